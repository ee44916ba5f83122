"""How a training process is asked to stop: signals (SIGTERM from a scheduler's preemption, SIGHUP from a closed
terminal, SIGINT from Ctrl-C) and its own time limit (`--time_limit`). runtime/schedule.py asks `StopRequests.reason()` around every chunk and while it
waits for an evaluation, saves a checkpoint and raises `Stopped` with the request's exit status (runtime/exits.py);
a second Ctrl-C aborts at once."""

import signal
import time
from typing import Optional

from runtime.exits import EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_PREEMPTED, EXIT_TIME_LIMIT

# SIGHUP (a closed terminal, a dropped ssh connection) stops a run as a preemption does: checkpoint, message, exit.
SIGNAL_EXIT_CODES = {signal.SIGTERM: EXIT_PREEMPTED, signal.SIGHUP: EXIT_HANGUP, signal.SIGINT: EXIT_INTERRUPTED}


class StopNow(BaseException):
    """A signal before training started: there is nothing to save, exit with `code`."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class Stopped(BaseException):
    """The run stopped on a request, its checkpoint saved: print `message`, exit with `code` (--resume continues)."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)
        self.code, self.message = code, message


def exit_at_once_on_sigterm():
    """Before training: SIGTERM and SIGHUP raise StopNow (nothing to save yet)."""
    def stop_now(signum, _frame):
        raise StopNow(SIGNAL_EXIT_CODES.get(signum, EXIT_PREEMPTED))

    signal.signal(signal.SIGTERM, stop_now)
    signal.signal(signal.SIGHUP, stop_now)


class StopRequests:
    """Installs the training-time handlers: a signal is remembered until the loop asks, and the time limit (seconds
    since `started`, 0 = none) counts as a request once it has passed, or once the next chunk would end past it.
    Every duration is on the monotonic clock (`started` too): a step of the wall clock (NTP, a suspend) moves no limit."""

    def __init__(self, time_limit: float, started: float):
        self.time_limit, self.started = time_limit, started
        self.signal = None
        for sig in SIGNAL_EXIT_CODES:
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = self.signal or signum

    def reason(self, next_chunk_s: float = 0.0) -> Optional[str]:
        """Why to stop now, or None. `next_chunk_s`: how long what comes next would take, so that it does not run
        past the time limit (0 when unknown: the limit itself)."""
        if self.signal is not None:
            return f'{signal.Signals(self.signal).name} received'
        if self.timed_out(next_chunk_s):
            return f'--time_limit={self.time_limit}s reached'
        return None

    def timed_out(self, ahead_s: float = 0.0) -> bool:
        return bool(self.time_limit) and time.monotonic() + ahead_s >= self.started + self.time_limit

    def requested(self) -> bool:
        """A stop is due now (what an evaluation checks at every environment step)."""
        return self.reason() is not None

    def exit_code(self) -> int:
        return SIGNAL_EXIT_CODES[self.signal] if self.signal is not None else EXIT_TIME_LIMIT
