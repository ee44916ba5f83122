"""The Slurm backend (scripts/sweep.py --backend=slurm --wait) against a real Slurm cluster, at toy size: a job
array gives the local backend's results; a job is requeued by Slurm after main.py's --time_limit and after Slurm's
time-limit warning (SIGUSR2) and resumes exactly; a cancelled job resumes when the sweep runs again; a failing job
is reported with its log, not requeued; a job `scontrol requeue` restarts is waited for; one that can never start is
named with Slurm's reason. The two scenarios that mostly wait for Slurm (each requeue waits for a
credential to expire) start together with the first test, which trains meanwhile.

These need a cluster that answers: `bash .ci/slurm_cluster.sh start` (as root, with Debian's slurmctld,
slurmd, munge and slurm-client packages) starts a one-node one on this machine. The tests use the cluster of
SLURM_CONF, else the one that script starts, and skip when none answers."""

import csv
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from runtime.run_dir import CHECKPOINT_NAME
from tests.helpers import ROOT, STUB_MAIN
from tests.helpers import start as start_process

pytestmark = pytest.mark.xdist_group('slurm')  # one worker runs them, one after the other, on the one cluster

ENV = 'pointmaze-medium-stitch-v0'
START_CLUSTER = 'bash .ci/slurm_cluster.sh start'
# Where .ci/slurm_cluster.sh writes the cluster's configuration.
CLUSTER_CONF = os.path.join(os.environ.get('SLURM_CLUSTER_DIR', '/tmp/byol-gamma-slurm'), 'slurm.conf')

# One chunk of GCBC and one evaluation of a short episode: the cheapest real run.
TINY = ['--train_steps=30', '--steps_per_call=30', '--log_interval=30', '--eval_interval=30', '--save_interval=30',
        '--eval_episodes=2', '--eval_tasks=1', '--eval_max_steps=5', '--agent.actor_hidden_dims=(32,32)',
        '--agent.batch_size=32']
# Long enough to be stopped in the middle: 800 steps in chunks of 50 (about 200 steps/s on a busy 2-core machine),
# the first checkpoint at step 200, seconds before the end.
LONG = ['--train_steps=800', '--steps_per_call=50', '--log_interval=50', '--save_interval=200', '--eval_interval=400',
        '--eval_episodes=3', '--eval_max_steps=60', '--agent.actor_hidden_dims=(64,64)', '--agent.batch_size=1024']


def cluster_problem(conf):
    """Why no Slurm cluster can run jobs for these tests (None: one can)."""
    for tool in ('sinfo', 'squeue', 'sbatch', 'scancel', 'scontrol'):
        if shutil.which(tool) is None:
            return f'{tool} not found'
    if not os.path.isfile(conf):
        return f'no {conf}'
    try:
        answer = subprocess.run(['sinfo', '--noheader', '--format=%t'], capture_output=True, text=True, timeout=30,
                                env=dict(os.environ, SLURM_CONF=conf))
    except subprocess.TimeoutExpired:
        return 'sinfo gave no answer in 30 s'
    if answer.returncode != 0:
        return 'sinfo: ' + ' '.join(answer.stderr.split())[-200:]
    if not {'idle', 'mix', 'alloc'} & set(answer.stdout.split()):
        return f'no node can take jobs (sinfo: {" ".join(answer.stdout.split()) or "no nodes"})'
    return None


@pytest.fixture(scope='module')
def slurm_env():
    """The environment of the tests' sweeps: the cluster's SLURM_CONF (the jobs inherit the rest: the XLA cache,
    WANDB_MODE=disabled, JAX on the CPU)."""
    conf = os.environ.get('SLURM_CONF') or CLUSTER_CONF
    problem = cluster_problem(conf)
    if problem:
        pytest.skip(f"no Slurm cluster ({problem}): run `{START_CLUSTER}` (root, Debian's slurm packages) to run these")
    return dict(os.environ, SLURM_CONF=conf)


