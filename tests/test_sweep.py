"""The sweep launcher: naming, skipping finished runs, dry runs, the local process pool (with a stub
main.py), checkpoint-and-requeue, and a tiny real grid through submitit's local executor."""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from scripts import sweep as sweep_cli
from utils import sweep
from utils.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = 'pointmaze-medium-stitch-v0'

# Stands in for main.py: creates the run directory, then fails for seed 13, waits for SIGTERM when
# STUB_WAIT is set (exit 143 like main.py), and otherwise finishes (DONE).
STUB_MAIN = textwrap.dedent('''
    import os, signal, sys, time
    args = dict(a[2:].split('=', 1) for a in sys.argv[1:] if '=' in a)
    run_dir = os.path.join(args['save_dir'], args['run_group'], args['run_name'])
    os.makedirs(run_dir, exist_ok=True)
    print('stub started', run_dir, flush=True)
    if args['seed'] == '13':
        sys.exit('stub failure for seed 13')
    if os.environ.get('STUB_WAIT'):
        signal.signal(signal.SIGTERM, lambda *_: (open(os.path.join(run_dir, 'TERMINATED'), 'w').close(), sys.exit(143)))
        open(os.path.join(run_dir, 'STARTED'), 'w').close()
        while True:
            time.sleep(0.05)
    open(os.path.join(run_dir, 'DONE'), 'w').close()
''')


@pytest.fixture
def stub_main(tmp_path):
    path = tmp_path / 'stub_main.py'
    path.write_text(STUB_MAIN)
    return str(path)


def grid(save_dir, seeds=(0, 1), methods=('byol_gamma_a:alpha=1,6.0', 'gcbc')):
    return sweep.build_runs('sw', [sweep.parse_method(m) for m in methods], [ENV], list(seeds), str(save_dir))


def test_parse_method_and_seeds():
    method = sweep.parse_method('byol_gamma_a:alpha=1,6:actor_hidden_dims=(32,32),(64,64):tau=0.99')
    assert method.preset == 'byol_gamma_a'
    assert method.overrides == (('alpha', ('1', '6')), ('actor_hidden_dims', ('(32,32)', '(64,64)')), ('tau', ('0.99',)))
    assert method.named_keys() == ['alpha', 'actor_hidden_dims']  # tau is fixed: not in the name
    assert len(method.settings()) == 4
    assert sweep.parse_seeds('0-3,7') == [0, 1, 2, 3, 7]
    for bad in ('byol:alpha', 'byol:alpha=', 'byol:alpha=1:alpha=2', ':alpha=1', 'byol-x'):
        with pytest.raises(ConfigError):
            sweep.parse_method(bad)
    for bad in ('3-1', 'a', '1,,2'):
        with pytest.raises(ConfigError, match='Bad --seeds'):
            sweep.parse_seeds(bad)


def test_run_names_are_deterministic(tmp_path):
    runs = grid(tmp_path)
    assert [r.name for r in runs] == [
        f'byol_gamma_a_{ENV}_a1_sd0', f'byol_gamma_a_{ENV}_a1_sd1',
        f'byol_gamma_a_{ENV}_a6_sd0', f'byol_gamma_a_{ENV}_a6_sd1',  # 6.0 is written 6
        f'gcbc_{ENV}_sd0', f'gcbc_{ENV}_sd1',
    ]
    assert runs[0].run_dir == str(tmp_path / 'sw' / runs[0].name)
    swept = sweep.build_runs('sw', [sweep.parse_method('fb:lr=1e-4,1e-5:tau=0.01')], [ENV], [3], str(tmp_path))
    assert [r.name for r in swept] == [f'fb_{ENV}_lr0.0001_sd3', f'fb_{ENV}_lr1e-05_sd3']
    with pytest.raises(ConfigError, match='appears twice'):
        grid(tmp_path, methods=('byol_gamma_a:alpha=6,6.0',))
    with pytest.raises(ConfigError, match='directory name'):
        sweep.build_runs('a/b', [sweep.parse_method('gcbc')], [ENV], [0], str(tmp_path))


