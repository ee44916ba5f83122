"""Train and evaluate one agent on one OGBench dataset.

    python main.py --env_name=pointmaze-medium-stitch-v0 --agent=agents/gcbc.py --agent.batch_size=256

Flag defaults follow the paper's protocol (1M steps, batch 1024, 50 evaluation episodes per task).
Data flows one way: dataset file -> validated arrays on device -> sampler inside the jitted update
-> agent -> metrics; this file orchestrates and never computes a loss.

`train` runs named steps: check_request (every flag and config value, before anything is read or
written) -> lock_run_dirs (one owner per run directory) -> check_run_dirs (checkpoint, --resume
against the recorded settings) -> locate_data -> begin_runs (metadata, DONE of an extension removed)
-> load_data -> build_agents (create or restore) -> Trainer.run (chunks of fused steps; at each
boundary: log, save, then evaluate) -> finish. The guarantees they give are in docs/guarantees.md.
"""

import dataclasses
import datetime
import errno
import json
import os
import signal
import sys
import time
from typing import Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from absl import app, flags, logging
from ml_collections import config_flags

import datagen
from agents import get_agent_class
from utils import provenance
from utils.checkpoints import checkpoint_step, load_checkpoint, save_checkpoint
from utils.config_checks import check_override_keys, check_types, load_config_file, validate_config
from utils.datasets import check_dataset_fits, ensure_dataset, env_id_for, load_dataset, num_tasks
from utils.errors import (ConfigError, DatasetError, DeviceMemoryError, EvaluationError, NonFiniteLossError,
                          ResumeMismatchError, RunDirError, StorageError, is_out_of_memory)
from utils.evaluation import env_spaces, evaluate_seeds, make_eval_envs, seeds_policy, usable_cpus, videos_to_wandb
from utils.loggers import CsvLogger, WandbLogger
from utils.rundir import CONFIG_FILE, FLAGS_FILE, RunDir, default_run_name, lock_all
from utils.sampler import DeviceDataset, SamplerConfig, example_observations
from utils.training import compiled_create, stack_trees, train_steps, train_steps_multi, validation_metrics

FLAGS = flags.FLAGS
_ABSL_FLAGS = set(FLAGS)
flags.DEFINE_string('env_name', 'pointmaze-medium-stitch-v0', 'OGBench dataset name, e.g. antmaze-medium-stitch-v0.')
flags.DEFINE_integer('seed', 0, 'Random seed (network init, sampling, evaluation).')
flags.DEFINE_integer('num_seeds', 1, 'Train seeds seed..seed+N-1 in one process, vmapped (one run directory each).')
flags.DEFINE_integer('train_steps', 1_000_000, 'Number of gradient steps.')
flags.DEFINE_integer('log_interval', 5000, 'Steps between training-metric logs.')
flags.DEFINE_integer('eval_interval', 100_000, 'Steps between evaluations (and one at the end).')
flags.DEFINE_integer('eval_episodes', 50, 'Evaluation episodes per task.')
flags.DEFINE_string('eval_tasks', '1,2,3,4,5', 'Comma-separated OGBench task ids to evaluate on.')
flags.DEFINE_integer('eval_max_steps', 0, 'Episode step limit at evaluation; 0 = the environment time limit.')
flags.DEFINE_integer('eval_workers', 0, 'Evaluation parallelism: threads stepping the episodes natively (point/ant/humanoid mazes), else processes (this one and N-1 workers); 0 = one per usable CPU core, 1 = all in this thread.')
flags.DEFINE_integer('video_episodes', 0, 'Episodes per task rendered to wandb video (needs MUJOCO_GL=egl).')
flags.DEFINE_integer('save_interval', 100_000, 'Steps between checkpoints (and one at the end).')
flags.DEFINE_integer('steps_per_call', 500, 'Gradient steps fused into one jitted call (lax.scan).')
flags.DEFINE_string('save_dir', 'runs', 'Root directory of run directories.')
flags.DEFINE_string('run_group', 'default', 'Group (sub-directory and wandb group) of this run.')
flags.DEFINE_string('run_name', '', 'Run directory name; default <agent>_<env>_sd<seed>.')
flags.DEFINE_string('dataset_dir', '~/.ogbench/data', 'Directory of OGBench dataset files.')
flags.DEFINE_bool('download', True, "Try OGBench's download when a dataset file is missing.")
flags.DEFINE_bool('generate_dataset', False, "When the dataset files are missing, generate them with this project's "
                  "generator (datagen/) instead of downloading. Only pointmaze is generated unasked; generated antmaze, "
                  "scene and visual data are NOT OGBench's.")
