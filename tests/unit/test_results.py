"""Results tables and learning curves from synthetic run directories (no training)."""

import csv
import functools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from configs.presets import PRESETS
from experiments import paper
from experiments import results as R
from scripts import plot_curves
from scripts import results as results_cli

MAZE = 'antmaze-medium-stitch-v0'
HUMANOID = 'humanoidmaze-medium-stitch-v0'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Statistics of a handful of scores, computed in float64, against their exact values: a mean, standard deviation or
# interval of at most 10 scores rounds within 30 u = 7e-15 of its magnitude (u = 2^-53), far inside pytest.approx's
# default rel 1e-6, while a wrong statistic (another ddof, a missing seed, another quantile) moves it by over 1e-3.
# T_975's quantiles are written to 9 significant digits (relative error below 5e-9): an interval built on them lies
# within 5e-9 T s of the code's, below the abs 1e-6 of those comparisons for these scores.


def half_away(value, decimals=0, signed=False):
    """`value` rounded as a reader rounds, a tie away from zero, with '+' for a positive one when `signed`: an
    independent check of the tables' rounding (the float's error, ~1e-13 here, is absorbed by the 1e-9)."""
    magnitude = math.floor(abs(value) * 10 ** decimals + 0.5 + 1e-9) / 10 ** decimals
    return ('-' if value < 0 else '+' if signed and value > 0 else '') + f'{magnitude:.{decimals}f}'


