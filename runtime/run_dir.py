"""A run directory: what `main.py` writes for one seed, and the one place that knows its layout.

    <save_dir>/<run_group>/<run_name>/
        flags.json          main.py's flags (seed included)
        config.json         the resolved agent config, plus the sampler it implies under "sampler"
        train.csv           training and validation metrics, one row per --log_interval
        eval.csv            evaluation metrics, one row per --eval_interval
        checkpoint.msgpack  agent (params, optimizer state, RNG) and step, rewritten atomically
        dataset.json        the dataset files the run trained on: paths, sizes, sha256, source
        resumes.json        one record per attempt: its first step, its code (git commit, dirty), flags that differed
        run.lock            who owns or last owned the directory (pid, host, start, command)
        DONE                present once the run reached --train_steps

`main.py` writes it; the sweep launcher (`experiments/sweep.py`) asks whether it is done; the
results tables (`experiments/results.py`) and the analyses (`experiments/analysis.py`)
read it. With `--num_seeds N` every seed gets its own directory of this same layout.

One owner: `RunLock` holds filelock's lock on `run.lock` for as long as the owning process lives, and
records the owner in it. The kernel drops the lock when the process dies however it dies, so a crash
never leaves a stale lock.
"""

import csv
import dataclasses
import logging
import os
from typing import Dict, List, Optional

import filelock

from runtime.atomic_io import read_json, temp_name_pattern, with_path, write_json
from runtime.errors import RunDirError, RunLockedError
from runtime.lock_owner import NO_LOCKING, holder, write_record
from runtime.loggers import read_csv_rows
from utils.checkpoint_format import CHECKPOINT_NAME  # JAX-free: reading a layout imports no JAX

FLAGS_FILE = 'flags.json'
CONFIG_FILE = 'config.json'
TRAIN_LOG = 'train.csv'
EVAL_LOG = 'eval.csv'
DONE_FILE = 'DONE'
DATASET_FILE = 'dataset.json'
RESUMES_FILE = 'resumes.json'
LOCK_FILE = 'run.lock'
# What main.py's messages advise renaming a run directory to when nothing can continue it (`mv <dir> <dir>.damaged`),
# before the same command starts the run over in <dir>: the results tables skip a directory so named.
DAMAGED_SUFFIX, OLD_SUFFIX = '.damaged', '.old'
SET_ASIDE_SUFFIXES = (DAMAGED_SUFFIX, OLD_SUFFIX)


