"""Progress bars that suit both a terminal and a log file.

On a terminal, tqdm's bar, redrawn in place. Written to a file or a pipe (a job's log, `> log 2>&1`), a redrawn bar
is a carriage-return flood (about ten redraws a second); there progress is instead one plain line at most every
`LOG_INTERVAL_S` seconds, and one at the end.
"""

import sys
import time

import tqdm

LOG_INTERVAL_S = 30.0


class LogProgress:
    """The part of tqdm's interface this project uses (iteration, `update`, `set_postfix`, `write`, `close`, a
    context manager), printing a line per LOG_INTERVAL_S seconds: 'desc: n/total (p%) in 1m05s, 12.3 unit/s, postfix'."""

    def __init__(self, iterable=None, total=None, initial=0, desc='', unit='it', disable=False, file=None, **_ignored):
        self.iterable, self.desc, self.unit, self.disable = iterable, desc, unit, disable
        self.total = len(iterable) if total is None and hasattr(iterable, '__len__') else total
        self.n = self.initial = initial
        self.file = file or sys.stderr
        self.started = self.last_print = time.monotonic()
        self.postfix = ''
        self.closed = False

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n=1):
        self.n += n
        if time.monotonic() - self.last_print >= LOG_INTERVAL_S:
            self._print()

    def write(self, text: str):
        self.file.write(text + '\n')

    def set_postfix(self, refresh=True, **values):
        self.postfix = ', '.join(f'{key}={value}' for key, value in values.items())

    def close(self):
        if not self.closed:
            self.closed = True
            if self.n != self.initial or self.total:
                self._print()

    def _print(self):
        self.last_print = now = time.monotonic()
        if self.disable:
            return
        elapsed = now - self.started
        rate = (self.n - self.initial) / elapsed if elapsed > 0 else 0.0
        done = f'{self.n}/{self.total} ({100 * self.n / self.total:.0f}%)' if self.total else f'{self.n}'
        minutes, seconds = divmod(int(elapsed), 60)
        line = f'{self.desc}: {done} in {minutes}m{seconds:02d}s, {rate:.3g} {self.unit}/s'
        self.file.write(line + (f', {self.postfix}' if self.postfix else '') + '\n')
        self.file.flush()


def progress_bar(iterable=None, file=None, **kwargs):
    """`tqdm(iterable, **kwargs)` on a terminal (`file`, default stderr); a LogProgress on anything else."""
    stream = sys.stderr if file is None else file
    if hasattr(stream, 'isatty') and stream.isatty():
        return tqdm.tqdm(iterable, file=stream, **kwargs)
    return LogProgress(iterable, file=stream, **kwargs)
