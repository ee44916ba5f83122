"""Train and evaluate one agent on one OGBench dataset.

    python main.py --env_name=pointmaze-medium-stitch-v0 --agent=configs/presets.py:gcbc --agent.batch_size=256

The flags are `Flags` below; their defaults follow the paper's protocol (1M steps, 50 evaluation episodes per task;
the batch size, 1024, is the agent config's). A run:

1. the command line: `Flags` and the agent config --agent (`define_flags`), parsed and checked (runtime/request.py):
   every flag and config value judged before anything is touched;
2. the run directories, one per seed, owned for the whole run (runtime/run_writer.RunSet): --resume checked against
   what they record;
3. the data: found, downloaded or generated (runtime/dataset_files.py), validated, and put on the device;
4. the agents: created, or restored from their checkpoints;
5. the loop: chunks of jitted updates (utils/training.train: sample a batch on the device, update, K times in one
   call, N seeds vmapped); around each chunk runtime/schedule.Schedule logs, checkpoints, evaluates and stops, in one
   fixed order.

docs/guarantees.md says what a run promises when something goes wrong.
"""

import dataclasses
import logging as py_logging
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from agents import config_listing, get_agent_class
from runtime import provenance
from runtime.checkpoints import load_checkpoint
from runtime.dataset_files import ensure_dataset
from runtime.evaluations import Evaluations
from runtime.exits import EXIT_INTERRUPTED, named_error
from runtime.memory import check_dataset_fits
from runtime.request import (HelpRequested, Request, check_jax_backend, check_request, define_dataclass_flags, flag,
                             parse_command_line)
from runtime.run_writer import RunSet
from runtime.schedule import Schedule
from runtime.stops import StopNow, StopRequests, Stopped, exit_at_once_on_sigterm
from runtime.training_metrics import TrainingMetrics, first_nonfinite, nonfinite_error
from utils.datasets import load_dataset
from utils.evaluation import env_spaces, evaluate_agents, make_eval_envs, usable_cpus
from utils.pixel_batches import example_observations
from utils.progress import progress_bar
from utils.random_streams import stream_key
from utils.training import DeviceDataset, stack_trees, train, validation_metrics

# The agent config when --agent is not given.
DEFAULT_AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configs/presets.py:byol_gamma_a')

# The gym-stepped envs of an evaluation (the native stepper holds any number of episodes): enough for one batch of
# the paper's 50 episodes per task; more episodes run in successive batches.
GYM_EVAL_ENVS = 256


@dataclasses.dataclass(frozen=True)
class Flags:
    """main.py's flags besides --agent (`define_flags`). `resume_may_differ` marks the flags --resume may change: they
    change neither what is computed nor what an evaluation number means."""

    env_name: str = flag('pointmaze-medium-stitch-v0', 'OGBench dataset name, e.g. antmaze-medium-stitch-v0.')
    seed: int = flag(0, 'Random seed (network init, sampling, evaluation).')
    num_seeds: int = flag(1, 'Train seeds seed..seed+N-1 in one process, vmapped (one run directory each).',
                          resume_may_differ=True)
    train_steps: int = flag(1_000_000, 'Number of gradient steps.')
    log_interval: int = flag(5000, 'Steps between training-metric logs.', resume_may_differ=True)
    eval_interval: int = flag(100_000, 'Steps between evaluations (and one at the end).')
    eval_episodes: int = flag(50, 'Evaluation episodes per task.')
    eval_tasks: str = flag('1,2,3,4,5', 'Comma-separated OGBench task ids to evaluate on.')
    eval_max_steps: int = flag(0, 'Episode step limit at evaluation; 0 = the environment time limit.')
    eval_workers: int = flag(0, 'Evaluation parallelism: threads stepping the episodes natively (point/ant/humanoid '
                             'mazes), else processes (this one and N-1 workers); 0 = one per usable CPU core, 1 = all in '
                             'this thread.', resume_may_differ=True)
    eval_mode: str = flag('auto', 'async: an evaluation runs on the CPU cores from a copy of the parameters while '
                          'training goes on; sync: training waits for it; auto: async when JAX runs on an accelerator, '
                          'sync on the CPU (where both would share the cores). Same numbers either way.',
                          choices=('auto', 'async', 'sync'), resume_may_differ=True)
    video_episodes: int = flag(0, 'Episodes per task rendered to wandb video (needs MUJOCO_GL=egl).', resume_may_differ=True)
    save_interval: int = flag(100_000, 'Steps between checkpoints (and one at the end).', resume_may_differ=True)
    steps_per_call: int = flag(500, 'Gradient steps fused into one jitted call (lax.scan).', resume_may_differ=True)
    time_limit: int = flag(0, 'Seconds after which the run checkpoints and exits with status 75, for --resume to continue '
                           "(a job scheduler's time limit); 0 = none.", resume_may_differ=True)
    save_dir: str = flag('runs', 'Root directory of run directories.', resume_may_differ=True)
    run_group: str = flag('default', 'Group (sub-directory) of this run; a sweep passes its name.', resume_may_differ=True)
    run_name: str = flag('', 'Run directory name; default <preset>_<env>_sd<seed>, where <preset> gains -<hash of the '
                         'config> when --agent.<key> overrides change it (see docs/logging.md).', resume_may_differ=True)
    dataset_dir: str = flag('~/.ogbench/data', 'Directory of OGBench dataset files.', resume_may_differ=True)
    download: bool = flag(True, "Try OGBench's download when a dataset file is missing.", resume_may_differ=True)
    generate_dataset: bool = flag(False, "When the dataset files are missing, generate them with this project's "
                                  'generator (datagen/) instead of downloading. Only pointmaze is generated unasked; '
                                  "generated antmaze, scene and visual data are NOT OGBench's.", resume_may_differ=True)
    wandb_mode: str = flag('online', 'wandb mode (online falls back to offline without an API key). Not given: wandb\'s '
                           'own WANDB_MODE decides when it is set.',
                           choices=('online', 'offline', 'disabled'), resume_may_differ=True)
    wandb_project: str = flag('byol-gamma', 'wandb project.', resume_may_differ=True)
    resume: bool = flag(False, 'Continue from the checkpoint in the run directory if there is one (with the settings it '
                        'was started with; --train_steps may change).', resume_may_differ=True)


