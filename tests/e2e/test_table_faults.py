"""Faults the results tables and learning curves meet, as users meet them: scripts/results.py and
scripts/plot_curves.py run as subprocesses over the committed run records (results/), or over copies of some of their
run directories changed as the fault has it (docs/guarantees.md, "Faults tried")."""

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU_RUNS, H200_RUNS = 'results/cpu_stitch_6k', 'results/h200_headline_200k'
GCBC = 'gcbc_pointmaze-large-stitch-v0_sd{}'  # a run directory of CPU_RUNS, by seed


def script(name, *args):
    """scripts/<name> run as a user runs it (a read that blocks fails the test at the timeout)."""
    return subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', name), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def copy_runs(destination, *names, records=CPU_RUNS, group='stitch'):
    """Run directories of the committed `records`, copied into `destination`; their new paths."""
    paths = []
    for name in names:
        paths.append(os.path.join(destination, name))
        shutil.copytree(os.path.join(ROOT, records, group, name), paths[-1])
    return paths


def set_value(path, name, value):
    """A JSON file's `name` set to `value`."""
    with open(path) as f:
        record = json.load(f)
    with open(path, 'w') as f:
        json.dump(dict(record, **{name: value}), f)


def test_seeds_linked_into_runs_are_read_like_the_others(tmp_path):
    """Seeds kept on other storage and linked into --runs (a symbolic link per run directory) were skipped without a
    word: the cell reported the other seeds alone, and the check of protocols never saw the linked ones. They are
    runs like the others; a link back up the tree is read once, with a warning."""
    runs = tmp_path / 'runs'
    copy_runs(runs, GCBC.format(0))
    (linked,) = copy_runs(tmp_path / 'other-storage', GCBC.format(1))
    os.symlink(linked, runs / GCBC.format(1))
    os.symlink(runs, runs / 'loop')
    done = script('results.py', f'--runs={runs}', '--per_seed')
    assert done.returncode == 0, done.stderr
    assert '| pointmaze-large-stitch | GCBC | - | 0: 10, 1: 31 |' in done.stdout  # both seeds (CPU_RUNS' scores)
    assert f'Warning: skipped {runs / "loop"}: it is {runs} again, reached through a symbolic link' in done.stderr
    (longer,) = copy_runs(tmp_path / 'other-storage', GCBC.format(2))
    set_value(os.path.join(longer, 'flags.json'), 'train_steps', 12000)
    os.symlink(longer, runs / GCBC.format(2))
    refused = script('results.py', f'--runs={runs}')
    assert refused.returncode == 1 and 'train_steps differ' in refused.stderr, refused.stderr
    assert 'train_steps=12000 (gcbc seed 2)' in refused.stderr


def test_protocol_filters_compare_values_as_main_py_reads_them():
    """--train_steps=6e3 said "No run directories" (the filter compared text; 6000 selected them): a filter is read as
    main.py reads the flag, and a value main.py would not take is named."""
    for value in ('6e3', '6000.0'):
        done = script('results.py', f'--runs={CPU_RUNS}', f'--train_steps={value}', '--methods=gcbc')
        assert done.returncode == 0 and '| pointmaze-large-stitch | **17** ± 6 |' in done.stdout, (value, done.stderr)
    bad = script('results.py', f'--runs={CPU_RUNS}', '--train_steps=6000.5')
    assert bad.returncode == 1 and 'Traceback' not in bad.stderr, bad.stderr
    assert "Error: --train_steps=6000.5 is not a value main.py's --train_steps takes: a whole number" in bad.stderr


def test_bad_table_and_figure_arguments_are_one_message_each(tmp_path):
    """results.py --decimals=-1 and plot_curves.py --out=x.txt were tracebacks (a format error, matplotlib's unknown
    format): each is one message naming the argument, before any table or figure is made."""
    decimals = script('results.py', f'--runs={CPU_RUNS}', '--decimals=-1')
    assert decimals.returncode == 2 and 'Traceback' not in decimals.stderr, decimals.stderr
    assert 'error: --decimals is the number of digits after the decimal point: 0 or more, got -1.' in decimals.stderr
    out = tmp_path / 'plots' / 'curves.txt'
    figure = script('plot_curves.py', f'--runs={CPU_RUNS}', f'--out={out}')
    assert figure.returncode == 2 and 'Traceback' not in figure.stderr, figure.stderr
    assert (f'error: --out={out}: {tmp_path / "plots" / "curves_dataset.txt"}: matplotlib writes no .txt files. Name an '
            f'image file: .png or .pdf') in figure.stderr and not (tmp_path / 'plots').exists()