flags.DEFINE_enum('wandb_mode', 'online', ['online', 'offline', 'disabled'], 'wandb mode (online falls back to offline without an API key).')
flags.DEFINE_string('wandb_project', 'byol-gamma', 'wandb project.')
flags.DEFINE_bool('resume', False, 'Continue from the checkpoint in the run directory if there is one (with the '
                  'settings it was started with; --train_steps may change).')
DEFAULT_AGENT = 'agents/byol_gamma.py'
if __name__ == '__main__':
    # ml_collections applies --agent.<key> overrides while defining the flag, and an unknown key
    # there is a bare KeyError traceback: check the keys first.
    try:
        check_override_keys(sys.argv[1:], DEFAULT_AGENT)
    except ConfigError as e:
        sys.exit(f'Error: {e}')
config_flags.DEFINE_config_file('agent', DEFAULT_AGENT, 'Agent config file (agents/<name>.py).', lock_config=True)
RUN_FLAGS = sorted(set(FLAGS) - _ABSL_FLAGS - {'agent'})

# --resume continues a run only with the settings it was started with. These flags may differ: they
# change neither what is computed nor what an evaluation number means (paths, how missing data are
# obtained -- the data themselves are compared through dataset.json --, logging, checkpoint interval,
# wandb, parallelism). --train_steps may change but not fall below the checkpoint's step. Every other
# flag (env, seed, the evaluation protocol, and any flag added later) and every agent config value must match.
RESUME_MAY_DIFFER = frozenset({
    'save_dir', 'run_group', 'run_name', 'dataset_dir', 'download', 'generate_dataset',
    'log_interval', 'video_episodes', 'save_interval', 'wandb_mode', 'wandb_project',
    'num_seeds', 'eval_workers', 'steps_per_call', 'resume',
})

PREEMPTED_EXIT_CODE = 143  # SIGTERM: checkpoint saved
INTERRUPTED_EXIT_CODE = 130  # SIGINT (Ctrl-C): checkpoint saved, or nothing to save yet
MAX_SEED = 2**31 - 1  # jax.random.PRNGKey keeps 32 bits: larger seeds would alias smaller ones
# What a failed write means and what to do, by errno.
STORAGE_ERRNOS = {
    errno.ENOSPC: ('the disk is full', 'free space'),
    errno.EDQUOT: ('the disk quota is exhausted', 'free space or raise the quota'),
    errno.EFBIG: ('the file-size limit was reached', 'raise the limit (ulimit -f)'),
    errno.EROFS: ('the file system is read-only', 'use a folder you can write (--save_dir; --dataset_dir for data)'),
    errno.EACCES: ('permission denied', 'use a folder you can write (--save_dir; --dataset_dir for data)'),
    errno.EPERM: ('the operation is not permitted', 'use a folder you can write (--save_dir; --dataset_dir for data)'),
    errno.ENOTDIR: ('a part of the path is a file, not a directory', 'pass folders that are directories'),
}


class StopNow(BaseException):
    """A signal before training started: there is nothing to save, exit with `code`."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def main(_):
    try:
        train()
    except (ConfigError, DatasetError, NonFiniteLossError, EvaluationError, StorageError, DeviceMemoryError) as e:
        fail(e)
    except OSError as e:
        if e.errno not in STORAGE_ERRNOS:
            raise
        fail(storage_error(e))
    except KeyboardInterrupt:
        print('\nInterrupted (Ctrl-C) before training started, or twice: stopped without a new checkpoint; '
              'the last checkpoint, if any, is kept (rerun with --resume).', file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT_CODE)
    except StopNow as e:
        print('\nStopped by a signal before training started: nothing to save.', file=sys.stderr)
        sys.exit(e.code)
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        fail(out_of_memory_error(e))


def fail(error: Exception):
    print(f'\nError: {error}', file=sys.stderr)
    sys.exit(1)


def storage_error(e: OSError) -> StorageError:
    cause, fix = STORAGE_ERRNOS[e.errno]
    return StorageError(
        f'Cannot write {e.filename or "a file"}: {cause} ({e.strerror}). Files are written atomically, so nothing '
        f'was left half-written: any checkpoint already saved, and the logs up to it, are intact. '
        f'{fix[0].upper() + fix[1:]}, then rerun (with --resume to continue from the last checkpoint).'
    )


def out_of_memory_error(e: BaseException) -> DeviceMemoryError:
    device = jax.devices()[0]
    first_line = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
    return DeviceMemoryError(
        f'Out of memory on the {device.platform.upper()} ({device.device_kind}) with --agent.batch_size='
        f'{FLAGS.agent.batch_size} and --num_seeds={FLAGS.num_seeds} (XLA: {first_line[:300]}). Nothing computed was '
        f'lost: the last checkpoint, if any, is kept. Use a smaller --agent.batch_size or --num_seeds (or smaller '
        f'networks), or a device with more memory.'
    )


# ----------------------------------------------------------------------------------------------
# check_request: every flag and config value, before anything is read from or written to disk.


@dataclasses.dataclass
class Request:
    """What the command line asks for, checked."""

    config: object  # the agent's ml_collections ConfigDict
    agent_class: type
    sampler_config: SamplerConfig
    seeds: List[int]
    eval_tasks: Tuple[int, ...]
    flags: Dict[str, object]  # RUN_FLAGS and their values
    config_defaults: Dict[str, object]  # the config file's own values, before --agent.<key> overrides

    def seed_flags(self, seed: int) -> Dict[str, object]:
        return dict(self.flags, seed=seed)

    def config_record(self) -> Dict[str, object]:
        """config.json's content: the agent config, plus the sampler it implies under 'sampler'."""
        return plain(dict(self.config.to_dict(), sampler=dataclasses.asdict(self.sampler_config)))