def sweep_command(name, save_dir, data_dir, main_flags, *options, methods=('gcbc',), seeds='0', backend='slurm'):
    command = [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), f'--name={name}', f'--envs={ENV}',
               *(f'--method={method}' for method in methods), f'--seeds={seeds}', f'--save_dir={save_dir}',
               f'--backend={backend}', *options]
    if backend == 'slurm':
        command += ['--gpus=0', '--cpus=1', '--mem_gb=1', '--time_min=10', '--wait']
    return command + ['--', f'--dataset_dir={data_dir}', '--nodownload', '--wandb_mode=disabled', *main_flags]


def start(command, env):
    return start_process(command, env=env, stderr=subprocess.STDOUT)


def finish(process, timeout=300):
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out


def run(command, env, timeout=300):
    return finish(start(command, env), timeout)


def submitted_job(process):
    """The first job id a running sweep prints (`Submitted N jobs (first id 12_0)`), read from its output; the lines
    up to it are returned too, for the final report."""
    lines = []
    for line in process.stdout:
        lines.append(line)
        match = re.search(r'Submitted \d+ jobs \(first id (\S+)\)', line)
        if match:
            return match.group(1), ''.join(lines)
    raise AssertionError(f'the sweep submitted nothing:\n{"".join(lines)}')


def wait_for(path, process, timeout=240):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert process.poll() is None, f'the sweep ended before {path} appeared: {process.stdout.read()}'
        assert time.time() < deadline, f'no {path} after {timeout} s'
        time.sleep(0.02)


def slurm(*args, env):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env, check=True).stdout


def job_record(job_id, env, timeout=30):
    """Slurm's record of a job (it keeps ended jobs for MinJobAge): its state and how often it was requeued. A job
    whose result the sweep has already read may still be COMPLETING (its processes ending): its final state is
    waited for."""
    deadline = time.time() + timeout
    while True:
        record = slurm('scontrol', '--oneliner', 'show', 'job', job_id, env=env)
        state = re.search(r'JobState=(\S+)', record).group(1)
        if state != 'COMPLETING' or time.time() > deadline:
            return state, int(re.search(r'Restarts=(\d+)', record).group(1))
        time.sleep(0.1)


def read_csv(path):
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def run_rows(run_dir):
    """A run's training and evaluation rows, without their timings."""
    return {name: [{k: v for k, v in row.items() if not k.startswith('time/')} for row in read_csv(run_dir / name)]
            for name in ('train.csv', 'eval.csv')}


def attempts(log_path, main='main.py'):
    """How many times a job started main.py (each start writes a `=== <time> <command>` header to its log)."""
    return sum(bool(re.match(r'=== \d{4}-\d\d-\d\dT', line)) and main in line for line in log_path.read_text().splitlines())


class Reference:
    """A run nobody stops (the local backend), started at once and waited for when its rows are wanted: it trains
    while the Slurm jobs wait for their turns."""

    def __init__(self, save_dir, data_dir, main_flags):
        self.run_dir = save_dir / 'ref' / f'gcbc_{ENV}_sd0'
        self.process = start(sweep_command('ref', save_dir, data_dir, main_flags, backend='local'), os.environ)

    def rows(self):
        if self.process.returncode is None:
            code, out = finish(self.process)
            assert code == 0, out
        return run_rows(self.run_dir)


@pytest.fixture(scope='module')
def long_reference(tmp_path_factory, pointmaze_data_dir):
    """The LONG run of seed 0, uninterrupted."""
    reference = Reference(tmp_path_factory.mktemp('long-reference'), pointmaze_data_dir, LONG)
    yield reference
    if reference.process.poll() is None:
        reference.process.kill()
        reference.process.communicate()


