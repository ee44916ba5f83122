"""When main.py's evaluations run: in the training loop (sync), or beside it (async).

    evaluations = Evaluations(run_evaluation, asynchronous=True, should_stop=stops.requested)
    evaluations.start(step, agent)          # async: returns at once; training goes on with `agent`'s successors
    ...
    done = evaluations.collect(block=False) # (step, results, seconds) once finished, else None
    step, snapshot = evaluations.cancel()   # a stop request: end it now, keep the parameters it evaluated

An evaluation checks `should_stop()` at every environment step (as well as `cancel`), so a stop request ends it in
either mode, a sync one included; it then stays in flight, without results, until `cancel` takes its parameters.

Async: `start` copies the agent on its device (the training loop donates its buffers to the next update) and a
background thread runs the evaluation from that copy: the env stepping on the CPU cores, the policy where JAX
runs it, while the accelerator trains. At most one evaluation is in flight; main.py collects it before starting
the next one and before any checkpoint, so a checkpoint never lies beyond an evaluation that is not logged yet.
The evaluation itself is the same function in both modes, on the same parameters and episode seeds, so it gives
the same numbers: only when they are computed changes.
"""

import threading
import time
from typing import Callable, List, Optional, Tuple

import jax
import jax.numpy as jnp

from runtime.errors import EvaluationError
from utils.evaluation.episodes import EvaluationCancelled


class EvaluationFailed(Exception):
    """The evaluation of `step` raised `__cause__`; `snapshot` holds the parameters it evaluated."""

    def __init__(self, step: int, snapshot, seconds: float):
        super().__init__(step)
        self.step, self.snapshot, self.seconds = step, snapshot, seconds

    def error(self, run_dirs: List[str], current_step: int):
        """The EvaluationError paragraph, once the checkpoint of `step` is saved in `run_dirs`."""
        cause = self.__cause__
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else ''
        since = (f' (training went on to step {current_step} meanwhile; those steps are not saved)'
                 if current_step > self.step else '')
        return EvaluationError(
            f'The evaluation at step {self.step} failed ({type(cause).__name__}: {text[:500]}). Training up to step '
            f'{self.step} is kept: the checkpoint of step {self.step} is saved in {", ".join(run_dirs)}{since}. Fix the '
            f'cause, then rerun with --resume: the evaluation of step {self.step} runs first. '
            f'--eval_workers=1 evaluates in this process, without worker processes.'
        )


class _Cancel:
    """What an evaluation checks at every environment step: an explicit cancel, or a stop request."""

    def __init__(self, should_stop: Callable[[], bool]):
        self.event, self.should_stop = threading.Event(), should_stop

    def set(self):
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set() or self.should_stop()


class _Pending:
    def __init__(self, step, snapshot, should_stop):
        self.step, self.snapshot = step, snapshot
        self.cancel = _Cancel(should_stop)
        self.stopped = False  # ended by a stop request, without results
        self.results, self.error = None, None
        self.started = time.perf_counter()
        self.seconds = None
        self.thread = None


class Evaluations:
    """`run_evaluation(agent, step, cancel) -> results` evaluated at most one at a time, in the caller or beside
    it. `cancel` has `is_set()`, which the evaluation checks at every environment step."""

    def __init__(self, run_evaluation: Callable, asynchronous: bool, should_stop: Callable[[], bool] = lambda: False):
        self.run_evaluation, self.asynchronous, self.should_stop = run_evaluation, asynchronous, should_stop
        self.pending: Optional[_Pending] = None

    @property
    def in_flight(self) -> Optional[int]:
        """The step of the evaluation started and not collected yet, or None."""
        return None if self.pending is None else self.pending.step

    def start(self, step: int, agent):
        if self.pending is not None:
            raise RuntimeError(f'The evaluation of step {self.pending.step} is still pending: collect it first.')
        if not self.asynchronous:
            self.pending = _Pending(step, agent, self.should_stop)
            self._run(self.pending)
            return
        self.pending = _Pending(step, jax.tree_util.tree_map(jnp.copy, agent), self.should_stop)
        self.pending.thread = threading.Thread(target=self._run, args=(self.pending,), name=f'evaluation-{step}', daemon=True)
        self.pending.thread.start()

    def _run(self, pending: _Pending):
        try:
            pending.results = self.run_evaluation(pending.snapshot, pending.step, pending.cancel)
        except EvaluationCancelled:
            pending.stopped = True
        except BaseException as e:  # handed to the training loop, which reports it
            pending.error = e
        pending.seconds = time.perf_counter() - pending.started

    def finished(self) -> bool:
        """The evaluation in flight has results (or an error) to collect."""
        pending = self.pending
        return pending is not None and not pending.stopped and (pending.thread is None or not pending.thread.is_alive())

    def collect(self, block: bool) -> Optional[Tuple[int, List, float]]:
        """(step, results, seconds) of the pending evaluation once it is done (waiting for it if `block`), None if
        none is pending, it is still running, or a stop request ended it; EvaluationFailed (from the evaluation's
        error) if it failed."""
        if self.pending is not None and block and self.pending.thread is not None:
            self.pending.thread.join()
        if not self.finished():
            return None
        pending, self.pending = self.pending, None
        if pending.thread is not None:
            pending.thread.join()
        if pending.error is not None:
            raise EvaluationFailed(pending.step, pending.snapshot, pending.seconds) from pending.error
        return pending.step, pending.results, pending.seconds

    def cancel(self) -> Optional[Tuple[int, object]]:
        """End the pending evaluation without results: (its step, the parameters it was evaluating), or None."""
        if self.pending is None:
            return None
        pending, self.pending = self.pending, None
        pending.cancel.set()
        if pending.thread is not None:
            pending.thread.join()
        return pending.step, pending.snapshot