def write_run(root, env, preset, seed, successes, alpha=None, done=True, steps=None, seed_column=None,
              extra_config=None, run_name=None, train_steps=1000, eval_interval=None):
    """A run directory as main.py leaves it: flags.json, config.json, eval.csv (+ DONE). Without an
    eval_interval the flags imply no evaluation count (a run is complete when DONE)."""
    name = run_name or f'{preset}_{env}' + (f'_a{alpha:g}' if alpha is not None else '') + f'_sd{seed}'
    run_dir = os.path.join(root, name)
    os.makedirs(run_dir)
    steps = steps or [100 * (i + 1) for i in range(len(successes))]
    with open(os.path.join(run_dir, 'flags.json'), 'w') as f:
        flags = dict(env_name=env, seed=seed, train_steps=train_steps, run_name=name, num_seeds=1)
        json.dump(dict(flags, eval_interval=eval_interval) if eval_interval else flags, f)
    agent = PRESETS[preset].agent.split(':')[-1] if preset in PRESETS else preset.split('_')[0]
    config = dict(agent_name=agent, preset=preset, lr=3e-4, actor_hidden_dims=[32, 32],
                  sampler=dict(batch_size=32, gamma=0.99))
    config.update(PRESETS[preset].overrides if preset in PRESETS else {}, **(extra_config or {}))
    if alpha is not None:
        config['alpha'] = float(alpha)
    with open(os.path.join(run_dir, 'config.json'), 'w') as f:
        json.dump(config, f)
    with open(os.path.join(run_dir, 'eval.csv'), 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow((['seed'] if seed_column else []) + ['step', 'evaluation/task1_success', R.METRIC])
        for i, (step, value) in enumerate(zip(steps, successes)):
            writer.writerow(([seed_column[i]] if seed_column else []) + [step, value, value])
    if done:
        open(os.path.join(run_dir, 'DONE'), 'w').close()
    return run_dir


@pytest.fixture
def sweep_dir(tmp_path):
    """Two datasets; BYOL-gamma^a at alphas 1 and 6 (3 seeds), TRA at one alpha, GCBC, and FB (RL)."""
    root = str(tmp_path / 'sweep')
    for seed in range(3):
        # Last-3 means: maze a1 -> 40 + seed, a6 -> 60 + 2 seed (best on maze); humanoid a1 best.
        write_run(root, MAZE, 'byol_gamma_a', seed, [0.0, 0.38 + seed / 100, 0.40 + seed / 100, 0.42 + seed / 100], alpha=1)
        write_run(root, MAZE, 'byol_gamma_a', seed, [0.9, 0.9] + [0.60 + 2 * seed / 100] * 3, alpha=6)
        write_run(root, HUMANOID, 'byol_gamma_a', seed, [0.30, 0.30, 0.30], alpha=1)
        write_run(root, HUMANOID, 'byol_gamma_a', seed, [0.20, 0.20, 0.20], alpha=6)
        write_run(root, MAZE, 'tra', seed, [0.59, 0.59, 0.59], alpha=10)  # 59 >= 0.95 * 62 = 58.9: bold.
        write_run(root, MAZE, 'fb', seed, [0.9, 0.9, 0.9])  # RL: higher, but neither best nor bold.
        write_run(root, HUMANOID, 'fb', seed, [0.1, 0.1, 0.1])
    for seed in range(2):  # GCBC: two seeds only, one of them unfinished.
        write_run(root, MAZE, 'gcbc', seed, [0.5, 0.5, 0.5 + seed / 100], done=seed == 0)
        write_run(root, HUMANOID, 'gcbc', seed, [0.28, 0.28, 0.28])  # 28 < 0.95 * 30 = 28.5
    return root


def table_for(root, **kwargs):
    cells = R.group_cells(R.load_runs([root]))
    return cells, R.build_table(R.best_cells(cells), **kwargs)


def markdown_rows(text):
    rows = {}
    for line in text.splitlines():
        if line.startswith('| ') and not line.startswith('| dataset'):
            cells = [c.strip() for c in line.strip('|').split('|')]
            rows[cells[0]] = cells[1:]
    return rows


def test_table_numbers_and_best_alpha(sweep_dir):
    cells, table = table_for(sweep_dir)
    assert table.methods == ['byol_gamma_a', 'tra', 'gcbc', 'fb']  # paper column order
    assert table.envs == ['antmaze-medium-stitch', 'humanoidmaze-medium-stitch']
    maze = table.cells[('antmaze-medium-stitch', 'byol_gamma_a')]
    assert maze.setting == (('alpha', 6.0),)  # best alpha on the maze ...
    assert maze.mean == pytest.approx(62.0) and maze.std == pytest.approx(np.std([60, 62, 64]))
    assert table.cells[('humanoidmaze-medium-stitch', 'byol_gamma_a')].setting == (('alpha', 1.0),)  # ... and here
    # Both alphas are kept in the groups: the choice is by mean over seeds of the last-3 means.
    alpha1 = [c for c in cells[('antmaze-medium-stitch', 'byol_gamma_a')] if c.setting == (('alpha', 1.0),)][0]
    assert alpha1.mean == pytest.approx(41.0) and alpha1.n == 3
    rows = markdown_rows(R.format_markdown(table))
    assert rows['antmaze-medium-stitch'][0] == '**62** ± 2 (best of 2)'  # alpha 6, chosen over alpha 1 on these seeds
    assert rows['humanoidmaze-medium-stitch'][0] == '**30** ± 0 (best of 2)'
    assert rows['antmaze-medium-stitch'][2] == '50 ± 0 (n=2) †'  # 2 of 3 seeds, one unfinished
    settings = markdown_rows(R.format_settings(table))
    assert settings['antmaze-medium-stitch'][0] == 'α=6 (best of 2)' and settings['humanoidmaze-medium-stitch'][0] == 'α=1 (best of 2)'


def test_bolding_rule(sweep_dir):
    marks = R.row_marks({'a': 60.0, 'b': 57.0, 'c': 56.99, 'fb': 90.0})
    assert marks == {'a': 'best', 'b': 'bold', 'c': '', 'fb': ''}  # FB is RL: neither best nor bold
    assert R.row_marks({'a': 60.0, 'fb': 90.0}, rl_methods=frozenset()) == {'a': '', 'fb': 'best'}
    _, table = table_for(sweep_dir)
    rows = markdown_rows(R.format_markdown(table))
    assert rows['antmaze-medium-stitch'] == ['**62** ± 2 (best of 2)', '**59** ± 0', '50 ± 0 (n=2) †', '90 ± 0']
    assert rows['humanoidmaze-medium-stitch'] == ['**30** ± 0 (best of 2)', '·', '28 ± 0 (n=2)', '10 ± 0']
    # Averages need every dataset of the method: TRA ran on one only.
    assert rows['average'] == ['**46**', '·', '39', '50']


def test_latex_table(sweep_dir):
    _, table = table_for(sweep_dir)
    latex = R.format_latex(table)
    lines = {line.split(' & ')[0]: line.split(' & ')[1:] for line in latex.splitlines() if line.startswith(r'\texttt')}
    maze = lines[r'\texttt{antmaze-medium-stitch}']
    assert maze[0] == r'\textcolor{brown}{$\mathbf{62} \pm 2$}'
    assert maze[1] == r'$\mathbf{59} \pm 0$'
    assert maze[2] == r'$50 \pm 0^{n=2,\dagger}$'
    assert maze[3] == r'\textcolor{gray}{$90 \pm 0$} \\'
    assert r'\textbf{BYOL-$\gamma^a$}' in latex and latex.rstrip().endswith(r'\end{tabular}')


def test_columns_and_seeds_selection(sweep_dir):
    cells = R.group_cells(R.load_runs([sweep_dir], seeds=[0, 1]))
    table = R.build_table(R.best_cells(cells), methods=['gcbc', 'byol_gamma_a'])
    assert table.methods == ['gcbc', 'byol_gamma_a'] and table.seed_count == 2
    assert table.cells[('antmaze-medium-stitch', 'byol_gamma_a')].mean == pytest.approx(61.0)
    with pytest.raises(ValueError, match='No results for method'):
        R.build_table(R.best_cells(cells), methods=['hgcbc'])


def test_seed_column_and_nested_seed_dirs(tmp_path):
    """Several seeds in one eval.csv (a `seed` column), and per-seed folders below one flags.json."""
    root = str(tmp_path)
    write_run(root, MAZE, 'gcbc', 0, [0.1, 0.2, 0.3, 0.5], steps=[1, 1, 2, 2], seed_column=[0, 1, 0, 1], run_name='multi')
    parent = write_run(root, HUMANOID, 'gcbc', 0, [], run_name='parent')
    os.remove(os.path.join(parent, 'eval.csv'))
    for seed, value in ((3, 0.4), (4, 0.6)):
        child = os.path.join(parent, f'parent_sd{seed}')
        os.makedirs(child)
        with open(os.path.join(child, 'flags.json'), 'w') as f:
            json.dump(dict(env_name=HUMANOID, seed=seed, train_steps=100, eval_interval=100), f)
        with open(os.path.join(child, 'eval.csv'), 'w') as f:
            f.write(f'step,{R.METRIC}\n100,{value}\n')
    runs = R.load_runs([root])
    assert [(r.env, r.seed) for r in runs] == [('antmaze-medium-stitch', 0), ('antmaze-medium-stitch', 1),
                                               ('humanoidmaze-medium-stitch', 3), ('humanoidmaze-medium-stitch', 4)]
    best = R.best_cells(R.group_cells(runs))
    assert best[('antmaze-medium-stitch', 'gcbc')].scores.tolist() == pytest.approx([20.0, 35.0])
    assert best[('humanoidmaze-medium-stitch', 'gcbc')].mean == pytest.approx(50.0)  # config.json and DONE from the parent
    assert not best[('humanoidmaze-medium-stitch', 'gcbc')].unfinished


def test_settings_beyond_alpha_are_separate_candidates(tmp_path):
    """Runs of one method differing in another key (visual gamma sweep, FB lr) are not averaged together."""
    root = str(tmp_path)
    for seed in range(2):
        write_run(root, MAZE, 'fb', seed, [0.2], extra_config=dict(lr=1e-4), run_name=f'fb_lr4_{seed}')
        write_run(root, MAZE, 'fb', seed, [0.4], extra_config=dict(lr=1e-5), run_name=f'fb_lr5_{seed}')
    cells = R.group_cells(R.load_runs([root]))
    assert [(c.setting, c.n) for c in cells[('antmaze-medium-stitch', 'fb')]] == [((('lr', 1e-5),), 2), ((('lr', 1e-4),), 2)]
    best = R.best_cells(cells)[('antmaze-medium-stitch', 'fb')]
    assert best.mean == pytest.approx(40.0) and R.setting_label(best.setting) == 'lr=1e-05'


def test_bad_input_errors(sweep_dir, tmp_path, capsys):
    with pytest.raises(ValueError, match="no column 'evaluation/nope'.*evaluation/task1_success"):
        R.load_runs([sweep_dir], metric='evaluation/nope')
    with pytest.raises(FileNotFoundError, match='not a directory'):
        R.load_runs([str(tmp_path / 'missing')])
    duplicate = str(tmp_path / 'dup')
    write_run(duplicate, MAZE, 'gcbc', 0, [0.5])
    with pytest.raises(ValueError, match='appears twice'):
        R.load_runs([duplicate, duplicate])
    with pytest.raises(SystemExit, match='No run directories.*for seeds 99'):
        results_cli.main([f'--runs={sweep_dir}', '--seeds=99'])


def test_results_cli(sweep_dir, capsys):
    assert results_cli.main([f'--runs={sweep_dir}', '--details']) == 0
    out = capsys.readouterr().out
    assert '| antmaze-medium-stitch | **62** ± 2 (best of 2) | **59** ± 0 | 50 ± 0 (n=2) † | 90 ± 0 |' in out
    assert 'Incomplete runs, or runs with fewer than 3 evaluations (1):' in out and 'gcbc_antmaze-medium-stitch-v0_sd1 (seed 1): running or stopped, last evaluation at step 300 of 1000' in out
    assert 'antmaze-medium-stitch byol_gamma_a [α=1]: 41 ± 1 (n=3, unfinished 0)' in out
    assert results_cli.main([f'--runs={sweep_dir}', '--format=latex']) == 0
    out = capsys.readouterr().out
    assert out.startswith('% Needs') and r'\begin{tabular}{lllll}' in out
    assert all(line.startswith(('%', '\\')) or not line.strip() for line in out.splitlines())  # pastes into LaTeX


def test_a_table_without_intervals_imports_neither_scipy_nor_jax(sweep_dir):
    """scripts/results.py starts in about a quarter of a second: scipy is imported for intervals only, and nothing it
    imports pulls in JAX or the simulators (a fresh process: the test worker has imported them all)."""
    probe = ('import sys\nfrom scripts import results\nassert results.main(sys.argv[1:]) == 0\n'
             'print(sorted(m for m in ("gymnasium", "jax", "mujoco", "scipy") if m in sys.modules))')

    def imported(*args):
        out = subprocess.run([sys.executable, '-c', probe, f'--runs={sweep_dir}', *args], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1]

    assert imported() == '[]'
    assert imported('--ci') == "['scipy']"


def test_plot_curves(sweep_dir, tmp_path, capsys):
    import matplotlib.image

    template = str(tmp_path / 'plots' / 'curves.png')
    assert plot_curves.main([f'--runs={sweep_dir}', f'--out={template}']) == 0
    paths = capsys.readouterr().out.split()
    assert paths == [str(tmp_path / 'plots' / f'curves_{env}.png') for env in ('antmaze-medium-stitch', 'humanoidmaze-medium-stitch')]
    for path in paths:
        image = matplotlib.image.imread(path)
        assert os.path.getsize(path) > 10_000 and image.shape[0] > 300
        assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 50  # lines, fills and text, not a blank canvas
    assert plot_curves.main([f'--runs={sweep_dir}', f'--out={tmp_path}/{{env}}-all.png', '--all_settings']) == 0
    assert os.path.exists(tmp_path / 'antmaze-medium-stitch-all.png')


def test_every_setting_of_a_method_has_a_band_of_its_own(sweep_dir, monkeypatch):
    """--all_settings: BYOL-gamma^a's two alphas share its colour; their bands differ by hatching (the first plain), and
    their lines by style."""
    drawn = []
    monkeypatch.setattr(plot_curves, 'save_figure', lambda figure, path: drawn.append(figure))
    monkeypatch.setattr(plot_curves.plt, 'close', lambda figure: None)
    assert plot_curves.main([f'--runs={sweep_dir}', '--out=unused_{env}.png', '--all_settings', '--band=ci']) == 0
    axes = drawn[0].axes[0]  # antmaze-medium-stitch: BYOL-gamma^a at alpha 1 and 6, TRA, GCBC, FB
    bands = [(band.get_hatch(), tuple(np.round(band.get_facecolor()[0][:3], 3))) for band in axes.collections]
    lines = [(line.get_linestyle(), line.get_color()) for line in axes.get_lines()]
    assert len(bands) == len(set(bands)) == len(lines) == len(set(lines)) == 5, (bands, lines)
    assert [hatch for hatch, _ in bands[:2]] == [None, '///'] and bands[0][1] == bands[1][1]


def test_mean_curve_with_unequal_seeds(tmp_path):
    root = str(tmp_path)
    write_run(root, MAZE, 'gcbc', 0, [0.2, 0.4])
    write_run(root, MAZE, 'gcbc', 1, [0.4], done=False)
    steps, mean, std, counts = R.mean_curve(R.load_runs([root]))
    assert steps.tolist() == [100, 200] and counts.tolist() == [2, 1]
    assert mean.tolist() == pytest.approx([30.0, 40.0]) and std.tolist() == pytest.approx([10.0, 0.0])


def test_settings_sort_numerically(tmp_path):
    root = str(tmp_path)
    for alpha in (100, 6, 40):
        write_run(root, MAZE, 'byol_gamma_a', 0, [0.5], alpha=alpha)
    cells = R.group_cells(R.load_runs([root]))[('antmaze-medium-stitch', 'byol_gamma_a')]
    assert [dict(c.setting)['alpha'] for c in cells] == [6.0, 40.0, 100.0]
    assert R.best_cells({('e', 'm'): cells})[('e', 'm')].setting == (('alpha', 6.0),)  # a tie goes to the first


def test_a_run_directory_without_evaluations_yet_is_named(tmp_path):
    """A main.py stopped before its first evaluation (killed while starting, or preempted early) leaves a run directory
    with run.lock and no eval.csv: the tables name it rather than pass it over in silence."""
    write_run(str(tmp_path), MAZE, 'gcbc', 0, [0.2])
    started = tmp_path / 'gcbc_started_sd1'
    started.mkdir()
    (started / 'run.lock').write_text('')
    warnings = []
    (run,) = R.load_runs([str(tmp_path)], warn=warnings.append)
    assert run.seed == 0 and warnings == [f'skipped {started}: a run directory without evaluations yet (no eval.csv); '
                                          f'nothing to score.']


def test_a_cut_off_last_line_is_skipped_with_a_warning(tmp_path, capsys):
    """A kill mid-write can leave "400,0.4" of "400,0.45,0.45": never scored, and the file is named."""
    run_dir = write_run(str(tmp_path), MAZE, 'gcbc', 0, [0.2, 0.2, 0.2])
    with open(os.path.join(run_dir, 'eval.csv'), 'a') as f:
        f.write('400,0.9,0.9')  # no newline: cut off mid-number (0.9 of 0.95, say)
    warnings = []
    (run,) = R.load_runs([str(tmp_path)], warn=warnings.append)
    assert run.steps.tolist() == [100, 200, 300] and R.seed_score(run) == pytest.approx(20.0)
    assert len(warnings) == 1 and os.path.join(run_dir, 'eval.csv') in warnings[0] and 'incomplete' in warnings[0]
    assert results_cli.main([f'--runs={tmp_path}']) == 0
    captured = capsys.readouterr()
    assert f'Warning: {os.path.join(run_dir, "eval.csv")}: its last line is incomplete' in captured.err
    assert '| antmaze-medium-stitch | **20** ± 0 (n=1) |' in captured.out


def test_runs_without_their_final_evaluation_are_marked(tmp_path, capsys):
    """DONE is not enough: a seed needs every evaluation its flags imply (one per eval_interval and one
    at train_steps), else its cell gets the dagger and the run is listed with what it lacks."""
    root = str(tmp_path)
    write_run(root, MAZE, 'gcbc', 0, [0.2, 0.2, 0.2], train_steps=300, eval_interval=100)  # complete
    write_run(root, MAZE, 'gcbc', 1, [0.2, 0.2], train_steps=300, eval_interval=100)  # no step-300 evaluation
    write_run(root, MAZE, 'gcbc', 2, [0.2, 0.2], steps=[100, 300], train_steps=300, eval_interval=100)  # lacks 200
    runs = R.load_runs([root])
    assert [run.problems() for run in runs] == [[], ['no final evaluation (step 300)'], ['2 of the 3 evaluations its flags imply']]
    cells = R.group_cells(runs)
    assert len(cells[(('antmaze-medium-stitch'), 'gcbc')][0].unfinished) == 2
    assert results_cli.main([f'--runs={root}']) == 0
    out = capsys.readouterr().out
    assert '| antmaze-medium-stitch | **20** ± 0 (last 2) † |' in out
    assert 'gcbc_antmaze-medium-stitch-v0_sd1 (seed 1): finished, last evaluation at step 200 of 300, 2 evaluation(s) ' \
           '(fewer than 3); no final evaluation (step 300)' in out


def write_dataset_record(run_dir, source):
    files = {split: dict(path=f'/data/{split}.npz', size=10, sha256='ab' * 32, source=source) for split in ('train', 'val')}
    with open(os.path.join(run_dir, 'dataset.json'), 'w') as f:
        json.dump(dict(dataset=MAZE, files=files), f)


def test_data_sources_per_row_and_mixed_cells(tmp_path, capsys):
    root = str(tmp_path)
    generated = dict(source='generated', description="this project's SAC ant expert", project_version='0.3.0', seed=0,
                     num_train_episodes=1000, num_val_episodes=100)
    for seed in range(2):
        write_dataset_record(write_run(root, MAZE, 'gcbc', seed, [0.5] * 3), dict(source='ogbench'))
        # BYOL-gamma's seeds trained on different data: one OGBench, one generated here.
        write_dataset_record(write_run(root, MAZE, 'byol_gamma_a', seed, [0.5] * 3, alpha=1),
                             dict(source='ogbench') if seed == 0 else generated)
    write_run(root, HUMANOID, 'gcbc', 0, [0.5] * 3)  # no dataset.json: an older run
    assert results_cli.main([f'--runs={root}']) == 0
    out = capsys.readouterr().out
    rows = markdown_rows(out.split('\n\n')[0])  # the table (the settings table follows)
    assert rows['antmaze-medium-stitch'] == ['**50** ± 0 (n=2) ‡', '**50** ± 0 (n=2) ‡']  # the row mixes data
    assert 'antmaze-medium-stitch: MIXED SOURCES: OGBench (3 seed runs); generated (this project\'s SAC ant expert, ' \
           'v0.3.0, seed 0, 1000+100 episodes) (1 seed runs)' in out
    assert '  humanoidmaze-medium-stitch: unrecorded' in out
    latex = R.format_latex(R.build_table(R.best_cells(R.group_cells(R.load_runs([root])))))
    assert r'\ddagger' in latex



def test_a_cell_of_runs_with_2_evaluations_says_last_2(tmp_path, capsys):
    """Complete runs with only 2 evaluations (200 steps, one every 100): their scores average 2, not the header's
    3, and every view of the cell says so, with the legend defining the mark."""
    for seed in range(3):
        write_run(str(tmp_path), MAZE, 'gcbc', seed, [0.1, 0.3 + seed / 10], train_steps=200, eval_interval=100)
        write_run(str(tmp_path), MAZE, 'gcbc_phi', seed, [0.2, 0.2, 0.2], train_steps=200, eval_interval=100,
                  steps=[100, 150, 200])
    assert results_cli.main([f'--runs={tmp_path}', '--ci', '--baseline=gcbc_phi', '--per_task']) == 0
    out = capsys.readouterr().out
    gcbc_row = next(line for line in out.splitlines() if line.startswith('| antmaze-medium-stitch | ') and '[' in line)
    assert gcbc_row.count('(last 2)') == 1 and '†' not in gcbc_row, gcbc_row
    assert '(last k): its seeds have only k < 3 evaluations' in out
    assert '| antmaze-medium-stitch | GCBC | - | 3 (last 2) | 25 |' in out
    assert '| antmaze-medium-stitch | GCBC-φ | - | 3 | 20 |' in out



def test_last_n_sets_the_evaluations_every_view_of_a_seed_averages(tmp_path, capsys):
    """--last_n=1: every seed scores its final evaluation, in the table's cells, in the choice of each method's best
    setting, in the comparison with a baseline and in the per-seed listing (the default, 3, is checked above). Here
    alpha 1 ends best (finals 50, 60, 70) while alpha 6 has the best mean of the last 3 (40 against 30)."""
    for seed in range(3):
        write_run(str(tmp_path), MAZE, 'byol_gamma_a', seed, [0.1, 0.1, 0.2, 0.5 + seed / 10], alpha=1)
        write_run(str(tmp_path), MAZE, 'byol_gamma_a', seed, [0.4, 0.4, 0.4, 0.4], alpha=6)
        write_run(str(tmp_path), MAZE, 'gcbc', seed, [0.0, 0.3, 0.3, 0.1 + seed / 10])  # finals 10, 20, 30
    assert results_cli.main([f'--runs={tmp_path}', '--last_n=1', '--per_seed', '--baseline=gcbc']) == 0
    lines = capsys.readouterr().out.splitlines()
    assert '| antmaze-medium-stitch | **60** ± 8 (best of 2) | 20 ± 8 |' in lines  # means of the finals, std 8.2
    assert '| antmaze-medium-stitch | α=1 (best of 2) | - |' in lines  # the chosen settings
    assert '| antmaze-medium-stitch | BYOL-γ^a | α=1 (best of 2) | 3 | 60 | [35, 85] | +40 | [+40, +40] | [+17, +63] |' in lines
    assert '| antmaze-medium-stitch | BYOL-γ^a | α=1 (best of 2) | 0: 50, 1: 60, 2: 70 |' in lines
    assert '| antmaze-medium-stitch | GCBC | - | 0: 10, 1: 20, 2: 30 |' in lines

# ---- confidence intervals and per-task success ---------------------------------------------------

# Two-sided 95% quantiles of Student's t (from statistical tables): df 1, 3, 7.
T_975 = {1: 12.7062047, 3: 3.18244631, 7: 2.36462425}


def test_t_interval_is_the_textbook_interval():
    """mean ± t_{0.975, n-1} s / sqrt(n), against hand-computed values: [0, 0, 0, 100] has mean 25, s = 50, so
    25 ± 3.182 * 25; two seeds 40, 60 give 50 ± 12.706 * 10 / sqrt(2) * sqrt(2)."""
    low, high = R.t_interval([0.0, 0.0, 0.0, 100.0])
    assert (low, high) == pytest.approx((25 - T_975[3] * 25, 25 + T_975[3] * 25), abs=1e-6)
    assert R.t_interval([40.0, 60.0]) == pytest.approx((50 - T_975[1] * 10, 50 + T_975[1] * 10), abs=1e-6)
    assert R.t_interval([40.0, 40.0, 40.0]) == (40.0, 40.0)
    assert all(np.isnan(R.t_interval([]))) and all(np.isnan(R.t_interval([55.0])))


def test_t_interval_covers_at_its_level_with_4_seeds():
    """Statistical check: 4 normal seeds, 4000 experiments: the 95% t-interval covers the true mean 95% of the time
    (binomial s.e. 0.35%); a percentile bootstrap of the same seeds covers about 80%."""
    rng = np.random.default_rng(0)
    scores = rng.normal(50, 10, size=(4000, 4))
    covered = [low <= 50 <= high for low, high in map(R.t_interval, scores)]
    assert 0.935 <= np.mean(covered) <= 0.965, np.mean(covered)


def test_welch_interval_is_the_textbook_interval():
    """Welch: difference ± t_{0.975, df} sqrt(s_a^2 / n_a + s_b^2 / n_b), df by Welch-Satterthwaite; with equal
    sizes and variances df = 2n - 2 (here 8 seeds each: df 14, t 2.1448)."""
    a, b = np.array([1.0, 3, 5, 7, 9, 11, 13, 15]), np.array([0.0, 2, 4, 6, 8, 10, 12, 14])
    standard_error = np.sqrt(a.var(ddof=1) / 8 + b.var(ddof=1) / 8)
    assert R.welch_interval(a, b) == pytest.approx((1 - 2.14478669 * standard_error, 1 + 2.14478669 * standard_error),
                                                   abs=1e-6)
    # Unequal variances: df = (va + vb)^2 / (va^2 / 3 + vb^2 / 7), computed here by hand.
    a, b = np.array([0.0, 0.0, 0.0, 100.0]), np.full(8, 10.0) + np.arange(8)
    va, vb = 2500.0 / 4, b.var(ddof=1) / 8
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 7)
    low, high = R.welch_interval(a, b)
    from scipy.stats import t as student_t  # the quantile at the by-hand df (stats' own, not the code's stdtrit call)

    assert df == pytest.approx(3.0, abs=0.05)  # the example's df, near 3
    assert high - low == pytest.approx(2 * student_t.ppf(0.975, df) * np.sqrt(va + vb), rel=1e-12)
    assert R.welch_interval([10.0, 20.0], [0.0, 0.0])[0] < 15 < R.welch_interval([10.0, 20.0], [0.0, 0.0])[1]
    assert all(np.isnan(R.welch_interval([], [1.0, 2.0]))) and all(np.isnan(R.welch_interval([1.0, 2.0], [3.0])))