def define_flags(flag_values: flags.FlagValues, argv, agent_config):
    """main.py's flags, in `flag_values`: the fields of `Flags`, and --agent, the agent config (`agent_config`, read
    from the file --agent names), whose fields --agent.<key>=<value> in `argv` override."""
    define_dataclass_flags(Flags, flag_values)
    config_flags.DEFINE_config_dict(
        'agent', agent_config,
        'Agent config: --agent=configs/presets.py:<name>, a preset (every method of the paper; README lists them; '
        'default byol_gamma_a), or an agent file, agents/<name>.py. Any field is overridden with --agent.<key>=<value>.',
        flag_values=flag_values, lock_config=True, sys_argv=list(argv))
    flag_values['agent'].default_as_str = None  # --help names the default preset; --print_config lists a config


def request_of(argv) -> Request:
    """main.py's command line `argv`, parsed and checked (ConfigError / StorageError naming the problem; nothing is
    touched)."""
    flag_values, agent_spec = parse_command_line(argv, define_flags, DEFAULT_AGENT, describe_config=config_listing)
    return check_request(Flags, flag_values, agent_spec, get_agent_class)


def main(argv):
    started = time.monotonic()
    # JAX probes for a TPU at start-up and logs that it found none; nobody here asked for one.
    py_logging.getLogger('jax._src.xla_bridge').setLevel(py_logging.WARNING)
    request = None
    try:
        request = request_of(argv)
        check_jax_backend()
        run(request, started)
    except HelpRequested as e:
        try:
            print(e, flush=True)
        except BrokenPipeError:  # `--print_config | head`: the reader has seen enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        print('\nInterrupted (Ctrl-C) before training started, or twice: stopped without a new checkpoint; '
              'the last checkpoint, if any, is kept (rerun with --resume).', file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except StopNow as e:
        print('\nStopped by a signal before training started: nothing to save.', file=sys.stderr)
        sys.exit(e.code)
    except Stopped as e:
        logging.warning(e.message)
        sys.exit(e.code)
    except Exception as e:
        error = named_error(e, request)
        if error is None:
            raise
        print(f'\nError: {error}', file=sys.stderr)
        sys.exit(1)