def plain(value):
    """`value` as JSON gives it back (tuples become lists), for comparing with a recorded file."""
    return json.loads(json.dumps(value, default=str))


def check_request() -> Request:
    eval_tasks = check_flags()
    config = FLAGS.agent
    defaults = load_config_file(config_flags.get_config_filename(FLAGS['agent']))
    check_types(config, defaults)
    agent_class = get_agent_class(config.agent_name)
    validate_config(config, getattr(agent_class, 'CONFIG_RULES', None))
    env_id_for(FLAGS.env_name)
    check_eval_tasks(eval_tasks, num_tasks(FLAGS.env_name))
    save_dir = os.path.expanduser(FLAGS.save_dir)
    if os.path.exists(save_dir) and not os.path.isdir(save_dir):
        raise StorageError(f'--save_dir={FLAGS.save_dir} is a file, not a directory: run directories cannot go there '
                           f'(nothing was written). Pass a directory (it is created if missing).')
    return Request(config, agent_class, SamplerConfig.from_config(config), [FLAGS.seed + k for k in range(FLAGS.num_seeds)],
                   eval_tasks, {name: FLAGS[name].value for name in RUN_FLAGS}, plain(defaults.to_dict()))


def check_flags() -> Tuple[int, ...]:
    for name in ('num_seeds', 'train_steps', 'log_interval', 'eval_interval', 'eval_episodes', 'save_interval', 'steps_per_call'):
        if FLAGS[name].value <= 0:
            raise ConfigError(f'--{name} must be positive, got {FLAGS[name].value}.')
    if FLAGS.eval_workers < 0:
        raise ConfigError(f'--eval_workers must be 0 (one per usable core) or a positive count, got {FLAGS.eval_workers}.')
    if FLAGS.eval_max_steps < 0:
        raise ConfigError(f'--eval_max_steps must be 0 (the environment\'s time limit) or a positive step cap, got {FLAGS.eval_max_steps}.')
    if FLAGS.video_episodes < 0:
        raise ConfigError(f'--video_episodes must be 0 or positive, got {FLAGS.video_episodes}.')
    if not 0 <= FLAGS.seed <= MAX_SEED - FLAGS.num_seeds + 1:
        raise ConfigError(f'--seed must lie in 0..{MAX_SEED - FLAGS.num_seeds + 1} (with --num_seeds={FLAGS.num_seeds}; '
                          f'JAX keys keep 32 bits), got {FLAGS.seed}.')
    for name in ('run_group', 'run_name'):
        value = FLAGS[name].value
        if os.sep in value or value in ('.', '..') or (name == 'run_group' and not value):
            raise ConfigError(f'--{name} must be one directory name (no "{os.sep}", not "." or ".."), got {value!r}.')
    try:
        tasks = tuple(int(t) for t in FLAGS.eval_tasks.split(','))
    except ValueError:
        raise ConfigError(f'--eval_tasks must be comma-separated integers like 1,2,3,4,5, got {FLAGS.eval_tasks!r}.') from None
    if len(set(tasks)) != len(tasks):
        raise ConfigError(f'--eval_tasks lists a task twice: {FLAGS.eval_tasks!r}.')
    return tasks