def test_welch_interval_covers_the_true_difference():
    """Statistical check: 8 seeds against 8, true difference 5, 2000 experiments: the 95% interval covers 5 at its
    level; it excludes 0 in most experiments only when the difference is large (20 = 4 standard errors)."""
    rng = np.random.default_rng(1)

    def coverage_and_power(true_difference):
        a, b = rng.normal(50 + true_difference, 10, size=(2000, 8)), rng.normal(50, 10, size=(2000, 8))
        intervals = np.array([R.welch_interval(x, y) for x, y in zip(a, b)])
        return np.mean((intervals[:, 0] <= true_difference) & (true_difference <= intervals[:, 1])), np.mean(intervals[:, 0] > 0)

    coverage, power_small = coverage_and_power(5.0)
    assert 0.935 <= coverage <= 0.965, coverage
    _, power_large = coverage_and_power(20.0)
    assert power_large > 0.9 > power_small, (power_small, power_large)


def test_paired_interval_is_the_t_interval_of_the_seed_wise_differences():
    """Paired by seed: mean(d) ± t_{0.975, n-1} s_d / sqrt(n) over d_i = a_i - b_i, against hand-computed values:
    differences 1, 3, 5, 7 have mean 4 and s_d = sqrt(20 / 3), so 4 ± 3.182 * sqrt(20 / 3) / 2."""
    a, b = np.array([11.0, 23, 35, 47]), np.array([10.0, 20, 30, 40])
    half = T_975[3] * np.sqrt(20 / 3) / 2
    assert R.paired_interval(a, b) == pytest.approx((4 - half, 4 + half), abs=1e-6)
    # A constant shift has no spread: the interval is the shift itself, however far apart the two methods' seeds lie.
    assert R.paired_interval([12.0, 52, 92], [10.0, 50, 90]) == (2.0, 2.0)
    assert all(np.isnan(R.paired_interval([1.0], [2.0])))
    with pytest.raises(ValueError, match='one baseline score per seed'):
        R.paired_interval([1.0, 2.0, 3.0], [1.0, 2.0])


