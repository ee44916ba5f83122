"""The sweep launcher: naming, skipping finished runs, dry runs, the local process pool (with a stub
main.py), datasets prepared once before launching, GPU slots, time limits, checkpoint-and-requeue, and a
tiny real grid through submitit's local executor."""

import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
import types

import pytest

from experiments import sweep
from scripts import sweep as sweep_cli
from tests.helpers import BUDGET, STUB_MAIN, TINY, start
from utils.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = 'pointmaze-medium-stitch-v0'



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
    for bad in ('byol:alpha', 'byol:alpha=', 'byol:alpha=1:alpha=2', ':alpha=1', '-byol', 'byol/x', 'byol x'):
        with pytest.raises(ConfigError):
            sweep.parse_method(bad)
    # Presets with '-' (fb_lr1e-5, fb_lr1e-6): accepted, and their run names stay one path-safe directory name.
    runs = sweep.build_runs('sw', [sweep.parse_method('fb_lr1e-5'), sweep.parse_method('fb_lr1e-6:tau=0.01,0.02')],
                            [ENV], [0], '/tmp')
    assert [r.name for r in runs] == [f'fb_lr1e-5_{ENV}_sd0', f'fb_lr1e-6_{ENV}_tau0.01_sd0', f'fb_lr1e-6_{ENV}_tau0.02_sd0']
    from configs.presets import PRESETS
    assert {'fb_lr1e-5', 'fb_lr1e-6'} <= set(PRESETS)
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


def test_settings_of_one_preset_differing_in_a_fixed_key_are_named_apart(tmp_path, capsys):
    """--method=byol_gamma_a:tau=0.99 --method=byol_gamma_a:tau=0.9: a fixed (single-valued) key is not in run names,
    so both settings were named byol_gamma_a_<env> and the sweep was refused as a duplicate. Their names now show
    the key they differ in, where they set it; names that never coincided stay as they were (a sweep relaunched
    finds its runs), and a setting listed twice is still refused, saying so."""
    status, out, err = run_cli(capsys, '--name=fixed', f'--envs={ENV}', '--method=byol_gamma_a:tau=0.99',
                               '--method=byol_gamma_a:tau=0.9', '--method=byol_gamma_a', f'--save_dir={tmp_path}', '--dry_run')
    assert status == 0 and 'Warning' not in err, err
    commands = out.splitlines()[1:]
    for tau, name in (('0.99', f'byol_gamma_a_{ENV}_tau0.99_sd0'), ('0.9', f'byol_gamma_a_{ENV}_tau0.9_sd0'),
                      (None, f'byol_gamma_a_{ENV}_sd0')):
        command = next(c for c in commands if f'--run_name={name} ' in c)
        assert (f'--agent.tau={tau} ' in command) if tau else '--agent.tau' not in command
    assert len(commands) == 3
    kept = sweep.build_runs('sw', [sweep.parse_method(m) for m in ('byol_gamma_a:alpha=1:tau=0.99', 'byol_gamma_a:alpha=6')],
                            [ENV], [0], str(tmp_path))
    assert [r.name for r in kept] == [f'byol_gamma_a_{ENV}_a1_sd0', f'byol_gamma_a_{ENV}_a6_sd0']
    status, _, err = run_cli(capsys, '--name=twice', f'--envs={ENV}', '--method=byol_gamma_a:tau=0.9',
                             '--method=byol_gamma_a:tau=0.9', f'--save_dir={tmp_path}')
    assert status == 1 and "byol_gamma_a with {'tau': '0.9'} is listed twice; remove the duplicate" in err, err


