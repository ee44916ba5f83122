"""Who holds a lock file: the record a process writes once it holds a lock (pid, host, start time, command), and how
a process that finds the lock taken reads and names it (run directories, runtime/run_dir.py; datasets being generated,
utils/datasets.py)."""

import datetime
import json
import os
import shlex
import socket
import sys
import time
from typing import Callable, Dict


def owner_record() -> Dict:
    return dict(pid=os.getpid(), host=socket.gethostname(),
                started=datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
                command=shlex.join([sys.executable] + sys.argv))


def describe_owner(record: Dict) -> str:
    if not record:
        return 'a process whose record is missing (deleted, or not written yet)'
    return (f'pid {record.get("pid")} on host {record.get("host")}, started {record.get("started")}, '
            f'command: {record.get("command")}')


def read_owner(read: Callable[[], bytes], attempts: int = 10) -> Dict:
    """The record `read()` returns, {} if there is none: the owner writes it right after locking, so an empty or
    half-written one gets a moment."""
    for _ in range(attempts):
        text = (read() or b'').decode(errors='replace').strip()
        if text:
            try:
                return json.loads(text)
            except ValueError:
                pass
        time.sleep(0.05)
    return {}
