"""The security promise, tried as an attacker would: no flag, config value, environment variable or data file makes
the project write outside the folders the user named, or run code the user did not write (docs/guarantees.md)."""

import json
import os
import pickle
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.helpers import (BUDGET, FAKE_JOB, POINTMAZE, analysis_run, error_paragraph, fake_slurm, job_record,
                           main_command, run)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def files_under(directory):
    return sorted(os.path.relpath(os.path.join(d, f), directory) for d, _, names in os.walk(directory) for f in names)


@pytest.mark.parametrize('preset', ['../../../escaped', '/ABSOLUTE', 'config file'])
def test_a_preset_label_cannot_put_the_run_outside_save_dir(tmp_path, pointmaze_data_dir, preset):
    """The run name is made from the config's preset label: a label holding a path (from --agent.preset or from a
    config file's get_config) is refused where run names are made, before anything is written anywhere."""
    work = tmp_path / 'a' / 'b' / 'c'
    work.mkdir(parents=True)
    save_dir = work / 'runs'
    if preset == 'config file':
        config = tmp_path / 'evil_config.py'
        config.write_text('from agents.gcbc import get_config as gcbc_config\n\n'
                          'def get_config():\n    config = gcbc_config()\n    config.preset = "../../../escaped"\n'
                          '    return config\n')
        agent, label = str(config), '../../../escaped'
    else:
        agent, label = 'configs/presets.py:gcbc', preset.replace('ABSOLUTE', str(tmp_path / 'abs'))
    command = [f'--agent={agent}' if arg.startswith('--agent=') else arg
               for arg in main_command(pointmaze_data_dir, save_dir, *BUDGET)]
    if preset != 'config file':
        command.append(f'--agent.preset={label}')
    before = files_under(tmp_path)
    code, _, err = run(command)
    paragraph = error_paragraph(code, err)
    assert f'made from the preset {label!r} of the --agent config, is not one directory name' in paragraph
    assert 'Nothing was written' in paragraph and '--run_name' in paragraph
    assert files_under(tmp_path) == before  # nothing outside save_dir, and nothing inside it either


def headline(tmp_path, **environment):
    """scripts/headline.sh --dry_run with HEADLINE_* variables, run where a planted file would show."""
    env = dict(os.environ, PYTHON=sys.executable, SAVE_DIR=str(tmp_path / 'runs'), **environment)
    return subprocess.run(['bash', os.path.join(ROOT, 'scripts', 'headline.sh'), '--dry_run'], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)


def test_headline_variables_are_values_never_code(tmp_path):
    """HEADLINE_SEEDS pasted into a `python -c` string would run the code in a quote. Every value reaches Python
    as an argument: code in it is a bad value, named by the sweep's own check; a bad range is named, not a
    traceback; a dataset folder with a space stays one flag."""
    planted = tmp_path / 'PLANTED'
    attack = headline(tmp_path, HEADLINE_SEEDS=f"0')); open({str(planted)!r}, 'w'); print(('")
    assert attack.returncode != 0 and not planted.exists(), attack.stderr
    assert 'Bad --seeds' in attack.stderr and 'Traceback' not in attack.stderr
    backwards = headline(tmp_path, HEADLINE_SEEDS='3-1')
    assert backwards.returncode != 0 and "Bad --seeds '3-1'" in backwards.stderr and 'Traceback' not in backwards.stderr
    spaced = headline(tmp_path, HEADLINE_SEEDS='0-1', HEADLINE_DATASET_DIR=str(tmp_path / 'my data'))
    assert spaced.returncode == 0, spaced.stderr
    commands = [line for line in spaced.stdout.splitlines() if 'main.py' in line]
    assert len(commands) == 2 and all(' --num_seeds=2 ' in c for c in commands)  # every seed of a method in one job
    assert all(f'--dataset_dir={tmp_path / "my data"}' in shlex.split(c) for c in commands), commands
    assert not (tmp_path / 'runs').exists()