def test_commands_skip_finished_runs_and_group_seeds(tmp_path):
    runs = grid(tmp_path, seeds=range(5), methods=('byol_gamma_a:alpha=6',))
    finished = runs[2]
    os.makedirs(finished.run_dir)
    open(os.path.join(finished.run_dir, 'DONE'), 'w').close()
    jobs = sweep.build_jobs(runs, ['--train_steps=50'], python='py', main_path='main.py')
    assert [job.name for job in jobs] == [r.name for r in runs if r is not finished]
    assert os.path.isabs(sweep.PRESETS_FILE)  # commands work pasted into any directory
    assert jobs[0].command == ('py', 'main.py', f'--env_name={ENV}', f'--agent={sweep.PRESETS_FILE}:byol_gamma_a',
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
    assert "Unknown preset 'no_such_preset'" in err and "Unknown config key 'alpha' in '--agent.alpha=1'" in err, err
    status, _, err = run_cli(capsys, *args, '--dry_run')
    assert status == 0 and f"Warning: no_such_preset_{ENV}_sd0: Unknown preset 'no_such_preset'" in err, err
    status, _, err = run_cli(capsys, '--name=bad', '--envs=antmaze-tiny-stitch-v0', '--method=gcbc', f'--save_dir={tmp_path}')
    assert status == 1 and "Unknown environment 'antmaze-tiny-stitch-v0'" in err
    status, _, err = run_cli(capsys, '--name=bad', f'--envs={ENV}', '--method=gcbc', '--', '--seed=4')
    assert status == 1 and 'the sweep sets --seed itself' in err


def test_every_sweep_flag_is_range_checked_before_any_work(tmp_path, capsys):
    """Slurm's --time_min, --array_parallelism, --max_timeouts, seeds main.py does not take (above 2^31-1: they passed
    the pre-launch check, which checks one command per setting) and a name the tables would skip or that names no
    folder are refused by name; --seeds=0-1000000000 was a MemoryError (in a process of its own here)."""
    grid = ['--name=flags', f'--envs={ENV}', '--method=gcbc', f'--save_dir={tmp_path}', '--dry_run']
    for flag, message in (('--time_min=0', '--time_min must be at least 1, got 0.'),
                          ('--array_parallelism=0', '--array_parallelism must be at least 1, got 0.'),
                          ('--max_timeouts=-1', '--max_timeouts must be at least 0, got -1.'),
                          ('--mem_gb=nan', '--mem_gb must be a positive number of GB, got nan.')):
        status, _, err = run_cli(capsys, *grid, flag)
        assert status == 2 and message in err, (flag, err)
    for seeds in ('2147483647-2147483648', '0-10000'):
        status, _, err = run_cli(capsys, *grid, f'--seeds={seeds}')
        assert status == 1 and f"Error: Bad --seeds '{seeds}': seeds lie in 0..2147483647" in err, err
    for name in ('..', '.', 'grid.old', 'grid.damaged'):
        status, _, err = run_cli(capsys, *grid[1:], f'--name={name}')
        assert status == 1 and f"Error: --name={name!r}: a sweep name is one directory name" in err, err
    huge = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), *grid, '--seeds=0-1000000000'],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert huge.returncode == 1 and "Error: Bad --seeds '0-1000000000'" in huge.stderr, huge.stderr[-2000:]
    assert not os.listdir(tmp_path)


def test_seeds_per_job_takes_a_positive_count_or_all(tmp_path, capsys):
    """--seeds_per_job=0 (or a negative count) is refused by name; "all" puts every seed of a setting in one job."""
    grid = ['--name=jobs', f'--envs={ENV}', '--method=gcbc', '--seeds=0-2', f'--save_dir={tmp_path}', '--dry_run']
    for count in ('0', '-2'):
        status, _, err = run_cli(capsys, *grid, f'--seeds_per_job={count}')
        assert status == 2 and 'is not a positive number of seeds' in err, err
    status, out, err = run_cli(capsys, *grid, '--seeds_per_job=all')
    assert status == 0 and out.splitlines()[0].endswith('3 to run in 1 jobs.'), (out, err)


