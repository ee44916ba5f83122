"""Faults injected into real main.py processes (tiny budgets): nothing computed is lost, no two runs
mix in one directory, no dataset file is overwritten, and every failure is one named paragraph.

Each test is one scenario whose subprocesses overlap where they are independent; docs/guarantees.md
lists the faults and their outcomes.
"""

import fcntl
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

from runtime import checkpoints
from runtime.loggers import read_csv_rows
from runtime.subprocesses import set_up_then_exec
from scripts import results as results_cli
from tests.helpers import (BUDGET, ENDLESS, ENV, TINY, bound_by_file_modes, error_paragraph, finish, main_command, run,
                           start, wait_until)
from utils.evaluation.workers import WORKER_COMMAND

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def checkpoint_step(run_dir):
    return checkpoints.checkpoint_step(str(run_dir / checkpoints.CHECKPOINT_NAME))


def csv_steps(path):
    return [int(row['step']) for row in read_csv_rows(str(path))[1]] if os.path.exists(path) else []


def evaluation_workers(pid):
    """Pids of the evaluation worker processes of main.py `pid` (`python -c <utils.evaluation.workers.WORKER_COMMAND>`;
    other short-lived children exist, e.g. the library probes that importing glfw starts)."""
    found = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/stat') as f:
                    parent = int(f.read().rsplit(')', 1)[1].split()[1])
                with open(f'/proc/{entry}/cmdline', 'rb') as f:
                    command = f.read().split(b'\0')
            except OSError:
                continue
            if parent == pid and WORKER_COMMAND.encode() in command:
                found.append(int(entry))
    return found


def snapshot(run_dir):
    """Every file of a run directory, the owner's record in run.lock included (a refused process leaves it)."""
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir())}


def test_resume_continues_exactly_or_refuses(pointmaze_data_dir, tmp_path, capsys):
    save_dir = tmp_path / 'runs'
    code, _, err = run(main_command(pointmaze_data_dir, save_dir, *BUDGET, '--run_name=r'))
    assert code == 0, err[-3000:]
    run_dir = save_dir / 'default' / 'r'
    assert (run_dir / 'DONE').exists() and checkpoint_step(run_dir) == 40

    # Its twin on a full disk: RLIMIT_FSIZE turns writes past 8 KB into EFBIG (Python ignores SIGXFSZ);
    # metadata, logs and lock are smaller, the 16 KB checkpoint is not. Its compilations are all in the
    # cache the first run filled (read through hard links: nothing is written to the shared cache).
    cache = linked_copy(os.environ.get('JAX_COMPILATION_CACHE_DIR'), tmp_path / 'xla-cache')
    limit = 'import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))'
    full = start(set_up_then_exec(limit, main_command(pointmaze_data_dir, save_dir, *BUDGET, '--run_name=full')),
                 env=dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache))

    # Settings the run did not use: refused before anything is loaded or written, listing old -> new.
    cases = {
        'settings': (['--agent.batch_size=64', '--env_name=pointmaze-large-stitch-v0', '--seed=1', '--eval_episodes=3',
                      '--eval_tasks=1,2', '--eval_max_steps=6'],
                     ['--agent.batch_size: 32 -> 64', '--env_name: pointmaze-medium-stitch-v0 -> pointmaze-large-stitch-v0',
                      '--seed: 0 -> 1', '--eval_episodes: 2 -> 3', '--eval_tasks: 1 -> 1,2', '--eval_max_steps: 5 -> 6']),
        'below': (['--train_steps=20'], ['--train_steps=20 is below the step of the checkpoint', '(40;']),
        # Other files (one byte appended to the val file) for an extension: refused when the data are found.
        'data': ([f'--dataset_dir={tmp_path / "other-data"}', '--train_steps=60'],
                 ['on other data than it was trained on: val data (', 'sha256 ']),
        # The same files for the finished run as it is, which has nothing to train: refused all the same (it used to
        # say "already finished ... nothing to do").
        'finished-data': ([f'--dataset_dir={tmp_path / "other-data"}'],
                          ['on other data than it was trained on: val data (', 'sha256 ']),
    }
    shutil.copytree(pointmaze_data_dir, tmp_path / 'other-data')
    with open(tmp_path / 'other-data' / f'{ENV}-val.npz', 'ab') as f:
        f.write(b'\0')
    processes, before = {}, {}
    for name, (extra, _) in cases.items():
        shutil.copytree(run_dir, save_dir / 'default' / name)
        before[name] = snapshot(save_dir / 'default' / name)
        (save_dir / 'default' / name / 'checkpoint.msgpack.k3x9_q2z.tmp').write_bytes(b'')  # a SIGKILL mid-write
        processes[name] = start(main_command(pointmaze_data_dir, save_dir, *BUDGET, f'--run_name={name}', '--resume', *extra))
    for name, (_, expected) in cases.items():
        paragraph = error_paragraph(*finish(processes[name])[::2])
        assert all(text in paragraph for text in expected), paragraph
        assert '--run_name' in paragraph
        # flags.json, config.json, checkpoint, DONE and the last owner's record untouched; the dead writer's
        # temporary file is gone.
        assert snapshot(save_dir / 'default' / name) == before[name]

    paragraph = error_paragraph(*finish(full)[::2])
    full_dir = save_dir / 'default' / 'full'
    assert paragraph.startswith(f'Cannot write {full_dir / "checkpoint.msgpack"}: the file-size limit was reached')
    assert '--resume' in paragraph
    assert sorted(p.name for p in full_dir.iterdir()) == ['config.json', 'dataset.json', 'flags.json', 'resumes.json', 'run.lock',
                                                            'train.csv']

    # An extension may change --train_steps: DONE goes before training starts, so a kill mid-extension
    # leaves an unfinished run, not a finished-looking one.
    extension = start(main_command(pointmaze_data_dir, save_dir, *BUDGET, '--run_name=r', '--resume',
                                   '--train_steps=100000000', '--steps_per_call=20'))
    wait_until(lambda: not (run_dir / 'DONE').exists(), extension)
    extension.kill()
    extension.wait()
    assert not (run_dir / 'DONE').exists() and checkpoint_step(run_dir) >= 40
    evaluated = csv_steps(run_dir / 'eval.csv')
    assert evaluated[:2] == [20, 40]

    # A kill mid-write of eval.csv's last line is never scored; the stopped run is marked.
    with open(run_dir / 'eval.csv', 'a') as f:
        f.write(f'{evaluated[-1] + 20},0.9')
    capsys.readouterr()
    assert results_cli.main([f'--runs={run_dir}']) == 0
    out, err = capsys.readouterr()
    assert f'{run_dir / "eval.csv"}: its last line is incomplete' in err
    # (of 40 or of 100000000: the kill may come before flags.json records the new --train_steps)
    assert f'{run_dir} (seed 0): running or stopped, last evaluation at step {evaluated[-1]} of ' in out
    assert 'pointmaze-medium-stitch: generated (pointmaze scripted oracle' in out  # the fixture's provenance