@pytest.fixture(scope='module')
def waiting_sweeps(tmp_path_factory, slurm_env, pointmaze_data_dir):
    """The two scenarios that spend most of their time waiting for Slurm (a requeued job starts again only once the
    credential of its last start has expired), started together with the module's first test, which trains
    meanwhile; their tests read the outcomes. {name: (save_dir, reference or None, sweep process)}."""
    time_limit, failing = tmp_path_factory.mktemp('time-limit'), tmp_path_factory.mktemp('failing')
    stub = failing / 'stub_main.py'
    stub.write_text(STUB_MAIN)
    sweeps = {
        'time_limit': (time_limit, Reference(time_limit, pointmaze_data_dir, TINY),
                       start(sweep_command('tl', time_limit, pointmaze_data_dir, [*TINY, '--time_limit=1']), slurm_env)),
        'failing': (failing, None, start(sweep_command('fail', failing, pointmaze_data_dir, [], f'--main={stub}',
                                                       '--max_timeouts=1', seeds='0,13'),
                                         dict(slurm_env, STUB_TIME_LIMIT='always'))),
    }
    yield sweeps
    for _, reference, process in sweeps.values():
        for running in (process, reference.process if reference else None):
            if running is not None and running.poll() is None:
                running.kill()
                running.communicate()