def check_eval_tasks(tasks: Tuple[int, ...], count: int):
    bad = [t for t in tasks if not 1 <= t <= count]
    if bad:
        raise ConfigError(f'--eval_tasks={FLAGS.eval_tasks}: {FLAGS.env_name} has tasks 1..{count}, so '
                          f'{", ".join(map(str, bad))} {"is" if len(bad) == 1 else "are"} out of range.')


# ----------------------------------------------------------------------------------------------
# Run directories: one RunWriter per seed owns (locks), checks, and writes its directory.


def next_boundary(step: int, interval: int) -> int:
    return (step // interval + 1) * interval


def run_directory(seed: int) -> RunDir:
    if FLAGS.run_name:
        name = FLAGS.run_name if FLAGS.num_seeds == 1 else f'{FLAGS.run_name}_sd{seed}'
    else:
        name = default_run_name(FLAGS.agent.agent_name, FLAGS.env_name, seed)
    return RunDir.at(FLAGS.save_dir, FLAGS.run_group, name)


def flatten(record: Dict, prefix: str = '') -> Dict[str, object]:
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f'{prefix}{key}.'))
        else:
            flat[prefix + key] = value
    return flat


_ABSENT = '(absent)'


class RunWriter:
    """What one seed writes: its run directory, CSV logs, wandb run and recent evaluations.

    With --num_seeds N every seed gets its own directory, laid out exactly like a single-seed run,
    so sweeps, results tables and analyses treat both alike.
    """

    def __init__(self, seed: int):
        self.seed = seed
        self.run_dir = run_directory(seed)
        self.dir = self.run_dir.path
        self.checkpoint_path = self.run_dir.checkpoint_path
        self.recorded_flags: Optional[Dict] = None  # flags.json of the run being resumed
        self.start_step = 0
        self.lock = None  # the RunLock held while this process lives

    # --- check_run_dirs: reads only ---

    def check(self, request: Request) -> int:
        """The step this seed starts from (its checkpoint's when resuming), or a RunDirError."""
        run_dir = self.run_dir
        if not FLAGS.resume:
            if run_dir.has_checkpoint() or run_dir.is_done():
                raise RunDirError(
                    f'Run directory {self.dir} already holds a {"finished run" if run_dir.is_done() else "checkpoint"}. '
                    f'Pass --resume to continue it, or choose another --run_name / --run_group (nothing was overwritten).'
                )
            return 0
        if not run_dir.has_checkpoint():
            if run_dir.is_done():
                raise RunDirError(f'{self.dir} is marked DONE but has no checkpoint to continue from. Choose another '
                                  f'--run_name, or move the directory away to start over.')
            return 0
        self.start_step = checkpoint_step(self.checkpoint_path)
        self.check_same_run(request)
        return self.start_step

    def check_same_run(self, request: Request):
        missing = self.run_dir.missing((FLAGS_FILE, CONFIG_FILE))
        if missing:
            raise RunDirError(f'{self.dir} has a checkpoint but no {" or ".join(missing)}, so --resume cannot check '
                              f'that it continues the same run. Restore the file(s), or start a new --run_name.')
        self.recorded_flags = self.run_dir.read_flags()
        differences = self.flag_differences(request) + self.config_differences(request)
        if differences:
            raise ResumeMismatchError(
                f'--resume would continue {self.dir} with settings it was not started with, mixing two runs in one '
                f'directory. Differences (recorded -> requested): {"; ".join(differences)}. Pass the recorded values '
                f'(or drop those flags) to continue this run, or start a new run with another --run_name (or '
                f'--run_group). Paths, logging, checkpoint, wandb and parallelism flags may differ; --train_steps may '
                f'change but not fall below the checkpoint\'s step.'
            )
        if FLAGS.train_steps < self.start_step:
            raise ResumeMismatchError(
                f'--train_steps={FLAGS.train_steps} is below the step of the checkpoint in {self.dir} '
                f'({self.start_step}; the run was started with --train_steps={self.recorded_flags.get("train_steps")}). '
                f'Pass --train_steps={self.start_step} or more to continue or extend it, or start a new --run_name for '
                f'a shorter run.'
            )

    def flag_differences(self, request: Request) -> List[str]:
        """Flags that must match and do not. A flag the run predates matches at its default value."""
        recorded, requested = plain(self.recorded_flags), plain(request.seed_flags(self.seed))
        differences = []
        for name in sorted(set(recorded) | set(requested)):
            if name in RESUME_MAY_DIFFER or name == 'train_steps':
                continue
            old, new = recorded.get(name, _ABSENT), requested.get(name, _ABSENT)
            if old is _ABSENT and name in FLAGS and new == plain(FLAGS[name].default):
                continue
            if name == 'eval_tasks' and _ABSENT not in (old, new):
                same = [t.strip() for t in str(old).split(',')] == [t.strip() for t in str(new).split(',')]
            else:
                same = old == new
            if not same:
                differences.append(f'--{name}: {old} -> {new}')
        return differences

    def config_differences(self, request: Request) -> List[str]:
        """Config values (and the sampler derived from them) that differ. A key the run predates matches
        at the config file's default; a derived sampler field it predates is not compared."""
        recorded, requested = flatten(plain(self.run_dir.read_config())), flatten(request.config_record())
        defaults = flatten(request.config_defaults)
        differences = []
        for key in sorted(set(recorded) | set(requested)):
            old, new = recorded.get(key, _ABSENT), requested.get(key, _ABSENT)
            if old is _ABSENT and (key.startswith('sampler.') or (key in defaults and new == defaults[key])):
                continue
            if old != new:
                name = f'{key} (derived from the agent config)' if key.startswith('sampler.') else f'--agent.{key}'
                differences.append(f'{name}: {old} -> {new}')
        return differences

    def check_dataset(self, record: Dict):
        recorded = self.run_dir.read_dataset_record() if self.recorded_flags is not None else None
        differences = provenance.record_differences(recorded, record) if recorded else []
        if differences:
            raise ResumeMismatchError(
                f'--resume would continue {self.dir} on other data than it was trained on: {"; ".join(differences)}. '
                f'Point --dataset_dir at the files the run used, or start a new --run_name.'
            )

    # --- begin_runs: the first writes ---

    def begin(self, request: Request, dataset: Dict):
        """Record what this run is before it loads anything: a new run's flags.json, config.json and
        dataset.json; for a resumed one, only a changed --train_steps (and DONE goes, if it grows past
        the checkpoint) plus a resumes.json entry listing the flags that differ."""
        if self.recorded_flags is None:
            self.flags = request.seed_flags(self.seed)
            self.run_dir.write_metadata(self.flags, request.config_record())
            self.run_dir.write_dataset_record(dataset)
            return
        self.flags = dict(self.recorded_flags, train_steps=FLAGS.train_steps)
        if FLAGS.train_steps > self.start_step:
            self.run_dir.clear_done()
        if self.recorded_flags.get('train_steps') != FLAGS.train_steps:
            self.run_dir.write_metadata(self.flags, self.run_dir.read_config())
        if self.run_dir.read_dataset_record() is None:
            self.run_dir.write_dataset_record(dict(dataset, recorded_at_step=self.start_step))
        requested = plain(request.seed_flags(self.seed))
        changed = {name: [self.recorded_flags.get(name), requested[name]] for name in sorted(RESUME_MAY_DIFFER | {'train_steps'})
                   if name in requested and plain(self.recorded_flags.get(name)) != requested[name]}
        self.run_dir.add_resume_record(dict(
            at=datetime.datetime.now().astimezone().isoformat(timespec='seconds'), from_step=self.start_step,
            train_steps=FLAGS.train_steps, changed_flags=changed))

    # --- logs ---

    def open_logs(self, start_step: int, config):
        self.train_log = CsvLogger(self.run_dir.train_log_path)
        self.eval_log = CsvLogger(self.run_dir.eval_log_path)
        self.train_log.truncate_after(start_step)
        self.eval_log.truncate_after(start_step)
        rows = self.eval_log.rows()
        self.evaluated_steps = {int(r['step']) for r in rows}
        self.recent_success = [float(r['evaluation/overall_success']) for r in rows][-2:]
        self.wandb = WandbLogger(
            FLAGS.wandb_mode, FLAGS.wandb_project, FLAGS.run_group, os.path.basename(self.dir),
            dict(self.flags, agent=config.to_dict()), self.dir, FLAGS.resume,
        )

    def log_train(self, metrics, step):
        self.train_log.log(metrics, step)
        self.wandb.log(metrics, step)

    def log_eval(self, metrics, step):
        self.recent_success = (self.recent_success + [metrics['evaluation/overall_success']])[-3:]
        metrics['evaluation/overall_success_last3'] = float(np.mean(self.recent_success))
        self.eval_log.log(metrics, step)
        self.evaluated_steps.add(step)
        self.wandb.log(metrics, step)

    def finish(self, done: bool):
        self.wandb.finish()
        if done:
            self.run_dir.mark_done()


