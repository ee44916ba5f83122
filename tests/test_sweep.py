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
from experiments import sweep
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
    with pytest.raises(ConfigError, match='also in the spec of method byol_gamma_a'):
        sweep.build_jobs(runs, ['--agent.alpha=3'])


def run_cli(capsys, *args):
    """scripts/sweep.py in this process: (exit status, stdout, stderr)."""
    try:
        status = sweep_cli.main(list(args))
    except SystemExit as e:  # argument errors exit with their message
        status = 1 if isinstance(e.code, str) else e.code
        print(e.code if isinstance(e.code, str) else '', file=sys.stderr)
    out, err = capsys.readouterr()
    return status, out, err


def test_dry_run_prints_commands(tmp_path, capsys):
    status, out, err = run_cli(
        capsys, '--name=dry', f'--envs={ENV}', '--method=byol_gamma_a:alpha=1,6', '--method=gcbc', '--seeds=0-2',
        f'--save_dir={tmp_path}', '--dry_run', "--main_flags=--train_steps=10 --eval_episodes=2",
        '--', '--eval_episodes=3', '--', '--wandb_mode=disabled')
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == '# sweep dry: 9 runs: 0 finished (skipped), 9 to run in 9 jobs.'
    assert len(lines) == 10 and all('--resume' in line for line in lines[1:])
    # Wrapper flags first, then those after `--` (which win in main.py), bare `--` dropped.
    assert lines[1].endswith('--resume --train_steps=10 --eval_episodes=2 --eval_episodes=3 --wandb_mode=disabled')
    assert f'--run_name=gcbc_{ENV}_sd2' in lines[-1]
    assert not os.path.exists(tmp_path / 'dry')  # nothing launched


def test_bad_grid_is_refused_but_dry_run_warns(tmp_path, capsys):
    args = ['--name=bad', f'--envs={ENV}', '--method=no_such_preset', '--method=gcbc:alpha=1', f'--save_dir={tmp_path}']
    status, _, err = run_cli(capsys, *args)
    assert status == 1
    assert "Unknown preset 'no_such_preset'" in err and "Preset 'gcbc' has no config key 'alpha'" in err
    status, _, err = run_cli(capsys, *args, '--dry_run')
    assert status == 0 and 'Warning: Unknown preset' in err
    status, _, err = run_cli(capsys, '--name=bad', '--envs=antmaze-tiny-stitch-v0', '--method=gcbc', f'--save_dir={tmp_path}')
    assert status == 1 and "Unknown environment 'antmaze-tiny-stitch-v0'" in err
    status, _, err = run_cli(capsys, '--name=bad', f'--envs={ENV}', '--method=gcbc', '--', '--seed=4')
    assert status == 1 and 'the sweep sets --seed itself' in err


def test_local_pool_reports_failures_and_resumes(tmp_path, stub_main, capsys):
    args = ['--name=pool', f'--envs={ENV}', '--method=gcbc', '--seeds=0,1,13', f'--save_dir={tmp_path}',
            '--workers=2', f'--main={stub_main}']
    status, out, err = run_cli(capsys, *args)
    assert status == 1, out + err
    log = tmp_path / 'pool' / f'gcbc_{ENV}_sd13.log'
    assert f'FAILED gcbc_{ENV}_sd13 (exit 1); log {log}' in out
    assert 'stub failure for seed 13' in out  # the log's tail is shown
    assert '2 jobs finished, 1 failed' in out
    assert 'stub failure for seed 13' in log.read_text() and '--resume' in log.read_text()
    for seed in (0, 1):
        assert (tmp_path / 'pool' / f'gcbc_{ENV}_sd{seed}' / 'DONE').exists()
    _, again, _ = run_cli(capsys, *args)  # finished runs are skipped; only the failed one runs again
    assert again.startswith('# sweep pool: 3 runs: 2 finished (skipped), 1 to run in 1 jobs.')
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


def test_submitit_checkpoint_stops_main_and_requeues_same_command(tmp_path, stub_main, monkeypatch):
    command = (sys.executable, stub_main, '--save_dir=' + str(tmp_path), '--run_group=g', '--run_name=r', '--seed=0')
    log_path = str(tmp_path / 'g' / 'r.log')
    runner, errors = sweep.MainCommand(), []

    def call():  # the submitit job's main thread; checkpoint() is its signal handler
        try:
            runner(command, log_path)
        except RuntimeError as e:
            errors.append(e)

    monkeypatch.setenv('STUB_WAIT', '1')
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    try:
        started, deadline = tmp_path / 'g' / 'r' / 'STARTED', time.time() + 60
        while not started.exists():
            assert time.time() < deadline, 'the stub did not start'
            time.sleep(0.05)
        runner._process.send_signal(signal.SIGUSR2)  # Slurm's timeout warning must not kill main.py ...
        time.sleep(0.5)
        assert runner._process.poll() is None
        assert pickle.loads(pickle.dumps(runner))._process is None  # a running job can still be pickled
        delayed = runner.checkpoint(command, log_path)  # ... the checkpoint's SIGTERM makes it save and exit
        thread.join(30)
    finally:
        if runner._process is not None and runner._process.poll() is None:
            runner._process.kill()
    assert (tmp_path / 'g' / 'r' / 'TERMINATED').exists() and runner._process.returncode == 143
    assert len(errors) == 1 and 'stopped by SIGTERM' in str(errors[0])
    assert isinstance(delayed.function, sweep.MainCommand) and delayed.args == (command, log_path)