def test_an_average_row_never_averages_cells_of_different_protocols(tmp_path):
    """The committed records: BYOL-γ^a and GCBC at 200k steps, batch 1024 and 50 episodes on an H200
    (antmaze-medium-stitch) beside 6k steps, batch 256 and 20 episodes on a CPU (pointmaze-large-stitch). Their
    `average` row, the mean of the two (42 = mean(61, 24)), says the protocols differ, and a line below the table says
    how. Both --runs are read (not the last one only), by plot_curves.py too."""
    done = script('results.py', f'--runs={CPU_RUNS}', f'--runs={H200_RUNS}')
    assert done.returncode == 0, done.stderr
    assert '| average | protocols differ | protocols differ | · | · |' in done.stdout, done.stdout
    for method in ('BYOL-γ^a', 'GCBC'):
        assert (f'average of {method}: not averaged, its cells were measured under different protocols (train_steps '
                f'200000 (antmaze-medium-stitch), 6000 (pointmaze-large-stitch);') in done.stdout
    assert 'eval_episodes 50 (antmaze-medium-stitch), 20 (pointmaze-large-stitch)' in done.stdout
    assert 'batch_size 1024 (antmaze-medium-stitch), 256 (pointmaze-large-stitch)' in done.stdout
    latex = script('results.py', f'--runs={CPU_RUNS},{H200_RUNS}', '--format=latex')
    assert r'\texttt{average} & \textit{protocols differ} & \textit{protocols differ} & $\cdot$ & $\cdot$ \\' in latex.stdout
    curves = script('plot_curves.py', f'--runs={CPU_RUNS}', f'--runs={H200_RUNS}', f'--out={tmp_path}/{{env}}.png')
    assert curves.returncode == 0 and curves.stdout.split() == [str(tmp_path / f'{env}.png') for env in
                                                                ('antmaze-medium-stitch', 'pointmaze-large-stitch')]
    # Cells of one protocol are averaged: GCBC's seeds copied as a second dataset of the same protocol.
    for seed in range(2):
        (run_dir,) = copy_runs(tmp_path / 'runs', GCBC.format(seed))
        shutil.copytree(run_dir, tmp_path / 'runs' / f'medium_sd{seed}')
        set_value(tmp_path / 'runs' / f'medium_sd{seed}' / 'flags.json', 'env_name', 'pointmaze-medium-stitch-v0')
    same = script('results.py', f'--runs={tmp_path / "runs"}', '--decimals=1')
    assert '| average | **20.3** |' in same.stdout and 'not averaged' not in same.stdout, same.stdout


def edit_json(path, **values):
    with open(path) as f:
        record = json.load(f)
    with open(path, 'w') as f:
        json.dump(dict(record, **values), f)


def test_a_method_is_what_ran_not_its_preset_label(tmp_path):
    """The tables put a run in the column its config.json's preset label names: --agent.preset=gcbc on a BYOL-gamma^a
    run put it in GCBC's column, beside GCBC's own runs. A column is what ran (the agent, and the fields that tell its
    methods apart); a label that does not match is warned about."""
    copy_runs(tmp_path, GCBC.format(0), GCBC.format(1))
    labelled = copy_runs(tmp_path, *(f'byol_gamma_a_pointmaze-large-stitch-v0_a1_sd{seed}' for seed in (0, 1)))
    for run_dir in labelled:
        edit_json(os.path.join(run_dir, 'config.json'), preset='gcbc')
    done = script('results.py', f'--runs={tmp_path}')
    assert done.returncode == 0, done.stderr
    assert '| dataset | BYOL-γ^a | GCBC |' in done.stdout, done.stdout
    assert (f"Warning: {labelled[0]}: its config.json says preset 'gcbc', but its config (agent byol_gamma) is not "
            f"GCBC's: it is reported as BYOL-γ^a, what its config is.") in done.stderr