def run(request: Request, started: float):
    flags = request.flags
    exit_at_once_on_sigterm()  # before training: nothing to save
    with RunSet.open(request) as runs:
        if runs.already_finished:
            logging.info(f'{", ".join(w.dir for w in runs.writers)}: already finished at step {runs.start_step}; '
                         f'nothing to do.')
            return
        train_path, val_path = ensure_dataset(flags.env_name, flags.dataset_dir, download=flags.download,
                                              generator='datagen', generate=flags.generate_dataset)
        record = provenance.dataset_record(flags.env_name, train_path, val_path)
        runs.check_dataset(record)
        data = Data(request, train_path, val_path)
        state, extras = build_agents(request, data, runs)  # the config's last checks (against the data) come before any write
        runs.begin(record)
        TrainingLoop(request, data, runs, state, started, extras).run()
        runs.finish()
        for writer in runs.writers:
            logging.info(f'Finished: {writer.dir}')


class Data:
    """The dataset on device, the evaluation environments, and example inputs that size the networks."""

    def __init__(self, request: Request, train_path: str, val_path: str):
        flags = request.flags
        check_dataset_fits([train_path, val_path])
        num_envs = max(min(flags.eval_episodes, GYM_EVAL_ENVS), flags.num_seeds)  # gym paths: one env per row
        self.eval_envs = make_eval_envs(flags.env_name, num_envs, num_workers=flags.eval_workers or usable_cpus())
        spaces = env_spaces(self.eval_envs)
        train, val = load_dataset(train_path, *spaces), load_dataset(val_path, *spaces)
        logging.info(f'Loaded {train_path}: {len(train["terminals"])} rows, {int(train["terminals"].sum())} episodes.')
        self.train, self.val = DeviceDataset.from_numpy(**train), DeviceDataset.from_numpy(**val)
        self.largest = {key: float(np.max(np.abs(train[key]))) for key in ('observations', 'actions')
                        if np.issubdtype(train[key].dtype, np.floating)}  # named if the loss turns non-finite
        self.example_observations = example_observations(train['observations'], request.sampler.frame_stack)
        self.example_actions = train['actions'][:1]


def build_agents(request: Request, data: Data, runs: RunSet):
    """One agent per seed, exactly as a single-seed run with that seed would make it, restored from its checkpoint
    when resuming; stacked along a seed axis when there are several. Also what the checkpoints carried besides (one
    dict per seed; empty for a new run)."""
    create = compiled_create(request.agent_class, data.example_observations, data.example_actions, request.config)
    agents, extras = [], []
    for writer in runs.writers:
        agent, extra = create(writer.seed), {}
        if runs.start_step:
            agent, step, extra = load_checkpoint(writer.checkpoint_path, agent)
            logging.info(f'Resumed {writer.dir} from step {step}.')
        agents.append(agent)
        extras.append(extra)
    return (stack_trees(agents) if len(agents) > 1 else agents[0]), extras


# Compiler options for a program that runs once: no XLA optimisations (the same numbers, compiled in a fraction of the
# time).
RUN_ONCE = {'xla_backend_optimization_level': 0, 'xla_llvm_disable_expensive_passes': True}


def compiled_create(agent_class, ex_observations, ex_actions, config):
    """`seed -> agent_class.create(seed, ex_observations, ex_actions, config)`, compiled once (the seed an argument)
    as one program without XLA's optimisations: bit for bit the agent that `create` run op by op makes, where every
    initialiser op is compiled, optimised, on its own (BYOL-gamma^a: 1.8 s instead of 5.9 s; docs/performance.md,
    "Start-up"). Files a `create` reads (a hierarchical agent's stage1_checkpoint) are read while tracing."""
    create = jax.jit(lambda seed, observations, actions: agent_class.create(seed, observations, actions, config))
    compiled = create.lower(np.int32(0), ex_observations, ex_actions).compile(RUN_ONCE)
    return lambda seed: compiled(np.int32(seed), ex_observations, ex_actions)


