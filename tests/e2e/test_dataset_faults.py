"""Dataset faults as a user meets them, in real processes on real files: two processes needing the same
missing dataset, stale temporary files left by a SIGKILL, a dataset file this user cannot read, a file no
environment's collection produces, a full disk and Ctrl-C during generation. main.py is started as a user starts it.

docs/guarantees.md lists the faults and their outcomes.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from runtime.dataset_files import dataset_lock, dataset_lock_path
from runtime.provenance import sha256_file
from runtime.subprocesses import set_up_then_exec
from tests.helpers import bound_by_file_modes, start

pytestmark = pytest.mark.xdist_group('test_dataset_faults')  # its module fixtures are built once, in one worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = 'pointmaze-medium-stitch-v0'
TRAIN, VAL = f'{ENV}.npz', f'{ENV}-val.npz'
# The cheapest real runs: GCBC, tiny networks, one 20-step chunk, one evaluation of one 5-step episode.
TINY = ['--agent=agents/gcbc.py', '--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32', '--eval_episodes=2',
        '--eval_tasks=1', '--eval_max_steps=5', '--wandb_mode=disabled', '--nodownload', '--eval_workers=1',
        '--train_steps=20', '--steps_per_call=20', '--log_interval=20', '--eval_interval=20', '--save_interval=20',
        '--run_name=r']


@pytest.fixture(scope='module')
def small_data(tmp_path_factory):
    """A small generated pointmaze pair (60 + 6 episodes, about 2 s to generate) with its sidecars."""
    from datagen.pointmaze import write_dataset

    path = tmp_path_factory.mktemp('small-data')
    write_dataset(ENV, str(path), seed=0, num_train_episodes=60, num_val_episodes=6, progress=False)
    return path


def copy_data(small_data, destination, names=(TRAIN, VAL)):
    destination.mkdir(parents=True, exist_ok=True)
    for name in names:
        for file in (name, name + '.provenance.json'):
            shutil.copyfile(small_data / file, destination / file)
    return destination


def start_main(data_dir, save_dir, *extra, setup=None):
    """main.py as a child; with `setup` (Python source), started by set_up_then_exec."""
    command = [sys.executable, 'main.py', f'--env_name={ENV}', f'--dataset_dir={data_dir}', f'--save_dir={save_dir}',
               *TINY, *extra]
    return start(command if setup is None else set_up_then_exec(setup, command))


def finish(process, timeout=300):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def error_paragraph(returncode, stderr):
    """main.py's one-paragraph named error: exit 1, no traceback, `Error: ...` as its last output."""
    assert returncode == 1 and 'Traceback' not in stderr and '\nError: ' in stderr, stderr[-3000:]
    paragraph = stderr.rstrip().rpartition('\nError: ')[2]
    assert '\n' not in paragraph, stderr[-3000:]
    return paragraph


def recorded_sha256(save_dir, run_name='r'):
    with open(os.path.join(save_dir, 'default', run_name, 'dataset.json')) as f:
        files = json.load(f)['files']
    return files['train']['sha256'], files['val']['sha256']


def test_two_mains_needing_the_same_missing_file_both_train_on_the_same_bytes(small_data, tmp_path):
    """Two main.py started at once, both finding the val file missing (regenerable from the train file's
    provenance): one regenerates it under the dataset's lock, the other waits for it (or finds it written)
    and uses it. Before the lock the second failed with "...-val.npz appeared while it was being generated"."""
    data = copy_data(small_data, tmp_path / 'data', names=(TRAIN,))
    expected_val = sha256_file(small_data / VAL)
    first = start_main(data, tmp_path / 'runs-a')
    second = start_main(data, tmp_path / 'runs-b')
    results = [finish(first), finish(second)]
    for code, _, err in results:
        assert code == 0 and 'Traceback' not in err, err[-3000:]
    assert sum('is missing: regenerating it' in err for _, _, err in results) == 1, [err[-2000:] for _, _, err in results]
    assert recorded_sha256(tmp_path / 'runs-a') == recorded_sha256(tmp_path / 'runs-b') == (
        sha256_file(small_data / TRAIN), expected_val)
    assert sorted(os.listdir(data)) == sorted([TRAIN, VAL, TRAIN + '.provenance.json', VAL + '.provenance.json'])