def test_a_second_writer_is_refused_and_ctrl_c_then_resume_is_undisturbed(pointmaze_data_dir, tmp_path):
    """While the first run holds its directory (stopped with SIGSTOP, so that it cannot finish while the other tries),
    a second main.py on it stops at once, before loading data, naming the holder. Ctrl-C then stops the first at the
    end of its chunk with a checkpoint, and --resume ends it with the files of a run nobody disturbed."""
    budget = ['--train_steps=4000', '--log_interval=500', '--steps_per_call=500', '--eval_interval=4000',
              '--save_interval=2000', '--run_name=r']
    undisturbed = start(main_command(pointmaze_data_dir, tmp_path / 'undisturbed', *budget))
    first = start(main_command(pointmaze_data_dir, tmp_path / 'runs', *budget))
    run_dir = tmp_path / 'runs' / 'default' / 'r'
    wait_until(lambda: csv_steps(run_dir / 'train.csv'), first)
    first.send_signal(signal.SIGSTOP)
    try:
        assert first.poll() is None, 'the first run ended before the other tried: the test proves nothing'
        started = time.time()
        code, _, err = run(main_command(pointmaze_data_dir, tmp_path / 'runs', *BUDGET, '--run_name=r'))
        paragraph = error_paragraph(code, err)
        assert f'{run_dir} is in use by another process (pid {first.pid} on host' in paragraph
        assert '--train_steps=4000' in paragraph  # the holder's command
        assert 'Loaded' not in err and time.time() - started < 60  # stopped before loading data
    finally:
        first.send_signal(signal.SIGCONT)
    first.send_signal(signal.SIGINT)  # Ctrl-C: the current chunk ends, a checkpoint is saved, exit 130
    code, _, err = finish(first)
    assert code == 130 and 'SIGINT received: checkpoints saved' in err and 'Traceback' not in err, err[-3000:]
    step = checkpoint_step(run_dir)
    assert step == csv_steps(run_dir / 'train.csv')[-1] < 4000 and not (run_dir / 'DONE').exists()
    assert run(main_command(pointmaze_data_dir, tmp_path / 'runs', *budget, '--resume'))[0] == 0
    assert finish(undisturbed)[0] == 0
    reference = tmp_path / 'undisturbed' / 'default' / 'r'
    for name in ('train.csv', 'eval.csv'):
        assert without_timing(read_csv_rows(str(run_dir / name))[1]) == without_timing(read_csv_rows(str(reference / name))[1])
    assert (run_dir / 'checkpoint.msgpack').read_bytes() == (reference / 'checkpoint.msgpack').read_bytes()
    assert (run_dir / 'DONE').exists()