@pytest.mark.parametrize('seeds', [4, 8])
def test_paired_interval_covers_the_true_difference_with_correlated_pairs(seeds):
    """Statistical check: pairs (a_i, b_i) with correlation -0.5 or +0.5 (the two methods' seed i share batches and
    evaluation resets), true difference 5, 4000 experiments: the 95% paired interval covers 5 at its level at 4 and 8
    seeds, whichever the sign. Welch's interval, which treats the pairs as independent, covers below its level when
    they are negatively correlated (about 91% at 4 seeds, 89% at 8) and above it when positively (about 99%)."""
    rng = np.random.default_rng(seeds)
    for correlation in (-0.5, 0.5):
        covariance = 100.0 * np.array([[1.0, correlation], [correlation, 1.0]])
        pairs = rng.multivariate_normal([55.0, 50.0], covariance, size=(4000, seeds))
        a, b = pairs[..., 0], pairs[..., 1]
        paired = np.array([R.paired_interval(x, y) for x, y in zip(a, b)])
        welch = np.array([R.welch_interval(x, y) for x, y in zip(a, b)])
        covered = np.mean((paired[:, 0] <= 5.0) & (5.0 <= paired[:, 1]))
        welch_covered = np.mean((welch[:, 0] <= 5.0) & (5.0 <= welch[:, 1]))
        assert 0.935 <= covered <= 0.965, (seeds, correlation, covered)
        assert (welch_covered < 0.925) if correlation < 0 else (welch_covered > 0.98), (seeds, correlation, welch_covered)