@dataclasses.dataclass(frozen=True)
class RunDir:
    path: str

    @classmethod
    def at(cls, save_dir: str, run_group: str, run_name: str) -> 'RunDir':
        return cls(os.path.join(os.path.expanduser(save_dir), run_group, run_name))

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def checkpoint_path(self) -> str:
        return self.file(CHECKPOINT_NAME)

    @property
    def train_log_path(self) -> str:
        return self.file(TRAIN_LOG)

    @property
    def eval_log_path(self) -> str:
        return self.file(EVAL_LOG)

    def has_checkpoint(self) -> bool:
        return os.path.exists(self.checkpoint_path)

    def is_done(self) -> bool:
        return os.path.exists(self.file(DONE_FILE))

    def missing(self, names=(FLAGS_FILE, CONFIG_FILE, CHECKPOINT_NAME)) -> List[str]:
        """Which of `names` this directory lacks (all of them if it does not exist)."""
        return [name for name in names if not os.path.exists(self.file(name))]

    def read(self, name: str, reader=read_json):
        """`reader(path)` of file `name`; a RunDirError naming the file when it exists but cannot be read (an
        OSError would be reported as a failed write) or does not parse (not text, JSON or CSV: damaged)."""
        path = self.file(name)
        try:
            value = reader(path)
        except OSError as e:
            raise RunDirError(
                f'Cannot read {path}: {e.strerror or e}. Nothing was written. Make it readable for this user '
                f'(chmod u+r {path}, as its owner), or move the run directory away to start the run over.'
            ) from None
        except (ValueError, csv.Error) as e:  # JSON's and UTF-8's decode errors are ValueErrors
            raise self.damaged(path, f'{type(e).__name__}: {e}') from None
        return value

    def damaged(self, path: str, cause: str) -> RunDirError:
        return RunDirError(
            f'{path} is damaged ({cause}), so nothing can continue from this run directory. '
            f'Nothing was written. Restore it from a backup, or move the run directory away (mv {self.path} '
            f'{self.path}{DAMAGED_SUFFIX}) and run the same command without --resume to start the run over.'
        )

    def check_logs(self):
        """RunDirError (read) if train.csv or eval.csv exists but is not a CSV this project wrote."""
        for name in (TRAIN_LOG, EVAL_LOG):
            if os.path.exists(self.file(name)):
                self.read(name, read_csv_rows)

    def read_flags(self) -> Dict:
        return self.read(FLAGS_FILE)

    def read_config(self) -> Dict:
        """The saved config.json: the agent config, with the sampler under 'sampler'."""
        return self.read(CONFIG_FILE)

    def eval_rows(self) -> List[Dict[str, str]]:
        """The complete rows of eval.csv (a last line cut off mid-write is left out)."""
        if not os.path.exists(self.eval_log_path):
            return []
        return read_csv_rows(self.eval_log_path)[1]

    def write_metadata(self, flags: Dict, config: Dict):
        os.makedirs(self.path, exist_ok=True)
        write_json(self.file(FLAGS_FILE), flags)
        write_json(self.file(CONFIG_FILE), config)

    def mark_done(self):
        write_json(self.file(DONE_FILE), {})

    def clear_done(self):
        """Remove DONE (a finished run being extended is unfinished until it reaches its new end)."""
        try:
            os.unlink(self.file(DONE_FILE))
        except FileNotFoundError:
            pass

    def read_dataset_record(self) -> Optional[Dict]:
        """dataset.json, or None if the run has none (it predates the record)."""
        if not os.path.exists(self.file(DATASET_FILE)):
            return None
        return self.read(DATASET_FILE)

    def read_resume_records(self) -> List[Dict]:
        if not os.path.exists(self.file(RESUMES_FILE)):
            return []
        return self.read(RESUMES_FILE)

    def write_dataset_record(self, record: Dict):
        write_json(self.file(DATASET_FILE), record)

    def add_resume_record(self, record: Dict):
        write_json(self.file(RESUMES_FILE), self.read_resume_records() + [record])


class RunLock:
    """Exclusive ownership of one run directory, for the life of this process (or until `release`).

    `RunLock.acquire(run_dir)` creates the directory and takes filelock's FileLock on its run.lock without waiting, then
    records this process there (runtime/lock_owner.py); if another process holds it, RunLockedError naming that
    process. The kernel drops the lock when the process dies, however it dies; exec'd children (evaluation workers) do
    not inherit it. `verify` (called before every write of a run) stops the run with a named error if run.lock is no
    longer the file it locked: the directory was moved or deleted, or run.lock deleted, so that a second process could
    now lock a new one.
    """

    def __init__(self, run_dir: 'RunDir', created: List[str]):
        self.run_dir, self.path = run_dir, run_dir.file(LOCK_FILE)
        self._created = created  # the folders acquire made, deepest first
        self._previous_record = self._identity = None  # set once locked (_took)
        self._lock = filelock.FileLock(self.path, on_acquired=self._took)
        self.owner = False  # set by mark_owner once this process starts writing the run

    def _took(self, fd: int):  # filelock's on_acquired: the last owner's record, then this process's
        self._previous_record, self._identity = os.pread(fd, 1 << 16, 0), _identity(os.fstat(fd))
        write_record(fd)

    @classmethod
    def acquire(cls, run_dir: 'RunDir') -> 'RunLock':
        created, folder = [], os.path.abspath(run_dir.path)
        while not os.path.exists(folder):
            created.append(folder)
            folder = os.path.dirname(folder)
        try:
            os.makedirs(run_dir.path, exist_ok=True)
        except OSError as e:
            raise with_path(e, run_dir.path) from e
        lock = cls(run_dir, created)
        try:
            lock._lock.acquire(blocking=False)
        except filelock.Timeout:
            lock.release()
            raise RunLockedError(
                f'Run directory {run_dir.path} is in use by another process ({holder(lock.path)}). Two '
                f'processes writing one run directory would mix or destroy each other\'s logs and checkpoints, '
                f'so this one stopped before touching it. Wait for that run to end (or stop it; its lock is '
                f'released the moment it exits, even after a crash), or choose another --run_name / --run_group.'
            ) from None
        except OSError as e:
            if e.errno not in NO_LOCKING:
                lock.release()
                raise with_path(e, lock.path) from e
            logging.warning(f'{run_dir.path}: this file system supports no flock ({e.strerror}); the run directory is '
                            f'NOT protected against a second process writing into it.')
        _remove_stale_temporaries(run_dir.path)
        return lock

    def mark_owner(self):
        """This process writes the run from now on: its record in run.lock stays when it exits."""
        self.owner = True

    def verify(self):
        """RunDirError if run.lock is no longer the file this process locked: the run directory was moved or deleted,
        or run.lock deleted or replaced, so that another process could now own a directory at this path."""
        try:
            current = _identity(os.stat(self.path))
        except OSError:
            current = None
        if self._identity is not None and current != self._identity:
            raise RunDirError(
                f'{self.path} was deleted, moved or replaced while this run was writing {self.run_dir.path}, so this '
                f'process no longer owns what is at that path and stopped before writing more. Its last checkpoint and '
                f'logs are wherever the directory went; restore it and rerun with --resume.'
            )

    def release(self):
        """Drop the lock. A process that never started writing the run (it was refused, or failed its checks) leaves
        the directory as it found it: the record of the last owner put back, or run.lock removed with the folders
        this lock created if there was none."""
        if not self._lock.is_locked:
            return
        if not self.owner:
            try:
                if self._previous_record:
                    with open(self.path, 'wb') as f:  # in place: the lock is on this file
                        f.write(self._previous_record)
                else:
                    os.unlink(self.path)  # held: a process that opened it meanwhile locks a new one (filelock)
            except OSError:
                pass
            for folder in self._created:
                try:
                    os.rmdir(folder)  # only if empty: another process may have put something there meanwhile
                except OSError:
                    break
        self._lock.release()


