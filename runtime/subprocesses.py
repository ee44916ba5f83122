"""Starting a child process with some state set first, without a fork of this one."""

import sys
from typing import List, Sequence


def set_up_then_exec(setup: str, command: Sequence[str]) -> List[str]:
    """The argv of a fresh interpreter that runs `setup` (Python source) and then execs `command` under its own pid:
    what a preexec_fn does, without running Python in a fork of a multithreaded process (JAX's), which can deadlock.
    Whatever survives exec carries over: an ignored signal, a resource limit, a capability bound."""
    return [sys.executable, '-c', f'{setup}\nimport os, sys\nos.execvp(sys.argv[1], sys.argv[1:])', *command]