def test_a_dataset_listed_twice_is_named_as_such(tmp_path):
    """--envs=A,A: the grid's duplicate run was blamed on the method ("gcbc ... is listed twice"); the refusal names
    --envs and the dataset, before anything is launched. Run as a user runs it."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=twice', f'--envs={ENV},{ENV}',
                           '--method=gcbc', f'--save_dir={tmp_path}', '--dry_run'], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr
    assert done.stderr.strip() == (f'Error: --envs lists {ENV} twice: a sweep runs each dataset once. Remove the '
                                   f'duplicate from --envs.'), done.stderr
    assert os.listdir(tmp_path) == []


def test_local_pool_reports_failures_and_resumes(tmp_path, stub_main, capsys, pointmaze_data_dir):
    args = ['--name=pool', f'--envs={ENV}', '--method=gcbc', '--seeds=0,1,13', f'--save_dir={tmp_path}',
            '--workers=2', f'--main={stub_main}', '--', f'--dataset_dir={pointmaze_data_dir}', '--nodownload']
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
    # The excerpt is this attempt's part of the log: the first attempt's lines are not in it.
    assert again.count('stub failure for seed 13') == 1 and again.count('stub started') == 1


def test_a_local_sweep_prints_each_start_and_end_and_the_steps_its_running_jobs_reached(
        tmp_path, stub_main, pointmaze_data_dir, capsys, monkeypatch):
    """Between its dataset line and its first finished job a sweep is not silent: a line per job start, a line every
    --progress_interval seconds with each running job's step (its train.csv's last row, a last line cut off mid-write
    not read; 'starting' before it), and a line per job end. --progress_interval=0: no progress lines."""
    def sweep_output(name, interval):
        result = subprocess.run(
            [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), f'--name={name}', f'--envs={ENV}',
             '--method=gcbc', '--seeds=0-1', f'--save_dir={tmp_path}', '--workers=2', f'--main={stub_main}',
             f'--progress_interval={interval}', '--', '--train_steps=40', f'--dataset_dir={pointmaze_data_dir}',
             '--nodownload'], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, STUB_PROGRESS='1.2'))
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout.splitlines()

    lines = sweep_output('progress', 0.4)
    jobs = [f'gcbc_{ENV}_sd{seed}' for seed in (0, 1)]
    started = [line for line in lines if line.startswith('[started ')]
    assert sorted(started) == sorted(f'[started {k}/2] {job}, log {tmp_path}/progress/{job}.log' for k, job in
                                     zip((1, 2), jobs)) or sorted(started) == sorted(
        f'[started {k}/2] {job}, log {tmp_path}/progress/{job}.log' for k, job in zip((2, 1), jobs)), lines
    progress = [line for line in lines if line.startswith('[progress ')]
    assert any(f'{jobs[0]}: starting' in line and f'{jobs[1]}: starting' in line for line in progress), lines
    assert any(f'{jobs[0]}: step 20/40 (50%)' in line for line in progress), lines  # train.csv's last row
    assert not any('1530' in line for line in progress), lines  # a dataset's progress line is not the run's
    assert all(', 0/2 done] ' in line for line in progress) and not any('999' in line for line in progress), lines
    ends = [i for i, line in enumerate(lines) if line.startswith(('[1/2] ', '[2/2] '))]
    assert len(ends) == 2 and all(lines[i].endswith(': ok') for i in ends), lines
    assert lines.index(started[0]) < lines.index(progress[0]) < ends[0], lines
    monkeypatch.setenv('STUB_PROGRESS', '0.2')
    status, out, _ = run_cli(capsys, '--name=quiet', f'--envs={ENV}', '--method=gcbc', '--seeds=0', f'--save_dir={tmp_path}',
                             f'--main={stub_main}', '--progress_interval=0', '--', '--train_steps=40',
                             f'--dataset_dir={pointmaze_data_dir}', '--nodownload')
    assert status == 0 and f'[started 1/1] gcbc_{ENV}_sd0' in out and '[progress ' not in out, out
    # The reader of train.csv takes the last whole row from the file's end, however long the file.
    run_dir = tmp_path / 'long'
    run_dir.mkdir()
    (run_dir / 'train.csv').write_text('step,loss\n' + ''.join(f'{step},0.1\n' for step in range(1, 20001)) + '200')
    assert sweep.last_logged_step(str(run_dir)) == 20000 and sweep.last_logged_step(str(tmp_path / 'none')) is None


def test_interrupt_stops_runs_with_sigterm(tmp_path, stub_main, pointmaze_data_dir):
    env = dict(os.environ, STUB_WAIT='1')
    process = start(
        [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=int', f'--envs={ENV}', '--method=gcbc',
         '--seeds=0-2', f'--save_dir={tmp_path}', '--workers=2', f'--main={stub_main}', '--',
         f'--dataset_dir={pointmaze_data_dir}', '--nodownload'], stderr=subprocess.STDOUT, env=env)
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


class FakeSlurmJob:
    """A submitted job as `wait_submitit` sees it: an id, and Slurm's record of it at each question (the last one
    stays); a record with an `error` is a question Slurm did not answer."""

    watcher = types.SimpleNamespace(error=None)  # what the jobs of one submission share

    def __init__(self, folder, job_id, *records):
        self.job_id, self.records = job_id, list(records)
        self.paths = types.SimpleNamespace(stderr=folder / f'{job_id}.err')

    def get_info(self, mode):
        record = self.records.pop(0) if len(self.records) > 1 else self.records[0]
        self.watcher.error = record.get('error')
        return record


def test_waiting_reads_each_outcome_from_slurms_states_and_the_runs_never_from_submitits_result(tmp_path):
    """--wait on Slurm: a job ends when its state says so; its outcome comes from its runs (DONE: ok) and how its last
    main.py ended (its log), never from submitit's result file, which is not even there; a job that ended before its
    main.py did (cancelled, forgotten) is stopped, resumable. Between, the progress lines say why a job is pending, a
    requeue is reported as one, and a question Slurm did not answer is said."""
    jobs = sweep.build_jobs(grid(tmp_path, seeds=range(4), methods=('gcbc',)), python='py', main_path='main.py')
    os.makedirs(tmp_path / 'sw')
    for job, outcome in zip(jobs[:2], ('main.py exited with status 0', 'main.py was stopped by SIGTERM (checkpoint '
                                                                        'saved); relaunch the sweep to resume.')):
        with open(job.log_path, 'w') as log:
            log.write(f'older attempt\n=== 2026-01-01T00:00:00 main.py ...\nError: {job.name}\n{sweep.OUTCOME}{outcome}\n')
    os.makedirs(jobs[0].runs[0].run_dir)
    open(os.path.join(jobs[0].runs[0].run_dir, 'DONE'), 'w').close()
    running, pending = dict(State='RUNNING', Restarts='0'), dict(State='PENDING', Reason='Resources', Restarts='0')
    handles = [FakeSlurmJob(tmp_path, '7_0', running, running, dict(State='COMPLETED')),
               FakeSlurmJob(tmp_path, '7_1', running, dict(State='FAILED')),
               FakeSlurmJob(tmp_path, '7_2', pending, pending, running, dict(pending, Restarts='1', Reason='BeginTime'),
                            dict(State='CANCELLED', Restarts='1')),
               FakeSlurmJob(tmp_path, '7_3', pending, dict(pending, error='scontrol: no answer within 60 s'), pending,
                            pending, pending, dict(State=sweep.FORGOTTEN))]
    out = io.StringIO()
    outcomes = sweep.wait_submitit(jobs, handles, [0] * 4, 'slurm', out, poll_s=0, result_grace_s=0,
                                   progress_interval=1e-9)
    text = out.getvalue()
    assert [o.status for o in outcomes] == ['ok', 'stopped', 'stopped', 'stopped'], text
    assert [o.ended_as for o in outcomes] == [None, None, 'Slurm state CANCELLED', f'Slurm state {sweep.FORGOTTEN}']
    assert f'gcbc_{ENV}_sd3: pending (Resources)' in text and f'gcbc_{ENV}_sd2: pending (BeginTime)' in text
    assert 'Slurm does not answer (scontrol: no answer within 60 s); still waiting' in text and 'Slurm answers again.' in text
    assert f'[requeued] gcbc_{ENV}_sd2: Slurm requeued job 7_2 (restart 1)' in text
    assert f'gcbc_{ENV}_sd2: stopped (Slurm state CANCELLED, before its main.py ended) (job 7_2)' in text
    report, status = sweep.summarize_submitit(outcomes, handles)
    assert status == 130 and report.startswith('1 jobs finished, 0 failed, 3 stopped.'), report
    assert f'STOPPED gcbc_{ENV}_sd1: main.py was stopped by SIGTERM (checkpoint saved); log' in report
    assert f'STOPPED gcbc_{ENV}_sd3: it ended before its main.py did (Slurm state {sweep.FORGOTTEN}; submitit log ' in report
    never = [FakeSlurmJob(tmp_path, '8', dict(State='PENDING', Reason='PartitionConfig'))]
    with pytest.raises(ConfigError, match=r'Slurm holds job 8 \(gcbc_.*_sd0\) PENDING with reason PartitionConfig: it '
                                          r'cannot start as submitted .* \(scancel 8\)'):
        sweep.wait_submitit(jobs[:1], never, [0], 'slurm', io.StringIO(), poll_s=0)


def test_submitit_reports_a_failed_job(tmp_path, stub_main, capsys, pointmaze_data_dir):
    status, out, _ = run_cli(capsys, '--name=fail', f'--envs={ENV}', '--method=gcbc', '--seeds=0,13', f'--save_dir={tmp_path}',
                             '--backend=submitit_local', '--gpus=0', f'--main={stub_main}', '--',
                             f'--dataset_dir={pointmaze_data_dir}', '--nodownload')
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


def test_a_finished_run_whose_budget_or_protocol_changed_is_never_skipped(tmp_path, pointmaze_data_dir):
    """A relaunched sweep took "has DONE" for finished: given a larger --train_steps (or another --eval_episodes) it said
    "1 finished (skipped), 0 to run" and the new budget never ran. Each finished run's recorded flags and config are
    compared with what the sweep would launch (main.py's own --resume check): a longer --train_steps resumes and
    extends the run; another protocol is refused before anything is launched, naming the difference (as is a budget
    below the run's: main.py's same check); only an unchanged run is skipped."""
    def relaunch(*flags):
        command = [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=grow', f'--envs={ENV}',
                   '--method=gcbc', '--seeds=0', f'--save_dir={tmp_path}', '--', f'--dataset_dir={pointmaze_data_dir}',
                   *TINY, *BUDGET, *flags]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        return result.returncode, result.stdout + result.stderr

    run_dir = tmp_path / 'grow' / f'gcbc_{ENV}_sd0'
    code, out = relaunch()
    assert code == 0 and (run_dir / 'DONE').exists(), out
    code, out = relaunch('--train_steps=60')
    assert code == 0 and '1 runs: 0 finished (skipped), 1 to run in 1 jobs.' in out, out
    assert (run_dir / 'DONE').exists() and '60,' in (run_dir / 'eval.csv').read_text().splitlines()[-1]
    code, out = relaunch('--train_steps=60', '--eval_episodes=3')
    assert code == 1 and 'Error: this sweep would fail at start:' in out and '--eval_episodes: 2 -> 3' in out, out
    code, out = relaunch('--train_steps=60')
    assert code == 0 and '1 runs: 1 finished (skipped), 0 to run in 0 jobs.' in out, out


def test_paper_grid_scripts(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable)
    state = subprocess.run(['bash', 'scripts/sweep_state.sh', '--dry_run', f'--save_dir={tmp_path}'], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, env=env)
    assert state.returncode == 0 and not state.stderr, state.stderr
    commands = state.stdout.splitlines()[1:]
    assert len(commands) == 5 * (4 + 4 + 4 + 4 + 1) * 10  # 5 datasets, 4 alphas per method but GCBC, 10 seeds
    assert sum(f'--agent={os.path.join(ROOT, "configs", "presets.py")}:tdsr_a --agent.alpha=0.005 ' in c for c in commands) == 50
    ablations = subprocess.run(['bash', 'scripts/sweep_ablations.sh', '--dry_run', f'--save_dir={tmp_path}'], cwd=ROOT,
                               capture_output=True, text=True, timeout=120, env=env)
    assert ablations.returncode == 0 and not ablations.stderr, ablations.stderr
    commands = [c for c in ablations.stdout.splitlines() if not c.startswith('#')]
    # The action-conditioning ablation (TRA^a, TD-SR) has 10 seeds in the paper, the others 4.
    for preset, seeds in (('tra_a', 10), ('tdsr', 10), ('byol_gamma_no_a', 4), ('gcbc_phi', 4), ('fb', 4)):
        ours = [c for c in commands if f'presets.py:{preset} ' in c]
        assert len(ours) == 5 * (1 if preset == 'gcbc_phi' else 3 if preset == 'fb' else 4) * seeds, preset
    assert not os.path.exists(tmp_path / 'state') and not os.path.exists(tmp_path / 'ablations')


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
    # A `*` in the list stays a `*` (it was expanded to the file names of the working directory), named by the sweep.
    (tmp_path / 'gcbc_phi').touch()
    starred = subprocess.run(['bash', os.path.join(ROOT, 'scripts', 'stitch_benchmark.sh'), '--dry_run'], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120, env=dict(env, STITCH_METHODS='gcbc *'))
    assert starred.returncode == 1 and "Error: Method spec '*' must start with a preset name" in starred.stderr, starred.stderr


def test_the_wrapper_scripts_help_is_the_sweeps_help(tmp_path):
    """The wrapper scripts passed --help to the sweep, which printed its help, and then tabled runs that were never
    run: the help ended in results.py's error. They stop after the help, with exit status 0."""
    env = dict(os.environ, PYTHON=sys.executable, SAVE_DIR=str(tmp_path), STITCH_SAVE_DIR=str(tmp_path))
    for name in ('stitch_benchmark.sh', 'headline.sh'):  # cpu_results*.sh end as stitch_benchmark.sh does
        done = subprocess.run(['bash', os.path.join(ROOT, 'scripts', name), '--help'], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env=env)
        assert done.returncode == 0 and 'usage: sweep.py' in done.stdout and not done.stderr, (name, done.stderr)
    assert os.listdir(tmp_path) == []


def test_dry_run_commands_work_pasted_in_any_directory(tmp_path, capsys, pointmaze_data_dir):
    """A printed command, run from another directory, trains: both main.py and the preset file are absolute."""
    status, out, err = run_cli(
        capsys, '--name=paste', f'--envs={ENV}', '--method=gcbc', '--seeds=0', f'--save_dir={tmp_path / "runs"}', '--dry_run',
        '--', f'--dataset_dir={pointmaze_data_dir}', '--nodownload', '--wandb_mode=disabled', '--train_steps=20',
        '--steps_per_call=20', '--log_interval=20', '--eval_interval=20', '--save_interval=20', '--eval_episodes=2',
        '--eval_tasks=1', '--eval_max_steps=5', '--eval_workers=1', '--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32')
    assert status == 0, err
    command = out.splitlines()[1]
    assert f'--agent={ROOT}/configs/presets.py:gcbc ' in command
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    result = subprocess.run(command, shell=True, cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / 'runs' / 'paste' / f'gcbc_{ENV}_sd0' / 'DONE').exists()


def half_pair(source, destination):
    """A folder holding a generated train file (with its provenance) whose val file is missing: the cheapest
    dataset that has to be generated (the val file is regenerated from the recorded seed and counts)."""
    destination.mkdir(parents=True)
    for name in (f'{ENV}.npz', f'{ENV}.npz.provenance.json'):
        shutil.copyfile(os.path.join(source, name), destination / name)
    return destination


@pytest.fixture(scope='module')
def small_data(tmp_path_factory):
    from datagen.pointmaze import write_dataset

    path = tmp_path_factory.mktemp('small-data')
    write_dataset(ENV, str(path), seed=0, num_train_episodes=20, num_val_episodes=4, progress=False)
    return str(path)


def test_datasets_are_prepared_once_before_any_job(tmp_path, stub_main, capsys, small_data):
    """The sweep obtains each dataset once, with the dataset flags it passes to main.py, before any job starts
    (so parallel jobs never race to generate it); the dry run obtains nothing."""
    data = half_pair(small_data, tmp_path / 'data')
    record = tmp_path / 'record.jsonl'
    args = ['--name=prep', f'--envs={ENV}', '--method=gcbc', '--seeds=0-3', f'--save_dir={tmp_path / "runs"}', '--workers=2',
            f'--main={stub_main}', '--', f'--dataset_dir={data}', '--nodownload']
    status, out, err = run_cli(capsys, '--dry_run', *args)
    assert status == 0 and not (data / f'{ENV}-val.npz').exists(), out + err
    os.environ['STUB_RECORD'] = str(record)
    try:
        status, out, err = run_cli(capsys, *args)
    finally:
        del os.environ['STUB_RECORD']
    assert status == 0, out + err
    assert out.count('is missing: regenerating it') == 1, out
    assert f'# dataset {ENV}: {data / f"{ENV}.npz"} (and its -val file) ready' in out
    assert out.index('ready') < out.index('[1/4]')
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(runs) == 4 and all(run['data'] == [True, True] for run in runs)  # there when each job started


def test_a_dataset_that_cannot_be_obtained_stops_the_sweep_before_launching(tmp_path, stub_main, capsys):
    """main.py's own paragraph, and not one job started (no log, no run directory)."""
    status, out, err = run_cli(capsys, '--name=nodata', '--envs=antmaze-medium-stitch-v0', '--method=gcbc',
                               f'--save_dir={tmp_path / "runs"}', f'--main={stub_main}', '--',
                               f'--dataset_dir={tmp_path / "empty"}', '--nodownload')
    assert status == 1 and 'Traceback' not in err
    assert "NOT OGBench's data" in err and 'generate_dataset.py --env_name=antmaze-medium-stitch-v0' in err
    assert 'No job of sweep nodata was launched.' in err and not (tmp_path / 'runs').exists()


def test_two_sweeps_into_one_folder_report_their_own_failure(tmp_path, stub_main, capsys, pointmaze_data_dir):
    """While a first sweep's run writes its log (here: a line every 10 ms), a second sweep into the same folder
    fails its job (the run directory is in use); its FAILED excerpt is its own attempt's part of the shared
    log, led by main.py's Error paragraph, with none of the first sweep's lines."""
    flags = ['--name=shared', f'--envs={ENV}', '--method=gcbc', '--seeds=0', f'--save_dir={tmp_path}', '--workers=1',
             f'--main={stub_main}', '--', f'--dataset_dir={pointmaze_data_dir}', '--nodownload']
    first = start([sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), *flags], stderr=subprocess.STDOUT,
                  env=dict(os.environ, STUB_LOCK='1'))
    try:
        started, deadline = tmp_path / 'shared' / f'gcbc_{ENV}_sd0' / 'STARTED', time.time() + 60
        while not started.exists():
            assert first.poll() is None and time.time() < deadline, first.stdout.read()
            time.sleep(0.05)
        os.environ['STUB_LOCK'] = '1'
        try:
            status, out, _ = run_cli(capsys, *flags)
        finally:
            del os.environ['STUB_LOCK']
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert status == 1
    report = out[out.index(f'FAILED gcbc_{ENV}_sd0 (exit 1)'):]
    excerpt = report.splitlines()[1]
    assert excerpt.strip().startswith('Error: Run directory ') and 'is in use by another process' in excerpt
    assert 'Finished:' not in report, report
    assert 'Finished: chunk' in (tmp_path / 'shared' / f'gcbc_{ENV}_sd0.log').read_text()  # the log is shared


