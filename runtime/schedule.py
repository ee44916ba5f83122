"""What happens around main.py's training chunks, in one fixed order, and how a run stops.

    schedule = Schedule(runs, flags, evaluations, stops, on_stop)
    schedule.start(state, step)         # before the first chunk: the evaluation a resumed run owes, then a stop check
    schedule.after_chunk(state, step)   # after each chunk (its training metrics already logged), the order below
    schedule.finish(state, step)        # after the last chunk: the final evaluation logged, then the run is complete

After a chunk that ends at `step`:
  1. an evaluation that finished meanwhile (async) is logged;
  2. a stop request (SIGTERM, SIGINT, --time_limit) stops the run (below);
  3. a checkpoint, when due: after the evaluation of an earlier step still in flight is logged, so that no checkpoint
     lies beyond an evaluation not yet logged;
  4. an evaluation, when due: run now (sync) or started beside training (async).
Every wait (an evaluation in flight, the final one, a sync evaluation) ends at a stop request, and stopping never
calls back into this order. Stopping ends the evaluation in flight, saves a checkpoint of the step it evaluated (so
--resume runs it first and retrains the steps since, exactly) or of `step`, and raises Stopped with the request's exit
status. A resumed run that --time_limit stops inside the evaluation it owed, before training anything, says so: a
rerun starts with the same evaluation (a sweep counts such requeues against its --max_timeouts).
"""

import logging
import time

from runtime.evaluations import EvaluationFailed, Evaluations
from runtime.stops import Stopped, StopRequests


def due(step: int, interval: int, last: int) -> bool:
    return step % interval == 0 or step == last


class Schedule:
    def __init__(self, runs, flags, evaluations: Evaluations, stops: StopRequests, on_stop=lambda: None,
                 checkpoint_extras=lambda step: None):
        """`runs`: the RunSet (writers, checkpoints, logs); `flags`: main.py's (intervals, --train_steps);
        `on_stop()`: called before the stop message (main.py closes its progress bar there); `checkpoint_extras(step)`:
        what each seed's checkpoint of `step` carries besides the agent (the training metrics of its unfinished row)."""
        self.runs, self.flags, self.evaluations, self.stops, self.on_stop = runs, flags, evaluations, stops, on_stop
        self.checkpoint_extras = checkpoint_extras
        self.saved_step = runs.start_step if runs.start_step else None  # a resumed run's checkpoint is at its start
        self.trained = False  # whether this process has trained a chunk yet

    # -- the interface ------------------------------------------------------------------------------------------------

    def start(self, state, step: int):
        """A resumed run whose checkpoint step was due an evaluation that never got logged (the run stopped or failed
        before it was) runs it first: it gives what it would have given then."""
        writers = self.runs.writers
        recorded_ends = {w.recorded_flags.get('train_steps') for w in writers if w.recorded_flags}
        owed = step > 0 and (due(step, self.flags.eval_interval, self.flags.train_steps) or step in recorded_ends)
        if owed and any(step not in w.evaluated_steps for w in writers):
            logging.info(f'Running the evaluation of step {step} that was due before the run stopped.')
            self.evaluations.start(step, state)
            self._wait_or_stop(state, step)
        self._stop_if_asked(state, step, next_chunk_s=0.0)

    def after_chunk(self, state, step: int, next_chunk_s: float):
        """The order of the module docstring. `next_chunk_s`: how long the next chunk may take (--time_limit stops a
        run before a chunk that would end past it)."""
        self.trained = True
        self._log_finished()
        self._stop_if_asked(state, step, next_chunk_s)
        if due(step, self.flags.save_interval, self.flags.train_steps):
            in_flight = self.evaluations.in_flight
            if in_flight is not None and in_flight < step:
                logging.info(f'The checkpoint of step {step} waits for the evaluation of step {in_flight}.')
                self._wait_or_stop(state, step)
            self._save(state, step)
        if due(step, self.flags.eval_interval, self.flags.train_steps):
            if self.evaluations.in_flight is not None:
                logging.info(f'Step {step}: the evaluation of step {self.evaluations.in_flight} is still running; '
                             f'training waits for it.')
                self._wait_or_stop(state, step)
            self.evaluations.start(step, state)
            if not self.evaluations.asynchronous:
                self._wait_or_stop(state, step)

    def finish(self, state, step: int):
        """The last evaluation logged (the run is complete once this returns)."""
        if self.evaluations.in_flight is not None:
            logging.info('Waiting for the final evaluation.')
            self._wait_or_stop(state, step)

    # -- the pieces ---------------------------------------------------------------------------------------------------

    def _log_finished(self):
        try:
            done = self.evaluations.collect(block=False)
        except EvaluationFailed as failure:
            self._save(failure.snapshot, failure.step)
            raise failure.error([w.dir for w in self.runs.writers], failure.step) from failure.__cause__
        if done is not None:
            self.runs.log_evaluation(*done)

    def _wait_or_stop(self, state, step: int):
        """Until the evaluation in flight is logged; a stop request meanwhile stops the run."""
        while self.evaluations.in_flight is not None:
            self._stop_if_asked(state, step, next_chunk_s=0.0)
            if self.evaluations.finished():
                self._log_finished()
            else:
                time.sleep(0.02)

    def _save(self, state, step: int):
        """The checkpoint of `step` from `state` (the live agents, or the parameters an evaluation of `step` was
        given), unless that step is saved already."""
        if self.saved_step != step:
            self.runs.save_checkpoints(state, step, self.checkpoint_extras(step))
            self.saved_step = step

    def _stop_if_asked(self, state, step: int, next_chunk_s: float):
        reason = self.stops.reason(next_chunk_s)
        if reason is None:
            return
        if self.evaluations.finished():
            self._log_finished()  # results that are in need not be computed again
        cancelled = self.evaluations.cancel()
        if cancelled is not None:
            step, state = cancelled  # the checkpoint is of the step it evaluated, so --resume runs it first
        self._save(state, step)
        self.on_stop()
        message = f'{reason}: checkpoints saved at step {self.saved_step}; rerun with --resume.'
        if self.stops.signal is None and not self.trained and cancelled is not None:
            message += (f' This run spent its time limit in the evaluation of step {cancelled[0]} that it owed, before '
                        f'training anything: a rerun starts with the same evaluation, so if that takes longer than '
                        f'--time_limit, raise the limit (or evaluate fewer --eval_episodes).')
        raise Stopped(self.stops.exit_code(), message)
