"""A run directory: what `main.py` writes for one seed, and the one place that knows its layout.

    <save_dir>/<run_group>/<run_name>/
        flags.json          main.py's flags (seed included)
        config.json         the resolved agent config, plus the sampler it implies under "sampler"
        train.csv           training and validation metrics, one row per --log_interval
        eval.csv            evaluation metrics, one row per --eval_interval
        checkpoint.msgpack  agent (params, optimizer state, RNG) and step, rewritten atomically
        dataset.json        the dataset files the run trained on: paths, sizes, sha256, source
        resumes.json        one record per --resume: the step it started from, flags that differed
        run.lock            who owns the directory (pid, host, start, command); locked while it runs
        DONE                present once the run reached --train_steps

`main.py` writes it; the sweep launcher (`experiments/sweep.py`) asks whether it is done; the
results tables (`experiments/results.py`) and the analyses (`experiments/analysis.py`)
read it. With `--num_seeds N` every seed gets its own directory of this same layout.

One owner: `RunLock` holds an exclusive `flock` on `run.lock` for as long as the owning process
lives. The kernel drops the lock when the process dies however it dies, so a crash never leaves a
stale lock; the file stays behind as a record of the last owner.
"""

import dataclasses
import datetime
import errno
import fcntl
import json
import logging
import os
import shlex
import socket
import sys
import time
from typing import Dict, List, Optional

from utils.atomic_io import read_json, with_path, write_json
from utils.errors import RunLockedError
from utils.loggers import read_csv_rows

FLAGS_FILE = 'flags.json'
CONFIG_FILE = 'config.json'
TRAIN_LOG = 'train.csv'
EVAL_LOG = 'eval.csv'
DONE_FILE = 'DONE'
DATASET_FILE = 'dataset.json'
RESUMES_FILE = 'resumes.json'
LOCK_FILE = 'run.lock'
CHECKPOINT_NAME = 'checkpoint.msgpack'  # here, not in utils/checkpoints.py, so that reading a layout imports no JAX
# File systems that cannot lock (some FUSE and old NFS mounts) answer flock with one of these.
_NO_LOCKING = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


def default_run_name(agent_name: str, env_name: str, seed: int) -> str:
    return f'{agent_name}_{env_name}_sd{seed}'


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

    def read_flags(self) -> Dict:
        return read_json(self.file(FLAGS_FILE))

    def read_config(self) -> Dict:
        """The saved config.json: the agent config, with the sampler under 'sampler'."""
        return read_json(self.file(CONFIG_FILE))

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
        path = self.file(DATASET_FILE)
        return read_json(path) if os.path.exists(path) else None

    def write_dataset_record(self, record: Dict):
        write_json(self.file(DATASET_FILE), record)

    def add_resume_record(self, record: Dict):
        path = self.file(RESUMES_FILE)
        write_json(path, (read_json(path) if os.path.exists(path) else []) + [record])


def _holder_record() -> Dict:
    return dict(pid=os.getpid(), host=socket.gethostname(),
                started=datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
                command=shlex.join([sys.executable] + sys.argv))


def describe_holder(holder: Dict) -> str:
    if not holder:
        return 'a process that has not written its details yet'
    return (f'pid {holder.get("pid")} on host {holder.get("host")}, started {holder.get("started")}, '
            f'command: {holder.get("command")}')


class RunLock:
    """Exclusive ownership of one run directory, for the life of this process (or until `release`).

    `RunLock.acquire(run_dir)` creates the directory and `run.lock`, takes a non-blocking exclusive
    `flock` on it and writes this process's pid, host, start time and command into it; if another
    process holds the lock it raises RunLockedError naming that process instead. The lock belongs to
    the open file description, which exec'd children (evaluation workers) do not inherit.
    """

    def __init__(self, path: str, fd: Optional[int]):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, run_dir: 'RunDir') -> 'RunLock':
        path = run_dir.file(LOCK_FILE)
        try:
            os.makedirs(run_dir.path, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # never O_TRUNC: the holder's record stays
        except OSError as e:
            raise with_path(e, path) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = cls._read_holder(fd)
            os.close(fd)
            raise RunLockedError(
                f'Run directory {run_dir.path} is in use by another process ({describe_holder(holder)}). Two '
                f'processes writing one run directory would mix or destroy each other\'s logs and checkpoints, '
                f'so this one stopped before touching it. Wait for that run to end (or stop it; its lock is '
                f'released the moment it exits, even after a crash), or choose another --run_name / --run_group.'
            ) from None
        except OSError as e:
            if e.errno not in _NO_LOCKING:
                os.close(fd)
                raise with_path(e, path) from e
            logging.warning(f'{run_dir.path}: this file system does not support flock ({e.strerror}); the run '
                            f'directory is NOT protected against a second process writing into it.')
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(_holder_record(), indent=2) + '\n').encode(), 0)
            os.fsync(fd)
        except OSError as e:
            os.close(fd)
            raise with_path(e, path) from e
        return cls(path, fd)

    @staticmethod
    def _read_holder(fd: int, attempts: int = 5) -> Dict:
        # The holder writes its record right after locking: give it a moment if the file is still empty.
        for _ in range(attempts):
            text = os.pread(fd, 65536, 0).decode(errors='replace').strip()
            if text:
                try:
                    return json.loads(text)
                except ValueError:
                    pass
            time.sleep(0.05)
        return {}

    def release(self):
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


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