def without_timing(rows):
    return [{k: v for k, v in r.items() if not k.startswith('time/')} for r in rows]


def test_failed_evaluation_keeps_the_interval(tmp_path):
    """The evaluation worker is killed before the first evaluation (a real fault: the evaluation at step
    20 finds its worker dead). The 20 steps before it are checkpointed although no save was due, and
    --resume runs that evaluation first. The teleport maze is stepped by gym envs in worker processes
    (the native stepper does not take it), so it has workers to kill."""
    from datagen.pointmaze import write_dataset

    teleport = 'pointmaze-teleport-stitch-v0'
    data_dir = tmp_path / 'data'
    write_dataset(teleport, str(data_dir), seed=0, num_train_episodes=20, num_val_episodes=4, progress=False)
    save_dir = tmp_path / 'runs'
    run_dir = save_dir / 'default' / 'r'
    args = [*BUDGET, '--run_name=r', '--save_interval=1000']
    process = start(main_command(data_dir, save_dir, *args, '--eval_workers=2', env=teleport))
    wait_until(lambda: evaluation_workers(process.pid), process)
    workers = evaluation_workers(process.pid)
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    paragraph = error_paragraph(*finish(process)[::2])
    # What is known of the worker, and no pointer to output that a killed worker never wrote.
    assert paragraph.startswith(f'The evaluation at step 20 failed (RuntimeError: Evaluation worker 0 (pid {workers[0]}) '
                                f'of {teleport} was killed by SIGKILL, which leaves no error message'), paragraph
    assert 'output above' not in paragraph
    assert 'the checkpoint of step 20 is saved' in paragraph and '--resume' in paragraph
    assert checkpoint_step(run_dir) == 20 and csv_steps(run_dir / 'train.csv') == [20] and csv_steps(run_dir / 'eval.csv') == []

    code, _, err = run(main_command(data_dir, save_dir, *args, '--resume', env=teleport))
    assert code == 0, err[-3000:]
    assert 'Running the evaluation of step 20 that was due' in err
    assert csv_steps(run_dir / 'eval.csv') == [20, 40] and csv_steps(run_dir / 'train.csv') == [20, 40]
    assert (run_dir / 'DONE').exists()


def linked_copy(directory, destination):
    """A copy of the session's XLA cache made of hard links: reads hit the cache, and a write cut short
    by a file-size limit lands in the copy, not in the cache other tests read."""
    if directory and os.path.isdir(directory):
        try:
            shutil.copytree(directory, destination, copy_function=os.link)
            return str(destination)
        except OSError:
            shutil.rmtree(destination, ignore_errors=True)
    os.makedirs(destination, exist_ok=True)
    return str(destination)


def test_unusable_folders_and_memory_are_one_paragraph(pointmaze_data_dir, tmp_path):
    a_file = tmp_path / 'a-file'
    a_file.write_text('')
    save_dir_is_a_file = start(main_command(pointmaze_data_dir, a_file, *BUDGET))
    data_dir_under_a_file = start(main_command(a_file / 'data', tmp_path / 'runs', *BUDGET, '--generate_dataset'))
    # A batch whose buffers exceed any address space (~800 TB): XLA's allocation fails at the first step.
    too_big = start(main_command(pointmaze_data_dir, tmp_path / 'runs', *BUDGET, '--run_name=big',
                                 '--agent.batch_size=1000000000000'))
    paragraph = error_paragraph(*finish(save_dir_is_a_file)[::2])
    assert paragraph.startswith(f'--save_dir={a_file} is a file, not a directory') and a_file.read_text() == ''
    paragraph = error_paragraph(*finish(data_dir_under_a_file)[::2])
    assert paragraph.startswith(f'Cannot write {ENV} files into {a_file / "data"}') and 'nothing was generated' in paragraph
    paragraph = error_paragraph(*finish(too_big)[::2])
    assert paragraph.startswith('Out of memory on the CPU') and 'smaller --agent.batch_size or --num_seeds' in paragraph