def test_a_run_stopped_at_its_time_limit_is_resumable_not_failed(tmp_path, stub_main, capsys, pointmaze_data_dir, monkeypatch):
    """main.py --time_limit exits 75 with a checkpoint: the local backend reports the job as stopped at its time
    limit, the sweep exits 75 saying that rerunning it resumes the job, and rerunning it does."""
    monkeypatch.setenv('STUB_TIME_LIMIT', '1')
    args = ['--name=tl', f'--envs={ENV}', '--method=gcbc', '--seeds=0,1', f'--save_dir={tmp_path}', '--workers=2',
            f'--main={stub_main}', '--', f'--dataset_dir={pointmaze_data_dir}', '--nodownload']
    status, out, err = run_cli(capsys, *args)
    assert status == 75, out + err
    assert f'gcbc_{ENV}_sd0: stopped at its --time_limit (exit 75: checkpoint saved; rerun the sweep to resume)' in out
    assert '0 jobs finished, 0 failed, 0 stopped or not started, 2 stopped at their time limit.' in out
    assert 'rerunning the same sweep command resumes them' in out and 'FAILED' not in out
    status, out, err = run_cli(capsys, *args)
    assert status == 0 and '2 jobs finished, 0 failed' in out, out + err
    assert all((tmp_path / 'tl' / f'gcbc_{ENV}_sd{seed}' / 'DONE').exists() for seed in (0, 1))