def lock_run_dirs(request: Request) -> List[RunWriter]:
    """A writer per seed, each owning (locking) its run directory until this process exits; a
    RunLockedError naming the holder if another process owns one of them."""
    writers = [RunWriter(seed) for seed in request.seeds]
    for writer, lock in zip(writers, lock_all([w.run_dir for w in writers])):
        writer.lock = lock
    return writers


def check_run_dirs(request: Request, writers: List[RunWriter]) -> int:
    """The common start step of the seeds (0 for a new run)."""
    steps = [writer.check(request) for writer in writers]
    if len(set(steps)) > 1:
        raise RunDirError(
            f'Seeds {request.seeds} have checkpoints at different steps {steps}; resume them as separate runs '
            f'(--num_seeds=1 --seed=...), or move the lagging run directories away.'
        )
    return steps[0]


def already_finished(writers: List[RunWriter], start_step: int) -> bool:
    return FLAGS.resume and start_step == FLAGS.train_steps and all(w.run_dir.is_done() for w in writers)


def locate_data(request: Request, writers: List[RunWriter]) -> Tuple[str, str, Dict]:
    """The dataset files (found, downloaded or generated) and their record; a resumed run must find the
    very files it was trained on."""
    train_path, val_path = ensure_dataset(FLAGS.env_name, FLAGS.dataset_dir, download=FLAGS.download, generator=datagen,
                                          generate=FLAGS.generate_dataset)
    record = provenance.dataset_record(FLAGS.env_name, train_path, val_path)
    for writer in writers:
        writer.check_dataset(record)
    return train_path, val_path, record