def test_datasets_are_never_overwritten_or_generated_unasked(pointmaze_data_dir, tmp_path):
    data_dir = tmp_path / 'data'
    data_dir.mkdir()
    train = data_dir / f'{ENV}.npz'
    shutil.copyfile(os.path.join(pointmaze_data_dir, f'{ENV}.npz'), train)  # no val file, no provenance sidecar
    before = train.read_bytes()
    half = start(main_command(data_dir, tmp_path / 'runs', *BUDGET))
    antmaze = start(main_command(tmp_path / 'empty', tmp_path / 'runs', *BUDGET, env='antmaze-medium-stitch-v0'))

    paragraph = error_paragraph(*finish(half)[::2])
    assert paragraph.startswith(f'{train} exists but {data_dir / f"{ENV}-val.npz"} is missing')
    assert 'Nothing was written or replaced' in paragraph
    assert train.read_bytes() == before and sorted(os.listdir(data_dir)) == [f'{ENV}.npz']
    paragraph = error_paragraph(*finish(antmaze)[::2])
    assert "NOT OGBench's data" in paragraph and 'generate_dataset.py --env_name=antmaze-medium-stitch-v0' in paragraph
    assert not os.path.exists(tmp_path / 'empty' / 'antmaze-medium-stitch-v0.npz')


def test_a_second_sweep_launch_fails_fast_and_the_first_resumes(pointmaze_data_dir, tmp_path):
    """The local sweep backend with the real main.py: a second launch of the same sweep while the first
    runs fails its job at once (the run directory is locked) and harms nothing; Ctrl-C stops the first
    (its run checkpoints); relaunching resumes the run to its end."""
    def sweep(*main_flags):
        return [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=sw', f'--envs={ENV}', '--method=gcbc',
                '--seeds=0', f'--save_dir={tmp_path}', '--workers=1', '--', f'--dataset_dir={pointmaze_data_dir}', *TINY,
                *main_flags]

    run_dir = tmp_path / 'sw' / f'gcbc_{ENV}_sd0'
    first = start(sweep(*ENDLESS))
    wait_until(lambda: csv_steps(run_dir / 'train.csv'), first)
    # The first launch's run pauses (holding its lock) while the second launch tries: it would only train uselessly.
    with open(run_dir / 'run.lock') as f:
        training = json.load(f)['pid']
    os.kill(training, signal.SIGSTOP)
    try:
        code, out, _ = run(sweep(*ENDLESS))
    finally:
        os.kill(training, signal.SIGCONT)
    assert code == 1 and f'FAILED gcbc_{ENV}_sd0 (exit 1)' in out, out
    assert f'{run_dir} is in use by another process (pid {training} ' in (tmp_path / 'sw' / f'gcbc_{ENV}_sd0.log').read_text()
    first.send_signal(signal.SIGINT)  # the launcher turns Ctrl-C into SIGTERM for its runs
    code, out, _ = finish(first)
    assert code == 130 and 'stopped' in out, out
    step = checkpoint_step(run_dir)
    assert step == csv_steps(run_dir / 'train.csv')[-1] > 0 and not (run_dir / 'DONE').exists()

    final = [f'--train_steps={step + 20}', '--log_interval=20', '--eval_interval=100000000', '--save_interval=100000000']
    code, out, _ = run(sweep(*final))
    assert code == 0 and '1 jobs finished, 0 failed' in out, out
    assert (run_dir / 'DONE').exists() and csv_steps(run_dir / 'eval.csv') == [step + 20]
    assert csv_steps(run_dir / 'train.csv') == list(range(20, step + 21, 20))


def test_a_log_row_cut_off_by_a_kill_is_dropped_on_resume(tmp_path):
    """A kill mid-append can leave "3" of "30,...": a row that parses, at a step below the checkpoint's."""
    from runtime.loggers import CsvLogger

    path = tmp_path / 'train.csv'
    logger = CsvLogger(str(path))
    logger.log({'loss': 0.5}, 10)
    logger.log({'loss': 0.25}, 20)
    with open(path, 'a') as f:
        f.write('3')
    resumed = CsvLogger(str(path))
    resumed.truncate_after(20)
    assert [r['step'] for r in resumed.rows()] == ['10', '20'] and path.read_text().endswith('\n')