def write_task_run(root, seed, task_rows):
    """A run whose eval.csv has per-task columns; task_rows: per evaluation, one success per task."""
    run_dir = write_run(root, MAZE, 'gcbc', seed, [float(np.mean(r)) for r in task_rows])
    with open(os.path.join(run_dir, 'eval.csv'), 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['step'] + [f'evaluation/task{t + 1}_success' for t in range(len(task_rows[0]))] + [R.METRIC])
        for i, row in enumerate(task_rows):
            writer.writerow([100 * (i + 1)] + list(row) + [float(np.mean(row))])


def test_per_task_table_and_ci_in_the_cli(tmp_path, capsys):
    root = str(tmp_path)
    # Task 1 last-3 means: 0.2 (seed 0), 0.4 (seed 1); task 2: 1.0 and 0.6.
    write_task_run(root, 0, [(0.0, 0.0), (0.2, 1.0), (0.2, 1.0), (0.2, 1.0)])
    write_task_run(root, 1, [(0.4, 0.6), (0.4, 0.6), (0.4, 0.6)])
    scores = R.task_scores(R.load_runs([root]))
    assert list(scores) == ['1', '2'] and scores['1'].tolist() == pytest.approx([20.0, 40.0])
    assert results_cli.main([f'--runs={root}', '--ci', '--per_task']) == 0
    out = capsys.readouterr().out
    low, high = R.t_interval([60.0, 50.0])
    assert low < 0 and high > 100  # 55 ± 12.7 x 5: past what a success rate can be, so shown cut to [0, 100]
    assert '| antmaze-medium-stitch | 55 [0, 100] (clipped) (n=2) |' in out  # alone in its row: nothing to be bold over
    assert '| antmaze-medium-stitch | GCBC | - | 2 | 55 | [0, 100] (clipped) | 30 | 80 |' in out
    assert '(clipped): the interval reaches past what a success rate x 100 can be and is shown cut to [0, 100].' in out
    assert '95% Student-t interval of the mean over seeds' in out