@pytest.mark.usefixtures('waiting_sweeps')  # started first, they wait while this test trains
def test_a_job_array_gives_the_local_backends_results(tmp_path, slurm_env, pointmaze_data_dir):
    """2 methods x 2 seeds, two seeds per process: two array tasks on Slurm and the same sweep on the local backend
    (run at the same time) write the same rows and the same results table."""
    from scripts import results as results_cli

    grid = dict(methods=('gcbc', 'gcbc_phi'), seeds='0-1')
    on_slurm = start(sweep_command('grid', tmp_path / 'slurm', pointmaze_data_dir, TINY, '--seeds_per_job=2', **grid),
                     slurm_env)
    local = start(sweep_command('grid', tmp_path / 'local', pointmaze_data_dir, TINY, '--seeds_per_job=2', '--workers=2',
                                backend='local', **grid), os.environ)
    code, out = finish(on_slurm)
    assert code == 0 and '2 jobs finished, 0 failed.' in out, out
    array = re.search(r'Submitted 2 jobs \(first id (\d+)_0\)', out).group(1)
    submitit = tmp_path / 'slurm' / 'grid' / 'submitit'
    assert '#SBATCH --array=0-1%' in (submitit / f'{array}_submission.sh').read_text()  # one array of two tasks
    assert all((submitit / f'{array}_{task}_0_result.pkl').exists() for task in (0, 1))
    code, local_out = finish(local)
    assert code == 0, local_out
    for preset in grid['methods']:
        assert f'{preset}_{ENV}_sd0-1: ok' in out
        for seed in (0, 1):
            name = f'{preset}_{ENV}_sd{seed}'
            assert (tmp_path / 'slurm' / 'grid' / name / 'DONE').exists()
            assert run_rows(tmp_path / 'slurm' / 'grid' / name) == run_rows(tmp_path / 'local' / 'grid' / name), name

    def table(backend):
        runs = tmp_path / backend / 'grid'
        result = subprocess.run([sys.executable, results_cli.__file__, f'--runs={runs}', '--per_seed'], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.replace(str(runs), '<runs>')

    slurm_table = table('slurm')
    assert '| dataset | GCBC | GCBC-φ |' in slurm_table and '| pointmaze-medium-stitch | ' in slurm_table
    assert slurm_table == table('local')


def test_a_job_at_main_py_time_limit_is_requeued_by_slurm_and_resumes(slurm_env, waiting_sweeps):
    """main.py --time_limit=1 stops (exit 75, checkpoint saved); the job requeues itself (submitit's checkpoint,
    `scontrol requeue`), and the requeued job resumes the run to the rows of a run nobody stopped (the local
    backend's, at the same time). Every start has the same 1-s limit, so where a start stops is the machine's load:
    after its chunk (step 30), or on a busy machine before it (step 0) or inside the evaluation of step 30 that a
    resumed start owes; each stop is requeued and the next start resumes from the step it saved."""
    save_dir, reference, sweep = waiting_sweeps['time_limit']
    code, out = finish(sweep)
    assert code == 0 and f'[1/1] gcbc_{ENV}_sd0: ok' in out, out
    job = re.search(r'first id (\S+)\)', out).group(1)
    state, requeues = job_record(job, slurm_env)
    assert state == 'COMPLETED' and requeues >= 1
    run_dir = save_dir / 'tl' / f'gcbc_{ENV}_sd0'
    log = save_dir / 'tl' / f'gcbc_{ENV}_sd0.log'
    text = log.read_text()
    assert attempts(log) == requeues + 1  # Slurm started the job once more per requeue, and the last one finished
    stops = [int(step) for step in re.findall(r'--time_limit=1s reached: checkpoints saved at step (\d+); rerun with '
                                              r'--resume\.', text)]
    assert len(stops) == requeues and stops == sorted(stops), stops
    for k in range(1, requeues + 1):
        assert (f'stopped at its --time_limit (exit 75, checkpoint saved): requeueing the same command ({k} of at '
                f'most 20)') in text
    resumed = re.findall(rf'Resumed {re.escape(str(run_dir))} from step (\d+)\.', text)
    assert resumed == [str(step) for step in stops if step], (resumed, stops)  # a step-0 checkpoint starts afresh
    assert run_rows(run_dir) == reference.rows()


def test_failing_jobs_are_reported_not_requeued_forever(slurm_env, waiting_sweeps):
    """A main.py that fails (the stub, for seed 13) is reported with its log excerpt, run once; one that stops at
    its time limit at every start (without getting further) is requeued --max_timeouts times, then reported."""
    save_dir, _, sweep = waiting_sweeps['failing']
    stub = save_dir / 'stub_main.py'
    code, out = finish(sweep)
    assert code == 1, out
    assert f'[2/2] gcbc_{ENV}_sd13: FAILED' in out or f'[1/2] gcbc_{ENV}_sd13: FAILED' in out
    assert '0 jobs finished, 1 failed, 1 stopped at their time limit.' in out
    failed = save_dir / 'fail' / f'gcbc_{ENV}_sd13.log'
    assert f'FAILED gcbc_{ENV}_sd13: main.py exited with status 1; log {failed}' in out
    assert out[out.index(f'FAILED gcbc_{ENV}_sd13:'):].splitlines()[2].strip() == 'stub failure for seed 13'
    limited = save_dir / 'fail' / f'gcbc_{ENV}_sd0.log'
    assert (f'STOPPED gcbc_{ENV}_sd0: main.py stopped at its --time_limit (exit 75, checkpoint saved) after 1 requeues '
            f'(--max_timeouts=1)') in out
    assert 'resume from their last checkpoints when the same sweep command runs again' in out
    array = re.search(r'first id (\d+)_0\)', out).group(1)
    assert job_record(f'{array}_1', slurm_env) == ('FAILED', 0) and attempts(failed, str(stub)) == 1
    assert job_record(f'{array}_0', slurm_env) == ('FAILED', 1) and attempts(limited, str(stub)) == 2


def test_slurms_time_limit_warning_requeues_a_job_that_resumes(tmp_path, slurm_env, pointmaze_data_dir, long_reference):
    """Slurm's warning before a job's time limit (SIGUSR2 to the job's processes, here sent with `scancel
    --signal=USR2` once the run has a checkpoint): main.py ignores it, submitit's handler has it save (SIGTERM) and
    requeues the job, and the requeued job resumes to the rows of a run nobody stopped."""
    sweep = start(sweep_command('usr2', tmp_path, pointmaze_data_dir, LONG), slurm_env)
    job, head = submitted_job(sweep)
    run_dir = tmp_path / 'usr2' / f'gcbc_{ENV}_sd0'
    wait_for(run_dir / CHECKPOINT_NAME, sweep)
    slurm('scancel', '--signal=USR2', job, env=slurm_env)
    code, out = finish(sweep)
    assert code == 0 and f'[1/1] gcbc_{ENV}_sd0: ok' in out, head + out
    assert job_record(job, slurm_env) == ('COMPLETED', 1)
    submitit_logs = ''.join(path.read_text() for path in (tmp_path / 'usr2' / 'submitit').glob('*_log.*'))
    assert 'Caught signal SIGUSR2' in submitit_logs and f'Requeued job {job}' in submitit_logs
    log = (tmp_path / 'usr2' / f'gcbc_{ENV}_sd0.log').read_text()
    assert attempts(tmp_path / 'usr2' / f'gcbc_{ENV}_sd0.log') == 2 and 'SIGTERM received: checkpoints saved' in log
    step = int(re.search(rf'Resumed {re.escape(str(run_dir))} from step (\d+)\.', log).group(1))
    assert 200 <= step < 800
    assert run_rows(run_dir) == long_reference.rows()


def test_a_cancelled_job_resumes_when_the_sweep_runs_again(tmp_path, slurm_env, pointmaze_data_dir, long_reference):
    """scancel of a running job: main.py saves (SIGTERM), the waiting sweep reports the job stopped (exit 130), and
    the same sweep command, run again, resumes it to the rows of a run nobody stopped."""
    command = sweep_command('cancel', tmp_path, pointmaze_data_dir, LONG)
    sweep = start(command, slurm_env)
    job, head = submitted_job(sweep)
    run_dir = tmp_path / 'cancel' / f'gcbc_{ENV}_sd0'
    wait_for(run_dir / CHECKPOINT_NAME, sweep)
    slurm('scancel', job, env=slurm_env)
    code, out = finish(sweep)
    assert code == 130, head + out
    assert f'[1/1] gcbc_{ENV}_sd0: stopped' in out and '0 jobs finished, 0 failed, 1 stopped.' in out
    assert f'STOPPED gcbc_{ENV}_sd0: main.py was stopped by SIGTERM (checkpoint saved)' in out
    assert job_record(job, slurm_env) == ('CANCELLED', 0) and not (run_dir / 'DONE').exists()

    code, out = run(command, slurm_env)
    assert code == 0 and '1 runs: 0 finished (skipped), 1 to run in 1 jobs.' in out and '1 jobs finished' in out, out
    log = (tmp_path / 'cancel' / f'gcbc_{ENV}_sd0.log').read_text()
    step = int(re.search(rf'Resumed {re.escape(str(run_dir))} from step (\d+)\.', log).group(1))
    assert 200 <= step < 800
    assert run_rows(run_dir) == long_reference.rows()


def test_a_job_slurm_requeues_is_waited_for_not_reported_stopped(tmp_path, slurm_env, pointmaze_data_dir):
    """`scontrol requeue` of a running job: Slurm stops its main.py (SIGTERM: it saves) and starts the job again. The
    waiting sweep says the job was requeued and reports how it ends, not a stop that needs a rerun. (The stub main.py
    runs until its first SIGTERM, then finishes.)"""
    stub = tmp_path / 'stub_main.py'
    stub.write_text(STUB_MAIN)
    sweep = start(sweep_command('requeue', tmp_path, pointmaze_data_dir, [], f'--main={stub}'),
                  dict(slurm_env, STUB_WAIT='once'))
    job, head = submitted_job(sweep)
    wait_for(tmp_path / 'requeue' / f'gcbc_{ENV}_sd0' / 'STARTED', sweep)
    slurm('scontrol', 'requeue', job, env=slurm_env)
    code, out = finish(sweep)
    assert code == 0 and f'[1/1] gcbc_{ENV}_sd0: ok' in out and '1 jobs finished, 0 failed.' in out, head + out
    assert f'[requeued] gcbc_{ENV}_sd0: Slurm requeued job {job} (restart 1)' in out and 'stopped' not in out
    assert job_record(job, slurm_env) == ('COMPLETED', 1)
    assert (tmp_path / 'requeue' / f'gcbc_{ENV}_sd0' / 'TERMINATED').exists()


def test_a_job_that_can_never_start_is_named_not_waited_for(tmp_path, slurm_env, pointmaze_data_dir):
    """More CPUs than any node has: sbatch accepts the job, and Slurm holds it PENDING (reason PartitionConfig)
    forever. The waiting sweep stops with that reason and what to do, leaving the job for the user to cancel."""
    command = sweep_command('never', tmp_path, pointmaze_data_dir, TINY)
    command[command.index('--cpus=1')] = '--cpus=100000'
    sweep = start(command, slurm_env)
    job, head = submitted_job(sweep)
    try:
        code, out = finish(sweep, timeout=120)
    finally:
        slurm('scancel', job, env=slurm_env)
    assert code == 1 and 'Traceback' not in out, head + out
    assert (f'Error: Slurm holds job {job} (gcbc_{ENV}_sd0) PENDING with reason PartitionConfig: it cannot start as '
            f'submitted') in out and f'(scancel {job})' in out


@pytest.mark.skipif(not os.environ.get('SLURM_SLOW_TESTS'),
                    reason='waits for Slurm\'s own time limit, about a minute: set SLURM_SLOW_TESTS=1 to run it')
def test_slurms_own_time_limit_warning_stops_and_requeues_the_job(tmp_path, slurm_env, pointmaze_data_dir):
    """--time_min=1: Slurm's own timer sends the warning (SIGUSR2; asked for 90 s before the limit, so at
    slurmctld's first time-limit check, which runs every 30 s). The stub main.py, which runs until SIGTERM, is
    stopped and the job requeued; at the second warning --max_timeouts=1 is used up and the job is reported, with
    no third start. Slurm's minute granularity and 30-s checks are why a run is not resumed to its end here: how
    long each start lasts is not known in advance."""
    stub = tmp_path / 'stub_main.py'
    stub.write_text(STUB_MAIN)
    command = sweep_command('limit', tmp_path, pointmaze_data_dir, [], f'--main={stub}', '--max_timeouts=1')
    command[command.index('--time_min=10')] = '--time_min=1'
    code, out = run(command, dict(slurm_env, STUB_WAIT='1'))
    assert code == 75, out
    assert f'STOPPED gcbc_{ENV}_sd0: Job not requeued because: timed-out too many times' in out
    job = re.search(r'first id (\S+)\)', out).group(1)
    assert job_record(job, slurm_env)[1] == 1
    assert attempts(tmp_path / 'limit' / f'gcbc_{ENV}_sd0.log', str(stub)) == 2
    assert (tmp_path / 'limit' / f'gcbc_{ENV}_sd0' / 'TERMINATED').exists()  # the stub was stopped with SIGTERM
    submitit_log = ''.join(path.read_text() for path in (tmp_path / 'limit' / 'submitit').glob('*_log.out'))
    assert submitit_log.count('Caught signal SIGUSR2') == 2 and submitit_log.count(f'Requeued job {job}') == 1


def test_an_unknown_partition_is_named_and_nothing_is_left(tmp_path, slurm_env, pointmaze_data_dir):
    """sbatch refuses a partition the cluster has not: one paragraph with sbatch's reason; no folder is left."""
    command = sweep_command('nopart', tmp_path / 'runs', pointmaze_data_dir, TINY, '--partition=nonexistent')
    returncode, out = run(command, slurm_env)
    assert returncode == 1 and 'Traceback' not in out, out[-3000:]
    assert 'Error: Slurm refused the job array (' in out and 'invalid partition specified: nonexistent' in out, out
    assert not (tmp_path / 'runs').exists()  # no submitit folder, no .pkl