def test_wandb_failures_never_stop_training(tmp_path, monkeypatch, caplog):
    """A wandb that fails to start, or fails mid-run: one warning each, and logging goes on to CSV only.
    (A stand-in module: the real one, once set up, redirects this process's console.)"""
    import types

    from runtime.loggers import WandbLogger

    def broken_init(**kwargs):
        raise ConnectionError('wandb is down')

    monkeypatch.setitem(sys.modules, 'wandb', types.SimpleNamespace(init=broken_init, Settings=dict))
    logger = WandbLogger('offline', 'p', str(tmp_path), 'n', 'g', 'g/n', [], {}, False)
    assert logger.run is None and 'wandb init failed (ConnectionError: wandb is down)' in caplog.text
    logger.log({'x': 1.0}, 1)
    logger.finish()

    class BrokenRun:
        def log(self, *args, **kwargs):
            raise OSError('disk full')

    logger.run = BrokenRun()
    logger.log({'x': 1.0}, 2)  # reported once, then CSV only
    assert logger.run is None and 'wandb log failed (OSError: disk full)' in caplog.text


# Training ends at step 20 with an evaluation that outlasts the test's reactions: 4 untrained episodes of up to
# 6000 steps (about 4.5 s on one core; the stops it asserts took 0.06-0.43 s), in the loop (sync, the CPU default).
LONG_FINAL_EVAL = ['--train_steps=20', '--steps_per_call=20', '--log_interval=20', '--eval_interval=20',
                   '--save_interval=20', '--eval_episodes=4', '--eval_max_steps=6000', '--eval_mode=sync', '--run_name=r']
# A new run's limit leaves room to reach its final evaluation on a busy machine; a resumed run's only has to pass.
TIME_LIMIT, RESUMED_TIME_LIMIT = 10, 5


def start_logged(command, log_path):
    """A process whose output goes to `log_path`, for a test to read while it runs."""
    with open(log_path, 'w') as log:
        return start(command, stdout=log, stderr=subprocess.STDOUT)


def wait_for_text(path, text, process, timeout=120):
    deadline = time.time() + timeout
    while text not in path.read_text():
        assert process.poll() is None and time.time() < deadline, path.read_text()[-3000:]
        time.sleep(0.02)


def let_go_past_time_limit(process, seen_at, time_limit):
    """SIGCONT a process paused with SIGSTOP once its --time_limit has passed: its main() had started by `seen_at`,
    so its limit passes by `seen_at` + `time_limit`. Returns when it was let go."""
    time.sleep(max(0.0, seen_at + time_limit + 0.5 - time.time()))
    process.send_signal(signal.SIGCONT)
    return time.time()