def test_submitit_requeues_a_run_stopped_at_its_time_limit(tmp_path, stub_main, capsys, pointmaze_data_dir, monkeypatch):
    """On Slurm (here submitit's local executor, which runs the same job code), a main.py that exits 75 has its
    job requeue itself with the same command, through submitit's own checkpoint-and-requeue path; the
    requeued job resumes the run to its end."""
    monkeypatch.setenv('STUB_TIME_LIMIT', '1')
    status, out, _ = run_cli(capsys, '--name=tlq', f'--envs={ENV}', '--method=gcbc', '--seeds=0', f'--save_dir={tmp_path}',
                             '--backend=submitit_local', '--gpus=0', f'--main={stub_main}', '--',
                             f'--dataset_dir={pointmaze_data_dir}', '--nodownload')
    assert status == 0 and f'gcbc_{ENV}_sd0: ok' in out, out
    log = (tmp_path / 'tlq' / f'gcbc_{ENV}_sd0.log').read_text()
    headers = [line for line in log.splitlines() if line.startswith('=== ') and stub_main in line]
    assert len(headers) == 2 and 'stopped at its --time_limit (exit 75, checkpoint saved): requeueing' in log
    assert (tmp_path / 'tlq' / f'gcbc_{ENV}_sd0' / 'DONE').exists()
    stderr = ''.join(p.read_text() for p in (tmp_path / 'tlq' / 'submitit').rglob('*.err'))
    assert 'Caught signal SIGUSR2' in stderr  # submitit's own checkpoint-and-requeue handler ran