def test_plot_curves_with_ci_bands(sweep_dir, tmp_path, capsys):
    assert plot_curves.main([f'--runs={sweep_dir}', f'--out={tmp_path}/{{env}}.png', '--band=ci']) == 0
    assert os.path.getsize(tmp_path / 'antmaze-medium-stitch.png') > 10_000
    runs = R.load_runs([sweep_dir])[:3]
    steps, low, high = R.curve_interval(runs, ci=R.Intervals())
    for step, step_low, step_high in zip(steps, low, high):
        values = [run.values[run.steps == step][-1] * 100 for run in runs if np.any(run.steps == step)]
        expected = R.t_interval(values)
        assert (step_low, step_high) == pytest.approx(expected, nan_ok=True) and len(values) > 1 or np.isnan(step_low)


def test_comparison_against_a_baseline_in_the_cli(tmp_path, capsys):
    """--baseline: every setting of every method, its difference from the baseline's best setting with the paired
    interval over seeds and Welch's beside it; a setting that did not score the baseline's seeds gets Welch's interval,
    marked unpaired, naming the seeds."""
    root = str(tmp_path)
    gcbc = [0.10, 0.20, 0.15, 0.25]
    byol = {1: [0.30, 0.40, 0.35, 0.45], 6: [0.10, 0.20, 0.20, 0.10]}
    for seed, value in enumerate(gcbc):
        write_run(root, MAZE, 'gcbc', seed, [value] * 3)
    for alpha, values in byol.items():
        for seed, value in enumerate(values):
            write_run(root, MAZE, 'byol_gamma_a', seed, [value] * 3, alpha=alpha)
    for seed, value in ((0, 0.2), (1, 0.3), (4, 0.25)):  # seeds 2 and 3 missing, seed 4 extra: no pairs
        write_run(root, MAZE, 'byol_gamma_a', seed, [value] * 3, alpha=40)
    assert results_cli.main([f'--runs={root}', '--baseline=gcbc']) == 0
    out = capsys.readouterr().out
    assert '| − GCBC | 95% paired interval | 95% Welch interval |' in out and 'paired t-interval over seeds' in out
    reference = 100 * np.array(gcbc)
    gcbc_low, gcbc_high = R.t_interval(reference)
    assert (f'| antmaze-medium-stitch | GCBC | - | 4 | 18 | [{half_away(gcbc_low)}, {half_away(gcbc_high)}] | (baseline) '
            f'| | |') in out
    for alpha, values in byol.items():  # every alpha is listed, not only the best one
        scores = 100 * np.array(values)
        low, high = R.paired_interval(scores, reference)
        welch_low, welch_high = R.welch_interval(scores, reference)
        difference = scores.mean() - reference.mean()
        ci_low, ci_high = R.t_interval(scores)
        signed = functools.partial(half_away, signed=True)
        chosen = ' (best of 3)' if alpha == 1 else ''  # the best-setting tables' alpha, marked
        assert (f'| antmaze-medium-stitch | BYOL-γ^a | α={alpha}{chosen} | 4 | {half_away(scores.mean())} | [{half_away(ci_low)}, '
                f'{half_away(ci_high)}] | {signed(difference)} | [{signed(low)}, {signed(high)}] | [{signed(welch_low)}, '
                f'{signed(welch_high)}] |') in out
    assert R.paired_interval(100 * np.array(byol[1]), reference)[0] > 0  # alpha 1 separates from GCBC
    unpaired = 100 * np.array([0.2, 0.3, 0.25])
    welch_low, welch_high = R.welch_interval(unpaired, reference)
    welch = f'[{half_away(welch_low, signed=True)}, {half_away(welch_high, signed=True)}]'
    assert (f'| α=40 | 3 | 25 | [{half_away(R.t_interval(unpaired)[0])}, {half_away(R.t_interval(unpaired)[1])}] | +8 | '
            f'{welch} (unpaired: seeds 2, 3, 4 in one only; Welch) | {welch} |') in out
    with pytest.raises(SystemExit, match="Baseline 'tra' has no runs here; methods found: byol_gamma_a, gcbc"):
        results_cli.main([f'--runs={root}', '--baseline=tra'])


def test_hierarchical_bc_alpha_is_not_a_setting(tmp_path, capsys):
    """HGCBC's config carries BYOL-gamma's alpha, which it ignores: the table must not label it α=1."""
    for seed in range(2):
        write_run(str(tmp_path), MAZE, 'hgcbc', seed, [0.5] * 3, alpha=1)
        write_run(str(tmp_path), MAZE, 'hbyol_gamma_a', seed, [0.5] * 3, alpha=1)
    cells = R.group_cells(R.load_runs([str(tmp_path)]))
    assert [cell.setting for cell in cells[('antmaze-medium-stitch', 'hgcbc')]] == [()]
    assert [cell.setting for cell in cells[('antmaze-medium-stitch', 'hbyol_gamma_a')]] == [(('alpha', 1.0),)]


def test_signed_numbers_show_their_sign_even_when_they_round_to_zero():
    """A bound of -0.39 or -0.03 printed as '0' hides which side of 0 it lies on: one that rounds to zero gets one
    more decimal, and only an exact zero prints unsigned."""
    assert [R._signed(v, 0) for v in (-0.39, -0.03, 0.2, 0.6, -1.4, 0.0)] == ['-0.4', '-0.0', '+0.2', '+1', '-1', '0']
    assert R._signed(-0.04, 1) == '-0.04' and R._signed(0.06, 1) == '+0.1' and R._signed(-0.0, 1) == '0.0'
    assert R.format_signed_interval(-0.44, 13.94, 0) == '[-0.4, +14]' and R._signed(float('nan'), 0) == 'NaN'


def test_a_cell_of_fewer_than_3_seeds_says_so_even_when_no_cell_has_more(tmp_path):
    for method in ('gcbc', 'gcbc_phi'):
        for seed, value in enumerate((0.2, 0.9)):
            write_run(str(tmp_path), MAZE, method, seed, [value] * 3)
    _, table = table_for(str(tmp_path))
    text = R.format_markdown(table, ci=R.Intervals())
    assert text.count('(n=2)') == 2, text