def test_stops_end_the_evaluation_they_fall_in_and_resume_reruns_it(pointmaze_data_dir, tmp_path):
    """Every stop request ends the evaluation it falls in at once. SIGTERM or SIGINT during the final evaluation
    (before: it ran on, then DONE and exit 0) exits 143 / 130 with the checkpoint of step 20 kept and no row of that
    evaluation. --time_limit passing during the final evaluation exits 75 the same way; passing during the evaluation
    a resumed run owed (async, as a GPU run evaluates; before: that evaluation ran forever), before it trained
    anything, exits 75 too, saying that a rerun starts with the same evaluation. The limits
    pass while the run is paused (SIGSTOP) 0.5 s into its evaluation. A last --resume without a limit reruns the
    evaluation and ends with the rows of a run nobody stopped."""
    def launch(name, *extra):
        return main_command(pointmaze_data_dir, tmp_path / name, *LONG_FINAL_EVAL, *extra)

    def assert_stopped_at_20(run_dir):
        assert checkpoint_step(run_dir) == 20 and csv_steps(run_dir / 'train.csv') == [20]
        assert csv_steps(run_dir / 'eval.csv') == [] and not (run_dir / 'DONE').exists()

    processes = []
    try:
        reference = start(launch('reference'))
        processes.append(reference)
        limited_dir = tmp_path / 'limited' / 'default' / 'r'
        limited = start(launch('limited', f'--time_limit={TIME_LIMIT}'))
        processes.append(limited)
        wait_until(lambda: (limited_dir / 'checkpoint.msgpack').exists(), limited)  # saved just before the evaluation
        checkpoint_seen = time.time()
        time.sleep(0.5)
        limited.send_signal(signal.SIGSTOP)  # in its evaluation until the limit has passed

        # A signal 0.5 s into the final evaluation.
        signalled, stopped_at = {}, {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            signalled[sig] = start(launch(sig.name))
            processes.append(signalled[sig])
        seen = {}
        while len(stopped_at) < len(signalled):  # each signalled 0.5 s after its checkpoint appears
            for sig, process in signalled.items():
                if sig in stopped_at:
                    continue
                assert process.poll() is None, f'exited early ({process.returncode}): {process.stderr.read()[-3000:]}'
                if sig not in seen and (tmp_path / sig.name / 'default' / 'r' / 'checkpoint.msgpack').exists():
                    seen[sig] = time.time()
                if sig in seen and time.time() >= seen[sig] + 0.5:
                    process.send_signal(sig)
                    stopped_at[sig] = time.time()
            time.sleep(0.02)
        results, exited = {}, {}
        for sig, process in signalled.items():
            results[sig] = finish(process)
            exited[sig] = time.time()  # (an upper bound)
        for sig, (code, _, err) in results.items():
            assert code == {signal.SIGTERM: 143, signal.SIGINT: 130}[sig], err[-3000:]
            assert f'{sig.name} received: checkpoints saved at step 20; rerun with --resume.' in err and 'Traceback' not in err
            assert_stopped_at_20(tmp_path / sig.name / 'default' / 'r')

        # The SIGTERMed run resumed with the limit: it owes the evaluation of step 20 and is paused inside it.
        stopped_dir = tmp_path / 'SIGTERM' / 'default' / 'r'
        log = tmp_path / 'resumed.log'
        resumed = start_logged(launch('SIGTERM', '--resume', '--eval_mode=async',
                                      f'--time_limit={RESUMED_TIME_LIMIT}'), log)
        processes.append(resumed)
        wait_for_text(log, 'Running the evaluation of step 20 that was due', resumed)
        owed_seen = time.time()
        time.sleep(0.5)
        resumed.send_signal(signal.SIGSTOP)

        let_go = let_go_past_time_limit(limited, checkpoint_seen, TIME_LIMIT)
        code, _, err = finish(limited)
        limited_s = time.time() - let_go
        assert code == 75 and f'--time_limit={TIME_LIMIT}s reached: checkpoints saved at step 20' in err, err[-3000:]
        assert_stopped_at_20(limited_dir)

        let_go = let_go_past_time_limit(resumed, owed_seen, RESUMED_TIME_LIMIT)
        resumed.wait(timeout=300)
        resumed_s = time.time() - let_go
        text = log.read_text()
        assert resumed.returncode == 75 and 'Traceback' not in text, text[-3000:]
        assert (f'--time_limit={RESUMED_TIME_LIMIT}s reached: checkpoints saved at step 20; rerun with --resume. This run '
                f'spent its time limit in the evaluation of step 20 that it owed, before training anything') in text, text[-3000:]
        assert_stopped_at_20(stopped_dir)

        # Each stopped well before its evaluation would have ended.
        assert finish(reference)[0] == 0
        reference_dir = tmp_path / 'reference' / 'default' / 'r'
        evaluation_s = float(read_csv_rows(str(reference_dir / 'eval.csv'))[1][-1]['time/evaluation_seconds'])
        for sig in signalled:
            assert exited[sig] - stopped_at[sig] < evaluation_s / 2, (sig, exited[sig] - stopped_at[sig], evaluation_s)
        assert limited_s < evaluation_s / 2 and resumed_s < evaluation_s / 2, (limited_s, resumed_s, evaluation_s)

    finally:
        for process in processes:  # a paused one too, if an assertion failed
            if process.poll() is None:
                process.kill()
                process.wait()

    # Stopped by SIGTERM, then by its limit: --resume with time to spare ends it as if nobody had stopped it.
    code, _, err = run(launch('SIGTERM', '--resume'))
    assert code == 0 and 'Running the evaluation of step 20 that was due' in err, err[-3000:]
    for name in ('train.csv', 'eval.csv'):
        assert without_timing(read_csv_rows(str(stopped_dir / name))[1]) == without_timing(read_csv_rows(str(reference_dir / name))[1])
    assert csv_steps(stopped_dir / 'eval.csv') == [20] and (stopped_dir / 'DONE').exists()


ONE_CHUNK = ['--train_steps=20', '--steps_per_call=20', '--log_interval=20', '--eval_interval=20', '--save_interval=20',
             '--run_name=r']


def test_each_unusable_run_directory_is_refused_with_advice_that_works(pointmaze_data_dir, tmp_path):
    """Copies of a finished run whose files cannot be used, each refused in one paragraph whose advice, followed as
    printed, works:
    - checkpoint truncated, or gone with DONE left: the plain command and --resume give the same way out (before, the
      plain command said "Pass --resume to continue it", which nothing could); `mv <dir> <dir>.damaged` (.old) as
      printed, then the same command without --resume, starts the run over, and the results table reads the new run
      and skips the one set aside;
    - eval.csv not text: --resume names it, with the same way out (before: a UnicodeDecodeError traceback);
    - checkpoint or flags.json unreadable (chmod 000; main.py bound by file modes as a user is): "Cannot read <file>"
      (before, for the checkpoint: "Cannot write ... Use a folder you can write"); chmod u+r, then the same command
      goes on (the run is finished: nothing to do)."""
    finished = tmp_path / 'finished'
    code, _, err = run(main_command(pointmaze_data_dir, finished, *ONE_CHUNK))
    assert code == 0, err[-3000:]

    def copy(case):
        shutil.copytree(finished, tmp_path / case)
        return tmp_path / case / 'default' / 'r'

    def command(case, *extra):
        return main_command(pointmaze_data_dir, tmp_path / case, *ONE_CHUNK, *extra)

    checkpoint = finished / 'default' / 'r' / 'checkpoint.msgpack'
    damaged = {case: copy(case) for case in ('damaged', 'damaged-plain')}
    for run_dir in damaged.values():
        (run_dir / 'checkpoint.msgpack').write_bytes(checkpoint.read_bytes()[:2000])
    old = {case: copy(case) for case in ('old', 'old-plain')}
    for run_dir in old.values():
        os.unlink(run_dir / 'checkpoint.msgpack')
    binary_log = copy('binary-log')
    (binary_log / 'eval.csv').write_bytes(b'\xff\xfe' + bytes(range(256)))
    before = {case: snapshot(run_dir) for case, run_dir in {**damaged, **old, 'binary-log': binary_log}.items()}
    flags = {case: [] if case.endswith('-plain') else ['--resume'] for case in before}
    flags['binary-log'] += ['--train_steps=40']  # extended: a finished run with nothing to do reads no log
    refused = {case: start(command(case, *flags[case])) for case in before}
    paragraphs = {case: error_paragraph(*finish(process)[::2]) for case, process in refused.items()}
    for case, run_dir in {**damaged, **old, 'binary-log': binary_log}.items():
        assert snapshot(run_dir) == before[case], case
    assert paragraphs['binary-log'].startswith(f"{binary_log / 'eval.csv'} is damaged (UnicodeDecodeError: 'utf-8' codec "
                                               f"can't decode byte 0xff"), paragraphs['binary-log']  # was a traceback
    assert f'(mv {binary_log} {binary_log}.damaged) and run the same command without --resume' in paragraphs['binary-log']
    for case, run_dir in damaged.items():
        assert paragraphs[case].startswith(f'Checkpoint {run_dir / "checkpoint.msgpack"} is damaged ('), paragraphs[case]
        assert (f'(mv {run_dir} {run_dir}.damaged) and run the same command without --resume to start the run over.'
                in paragraphs[case])
    for case, run_dir in old.items():
        assert paragraphs[case].startswith(f'{run_dir} is marked DONE but has no checkpoint, so nothing can continue it. '
                                           f'Move the directory away (mv {run_dir} {run_dir}.old) and run the same '
                                           f'command without --resume to start the run over'), paragraphs[case]

    # Followed as printed.
    started_over = {}
    for case in ('damaged', 'old'):
        source, destination = re.search(r'\(mv (\S+) (\S+)\)', paragraphs[case]).groups()
        os.rename(source, destination)
        started_over[case] = start(command(case))
    for case, process in started_over.items():
        code, _, err = finish(process)
        assert code == 0, err[-3000:]
        run_dir = damaged.get(case) or old[case]
        assert checkpoint_step(run_dir) == 20 and csv_steps(run_dir / 'eval.csv') == [20] and (run_dir / 'DONE').exists()
    assert (damaged['damaged'].parent / 'r.damaged' / 'checkpoint.msgpack').stat().st_size == 2000

    # The results table reads the run started over and skips the one set aside.
    group = damaged['damaged'].parent
    table = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'results.py'), f'--runs={group}'], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr[-3000:]
    assert f'Warning: skipped {group / "r.damaged"}: set aside' in table.stderr
    assert f'{group / "r"} (seed 0): finished, last evaluation at step 20 of 20' in table.stdout

    # Unreadable files, read by a main.py that file modes bind.
    unreadable = {'checkpoint.msgpack': copy('unreadable-checkpoint'), 'flags.json': copy('unreadable-flags')}
    for name, run_dir in unreadable.items():
        os.chmod(run_dir / name, 0)
    as_user = bound_by_file_modes(unreadable['flags.json'] / 'flags.json')

    def as_user_command(case, *extra):
        return command(case, *extra) if as_user is None else set_up_then_exec(as_user, command(case, *extra))

    cases = {'checkpoint.msgpack': 'unreadable-checkpoint', 'flags.json': 'unreadable-flags'}
    refused = {name: start(as_user_command(case, '--resume')) for name, case in cases.items()}
    for name, process in refused.items():
        path = unreadable[name] / name
        paragraph = error_paragraph(*finish(process)[::2])
        what = 'checkpoint ' if name == 'checkpoint.msgpack' else ''
        assert paragraph.startswith(f'Cannot read {what}{path}: Permission denied. Nothing was written. Make it readable '
                                    f'for this user (chmod u+r {path}, as its owner)'), paragraph
        os.chmod(path, os.stat(path).st_mode | stat.S_IRUSR)  # chmod u+r
    reruns = [start(as_user_command(case, '--resume')) for case in cases.values()]
    for process in reruns:
        code, _, err = finish(process)
        assert code == 0 and 'already finished at step 20; nothing to do' in err, err[-3000:]