class TrainingLoop:
    """Chunks of fused updates up to --train_steps, each ending where a log, checkpoint or evaluation falls due; the
    training metrics (kept on the device until a row, runtime/training_metrics.py, and checked finite per chunk);
    everything else around a chunk is the Schedule's."""

    def __init__(self, request: Request, data: Data, runs: RunSet, state, started: float, extras):
        self.request, self.flags, self.data, self.runs, self.state = request, request.flags, data, runs, state
        self.step = runs.start_step
        self.metrics = TrainingMetrics.resumed(self.step, extras)
        seed_keys = lambda name: jnp.stack([stream_key(seed, name) for seed in request.seeds])  # noqa: E731  [N, 2]
        self.data_keys, self.val_keys, self.val_noise_keys, self.eval_seed_keys = (
            seed_keys(n) for n in ('sampling', 'validation', 'validation/noise', 'evaluation'))
        self.stops = StopRequests(self.flags.time_limit, started)
        evaluations = Evaluations(self.evaluate, request.eval_asynchronously(jax.default_backend()), self.stops.requested)
        self.schedule = Schedule(runs, self.flags, evaluations, self.stops, on_stop=self.close_progress,
                                 checkpoint_extras=lambda step: self.metrics.checkpoint_extras(step, len(runs.writers)))
        self.longest_chunk_s = 0.0

    def run(self):
        flags = self.flags
        name = self.runs.writers[0].run_dir.name
        desc = name + (f' (+{len(self.runs.writers) - 1} seeds)' if len(self.runs.writers) > 1 else '')
        self.progress = progress_bar(total=flags.train_steps, initial=self.step, smoothing=0.1, dynamic_ncols=True, desc=desc)
        self.chunk_start_time, self.chunk_start_step = time.monotonic(), self.step
        try:
            self.schedule.start(self.state, self.step)
            while self.step < flags.train_steps:
                self.train_chunk()
                if self.step % flags.log_interval == 0 or self.step == flags.train_steps:
                    self.log_training()
                if self.step % flags.eval_interval == 0 or self.step == flags.train_steps:
                    self.metrics.keep_for_checkpoint()  # a stop during this step's evaluation saves this step
                self.schedule.after_chunk(self.state, self.step, next_chunk_s=2 * self.longest_chunk_s)
            self.schedule.finish(self.state, self.step)
        finally:
            self.schedule.evaluations.cancel()  # an error left one running: end it before the process ends
            self.close_progress()

    def close_progress(self):
        self.progress.close()  # before any message, which would otherwise be followed by the bar

    def train_chunk(self):
        flags, step, started = self.flags, self.step, time.monotonic()
        stop = min(flags.train_steps, step + flags.steps_per_call,
                   *(step // interval * interval + interval for interval in
                     (flags.log_interval, flags.eval_interval, flags.save_interval)))
        if len(self.runs.writers) > 1:
            self.state, infos = train(self.state, self.data.train, self.data_keys, step, stop - step)
        else:  # one seed's agent is not stacked; its metrics get the seed axis of N seeds' [N, steps]
            self.state, infos = train(self.state, self.data.train, self.data_keys[0], step, stop - step)
            infos = {name: values[None] for name, values in infos.items()}
        finite = self.metrics.add(infos)
        for k, writer in enumerate(self.runs.writers):
            bad = None if finite[k] else first_nonfinite({key: np.asarray(v[k]) for key, v in infos.items()})
            if bad is not None:
                raise nonfinite_error(bad, step, writer.seed, writer.checkpoint_path, self.data.largest)
        self.progress.update(stop - step)
        self.step = stop
        self.longest_chunk_s = max(self.longest_chunk_s, time.monotonic() - started)

    def log_training(self):
        steps_per_second = (self.step - self.chunk_start_step) / max(time.monotonic() - self.chunk_start_time, 1e-9)
        self.chunk_start_time, self.chunk_start_step = time.monotonic(), self.step
        rows = self.metrics.row()
        for k, writer in enumerate(self.runs.writers):
            metrics = {f'training/{key}': v for key, v in rows[k].items()}
            val_info = validation_metrics(self.runs.seed_agent(self.state, k), self.data.val,
                                          jax.random.fold_in(self.val_keys[k], self.step),
                                          jax.random.fold_in(self.val_noise_keys[k], self.step))
            metrics.update({f'validation/{key}': float(v) for key, v in val_info.items()})
            metrics['time/steps_per_second'] = steps_per_second
            writer.log_train(metrics, self.step)
        self.progress.set_postfix(loss=f"{np.mean([row['total_loss'] for row in rows]):.3f}")

    def evaluate(self, state, step: int, cancel):
        flags = self.flags
        return evaluate_agents(state, len(self.runs.writers), self.data.eval_envs, self.eval_seed_keys, step,
                               self.request.sampler.frame_stack, task_ids=self.request.eval_tasks,
                               episodes_per_task=flags.eval_episodes, max_steps=flags.eval_max_steps or None,
                               num_video_episodes=flags.video_episodes, cancel=cancel)


def keep_argv(argv):
    """app.run's flag parser: main.py's flags are parsed (purely) by request_of; absl's own keep their defaults."""
    flags.FLAGS.mark_as_parsed()
    return argv


if __name__ == '__main__':
    app.run(main, flags_parser=keep_argv)