def test_runs_at_different_protocols_are_never_compared(tmp_path):
    """A protocol (budget, evaluation) is not a setting: a cell whose seeds ran at two budgets, or a row whose
    columns did, is refused naming the flags that differ and the filter that selects one; the filter then gives
    the cell of that protocol only. Run as a user runs it."""
    import subprocess
    import sys

    root = str(tmp_path / 'runs')
    write_run(root, MAZE, 'gcbc', 0, [0.1] * 3, train_steps=1000, run_name='gcbc_sd0')
    write_run(root, MAZE, 'gcbc', 1, [0.9] * 3, train_steps=2000, run_name='gcbc_sd1')
    write_run(root, MAZE, 'gcbc', 0, [0.7] * 3, train_steps=3000, run_name='gcbc_sd0_longer')  # one seed, two budgets

    def results(*args):
        return subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'results.py'), f'--runs={root}', *args],
                              capture_output=True, text=True, cwd=ROOT)

    refused = results()
    assert refused.returncode == 1 and 'Traceback' not in refused.stderr, refused.stderr
    assert 'different evaluation protocols' in refused.stderr and 'train_steps differ' in refused.stderr
    assert 'train_steps=1000 (gcbc seed 0)' in refused.stderr and 'train_steps=3000 (gcbc seed 0)' in refused.stderr
    assert '--train_steps=' in refused.stderr
    selected = results('--train_steps=2000', '--per_seed')
    assert selected.returncode == 0, selected.stderr
    assert '| antmaze-medium-stitch | **90** ± 0 (n=1) |' in selected.stdout and '| 1: 90 |' in selected.stdout
    # A row: GCBC at 2000 steps and 50 episodes against GCBC-phi at 1000 steps: refused, --baseline alike.
    os.makedirs(tmp_path / 'aside')
    for name in ('gcbc_sd0', 'gcbc_sd0_longer'):
        os.rename(os.path.join(root, name), tmp_path / 'aside' / name)
    write_run(root, MAZE, 'gcbc_phi', 0, [0.5] * 3, train_steps=1000)
    for args in ((), ('--baseline=gcbc',)):
        refused = results(*args)
        assert refused.returncode == 1 and 'gcbc_phi seed 0' in refused.stderr and 'gcbc seed 1' in refused.stderr


def test_the_difference_figure_pairs_by_seed_and_sets_the_paper_beside_it(tmp_path, capsys):
    """scripts/plot_difference.py: a row per dataset naming budget, evaluations, setting (marked where it is the best
    of several, chosen on these seeds), seeds and data; the paired interval with Welch's beside it, Welch's alone
    marked unpaired where the seeds differ; the paper's difference where its main table has the dataset, said for
    what it is (its own BYOL-gamma^a cell minus the GCBC number it quotes from OGBench), and 'no cell in the paper'
    where not."""
    from scripts import plot_difference

    root = str(tmp_path / 'runs')
    gcbc, byol = [0.40, 0.50, 0.45, 0.55], [0.52, 0.60, 0.58, 0.70]
    for seed in range(4):
        write_run(root, MAZE, 'gcbc', seed, [gcbc[seed]] * 3)
        write_run(root, MAZE, 'byol_gamma_a', seed, [byol[seed]] * 3, alpha=1)
        write_run(root, MAZE, 'byol_gamma_a', seed, [gcbc[seed]] * 3, alpha=6)  # worse: alpha 1 is the best of 2
        write_run(root, 'pointmaze-medium-stitch-v0', 'gcbc', seed, [gcbc[seed]] * 3)
        if seed != 3:  # BYOL-gamma^a's seed 3 missing on pointmaze: the seeds do not pair
            write_run(root, 'pointmaze-medium-stitch-v0', 'byol_gamma_a', seed, [byol[seed]] * 3, alpha=1)
    assert plot_difference.main([f'--runs=T={root}', f'--out={tmp_path}/difference.png']) == 0
    out = capsys.readouterr().out.splitlines()
    scores, reference = 100 * np.array(byol), 100 * np.array(gcbc)
    paired, welch = R.paired_interval(scores, reference), R.welch_interval(scores, reference)
    signed = functools.partial(half_away, decimals=1, signed=True)
    assert out[0] == (f'T: antmaze-medium-stitch; 1k steps, score = mean of 3 evaluations, α=1 (best of 2, chosen on '
                      f'these seeds); n = 4 vs 4 seeds, paired; data: unrecorded: {signed(scores.mean() - reference.mean())} '
                      f'[{signed(paired[0])}, {signed(paired[1])}] paired, Welch [{signed(welch[0])}, {signed(welch[1])}]; '
                      f"the paper +13: its BYOL-γ^a ({paper.MAIN_TABLE_SETTING}) minus the GCBC number it quotes from "
                      f"OGBench")
    unpaired = R.welch_interval(scores[:3], reference)
    assert out[1] == ('T: pointmaze-medium-stitch; 1k steps, score = mean of 3 evaluations, α=1; n = 3 vs 4 seeds, '
                             f'unpaired; data: unrecorded: {signed(scores[:3].mean() - reference.mean())} '
                             f'[{signed(unpaired[0])}, {signed(unpaired[1])}] Welch (unpaired); no cell in the paper')
    assert out[2] == f'{tmp_path}/difference.png' and os.path.getsize(out[2]) > 10_000
    assert plot_difference.data_origin("generated (this project's SAC ant expert (not OGBench's expert), v0.4.0, seed 0, "
                                       "5000+500 episodes)") == "data generated by this project's SAC ant expert (not OGBench's expert)"
    assert plot_difference.data_origin('OGBench') == "OGBench's data"


def test_the_paper_table_in_code_is_the_one_method_md_prints():
    with open(os.path.join(ROOT, 'docs', 'method.md')) as f:
        text = f.read()
    table = text[text.index('| dataset | BYOL-gamma^a | BYOL | TRA | TD-SR^a | GCBC |'):].split('\n\n')[0].splitlines()[2:]
    printed = {cells[0]: tuple(int(c) for c in cells[1:]) for cells in ([c.strip() for c in line.strip('|').split('|')]
                                                                         for line in table)}
    assert printed == paper.MAIN_TABLE and paper.MAIN_TABLE_METHODS == ('byol_gamma_a', 'byol', 'tra', 'tdsr_a', 'gcbc')
    assert paper.main_table_difference('antmaze-medium-stitch', 'byol_gamma_a', 'gcbc') == 13.0
    assert paper.main_table_difference('pointmaze-large-stitch', 'byol_gamma_a', 'gcbc') is None
    assert paper.main_table_difference('antmaze-medium-stitch', 'hgcbc', 'gcbc') is None


def test_a_run_of_every_preset_is_tabled_under_its_method_and_a_wrong_label_under_what_ran():
    """Any preset's config, as main.py records it, is its method's (no warning); the same config labelled as another
    agent's preset, or as a method of its agent whose identity it lacks, is tabled under what it is, with a warning."""
    from configs.presets import get_config, method_of

    warnings = []
    for preset in PRESETS:
        assert R.method_ran(get_config(preset).to_dict(), preset, warnings.append) == method_of(preset), preset
    assert warnings == []
    for preset, label, column in (('byol_gamma_a', 'gcbc', 'byol_gamma_a'), ('gcbc', 'gcbc_phi', 'gcbc'),
                                  ('byol_gamma_no_psi_b', 'byol_gamma_a', 'byol_gamma_no_psi_b'),
                                  ('gcbc_phi_visual', 'gcbc', 'gcbc_phi')):
        config = dict(get_config(preset).to_dict(), preset=label)
        assert R.method_ran(config, 'run', warnings.append) == column, (preset, label)
    assert len(warnings) == 4 and "run: its config.json says preset 'gcbc', but its config (agent byol_gamma)" in warnings[0]