def test_methods_at_different_batch_sizes_are_marked_and_never_paired(tmp_path):
    """GCBC at batch 32 beside GCBC-phi at 256 shared a row unmarked, and --baseline paired their seeds as if they had
    drawn the same batches. Each cell of such a row says its batch size, and the comparison is Welch's, saying why."""
    for run_dir in copy_runs(tmp_path, GCBC.format(0), GCBC.format(1)):
        edit_json(os.path.join(run_dir, 'config.json'), batch_size=32)
    copy_runs(tmp_path, *(f'gcbc_phi_pointmaze-large-stitch-v0_sd{seed}' for seed in (0, 1)))
    done = script('results.py', f'--runs={tmp_path}', '--baseline=gcbc')
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith('| pointmaze-large-stitch | '))
    assert row.count('(batch 32)') == 1 and row.count('(batch 256)') == 1, row
    comparison = next(line for line in done.stdout.splitlines() if line.startswith('| pointmaze-large-stitch | GCBC-φ'))
    assert '(unpaired: batch sizes differ: 256 vs 32; Welch)' in comparison, comparison


def test_data_that_differ_under_one_provenance_label_are_marked(tmp_path):
    """One generation command gives different train files on two machines under one provenance label: a table mixing
    them showed one data line and no ‡. The data lines tell the files apart by sha256, and the row's cells show ‡."""
    first, second = copy_runs(tmp_path, GCBC.format(0), GCBC.format(1))
    with open(os.path.join(second, 'dataset.json')) as f:
        record = json.load(f)
    record['files']['train']['sha256'] = '0' * 64
    with open(os.path.join(second, 'dataset.json'), 'w') as f:
        json.dump(record, f)
    done = script('results.py', f'--runs={tmp_path}')
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith('| pointmaze-large-stitch | '))
    assert row.endswith(' ‡ |'), row
    label = 'generated (pointmaze scripted oracle, v0.5.0, seed 0, 5000+500 episodes)'
    assert (f'pointmaze-large-stitch: MIXED SOURCES: {label} [train sha256 3904b8e0ca9e] (1 seed runs); {label} [train '
            f'sha256 000000000000] (1 seed runs)') in done.stdout, done.stdout


def test_a_figure_onto_a_full_disk_or_a_read_only_folder_is_one_paragraph(tmp_path):
    """plot_curves.py onto a full disk (a file-size limit of 8 KB, below a figure's size) or into a folder it may not
    write ended in a traceback: one paragraph naming the file and the cause, exit 1, no file left behind."""
    from runtime.subprocesses import set_up_then_exec
    from tests.helpers import bound_by_file_modes

    copy_runs(tmp_path / 'runs', GCBC.format(0))
    read_only = tmp_path / 'read-only'
    read_only.mkdir()
    (read_only / 'probe').touch()
    (read_only / 'probe').chmod(0)
    bypass = bound_by_file_modes(read_only / 'probe')
    read_only.chmod(0o555)
    full_disk = 'import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))'
    for folder, set_up, cause in ((tmp_path / 'full', full_disk, 'the file-size limit was reached'),
                                  (read_only, bypass, 'permission denied')):
        folder.mkdir(exist_ok=True)
        before = sorted(os.listdir(folder))
        command = [sys.executable, os.path.join(ROOT, 'scripts', 'plot_curves.py'), f'--runs={tmp_path / "runs"}',
                   f'--out={folder / "curves.png"}']
        done = subprocess.run(set_up_then_exec(set_up, command) if set_up else command, cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
        assert (f'Error: Cannot write {folder / "curves_pointmaze-large-stitch.png"}' in done.stderr
                or f'Error: Cannot write {folder}' in done.stderr) and cause in done.stderr, done.stderr
        assert sorted(os.listdir(folder)) == before


def test_a_scale_that_turns_the_ranking_and_an_out_with_braces_are_one_message_each(tmp_path):
    """results.py --scale=-100 bolded the worst method; plot_curves.py --out='{env}{0}.png' was an IndexError (the
    name went through str.format). The scale is refused by name; only {env} in --out is replaced."""
    scaled = script('results.py', f'--runs={CPU_RUNS}', '--scale=-100')
    assert scaled.returncode == 2 and 'Traceback' not in scaled.stderr, scaled.stderr
    assert 'error: --scale multiplies the metric (100: success in percent): a positive number, got -100' in scaled.stderr
    (run_dir,) = copy_runs(tmp_path / 'runs', GCBC.format(0))
    figure = script('plot_curves.py', f'--runs={tmp_path / "runs"}', f'--out={tmp_path}/{{env}}{{0}}.png')
    assert figure.returncode == 0 and 'Traceback' not in figure.stderr, figure.stderr
    assert (tmp_path / 'pointmaze-large-stitch{0}.png').exists()