def begin_runs(request: Request, writers: List[RunWriter], dataset: Dict):
    for writer in writers:
        writer.begin(request, dataset)


# ----------------------------------------------------------------------------------------------
# Data and agents.


@dataclasses.dataclass
class Data:
    train: DeviceDataset
    val: DeviceDataset
    eval_envs: object
    example_observations: np.ndarray
    example_actions: np.ndarray


def load_data(request: Request, train_path: str, val_path: str) -> Data:
    """Validated numpy arrays -> device, and the evaluation environments."""
    check_dataset_fits([train_path, val_path])
    # Gym-stepped envs (those the native stepper does not support) need one env per seed at least.
    eval_envs = make_eval_envs(FLAGS.env_name, max(FLAGS.eval_episodes, FLAGS.num_seeds), num_workers=FLAGS.eval_workers or usable_cpus())
    spaces = env_spaces(eval_envs)
    train_np, val_np = load_dataset(train_path, *spaces), load_dataset(val_path, *spaces)
    logging.info(f'Loaded {train_path}: {len(train_np["terminals"])} rows, {int(train_np["terminals"].sum())} episodes.')
    return Data(DeviceDataset.from_numpy(**train_np), DeviceDataset.from_numpy(**val_np), eval_envs,
                example_observations(train_np['observations'], request.sampler_config.frame_stack), train_np['actions'][:1])


def build_agents(request: Request, data: Data, writers: List[RunWriter], start_step: int):
    """One agent per seed, exactly as a single-seed run with that seed would make it, restored from its
    checkpoint when resuming; stacked along a seed axis when there are several."""
    create = compiled_create(request.agent_class, data.example_observations, data.example_actions, request.config)
    agents = []
    for writer in writers:
        agent = create(writer.seed)
        if start_step:
            agent, step, _ = load_checkpoint(writer.checkpoint_path, agent)
            logging.info(f'Resumed {writer.dir} from step {step}.')
        agents.append(agent)
    return stack_trees(agents) if len(agents) > 1 else agents[0]


# ----------------------------------------------------------------------------------------------
# The training loop.


def first_nonfinite(infos, start_step):
    """(step, metric) of the first non-finite metric in a chunk's stacked infos, or None."""
    bad = None
    for key, values in infos.items():
        values = np.asarray(values)
        idx = np.flatnonzero(~np.isfinite(values))
        if len(idx) and (bad is None or idx[0] < bad[0]):
            bad = (int(idx[0]), key)
    return None if bad is None else (start_step + bad[0] + 1, bad[1])


class StopSignals:
    """SIGTERM (preemption) and SIGINT (Ctrl-C) during training: finish the current chunk, save a
    checkpoint, exit 143 or 130. A second Ctrl-C aborts at once, without saving."""

    EXIT_CODES = {signal.SIGTERM: PREEMPTED_EXIT_CODE, signal.SIGINT: INTERRUPTED_EXIT_CODE}

    def __init__(self):
        self.received = None

    def install(self):
        for sig in self.EXIT_CODES:
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = self.received or signum

    @property
    def requested(self) -> bool:
        return self.received is not None