# ---- what a shown number claims: its rounding, its range, its bold, its selection ------------------------------


def test_ties_round_away_from_zero_as_a_reader_rounds():
    """A tie prints as a reader rounds it, however float arithmetic reached it: the committed CPU record's +6.75 came
    out of a difference of means as 6.7499999999999964 and printed +6.7 (round-half-even of the float); 11.55 as
    11.549999999999997 printed 11.5. A value a hair from a tie keeps its side."""
    assert R._signed(6.7499999999999964, 1) == '+6.8' and R._signed(11.549999999999997, 1) == '+11.6'
    assert R._signed(-17.125000000000007, 2) == '-17.13' and R._number(22.5, 0) == '23' and R._number(23.5, 0) == '24'
    assert R._number(6.7499, 1) == '6.7' and R._number(6.7501, 1) == '6.8' and R._signed(-0.25, 0) == '-0.3'
    assert R._number(float('nan'), 1) == 'NaN' and R._number(100.0, 0) == '100' and R._number(0.0, 2) == '0.00'
    # The CPU record's own difference, from its files, prints as its exact value rounds.
    best = R.best_cells(R.group_cells(R.load_runs([os.path.join(ROOT, 'results', 'cpu_stitch_6k')])))
    found = R.difference(best[('pointmaze-large-stitch', 'byol_gamma_a')], best[('pointmaze-large-stitch', 'gcbc')])
    assert found.value != 6.75 and abs(found.value - 6.75) < 1e-12 and R._signed(found.value, 1) == '+6.8'


def test_a_shown_interval_is_cut_to_what_a_success_rate_can_be_and_says_so():
    assert R.format_interval(-80.4, 192.0, 0, (0.0, 100.0)) == '[0, 100] (clipped)'
    assert R.format_interval(3.0, 104.0, 0, (0.0, 100.0)) == '[3, 100] (clipped)'
    assert R.format_interval(3.0, 99.6, 0, (0.0, 100.0)) == '[3, 100]'  # rounds to the end, not past it: not cut
    assert R.format_interval(-80.4, 192.0, 0) == '[-80, 192]'  # a metric without a range
    assert R.format_signed_interval(-130.0, 20.0, 0, R.Intervals().difference_range) == '[-100, +20] (clipped)'


def test_bold_with_intervals_only_where_they_separate(tmp_path, capsys):
    """With intervals shown, a cell within 95% of the row's best is bold only if it is ahead of every non-RL cell
    below that 95% by an interval of the difference above 0: 2 seeds of 56 [-80, 192] against 30 are not bold (the
    paper's rule alone made it so), 8 seeds that separate are; a cell alone in its row is not bold; without
    intervals the paper's rule stands."""
    root = str(tmp_path / 'two')
    for seed, (a, b) in enumerate([(0.45, 0.30), (0.67, 0.30)]):
        write_run(root, MAZE, 'byol_gamma_a', seed, [a] * 3, alpha=1)
        write_run(root, MAZE, 'gcbc', seed, [b] * 3)
    assert results_cli.main([f'--runs={root}', '--ci']) == 0
    row = markdown_rows(capsys.readouterr().out.split('\n\n')[0])['antmaze-medium-stitch']
    assert row == ['56 [0, 100] (clipped) (n=2)', '30 [30, 30] (n=2)'], row
    assert results_cli.main([f'--runs={root}']) == 0
    assert markdown_rows(capsys.readouterr().out.split('\n\n')[0])['antmaze-medium-stitch'][0].startswith('**56**')
    root = str(tmp_path / 'eight')
    for seed in range(8):
        write_run(root, MAZE, 'byol_gamma_a', seed, [0.55 + seed / 100] * 3, alpha=1)
        write_run(root, MAZE, 'tra', seed, [0.56 + seed / 100] * 3, alpha=10)
        write_run(root, MAZE, 'gcbc', seed, [0.30 + (seed % 3) / 100] * 3)
        write_run(root, MAZE, 'fb', seed, [0.9] * 3)  # RL: never bold, and no cell needs to be ahead of it
    _, table = table_for(root)
    rows = markdown_rows(R.format_markdown(table, ci=R.Intervals()))
    assert [cell.startswith('**') for cell in rows['antmaze-medium-stitch']] == [True, True, False, False]
    alone = str(tmp_path / 'alone')
    for seed in range(8):
        write_run(alone, MAZE, 'gcbc', seed, [0.5 + seed / 100] * 3)
    _, table = table_for(alone)
    assert not markdown_rows(R.format_markdown(table, ci=R.Intervals()))['antmaze-medium-stitch'][0].startswith('**')


def test_a_setting_selected_on_the_same_seeds_says_so_wherever_it_is_shown(tmp_path, capsys):
    """A cell that is the best of several settings says 'best of k' in the table, the per-task and per-seed tables,
    the chosen settings and the baseline's row, and the legend says what that costs; a single setting says nothing."""
    root = str(tmp_path)
    for seed in range(3):
        for alpha, value in ((1, 0.3), (6, 0.4), (40, 0.2), (100, 0.1)):
            write_run(root, MAZE, 'byol_gamma_a', seed, [value + seed / 100] * 3, alpha=alpha)
        write_run(root, MAZE, 'gcbc', seed, [0.2 + seed / 100] * 3)
    assert results_cli.main([f'--runs={root}', '--ci', '--per_task', '--per_seed', '--baseline=byol_gamma_a,gcbc']) == 0
    out = capsys.readouterr().out
    main_row = markdown_rows(out.split('\n\n')[0])['antmaze-medium-stitch']
    assert main_row[0].endswith(' (best of 4)') and 'best of' not in main_row[1], main_row
    assert '| antmaze-medium-stitch | BYOL-γ^a | α=6 (best of 4) | 3 | 41 |' in out  # per task
    assert '| antmaze-medium-stitch | BYOL-γ^a | α=6 (best of 4) | 0: 40, 1: 41, 2: 42 |' in out  # per seed
    assert '| antmaze-medium-stitch | α=6 (best of 4) | - |' in out  # chosen settings
    assert '| antmaze-medium-stitch | BYOL-γ^a | α=6 (best of 4) | 3 | 41 |' in out.split('Against')[1]  # baseline
    against_gcbc = out.split('Against')[2]  # every setting: the one a best-setting table shows marked, the others not
    assert '| antmaze-medium-stitch | BYOL-γ^a | α=1 | 3 | 31 |' in against_gcbc
    assert '| antmaze-medium-stitch | BYOL-γ^a | α=6 (best of 4) | 3 | 41 |' in against_gcbc
    assert R.SELECTION_LEGEND in out and 'chosen on the very seeds the cell reports' in R.SELECTION_LEGEND
    assert results_cli.main([f'--runs={root}', '--methods=gcbc']) == 0
    assert R.SELECTION_LEGEND not in capsys.readouterr().out