def test_stitch_benchmark_counts_are_numbers_before_bash_arithmetic_reads_them(tmp_path):
    """bash's arithmetic evaluates the command substitutions an array subscript holds: a count is checked first."""
    planted = tmp_path / 'PLANTED'
    env = dict(os.environ, PYTHON=sys.executable, STITCH_SAVE_DIR=str(tmp_path / 'runs'),
               STITCH_STEPS=f'x[$(touch {planted})]')
    result = subprocess.run(['bash', os.path.join(ROOT, 'scripts', 'stitch_benchmark.sh'), '--dry_run'], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2 and not planted.exists()
    assert "STITCH_STEPS must be a positive whole number, got 'x[$(touch" in result.stderr


class Planted:
    """A pickle an attacker writes where submitit keeps a job's result: unpickling it runs open(path, 'w')."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, 'w')


def test_a_planted_submitit_result_is_never_unpickled(tmp_path, pointmaze_data_dir):
    """submitit keeps each job's result as a pickle in the sweep's folder, and the waiting launcher read it (submitit's
    `result()`): a planted one ran its code there and forged the job's outcome before the job ended. The outcome comes
    from Slurm's state and the job's runs: the planted file is never read."""
    planted = tmp_path / 'PLANTED'
    done = tmp_path / 'runs' / 's' / f'gcbc_{POINTMAZE}_sd0' / 'DONE'
    (tmp_path / 'runs' / 's' / 'submitit').mkdir(parents=True)
    (tmp_path / 'runs' / 's' / 'submitit' / f'{FAKE_JOB}_0_result.pkl').write_bytes(pickle.dumps(Planted(str(planted))))
    env = fake_slurm(tmp_path / 'bin', job_record('RUNNING'), dict(job_record('COMPLETED'), touch=str(done)))
    os.makedirs(done.parent)
    command = [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=s', '--method=gcbc',
               f'--envs={POINTMAZE}', '--seeds=0', f'--save_dir={tmp_path / "runs"}', '--backend=slurm', '--wait',
               '--gpus=0', '--no-prepare_datasets', '--', f'--dataset_dir={pointmaze_data_dir}', '--nodownload']
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert not planted.exists()
    assert result.returncode == 0 and f'[1/1] gcbc_{POINTMAZE}_sd0: ok (job {FAKE_JOB})' in result.stdout, result.stderr


def test_a_recorded_dataset_name_cannot_put_a_figure_outside_out(tmp_path):
    """plot_curves.py names each figure after the dataset its runs record: `../../ESC/evil-v0` in a run's flags.json
    wrote the figure of --out='<folder>/{env}.png' into a folder two levels up. The name is refused, naming the run,
    before any figure is written."""
    runs, out = tmp_path / 'a' / 'b' / 'runs', tmp_path / 'a' / 'b' / 'figures'
    run_dir = runs / 'gcbc'
    shutil.copytree(os.path.join(ROOT, 'results', 'cpu_stitch_6k', 'stitch', 'gcbc_pointmaze-large-stitch-v0_sd0'), run_dir)
    with open(run_dir / 'flags.json') as f:
        flags = json.load(f)
    with open(run_dir / 'flags.json', 'w') as f:
        json.dump(dict(flags, env_name='../../ESC/evil-v0'), f)
    out.mkdir()
    (tmp_path / 'a' / 'ESC').mkdir()
    before = files_under(tmp_path)
    result = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'plot_curves.py'), f'--runs={runs}',
                             f'--out={out}/{{env}}.png'], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert files_under(tmp_path) == before
    assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr
    assert (f"Error: {run_dir}: the env_name its flags.json records ('../../ESC/evil', less its version) is not a "
            f"dataset name") in result.stderr


def test_the_analyses_never_obtain_data_into_a_recorded_folder(tmp_path):
    """rep_heatmap.py and sp_correlation.py read the run's dataset from the folder its flags.json records, and
    downloaded or generated it there when missing (minutes, 20 MB), a folder the user never named to them, even for
    a run that recorded --nodownload. They stop with the commands that obtain it, writing nothing (both read it through
    experiments.analysis.load_states: rep_heatmap.py stands for both)."""
    recorded = tmp_path / 'recorded' / 'data'
    run_dir = analysis_run(str(tmp_path / 'runs'), str(recorded))
    flags_path = os.path.join(run_dir, 'flags.json')
    with open(flags_path) as f:
        flags = json.load(f)
    with open(flags_path, 'w') as f:
        json.dump(dict(flags, download=False), f)
    for name in ('rep_heatmap.py',):
        result = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', name), f'--run_dir={run_dir}',
                                 f'--out_dir={tmp_path / "out"}'], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-3000:]
        assert (f'Error: {recorded}/{POINTMAZE}.npz, the dataset {run_dir} trained on (unrecorded), is not there, and the '
                f'analyses never download or generate data.') in result.stderr, result.stderr[-3000:]
        assert f'python scripts/generate_dataset.py --env_name={POINTMAZE} --dataset_dir={recorded}' in result.stderr
        assert not (tmp_path / 'recorded').exists() and not (tmp_path / 'out').exists(), name