def main_waiting_for_the_lock(data, tmp_path, log):
    """main.py started on `data` (its output into `log`), once it says it waits for the dataset's lock."""
    with open(log, 'w') as output:
        process = start([sys.executable, 'main.py', f'--env_name={ENV}', f'--dataset_dir={data}',
                         f'--save_dir={tmp_path / "runs"}', *TINY], stdout=output, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while 'waiting for it to finish' not in log.read_text():
        assert process.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    return process


def test_a_process_finding_the_dataset_being_generated_waits_for_it_and_says_for_whom(small_data, tmp_path):
    """The waiting made deterministic: this test process holds the dataset's lock (as a generating process
    does) while main.py starts on a folder without the val file; main.py names this process and waits; the
    val file then appears and the lock is released; main.py trains on it, regenerating nothing."""
    data = copy_data(small_data, tmp_path / 'data', names=(TRAIN,))
    log = tmp_path / 'main.log'
    with dataset_lock(ENV, str(data), log=lambda message: None):
        process = main_waiting_for_the_lock(data, tmp_path, log)
        time.sleep(0.5)
        assert process.poll() is None  # still waiting
        for name in (VAL, VAL + '.provenance.json'):  # what the generating process would publish
            shutil.copyfile(small_data / name, data / name)
    assert process.wait(timeout=300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert f'another process is generating or downloading it into {data} (pid {os.getpid()} on host ' in text
    assert f'command: {sys.executable}' in text and 'the other process finished after' in text
    assert 'regenerating' not in text and 'using the files the other process wrote' in text
    assert recorded_sha256(tmp_path / 'runs')[1] == sha256_file(small_data / VAL)
    assert not os.path.exists(dataset_lock_path(ENV, str(data)))  # removed by its holder


# A process obtaining a dataset, as far as others can tell: it holds the dataset's lock (and writes nothing).
LOCK_HOLDER = (
    'import sys, time\n'
    'from runtime.dataset_files import dataset_lock\n'
    'with dataset_lock(sys.argv[1], sys.argv[2], log=lambda message: None):\n'
    '    print("holding", flush=True)\n'
    '    time.sleep(600)\n'
)


def test_a_process_whose_generator_was_killed_says_so_and_obtains_the_files_itself(small_data, tmp_path):
    """main.py waits for another process obtaining the val file, which is SIGKILLed before writing it: main.py says
    that process ended without writing it (before: "the other process finished after 8 s", then regenerating), then
    regenerates the file from the train file's provenance and trains on it."""
    data = copy_data(small_data, tmp_path / 'data', names=(TRAIN,))
    holder = start([sys.executable, '-c', LOCK_HOLDER, ENV, str(data)], stderr=None)
    try:
        assert holder.stdout.readline().strip() == 'holding'
        log = tmp_path / 'main.log'
        process = main_waiting_for_the_lock(data, tmp_path, log)
        assert f'(pid {holder.pid} on host' in log.read_text()
    finally:
        holder.kill()
        holder.wait()
    assert process.wait(timeout=300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert (f'{ENV}: the other process ended after ' in text and f's without writing {VAL} (it was stopped, killed or '
            f'failed); obtaining them here.' in text), text[-3000:]
    assert 'finished after' not in text and 'using the files the other process wrote' not in text
    assert f'{data / VAL} is missing: regenerating it' in text
    assert recorded_sha256(tmp_path / 'runs') == (sha256_file(small_data / TRAIN), sha256_file(small_data / VAL))


def test_stale_temporaries_of_a_killed_writer_are_removed_when_nobody_writes(small_data, tmp_path):
    """A process SIGKILLed inside runtime/atomic_io.atomic_open leaves its 0-byte `<file>.<random>.tmp`. The
    next process that holds the dataset's lock (nobody else can be writing then) removes it, and only the
    temporaries of that dataset's files; while another process holds the lock, nothing is removed."""
    data = copy_data(small_data, tmp_path / 'data')
    others = ['antmaze-medium-stitch-v0.npz.abcd1234.tmp', f'{TRAIN}.frames.npy', f'{TRAIN}.progress.json.tmp', 'notes.txt']
    with dataset_lock(ENV, str(data), log=lambda message: None):  # a writer at work (this process): its temporaries stay
        killed = subprocess.run(
            [sys.executable, '-c', 'import os, signal, sys\nfrom runtime.atomic_io import atomic_open\n'
             'with atomic_open(sys.argv[1], "wb", exclusive=True) as f:\n    f.write(b"")\n    os.kill(os.getpid(), signal.SIGKILL)',
             str(data / f'{TRAIN}.provenance.json')], cwd=ROOT, timeout=60)
        assert killed.returncode == -signal.SIGKILL
        (data / f'{VAL}.x1y2z3_4.tmp').write_bytes(b'PK\x03\x04 partial')  # cut off mid-write: not empty
        (data / f'{TRAIN}.tmp').write_bytes(b'')  # OGBench's download, killed
        stale = sorted(name for name in os.listdir(data) if name.endswith('.tmp'))
        left_by_kill = [name for name in stale if name.startswith(f'{TRAIN}.provenance.json.')]
        assert len(stale) == 3 and len(left_by_kill) == 1 and os.path.getsize(data / left_by_kill[0]) == 0
        for name in others:  # another dataset's temporary, a visual render's resumable state, a user's file
            (data / name).write_text('keep')
        code, _, err = finish(start_main(data, tmp_path / 'runs', '--run_name=held'))
        assert code == 0, err[-3000:]
        assert 'stale temporary' not in err and sorted(n for n in os.listdir(data) if n.endswith('.tmp')) == sorted(stale + [others[0], others[2]])
    code, _, err = finish(start_main(data, tmp_path / 'runs'))
    assert code == 0, err[-3000:]
    assert f'{ENV}: removed 3 stale temporary file(s) left in {data} by a process killed while writing' in err
    assert sorted(os.listdir(data)) == sorted([TRAIN, VAL, TRAIN + '.provenance.json', VAL + '.provenance.json'] + others)
    assert recorded_sha256(tmp_path / 'runs') == (sha256_file(small_data / TRAIN), sha256_file(small_data / VAL))


# Train files no OGBench environment's collection produces: how each is made from the real one, and what main.py's
# paragraph says.
CONTENT_FAULTS = {
    'actions_x1000': (lambda a: dict(a, actions=a['actions'] * 1000),
                      'action values lie outside the action space [-1, 1]'),
    'int_observations': (lambda a: dict(a, observations=a['observations'].round().astype('int64')),
                         'observations are int64, where the environment observes real-valued vectors'),
    'bool_observations': (lambda a: dict(a, observations=a['observations'] > 5),
                          'observations are bool, where the environment observes real-valued vectors'),
    'complex_observations': (lambda a: dict(a, observations=a['observations'].astype('complex64')),
                             'observations are complex64, where the environment observes real-valued vectors'),
}


def test_dataset_contents_no_environment_produces_are_named_before_training(small_data, tmp_path):
    """A train file whose actions are scaled x1000, or whose observations are integers, booleans or complex numbers:
    unchecked, trained on without a word, or a JAX error ("grad requires real-valued outputs"). Each is one paragraph
    naming the file and what is wrong, before training, nothing written."""
    import numpy as np

    with np.load(small_data / TRAIN) as f:
        arrays = {k: f[k] for k in f.files}
    processes = {}
    for case, (change, _) in CONTENT_FAULTS.items():
        data = copy_data(small_data, tmp_path / case / 'data', names=(VAL,))
        np.savez(data / TRAIN, **change(arrays))
        processes[case] = start_main(data, tmp_path / case / 'runs')
    for case, process in processes.items():
        paragraph = error_paragraph(*finish(process)[::2])
        assert paragraph.startswith(f'Dataset {tmp_path / case / "data" / TRAIN} is '), (case, paragraph)
        assert CONTENT_FAULTS[case][1] in paragraph, (case, paragraph)
        assert not (tmp_path / case / 'runs').exists(), case


def test_a_dataset_file_this_user_cannot_read_is_named_as_a_read(small_data, tmp_path):
    """An unreadable train file (chmod 000; main.py bound by file modes as a user is, since tests and CI run as root):
    one paragraph saying it cannot READ the file, with the fix, before any training (before: "Cannot write ...", as
    main.py names a bare EACCES, for a file it only reads)."""
    unreadable = copy_data(small_data, tmp_path / 'unreadable')
    os.chmod(unreadable / TRAIN, 0)
    as_user = bound_by_file_modes(unreadable / TRAIN)
    paragraph = error_paragraph(*finish(start_main(unreadable, tmp_path / 'runs', setup=as_user))[::2])
    assert paragraph.startswith(f'Cannot read dataset file {unreadable / TRAIN}: Permission denied'), paragraph
    assert f'chmod a+r {unreadable / TRAIN}' in paragraph and 'Cannot write' not in paragraph
    assert not os.path.exists(tmp_path / 'runs' / 'default' / 'r' / 'checkpoint.msgpack')


@pytest.mark.parametrize('sig, code, cause', [(signal.SIGINT, 130, 'Ctrl-C'), (signal.SIGTERM, 143, 'SIGTERM'),
                                              (signal.SIGHUP, 129, 'SIGHUP')])
def test_ctrl_c_during_generation_says_nothing_was_written(tmp_path, sig, code, cause):
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP while scripts/generate_dataset.py generates: one line saying generation was
    interrupted and nothing was written, the signal's exit status, no traceback, and no file left (no partial,
    temporary or lock file)."""
    data = tmp_path / 'data'
    # As from a terminal: Ctrl-C at its default however this suite was started (a shell's background job, nohup,
    # passes SIGINT ignored to its children; an ignored signal stays ignored across exec, a handled one does not).
    interactive = 'import signal; signal.signal(signal.SIGINT, signal.SIG_DFL)'
    process = start(set_up_then_exec(interactive, [sys.executable, 'scripts/generate_dataset.py', f'--env_name={ENV}',
                                                   f'--dataset_dir={data}']))
    lock = dataset_lock_path(ENV, str(data))
    deadline = time.time() + 120
    while not os.path.exists(lock):  # generating (5000 episodes: minutes)
        assert process.poll() is None and time.time() < deadline, process.communicate()
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(sig)
    out, err = process.communicate(timeout=120)
    assert process.returncode == code, err[-3000:]
    assert 'Traceback' not in err and 'KeyboardInterrupt' not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f'Interrupted ({cause}): generation of {ENV} stopped. Nothing of {ENV} was written'), \
        err[-2000:]
    assert os.listdir(data) == []


def test_a_disk_filling_during_generation_is_one_paragraph_and_a_rerun_completes_the_pair(small_data, tmp_path):
    """scripts/generate_dataset.py whose writes stop fitting mid-generation (RLIMIT_FSIZE: a write past 100 KB fails
    with EFBIG, as one on a full disk fails with ENOSPC): the val file (written first) fits, the train file does not.
    Unhandled, a raw OSError traceback; handled, one paragraph naming the file, the cause and what was kept, exit 1, no
    partial or temporary file; the same command then writes the train file alone, byte-identical to an undisturbed run."""
    data = tmp_path / 'data'
    command = [sys.executable, 'scripts/generate_dataset.py', f'--env_name={ENV}', f'--dataset_dir={data}',
               '--num_episodes=60', '--num_val_episodes=6']
    limit = 'import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))'
    full = subprocess.run(set_up_then_exec(limit, command), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert full.returncode == 1 and 'Traceback' not in full.stderr, full.stderr[-3000:]
    assert full.stderr.strip().splitlines()[-1] == (
        f'Error: Cannot write {data / TRAIN}: the file-size limit was reached (File too large). {data / VAL} was '
        f'written whole and is kept; {data / TRAIN} was not (no partial or temporary file is left). Raise the limit '
        f'(ulimit -f), then rerun the same command to write the rest: a file already complete is checked against it, '
        f'never replaced.'), full.stderr[-3000:]
    assert sorted(os.listdir(data)) == sorted([VAL, VAL + '.provenance.json'])
    rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    for name in (TRAIN, VAL):
        assert sha256_file(data / name) == sha256_file(small_data / name)


def test_two_generations_of_the_same_missing_dataset_both_succeed(small_data, tmp_path):
    """Both files missing, two scripts/generate_dataset.py at once (the same settings): one generates under the
    dataset's lock, the other waits for it (saying for whom) and then checks the files against its own
    rows, keeping them; both succeed, and the folder holds the pair, its sidecars and nothing else."""
    data = tmp_path / 'data'
    command = [sys.executable, 'scripts/generate_dataset.py', f'--env_name={ENV}', f'--dataset_dir={data}',
               '--num_episodes=60', '--num_val_episodes=6']
    processes = [start(command) for _ in range(2)]
    results = [finish(process) for process in processes]
    for code, out, err in results:
        assert code == 0 and f'Wrote {data / TRAIN} and {data / VAL}' in out, err[-3000:]
    for (_, out, _), other in zip(results, reversed(processes)):  # a process that waited names the other one
        assert 'waiting for it to finish' not in out or f'(pid {other.pid} on host' in out, out[-2000:]
    assert sorted(os.listdir(data)) == sorted([TRAIN, VAL, TRAIN + '.provenance.json', VAL + '.provenance.json'])
    for name in (TRAIN, VAL):  # the same seed and counts as small_data: the same bytes
        assert sha256_file(data / name) == sha256_file(small_data / name)


def test_generation_counts_and_seeds_out_of_range_are_refused_by_name(tmp_path):
    """scripts/generate_dataset.py --num_episodes=0 or --seed=-1 ended in tracebacks deep in the generator: refused by
    absl's flag check, naming the flag, before anything is written."""
    for flag in ('--num_episodes=0', '--num_val_episodes=0', '--seed=-1'):
        done = subprocess.run([sys.executable, 'scripts/generate_dataset.py', f'--env_name={ENV}',
                               f'--dataset_dir={tmp_path / "data"}', flag], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr[-2000:]
        assert f'Flags parsing error: flag {flag}: ' in done.stderr, done.stderr
    assert not (tmp_path / 'data').exists()