def _identity(stat_result):
    return stat_result.st_dev, stat_result.st_ino


def _remove_stale_temporaries(directory: str):
    """Temporary files of atomic writes (`<name>.<random>.tmp`) left by a process killed mid-write. Called with
    the directory locked, so no live writer owns them."""
    for name in os.listdir(directory):
        if temp_name_pattern().fullmatch(name):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def lock_all(run_dirs: List['RunDir']) -> List[RunLock]:
    """Locks on every directory (taken in path order; returned in the given order), or none: a
    RunLockedError releases those already taken."""
    locks = {}
    try:
        for run_dir in sorted(run_dirs, key=lambda r: r.path):
            locks[run_dir.path] = RunLock.acquire(run_dir)
    except BaseException:
        for lock in locks.values():
            lock.release()
        raise
    return [locks[run_dir.path] for run_dir in run_dirs]


def flatten(record: Dict, prefix: str = '') -> Dict[str, object]:
    """A nested record's leaves under dotted keys: {'sampler': {'gamma': 0.99}} -> {'sampler.gamma': 0.99}."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f'{prefix}{key}.'))
        else:
            flat[prefix + key] = value
    return flat


def name_max(directory: str) -> int:
    """The longest file name, in bytes, the file system of `directory` (or of its nearest existing parent) holds."""
    path = os.path.abspath(os.path.expanduser(directory))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return os.pathconf(path, 'PC_NAME_MAX')
    except (OSError, ValueError):
        return 255


def not_one_name(name: str) -> Optional[str]:
    """Why `name` is not one plain directory name, so that joined to a directory it could lead out of it (or nowhere);
    None when it is one."""
    if not name:
        return 'it is empty'
    if name in ('.', '..'):
        return f'"{name}" is the directory itself or its parent'
    for separator in filter(None, (os.sep, os.altsep)):
        if separator in name:
            return f'it holds "{separator}", which makes it a path'
    if '\0' in name:
        return 'it holds a NUL character'
    return None


def name_too_long(name: str, directory: str, what: str, fix: str) -> Optional[str]:
    """A sentence naming `what` (`name`, to go in `directory`) and `fix` if the file system cannot hold the name."""
    limit, size = name_max(directory), len(name.encode())
    if size <= limit:
        return None
    return (f'The {what} {name[:60]}... is {size} bytes long, and the file system under {directory} holds names of at '
            f'most {limit} bytes: {fix} (nothing was written).')
