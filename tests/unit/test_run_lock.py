"""A run directory's lock (runtime/run_dir.py RunLock, filelock's lock on run.lock) on real files, held by a second
process as main.py holds it: one owner at a time, the holder named to the next, the refused process leaving the
holder's record as it was, never stale after a SIGKILL, and a run that stops writing once its run.lock is gone."""

import json
import os
import subprocess
import sys

import pytest

from runtime.errors import RunDirError, RunLockedError
from runtime.run_dir import RunDir, RunLock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A process that owns a run directory, as main.py does once it starts writing the run.
HOLDER = (
    'import sys, time\n'
    'from runtime.run_dir import RunDir, RunLock\n'
    'RunLock.acquire(RunDir(sys.argv[1])).mark_owner()\n'
    'print("holding", flush=True)\n'
    'time.sleep(600)\n'
)


def test_one_owner_named_to_the_next_and_freed_when_it_is_killed(tmp_path):
    run_dir = tmp_path / 'group' / 'r'
    holder = subprocess.Popen([sys.executable, '-c', HOLDER, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'holding'
        record = (run_dir / 'run.lock').read_bytes()
        assert json.loads(record)['pid'] == holder.pid
        with pytest.raises(RunLockedError, match=rf'{run_dir} is in use by another process \(pid {holder.pid} on host '):
            RunLock.acquire(RunDir(str(run_dir)))
        assert (run_dir / 'run.lock').read_bytes() == record  # opening the lock file truncated nothing
    finally:
        holder.kill()  # SIGKILL: it unlocks nothing itself
        holder.wait()
    lock = RunLock.acquire(RunDir(str(run_dir)))  # the kernel dropped the dead holder's lock
    assert json.loads((run_dir / 'run.lock').read_bytes())['pid'] == os.getpid()
    lock.release()  # it never wrote the run: the last owner's record goes back
    assert (run_dir / 'run.lock').read_bytes() == record


def test_a_run_stops_writing_once_its_run_lock_is_not_the_file_it_locked(tmp_path):
    """run.lock deleted, or the run directory moved away, while the run writes: another process could now lock a new
    run.lock at that path, so the run's next check before a write stops it."""
    for case, gone in (('deleted', lambda d: os.unlink(d / 'run.lock')), ('moved', lambda d: os.rename(d, f'{d}.moved'))):
        run_dir = tmp_path / case
        lock = RunLock.acquire(RunDir(str(run_dir)))
        lock.mark_owner()
        lock.verify()
        gone(run_dir)
        with pytest.raises(RunDirError, match=f'{run_dir / "run.lock"} was deleted, moved or replaced while this run '
                                              f'was writing {run_dir}'):
            lock.verify()
        lock.release()