def test_commands_skip_finished_runs_and_group_seeds(tmp_path):
    runs = grid(tmp_path, seeds=range(5), methods=('byol_gamma_a:alpha=6',))
    finished = runs[2]
    os.makedirs(finished.run_dir)
    open(os.path.join(finished.run_dir, 'DONE'), 'w').close()
    jobs = sweep.build_jobs(runs, ['--train_steps=50'], python='py', main_path='main.py')
    assert [job.name for job in jobs] == [r.name for r in runs if r is not finished]
    assert jobs[0].command == ('py', 'main.py', f'--env_name={ENV}', '--agent=configs/presets.py:byol_gamma_a',
                               '--agent.alpha=6', '--seed=0', f'--run_name=byol_gamma_a_{ENV}_a6_sd0',
                               f'--save_dir={tmp_path}', '--run_group=sw', '--resume', '--train_steps=50')
    assert jobs[0].log_path == str(tmp_path / 'sw' / f'byol_gamma_a_{ENV}_a6_sd0.log')
    assert sweep.describe(runs, jobs) == '5 runs: 1 finished (skipped), 4 to run in 4 jobs.'
    # --num_seeds jobs: consecutive unfinished seeds only (seed 2 is done), named like main.py names them.
    grouped = sweep.build_jobs(runs, seeds_per_job=3, python='py', main_path='main.py')
    assert [[r.seed for r in job.runs] for job in grouped] == [[0, 1], [3, 4]]
    assert '--num_seeds=2' in grouped[1].command and f'--run_name=byol_gamma_a_{ENV}_a6' in grouped[1].command
    assert grouped[1].name == f'byol_gamma_a_{ENV}_a6_sd3-4'
    for flag in ('--seed=3', '--run_name=x', '--noresume', '--agent=agents/gcbc.py'):
        with pytest.raises(ConfigError, match='the sweep sets'):
            sweep.build_jobs(runs, [flag])


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)


def test_dry_run_prints_commands(tmp_path):
    result = run_cli('--name=dry', f'--envs={ENV}', '--method=byol_gamma_a:alpha=1,6', '--method=gcbc', '--seeds=0-2',
                     f'--save_dir={tmp_path}', '--dry_run', "--main_flags=--train_steps=10 --eval_episodes=2",
                     '--', '--eval_episodes=3', '--', '--wandb_mode=disabled')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == '# sweep dry: 9 runs: 0 finished (skipped), 9 to run in 9 jobs.'
    assert len(lines) == 10 and all('--resume' in line for line in lines[1:])
    # Wrapper flags first, then those after `--` (which win in main.py), bare `--` dropped.
    assert lines[1].endswith('--resume --train_steps=10 --eval_episodes=2 --eval_episodes=3 --wandb_mode=disabled')
    assert f'--run_name=gcbc_{ENV}_sd2' in lines[-1]
    assert not os.path.exists(tmp_path / 'dry')  # nothing launched


def test_bad_grid_is_refused_but_dry_run_warns(tmp_path):
    args = ['--name=bad', f'--envs={ENV}', '--method=no_such_preset', '--method=gcbc:alpha=1', f'--save_dir={tmp_path}']
    result = run_cli(*args)
    assert result.returncode == 1
    assert "Unknown preset 'no_such_preset'" in result.stderr and "Preset 'gcbc' has no config key 'alpha'" in result.stderr
    result = run_cli(*args, '--dry_run')
    assert result.returncode == 0 and 'Warning: Unknown preset' in result.stderr
    result = run_cli('--name=bad', '--envs=antmaze-tiny-stitch-v0', '--method=gcbc', f'--save_dir={tmp_path}')
    assert result.returncode == 1 and "Unknown environment 'antmaze-tiny-stitch-v0'" in result.stderr


def test_local_pool_reports_failures_and_resumes(tmp_path, stub_main):
    args = ['--name=pool', f'--envs={ENV}', '--method=gcbc', '--seeds=0,1,13', f'--save_dir={tmp_path}',
            '--workers=2', f'--main={stub_main}']
    result = run_cli(*args)
    assert result.returncode == 1, result.stdout + result.stderr
    log = tmp_path / 'pool' / f'gcbc_{ENV}_sd13.log'
    assert f'FAILED gcbc_{ENV}_sd13 (exit 1); log {log}' in result.stdout
    assert 'stub failure for seed 13' in result.stdout  # the log's tail is shown
    assert '1 jobs finished' not in result.stdout and '2 jobs finished, 1 failed' in result.stdout
    assert 'stub failure for seed 13' in log.read_text() and '--resume' in log.read_text()
    for seed in (0, 1):
        assert (tmp_path / 'pool' / f'gcbc_{ENV}_sd{seed}' / 'DONE').exists()
    again = run_cli(*args)  # finished runs are skipped; only the failed one runs again
    assert again.stdout.startswith('# sweep pool: 3 runs: 2 finished (skipped), 1 to run in 1 jobs.')
    assert log.read_text().count('=== ') == 2  # the log keeps both attempts