class Trainer:
    """Chunks of fused steps; at every chunk's end, in this order: non-finite check, training log,
    checkpoint (when due, or when a stop was asked), evaluation (when due). A checkpoint therefore
    never waits on an evaluation, and a failed evaluation saves one before stopping."""

    def __init__(self, request: Request, data: Data, writers: List[RunWriter], state, start_step: int):
        self.request, self.data, self.writers, self.state = request, data, writers, state
        self.sampler_config = request.sampler_config
        self.multi = len(writers) > 1
        keys = np.stack([np.asarray(jax.random.split(jax.random.PRNGKey(seed), 3)) for seed in request.seeds])  # [N, 3, 2]
        self.data_keys, self.val_keys, self.eval_seed_keys = (jnp.asarray(keys[:, i]) for i in range(3))
        self.step = start_step
        self.saved_step = start_step if start_step else None  # a resumed run's checkpoint is at its start step
        self.stops = StopSignals()
        self.recorded_train_steps = {w.recorded_flags.get('train_steps') for w in writers if w.recorded_flags}

    def seed_agent(self, k):
        return jax.tree_util.tree_map(lambda x: x[k], self.state) if self.multi else self.state

    def run(self):
        self.stops.install()
        desc = os.path.basename(self.writers[0].dir) + (f' (+{len(self.writers) - 1} seeds)' if self.multi else '')
        self.progress = tqdm.tqdm(total=FLAGS.train_steps, initial=self.step, smoothing=0.1, dynamic_ncols=True, desc=desc)
        self.chunk_start_time, self.chunk_start_step = time.time(), self.step
        try:
            self.evaluate_pending()
            while self.step < FLAGS.train_steps:
                infos = self.train_chunk()
                if self.step % FLAGS.log_interval == 0 or self.step == FLAGS.train_steps:
                    self.log_training(infos)
                if self.step % FLAGS.save_interval == 0 or self.step == FLAGS.train_steps or self.stops.requested:
                    self.save()
                if self.stops.requested:
                    self.stop()
                if self.step % FLAGS.eval_interval == 0 or self.step == FLAGS.train_steps:
                    self.evaluate_and_log()
                if self.stops.requested:
                    self.stop()
        finally:
            self.progress.close()  # before any error message, which would otherwise be followed by the bar

    def evaluate_pending(self):
        """A resumed run whose checkpoint step was due an evaluation that never got logged (the run was
        stopped or failed right after saving) runs it first: it gives what it would have given then."""
        step = self.step
        due = step > 0 and (step % FLAGS.eval_interval == 0 or step == FLAGS.train_steps or step in self.recorded_train_steps)
        if due and any(step not in w.evaluated_steps for w in self.writers):
            logging.info(f'Running the evaluation of step {step} that was due before the run stopped.')
            self.evaluate_and_log()

    def train_chunk(self):
        step = self.step
        stop = min(
            FLAGS.train_steps, step + FLAGS.steps_per_call, next_boundary(step, FLAGS.log_interval),
            next_boundary(step, FLAGS.eval_interval), next_boundary(step, FLAGS.save_interval),
        )
        try:
            if self.multi:
                self.state, infos = train_steps_multi(self.state, self.data.train, self.data_keys, step, self.sampler_config, stop - step)
            else:
                self.state, infos = train_steps(self.state, self.data.train, self.data_keys[0], step, self.sampler_config, stop - step)
                infos = jax.tree_util.tree_map(lambda x: x[None], infos)
            infos = jax.device_get(infos)  # [N, steps] per metric: one transfer per chunk
        except Exception as e:
            if is_out_of_memory(e):
                raise out_of_memory_error(e) from e
            raise
        for k, writer in enumerate(self.writers):
            bad = first_nonfinite({key: v[k] for key, v in infos.items()}, step)
            if bad is not None:
                raise NonFiniteLossError(
                    f'Non-finite {bad[1]} at step {bad[0]} (seed {writer.seed}): training stopped. The last good '
                    f'checkpoint ({writer.checkpoint_path}, if any) was kept. Try a lower --agent.lr or auxiliary '
                    f'weight (alpha), then rerun with --resume.'
                )
        self.progress.update(stop - step)
        self.step = stop
        return infos

    def log_training(self, infos):
        steps_per_second = (self.step - self.chunk_start_step) / max(time.time() - self.chunk_start_time, 1e-9)
        self.chunk_start_time, self.chunk_start_step = time.time(), self.step
        for k, writer in enumerate(self.writers):
            metrics = {f'training/{key}': float(np.mean(v[k])) for key, v in infos.items()}
            val_info = validation_metrics(self.seed_agent(k), self.data.val, jax.random.fold_in(self.val_keys[k], self.step), self.sampler_config)
            metrics.update({f'validation/{key}': float(v) for key, v in val_info.items()})
            metrics['time/steps_per_second'] = steps_per_second
            writer.log_train(metrics, self.step)
        self.progress.set_postfix(loss=f"{np.mean(infos['total_loss'][:, -1]):.3f}")

    def save(self):
        for k, writer in enumerate(self.writers):
            save_checkpoint(writer.dir, self.seed_agent(k), self.step)
        self.saved_step = self.step

    def stop(self):
        if self.saved_step != self.step:
            self.save()
        self.progress.close()  # before the message
        name = signal.Signals(self.stops.received).name
        logging.warning(f'{name} received: checkpoints saved at step {self.step}; rerun with --resume.')
        for writer in self.writers:
            writer.finish(done=False)
        sys.exit(StopSignals.EXIT_CODES[self.stops.received])

    def evaluate_and_log(self):
        try:
            per_seed = self.evaluate_seeds()
        except Exception as e:
            if self.saved_step != self.step:
                self.save()
            cause = str(e).strip().splitlines()[0] if str(e).strip() else ''
            raise EvaluationError(
                f'The evaluation at step {self.step} failed ({type(e).__name__}: {cause[:500]}). Training up to step '
                f'{self.step} is kept: the checkpoint of step {self.step} is saved in {", ".join(w.dir for w in self.writers)}. '
                f'Fix the cause (see any output above), then rerun with --resume: the evaluation of step {self.step} runs '
                f'first. --eval_workers=1 evaluates in this process, without worker processes.'
            ) from e
        for writer, metrics in zip(self.writers, per_seed):
            if self.step in writer.evaluated_steps:
                continue  # a pending evaluation that only some seeds missed
            writer.log_eval(metrics, self.step)
            tqdm.tqdm.write(f'seed {writer.seed} step {self.step}: success {metrics["evaluation/overall_success"]:.3f} ' + ' '.join(
                f'{key.split("/")[-1]}={v:.2f}' for key, v in metrics.items() if '/task' in key))

    def evaluate_seeds(self) -> List[Dict]:
        """The evaluation metrics of every seed at this step (nothing is logged until all succeeded): all seeds'
        episodes step together in one lockstep batch, each seed's results those of its own evaluation."""
        eval_seeds = [int(jax.random.randint(jax.random.fold_in(self.eval_seed_keys[k], self.step), (), 0, 2**31 - 1))
                      for k in range(len(self.writers))]
        seed_results = evaluate_seeds(
            seeds_policy(self.state, len(self.writers), self.sampler_config.frame_stack), self.data.eval_envs, eval_seeds,
            task_ids=self.request.eval_tasks, episodes_per_task=FLAGS.eval_episodes, max_steps=FLAGS.eval_max_steps or None,
            num_video_episodes=FLAGS.video_episodes,
        )
        per_seed = []
        for results in seed_results:
            metrics = {key: float(v) for key, v in results.items() if key.startswith('evaluation/')}
            if results.get('videos'):
                metrics['evaluation/video'] = videos_to_wandb(results['videos'])
            per_seed.append(metrics)
        return per_seed


# ----------------------------------------------------------------------------------------------


def stop_now(signum, _frame):
    raise StopNow(StopSignals.EXIT_CODES.get(signum, PREEMPTED_EXIT_CODE))


def train():
    signal.signal(signal.SIGTERM, stop_now)  # before training: nothing to save, exit at once (143)
    request = check_request()
    writers = lock_run_dirs(request)
    start_step = check_run_dirs(request, writers)
    if already_finished(writers, start_step):
        logging.info(f'{", ".join(w.dir for w in writers)}: already finished at step {start_step}; nothing to do.')
        return
    train_path, val_path, dataset = locate_data(request, writers)
    begin_runs(request, writers, dataset)
    data = load_data(request, train_path, val_path)
    state = build_agents(request, data, writers, start_step)
    for writer in writers:
        writer.open_logs(start_step, request.config)
    Trainer(request, data, writers, state, start_step).run()
    for writer in writers:
        writer.finish(done=True)
        logging.info(f'Finished: {writer.dir}')


if __name__ == '__main__':
    app.run(main)
