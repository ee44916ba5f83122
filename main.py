"""Train and evaluate one agent on one OGBench dataset.

    python main.py --env_name=pointmaze-medium-stitch-v0 --agent=configs/presets.py:gcbc --agent.batch_size=256

Flag defaults follow the paper's protocol (1M steps, batch 1024, 50 evaluation episodes per task). A run goes:
flags -> request (runtime/request.py: every flag and config value checked; nothing touched yet) -> run directories
(runtime/run_writer.py: one owner each; --resume checked against what they record) -> data (found, downloaded or
generated; validated; on device) -> agents (created, or restored from checkpoints) -> the fused loop (chunks of
jitted lax.scan updates, sampling included; at each chunk's end: log, checkpoint, evaluation) -> evaluation
(utils/evaluation: in the loop, or beside it on the CPU cores while an accelerator trains). This file computes no
loss. docs/guarantees.md says what it promises when something goes wrong.
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from absl import app, flags, logging

import datagen
from agents import get_agent_class
from runtime import provenance
from runtime.checkpoints import load_checkpoint
from runtime.dataset_files import ensure_dataset
from runtime.exits import EXIT_INTERRUPTED, named_error
from runtime.request import HelpRequested, Request, check_request
from runtime.run_writer import already_finished, begin_runs, check_runs, open_runs
from runtime.stops import StopNow, StopRequests, exit_at_once_on_sigterm
from utils.datasets import check_dataset_fits, load_dataset
from utils.errors import NonFiniteLossError
from utils.evaluation import env_spaces, evaluate_agents, make_eval_envs, usable_cpus
from utils.evaluation.scheduler import EvaluationFailed, Evaluations
from utils.sampler import DeviceDataset, example_observations
from utils.training import compiled_create, first_nonfinite, stack_trees, train_seeds, validation_metrics

STARTED = time.time()
# The gym-stepped envs of an evaluation (the native stepper holds any number of episodes): enough for one batch of
# the paper's 50 episodes per task; more episodes run in successive batches.
GYM_EVAL_ENVS = 256


def main(argv):
    request = None
    try:
        request = check_request(argv, get_agent_class)
        train(request)
    except HelpRequested as e:
        print(e)
    except KeyboardInterrupt:
        print('\nInterrupted (Ctrl-C) before training started, or twice: stopped without a new checkpoint; '
              'the last checkpoint, if any, is kept (rerun with --resume).', file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except StopNow as e:
        print('\nStopped by a signal before training started: nothing to save.', file=sys.stderr)
        sys.exit(e.code)
    except Exception as e:
        error = named_error(e, request)
        if error is None:
            raise
        print(f'\nError: {error}', file=sys.stderr)
        sys.exit(1)


def train(request: Request):
    exit_at_once_on_sigterm()  # before training: nothing to save
    writers = open_runs(request)
    try:
        start_step = check_runs(request, writers)
        if already_finished(request, writers, start_step):
            logging.info(f'{", ".join(w.dir for w in writers)}: already finished at step {start_step}; nothing to do.')
            return
        train_path, val_path = ensure_dataset(request.env_name, request.dataset_dir, download=request.download,
                                              generator=datagen, generate=request.generate_dataset)
        record = provenance.dataset_record(request.env_name, train_path, val_path)
        for writer in writers:
            writer.check_dataset(record)  # a resumed run must find the very files it was trained on
        begin_runs(writers, record)
        data = Data(request, train_path, val_path)
        state = build_agents(request, data, writers, start_step)
        for writer in writers:
            writer.open_logs(start_step)
        Trainer(request, data, writers, state, start_step).run()
        for writer in writers:
            writer.finish(done=True)
            logging.info(f'Finished: {writer.dir}')
    finally:
        for writer in writers:
            writer.lock.release()


class Data:
    """The dataset on device, the evaluation environments, and example inputs that size the networks."""

    def __init__(self, request: Request, train_path: str, val_path: str):
        check_dataset_fits([train_path, val_path])
        num_envs = max(min(request.eval_episodes, GYM_EVAL_ENVS), request.num_seeds)  # gym paths: one env per row
        self.eval_envs = make_eval_envs(request.env_name, num_envs, num_workers=request.eval_workers or usable_cpus())
        spaces = env_spaces(self.eval_envs)
        train, val = load_dataset(train_path, *spaces), load_dataset(val_path, *spaces)
        logging.info(f'Loaded {train_path}: {len(train["terminals"])} rows, {int(train["terminals"].sum())} episodes.')
        self.train, self.val = DeviceDataset.from_numpy(**train), DeviceDataset.from_numpy(**val)
        self.example_observations = example_observations(train['observations'], request.sampler_config.frame_stack)
        self.example_actions = train['actions'][:1]


def build_agents(request: Request, data: Data, writers, start_step: int):
    """One agent per seed, exactly as a single-seed run with that seed would make it, restored from its checkpoint
    when resuming; stacked along a seed axis when there are several."""
    create = compiled_create(request.agent_class, data.example_observations, data.example_actions, request.config)
    agents = []
    for writer in writers:
        agent = create(writer.seed)
        if start_step:
            agent, step, _ = load_checkpoint(writer.checkpoint_path, agent)
            logging.info(f'Resumed {writer.dir} from step {step}.')
        agents.append(agent)
    return stack_trees(agents) if len(agents) > 1 else agents[0]


def due(step: int, interval: int, last: int) -> bool:
    return step % interval == 0 or step == last


class Trainer:
    """Chunks of fused steps. At every chunk's end, in this order: non-finite check, the results of a finished
    evaluation, training log, stop (on a signal or at --time_limit), checkpoint (when due; after the evaluation
    still running, if any, so that no checkpoint lies beyond an evaluation not yet logged), evaluation (when due:
    run now, or started beside training with --eval_mode=async)."""

    def __init__(self, request: Request, data: Data, writers, state, start_step: int):
        self.request, self.data, self.writers, self.state = request, data, writers, state
        self.multi = len(writers) > 1
        keys = np.stack([np.asarray(jax.random.split(jax.random.PRNGKey(seed), 3)) for seed in request.seeds])  # [N, 3, 2]
        self.data_keys, self.val_keys, self.eval_seed_keys = (jnp.asarray(keys[:, i]) for i in range(3))
        self.step = start_step
        self.saved_step = start_step if start_step else None  # a resumed run's checkpoint is at its start step
        self.evaluations = Evaluations(self.evaluate, request.eval_asynchronously(jax.default_backend()))
        self.longest_chunk_s = 0.0

    def run(self):
        request = self.request
        self.stops = StopRequests(request.time_limit, STARTED)
        desc = os.path.basename(self.writers[0].dir) + (f' (+{len(self.writers) - 1} seeds)' if self.multi else '')
        self.progress = tqdm.tqdm(total=request.train_steps, initial=self.step, smoothing=0.1, dynamic_ncols=True, desc=desc)
        self.chunk_start_time, self.chunk_start_step = time.time(), self.step
        try:
            self.evaluate_pending()
            while self.step < request.train_steps:
                self.stop_if_asked()
                infos = self.train_chunk()
                self.log_evaluation(block=False)
                if due(self.step, request.log_interval, request.train_steps):
                    self.log_training(infos)
                self.stop_if_asked()
                if due(self.step, request.save_interval, request.train_steps):
                    self.save()
                if due(self.step, request.eval_interval, request.train_steps):
                    self.start_evaluation()
            self.wait_for_evaluation('Waiting for the final evaluation.')  # before DONE
        finally:
            self.evaluations.cancel()  # an error left one running: end it before the process ends
            self.progress.close()  # before any message, which would otherwise be followed by the bar

    def evaluate_pending(self):
        """A resumed run whose checkpoint step was due an evaluation that never got logged (the run stopped or
        failed before it was) runs it first: it gives what it would have given then."""
        step, recorded = self.step, {w.recorded_flags.get('train_steps') for w in self.writers if w.recorded_flags}
        if step > 0 and (due(step, self.request.eval_interval, self.request.train_steps) or step in recorded) \
                and any(step not in w.evaluated_steps for w in self.writers):
            logging.info(f'Running the evaluation of step {step} that was due before the run stopped.')
            self.start_evaluation()
            self.wait_for_evaluation()

    def train_chunk(self):
        request, step, started = self.request, self.step, time.time()
        stop = min(request.train_steps, step + request.steps_per_call,
                   *(step // interval * interval + interval for interval in
                     (request.log_interval, request.eval_interval, request.save_interval)))
        self.state, infos = train_seeds(self.state, self.data.train, self.data_keys, step, request.sampler_config, stop - step)
        for k, writer in enumerate(self.writers):
            bad = first_nonfinite({key: v[k] for key, v in infos.items()})
            if bad is not None:
                raise NonFiniteLossError(
                    f'Non-finite {bad[1]} at step {step + bad[0] + 1} (seed {writer.seed}): training stopped. The last '
                    f'good checkpoint ({writer.checkpoint_path}, if any) was kept. --resume would repeat the same steps '
                    f'(and refuses other settings): start a new run (another --run_name) with a lower --agent.lr or '
                    f'auxiliary weight (alpha).'
                )
        self.progress.update(stop - step)
        self.step = stop
        self.longest_chunk_s = max(self.longest_chunk_s, time.time() - started)
        return infos

    def seed_agent(self, state, k):
        return jax.tree_util.tree_map(lambda x: x[k], state) if self.multi else state

    def log_training(self, infos):
        steps_per_second = (self.step - self.chunk_start_step) / max(time.time() - self.chunk_start_time, 1e-9)
        self.chunk_start_time, self.chunk_start_step = time.time(), self.step
        for k, writer in enumerate(self.writers):
            metrics = {f'training/{key}': float(np.mean(v[k])) for key, v in infos.items()}
            val_info = validation_metrics(self.seed_agent(self.state, k), self.data.val,
                                          jax.random.fold_in(self.val_keys[k], self.step), self.request.sampler_config)
            metrics.update({f'validation/{key}': float(v) for key, v in val_info.items()})
            metrics['time/steps_per_second'] = steps_per_second
            writer.log_train(metrics, self.step)
        self.progress.set_postfix(loss=f"{np.mean(infos['total_loss'][:, -1]):.3f}")

    def save(self, state=None, step=None):
        """Checkpoints of `state` at `step` (default: now); waits for an earlier evaluation still running."""
        state, step = (self.state, self.step) if state is None else (state, step)
        if self.evaluations.in_flight is not None and self.evaluations.in_flight < step:
            self.wait_for_evaluation(f'The checkpoint of step {step} waits for the evaluation of step {self.evaluations.in_flight}.')
        for k, writer in enumerate(self.writers):
            writer.save_checkpoint(self.seed_agent(state, k), step)
        self.saved_step = step

    def stop_if_asked(self):
        """On SIGTERM / SIGINT, or when the next chunk would end past --time_limit: checkpoint and exit. An
        evaluation still running is ended; the checkpoint is then of the step it evaluated, so --resume runs it
        first and retrains the steps since, exactly."""
        reason = self.stops.reason(2 * self.longest_chunk_s)
        if reason is None:
            return
        cancelled = self.evaluations.cancel()
        if cancelled is not None:
            step, snapshot = cancelled
            if self.saved_step != step:
                self.save(snapshot, step)
        elif self.saved_step != self.step:
            self.save()
        self.progress.close()  # before the message
        logging.warning(f'{reason}: checkpoints saved at step {self.saved_step}; rerun with --resume.')
        for writer in self.writers:
            writer.finish(done=False)
        sys.exit(self.stops.exit_code())

    def start_evaluation(self):
        if self.evaluations.in_flight is not None:
            self.wait_for_evaluation(f'Step {self.step}: the evaluation of step {self.evaluations.in_flight} is still '
                                     f'running; training waits for it.')
        self.evaluations.start(self.step, self.state)
        if not self.evaluations.asynchronous:
            self.log_evaluation(block=True)

    def wait_for_evaluation(self, why: str = ''):
        """Log the evaluation in flight once it ends; a stop signal (or --time_limit) meanwhile stops at once."""
        if self.evaluations.in_flight is None:
            return
        if why:
            logging.info(why)
        while not self.evaluations.finished():
            self.stop_if_asked()
            time.sleep(0.02)
        self.log_evaluation(block=True)

    def log_evaluation(self, block: bool):
        try:
            done = self.evaluations.collect(block)
        except EvaluationFailed as failure:
            if self.saved_step != failure.step:
                self.save(failure.snapshot, failure.step)
            raise failure.error([w.dir for w in self.writers], self.step) from failure.__cause__
        if done is None:
            return
        step, per_seed, seconds = done
        for writer, metrics in zip(self.writers, per_seed):
            if step in writer.evaluated_steps:
                continue  # a pending evaluation that only some seeds missed
            writer.log_eval(dict(metrics, **{'time/evaluation_seconds': seconds}), step)
            tqdm.tqdm.write(f'seed {writer.seed} step {step}: success {metrics["evaluation/overall_success"]:.3f} ' + ' '.join(
                f'{key.split("/")[-1]}={v:.2f}' for key, v in metrics.items() if '/task' in key))

    def evaluate(self, state, step: int, cancel):
        request = self.request
        return evaluate_agents(state, len(self.writers), self.data.eval_envs, self.eval_seed_keys, step,
                               request.sampler_config.frame_stack, task_ids=request.eval_tasks,
                               episodes_per_task=request.eval_episodes, max_steps=request.eval_max_steps or None,
                               num_video_episodes=request.video_episodes, cancel=cancel)


def keep_argv(argv):
    """app.run's flag parser: main.py's flags are parsed (purely) by check_request; absl's own keep their defaults."""
    flags.FLAGS.mark_as_parsed()
    return argv


if __name__ == '__main__':
    app.run(main, flags_parser=keep_argv)