def tree(root):
    """Every folder and file under `root`, files with their bytes; None if `root` does not exist."""
    if not os.path.exists(root):
        return None
    found = {}
    for directory, _, files in os.walk(root):
        found[os.path.relpath(directory, root) + os.sep] = None
        for name in files:
            with open(os.path.join(directory, name), 'rb') as f:
                found[os.path.relpath(os.path.join(directory, name), root)] = f.read()
    return found


def test_refused_runs_leave_the_save_directory_as_they_found_it(pointmaze_data_dir, tmp_path):
    """A run refused before it starts writing leaves every folder and file as it found them, byte for byte:
    - --num_seeds=3 while seed 1's directory is held by another process (here a flock on its run.lock from this test,
      as main.py takes one): seed 0's directory, created and locked first, goes again (before: it was left holding run.lock);
      where seed 0's directory existed, its last owner's record in run.lock is put back;
    - a config value only the data show to be wrong (--agent.encoder=impala_small on state observations): refused once
      the data are loaded, before anything is written, and the folders its lock created go (before: flags.json,
      config.json and dataset.json were left)."""
    save_dir = tmp_path / 'runs'
    group = save_dir / 'default'
    held = []
    try:
        for name in ('new_sd1', 'old_sd1'):
            (group / name).mkdir(parents=True)
            held.append(os.open(group / name / 'run.lock', os.O_RDWR | os.O_CREAT))
            fcntl.flock(held[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
        (group / 'old_sd0').mkdir()
        (group / 'old_sd0' / 'run.lock').write_text(json.dumps({'pid': 1, 'host': 'elsewhere', 'command': 'main.py'}) + '\n')
        (group / 'old_sd0' / 'notes.txt').write_text('kept')
        before = tree(save_dir)
        refused = {name: start(main_command(pointmaze_data_dir, save_dir, *ONE_CHUNK, f'--run_name={name}',
                                            f'--num_seeds={seeds}'))
                   for name, seeds in (('new', 3), ('old', 2))}
        encoder = start(main_command(pointmaze_data_dir, tmp_path / 'fresh', *ONE_CHUNK, '--agent.encoder=impala_small'))
        for name, process in refused.items():
            paragraph = error_paragraph(*finish(process)[::2])
            assert paragraph.startswith(f'Run directory {group / (name + "_sd1")} is in use by another process'), paragraph
        code, _, err = finish(encoder)
        assert error_paragraph(code, err).startswith("encoder='impala_small' is an image encoder but the observations "
                                                     "are state vectors") and 'Loaded' in err
        assert tree(save_dir) == before
        assert not os.path.exists(tmp_path / 'fresh')
    finally:
        for fd in held:
            os.close(fd)
