"""Locks between processes, and who holds one: run directories (runtime/run_dir.py) and datasets being obtained
(runtime/dataset_files.py).

A lock is filelock's FileLock: on Unix a kernel `flock`, which the kernel drops when the holder exits however it exits
(SIGKILL, a crash, the OOM killer), so no lock is ever stale. filelock records no holder, so once a process holds a
lock it writes its own record (pid, host, start time, command) into the lock file; a process that finds the lock taken
names the holder from it. filelock opens an existing lock file without truncating it, so a process that is refused
leaves the holder's record as it was.
"""

import datetime
import errno
import json
import os
import shlex
import socket
import sys
import time

# Where a file system cannot lock (some FUSE, Lustre and old NFS mounts), flock fails with one of these.
NO_LOCKING = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


def write_record(fd: int):
    """This process's record into the lock file open at `fd`, which it has just locked (filelock's `on_acquired`)."""
    record = dict(pid=os.getpid(), host=socket.gethostname(),
                  started=datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
                  command=shlex.join([sys.executable] + sys.argv))
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + '\n').encode(), 0)


def holder(path: str, attempts: int = 10) -> str:
    """Who holds the lock at `path`, as its record says. The holder writes the record right after taking the lock, so
    an empty or half-written one gets a moment."""
    for _ in range(attempts):
        try:
            with open(path, 'rb') as f:
                record = json.loads(f.read())
            return (f'pid {record.get("pid")} on host {record.get("host")}, started {record.get("started")}, '
                    f'command: {record.get("command")}')
        except (OSError, ValueError):
            time.sleep(0.05)
    return 'a process whose record is missing (not written yet)'