def test_local_gpu_slots_pin_each_job_to_one_gpu(tmp_path, stub_main, capsys, pointmaze_data_dir, monkeypatch):
    """--gpus=0,1 --runs_per_gpu=2: four slots; each job sees one GPU (CUDA_VISIBLE_DEVICES) with a preallocated
    share of its memory, and at no time do more than two jobs use one GPU."""
    record = tmp_path / 'record.jsonl'
    # A machine with two GPUs and JAX's CUDA plugin, as far as the launcher's check can tell (the stub needs neither).
    monkeypatch.setattr(sweep, 'gpu_inventory', lambda: sweep.GpuInventory((('0', None), ('1', None)), 'a stand-in',
                                                                            'jax-cuda12-plugin'))
    monkeypatch.delenv('JAX_PLATFORMS', raising=False)
    monkeypatch.setenv('STUB_RECORD', str(record))
    monkeypatch.setenv('STUB_SLEEP', '0.4')
    monkeypatch.setenv('XLA_CLIENT_MEM_FRACTION', '0.9')  # a user's setting: JAX refuses it next to the old name
    status, out, err = run_cli(capsys, '--name=gpus', f'--envs={ENV}', '--method=gcbc', '--seeds=0-7', f'--save_dir={tmp_path}',
                               '--gpus=0,1', '--runs_per_gpu=2', f'--main={stub_main}', '--',
                               f'--dataset_dir={pointmaze_data_dir}', '--nodownload')
    assert status == 0 and '8 jobs finished' in out, out + err
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(runs) == 8
    assert all(r['CUDA_VISIBLE_DEVICES'] in ('0', '1') and r['XLA_PYTHON_CLIENT_PREALLOCATE'] == 'true'
               and r['XLA_PYTHON_CLIENT_MEM_FRACTION'] == '0.43' and r['XLA_CLIENT_MEM_FRACTION'] is None for r in runs)
    for gpu in ('0', '1'):
        on_gpu = [r for r in runs if r['CUDA_VISIBLE_DEVICES'] == gpu]
        assert on_gpu
        for r in on_gpu:  # how many jobs ran on this GPU when r started (r included)
            assert sum(o['start'] <= r['start'] < o['end'] for o in on_gpu) <= 2
    assert max(sum(o['start'] <= r['start'] < o['end'] for o in runs) for r in runs) > 1  # slots do run at once
    log = (tmp_path / 'gpus' / f'gcbc_{ENV}_sd0.log').read_text()
    assert '[CUDA_VISIBLE_DEVICES=' in log