def test_submitit_reports_a_failed_job(tmp_path, stub_main, capsys):
    status, out, _ = run_cli(capsys, '--name=fail', f'--envs={ENV}', '--method=gcbc', '--seeds=0,13', f'--save_dir={tmp_path}',
                             '--backend=submitit_local', '--gpus=0', f'--main={stub_main}')
    assert status == 1
    assert f'gcbc_{ENV}_sd0: ok' in out and f'FAILED gcbc_{ENV}_sd13: main.py exited with status 1; log ' in out
    assert 'stub failure for seed 13' in out and '1 jobs finished, 1 failed.' in out


def test_submitit_local_runs_a_tiny_grid(tmp_path, capsys, pointmaze_data_dir):
    """Two real main.py runs (two seeds in one --num_seeds process: half the CPU time of two jobs)
    through submitit's local executor, then the results table reads them."""
    from scripts import results as results_cli
    # GCBC, one evaluation of one short episode: the cheapest real runs.
    args = ['--name=tiny', f'--envs={ENV}', '--method=gcbc', '--seeds=0-1', '--seeds_per_job=2', f'--save_dir={tmp_path / "runs"}',
            '--backend=submitit_local', '--gpus=0', '--cpus=1', '--time_min=10', '--',
            f'--dataset_dir={pointmaze_data_dir}', '--nodownload', '--wandb_mode=disabled', '--train_steps=30',
            '--steps_per_call=30', '--log_interval=30', '--eval_interval=30', '--save_interval=30', '--eval_episodes=2',
            '--eval_tasks=1', '--eval_max_steps=5', '--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32']
    assert sweep_cli.main(args) == 0
    for seed in (0, 1):
        run_dir = tmp_path / 'runs' / 'tiny' / f'gcbc_{ENV}_sd{seed}'
        assert (run_dir / 'DONE').exists() and (run_dir / 'eval.csv').exists()
        assert f'Finished: {run_dir}' in (tmp_path / 'runs' / 'tiny' / f'gcbc_{ENV}_sd0-1.log').read_text()
    assert sweep_cli.main(args) == 0  # everything finished: nothing is submitted again
    capsys.readouterr()
    assert results_cli.main([f'--runs={tmp_path / "runs" / "tiny"}']) == 0
    table = capsys.readouterr().out
    assert '| pointmaze-medium-stitch | ' in table and 'over 2 seeds' in table
    assert table.count('finished, last evaluation at step 30 of 30, 1 evaluation(s) (fewer than 3)') == 2


def test_paper_grid_scripts(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable)
    state = subprocess.run(['bash', 'scripts/sweep_state.sh', '--dry_run', f'--save_dir={tmp_path}'], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, env=env)
    assert state.returncode == 0 and not state.stderr, state.stderr
    commands = state.stdout.splitlines()[1:]
    assert len(commands) == 5 * (4 + 1 + 4 + 4 + 1) * 10
    assert sum('--agent=configs/presets.py:tdsr_a --agent.alpha=0.005 ' in c for c in commands) == 50
    visual = subprocess.run(['bash', 'scripts/sweep_visual.sh', '--dry_run', f'--save_dir={tmp_path}'], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=env)
    assert visual.returncode == 0 and not visual.stderr, visual.stderr
    commands = [c for c in visual.stdout.splitlines() if not c.startswith('#')]
    assert len(commands) == 3 * (4 + 1 + 4 + 4 + 1) * 4  # 3 datasets, 14 method cells, 4 seeds
    scene = [c for c in commands if '--env_name=visual-scene-play-v0 ' in c]
    assert len(scene) == 14 * 4 and all('--agent.p_aug=0.5' in c for c in scene)
    assert not any('--agent.p_aug' in c for c in commands if c not in scene)
    assert not os.path.exists(tmp_path / 'state') and not os.path.exists(tmp_path / 'visual')


def test_stitch_benchmark_script(tmp_path):
    """The one-command stitching benchmark plans 8 method cells x 8 seeds as 16 four-seed processes at
    its documented budget; STITCH_* variables change the budget and the method list."""
    env = dict(os.environ, PYTHON=sys.executable, STITCH_SAVE_DIR=str(tmp_path))
    plan = subprocess.run(['bash', 'scripts/stitch_benchmark.sh', '--dry_run'], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)
    assert plan.returncode == 0 and not plan.stderr, plan.stderr
    header, *commands = plan.stdout.splitlines()
    assert '64 runs' in header and '16 jobs' in header
    cells = ['gcbc', 'gcbc_phi', 'byol_gamma_a_{}_a1', 'byol_gamma_a_{}_a6', 'byol', 'tra_{}_a10', 'tdsr_a_{}_a0.01',
             'hgcbc']
    for cell in cells:
        run_name = cell.format('pointmaze-large-stitch-v0') if '{}' in cell else f'{cell}_pointmaze-large-stitch-v0'
        assert sum(f' --run_name={run_name} ' in c for c in commands) == 2, cell
    for command in commands:
        assert '--env_name=pointmaze-large-stitch-v0 ' in command and '--num_seeds=4 ' in command
        assert ('--seed=0 ' in command) != ('--seed=4 ' in command)
        for flag in ('--train_steps=6000', '--agent.batch_size=256', '--eval_interval=2000', '--eval_episodes=20'):
            assert f' {flag} ' in command, (flag, command)
    small = subprocess.run(['bash', 'scripts/stitch_benchmark.sh', '--dry_run'], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env=dict(env, STITCH_METHODS='gcbc byol_gamma_a:alpha=1', STITCH_SEEDS='0-3',
                                                 STITCH_STEPS='300', STITCH_ENV='pointmaze-medium-stitch-v0'))
    assert small.returncode == 0 and not small.stderr, small.stderr
    header, *commands = small.stdout.splitlines()
    assert '8 runs' in header and len(commands) == 2
    assert all(' --train_steps=300 ' in c and ' --eval_interval=100 ' in c and 'medium-stitch' in c for c in commands)
    assert not os.path.exists(tmp_path / 'stitch')