def test_interrupt_stops_runs_with_sigterm(tmp_path, stub_main):
    env = dict(os.environ, STUB_WAIT='1')
    process = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=int', f'--envs={ENV}', '--method=gcbc',
         '--seeds=0-2', f'--save_dir={tmp_path}', '--workers=2', f'--main={stub_main}'],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    started = [tmp_path / 'int' / f'gcbc_{ENV}_sd{seed}' / 'STARTED' for seed in (0, 1)]
    deadline = time.time() + 60
    while not all(p.exists() for p in started):
        assert process.poll() is None and time.time() < deadline, process.stdout.read()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)  # Ctrl-C: runs get SIGTERM (checkpoint), seed 2 never starts
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 130, out
    for seed in (0, 1):
        assert (tmp_path / 'int' / f'gcbc_{ENV}_sd{seed}' / 'TERMINATED').exists()
    assert not (tmp_path / 'int' / f'gcbc_{ENV}_sd2').exists()
    assert '0 jobs finished, 0 failed, 3 stopped or not started.' in out and 'resume' in out


def test_submitit_checkpoint_stops_main_and_requeues_same_command(tmp_path, stub_main):
    command = (sys.executable, stub_main, '--save_dir=' + str(tmp_path), '--run_group=g', '--run_name=r', '--seed=0')
    log_path = str(tmp_path / 'g' / 'r.log')
    runner, errors = sweep.MainCommand(), []
    os.environ['STUB_WAIT'] = '1'
    try:
        thread = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, runner, command, log_path)))
        thread.start()
        started = tmp_path / 'g' / 'r' / 'STARTED'
        deadline = time.time() + 30
        while not started.exists():
            assert time.time() < deadline
            time.sleep(0.05)
    finally:
        del os.environ['STUB_WAIT']
    runner._process.send_signal(signal.SIGUSR2)  # Slurm's timeout warning must not kill main.py ...
    time.sleep(0.5)
    assert runner._process.poll() is None
    assert pickle.loads(pickle.dumps(runner))._process is None  # a running job can still be pickled
    delayed = runner.checkpoint(command, log_path)  # ... the checkpoint's SIGTERM makes it save and exit
    thread.join(30)
    assert (tmp_path / 'g' / 'r' / 'TERMINATED').exists() and runner._process.returncode == 143
    assert 'stopped by SIGTERM' in str(errors[0].value)
    assert isinstance(delayed.function, sweep.MainCommand) and delayed.args == (command, log_path)


def test_submitit_local_runs_a_tiny_grid(tmp_path):
    """Two real main.py runs through submitit's local executor, then the results table reads them."""
    from scripts import results as results_cli
    from utils.datagen.pointmaze import write_dataset

    write_dataset(ENV, str(tmp_path / 'data'), seed=0, num_train_episodes=200, num_val_episodes=20, progress=False)
    args = ['--name=tiny', f'--envs={ENV}', '--method=byol_gamma_a:alpha=1,6', '--seeds=0', f'--save_dir={tmp_path / "runs"}',
            '--backend=submitit_local', '--gpus=0', '--cpus=1', '--time_min=10', '--',
            f'--dataset_dir={tmp_path / "data"}', '--nodownload', '--wandb_mode=disabled', '--train_steps=30',
            '--steps_per_call=15', '--log_interval=15', '--eval_interval=15', '--save_interval=30', '--eval_episodes=2',
            '--eval_max_steps=5', '--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32']
    assert sweep_cli.main(args) == 0
    for alpha in (1, 6):
        run_dir = tmp_path / 'runs' / 'tiny' / f'byol_gamma_a_{ENV}_a{alpha}_sd0'
        assert (run_dir / 'DONE').exists() and (run_dir / 'eval.csv').exists()
        assert f'Finished: {run_dir}' in (tmp_path / 'runs' / 'tiny' / f'{run_dir.name}.log').read_text()
    assert sweep_cli.main(args) == 0  # everything finished: nothing is submitted again
    assert results_cli.main([f'--runs={tmp_path / "runs" / "tiny"}']) == 0