def test_gpus_the_machine_cannot_give_are_refused_before_launching(tmp_path, stub_main, pointmaze_data_dir):
    """--gpus=0,1 on this machine (no GPU, a CPU-only jaxlib; JAX_PLATFORMS=cpu in the tests' environment): refused in
    one paragraph before any job starts (before: each job trained on the CPU, "2 jobs finished"); a dry run, whose
    commands may be meant for another machine, warns. What the check finds on other machines, from stand-ins."""
    command = [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=g', f'--envs={ENV}', '--method=gcbc',
               '--seeds=0,1', f'--save_dir={tmp_path}', '--gpus=0,1', f'--main={stub_main}', '--',
               f'--dataset_dir={pointmaze_data_dir}', '--nodownload']
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stdout + result.stderr
    paragraph = result.stderr.strip().splitlines()[-1]
    assert paragraph.startswith('Error: --gpus=0,1 ') and paragraph.endswith('Nothing was launched.'), paragraph
    assert 'every job would train on the CPU' in paragraph and 'drop --gpus' in paragraph.lower()
    if not sweep.gpu_inventory().gpus:
        assert 'this machine has no NVIDIA GPU (nvidia-smi' in paragraph, paragraph
    assert not (tmp_path / 'g').exists()  # no job, no log
    dry = subprocess.run(command[:-3] + ['--dry_run'], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0 and 'Warning: --gpus=0,1 ' in dry.stderr and len(dry.stdout.splitlines()) == 3, dry.stderr

    two = (('0', 'GPU-aa'), ('1', 'GPU-bb'))
    ready = sweep.GpuInventory(two, 'nvidia-smi -L', 'jax-cuda12-plugin 0.10.2')
    assert sweep.gpu_problem(['0', '1'], ready, environ={}) is None
    assert sweep.gpu_problem(['GPU-bb', 'MIG-cc'], ready, environ={'JAX_PLATFORMS': 'cuda,cpu'}) is None
    for gpus, inventory, environ, expected in (
            (['0', '2'], ready, {}, 'lists GPU 2, which this machine does not have (it has 2: 0, 1, from nvidia-smi -L)'),
            (['GPU-zz'], ready, {}, 'lists GPU GPU-zz, which this machine does not have'),
            (['0'], sweep.GpuInventory(two, 'nvidia-smi -L', None), {}, 'the installed JAX has no CUDA support'),
            (['0'], ready, {'JAX_PLATFORMS': 'cpu'}, 'JAX_PLATFORMS=cpu is set in this environment')):
        problem = sweep.gpu_problem(gpus, inventory, environ)
        assert expected in problem and 'train on the CPU' in problem, problem


def test_gpu_and_worker_flags_must_agree(tmp_path, capsys):
    common = ['--name=x', f'--envs={ENV}', '--method=gcbc', f'--save_dir={tmp_path}', '--dry_run']
    for flags, message in (
            (['--gpus=0,1', '--runs_per_gpu=2', '--workers=3'], '--workers=3 does not match --gpus=0,1 with --runs_per_gpu=2'),
            (['--runs_per_gpu=2'], '--runs_per_gpu and --gpu_mem_fraction apply to GPUs listed with --gpus'),
            (['--gpus=0,0'], 'lists GPU 0 twice'),
            (['--gpus=a,b'], "Bad --gpus='a,b'"),
            (['--gpus=0,1', '--runs_per_gpu=4', '--gpu_mem_fraction=0.3'], 'all 4 shares together at most 1'),
            (['--backend=submitit_local', '--gpus=0,1'], 'it is the number of GPUs per job'),
            (['--backend=slurm', '--workers=2'], 'apply to --backend=local')):
        status, _, err = run_cli(capsys, *common, *flags)
        assert status == 2 and message in err, (flags, err)
    assert [s for s in sweep.worker_slots(None, ['0', '1'], 2)] == ['0', '1', '0', '1']
    assert sweep.worker_slots(4, ['0', '1'], 2) == ['0', '1', '0', '1'] and sweep.worker_slots(None, None) == [None]
    assert sweep.default_mem_fraction(2) == 0.43 and sweep.default_mem_fraction(4) == 0.205
    alone = sweep.child_environment(4, '3', 1)  # one job per GPU: JAX's defaults (and the user's settings) stay
    assert alone['CUDA_VISIBLE_DEVICES'] == '3'
    assert alone.get('XLA_PYTHON_CLIENT_MEM_FRACTION') == os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION')
    assert alone.get('XLA_PYTHON_CLIENT_PREALLOCATE') == os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE')


def test_job_commands_are_checked_before_launch(tmp_path, capsys):
    """An override value main.py could not parse stops the sweep before anything starts (the dry run warns)."""
    args = ['--name=bad', f'--envs={ENV}', '--method=byol_gamma_a:alpha=abc', f'--save_dir={tmp_path}']
    status, _, err = run_cli(capsys, *args)
    # main.py's own request check, run on the job's command: main.py's paragraph, named after the job.
    assert status == 1 and "_aabc_sd0: flag --agent.alpha=abc: could not convert string to float: 'abc'" in err
    status, out, err = run_cli(capsys, *args, '--dry_run')
    assert status == 0 and 'Warning: ' in err and '--agent.alpha=abc' in err and not (tmp_path / 'bad').exists()
