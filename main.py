"""Train and evaluate one agent on one OGBench dataset.

    python main.py --env_name=pointmaze-medium-stitch-v0 --agent=agents/gcbc.py --agent.batch_size=256

Flag defaults follow the paper's protocol (1M steps, batch 1024, 50 evaluation episodes per task).
Data flows one way: dataset file -> validated arrays on device -> sampler inside the jitted update
-> agent -> metrics; this file orchestrates and never computes a loss.
"""

import dataclasses
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from absl import app, flags, logging
from ml_collections import config_flags

from agents import get_agent_class
from utils.checkpoints import load_checkpoint, save_checkpoint
from utils.config_checks import check_override_keys, check_types, load_config_file, validate_config
from utils.datasets import check_dataset_fits, ensure_dataset, env_id_for, load_dataset
from utils.errors import ConfigError, DatasetError, NonFiniteLossError
from utils.evaluation import env_spaces, evaluate_seeds, make_eval_envs, seeds_policy, usable_cpus, videos_to_wandb
from utils.loggers import CsvLogger, WandbLogger
from utils.rundir import RunDir, default_run_name
from utils.sampler import DeviceDataset, SamplerConfig, example_observations
from utils.training import stack_trees, train_steps, train_steps_multi, validation_metrics

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
flags.DEFINE_enum('wandb_mode', 'online', ['online', 'offline', 'disabled'], 'wandb mode (online falls back to offline without an API key).')
flags.DEFINE_string('wandb_project', 'byol-gamma', 'wandb project.')
flags.DEFINE_bool('resume', False, 'Continue from the checkpoint in the run directory if there is one.')
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

PREEMPTED_EXIT_CODE = 143


def next_boundary(step: int, interval: int) -> int:
    return (step // interval + 1) * interval


def run_directory(seed: int) -> RunDir:
    if FLAGS.run_name:
        name = FLAGS.run_name if FLAGS.num_seeds == 1 else f'{FLAGS.run_name}_sd{seed}'
    else:
        name = default_run_name(FLAGS.agent.agent_name, FLAGS.env_name, seed)
    return RunDir.at(FLAGS.save_dir, FLAGS.run_group, name)


class SeedRun:
    """What one seed writes: its run directory, CSV logs, wandb run and recent evaluations.

    With --num_seeds N every seed gets its own directory, laid out exactly like a single-seed run,
    so sweeps, results tables and analyses treat both alike.
    """

    def __init__(self, seed: int, run_flags: dict, config):
        self.seed = seed
        self.run_dir = run_directory(seed)
        self.dir = self.run_dir.path
        self.checkpoint_path = self.run_dir.checkpoint_path
        if self.run_dir.has_checkpoint() and not FLAGS.resume:
            raise FileExistsError(
                f'Run directory {self.dir} already holds a checkpoint. Pass --resume to continue it, or choose '
                f'another --run_name / --run_group (nothing was overwritten).'
            )
        self.flags = dict(run_flags, seed=seed)
        self.config = config

    def open_logs(self, start_step: int, sampler_config):
        self.run_dir.write_metadata(self.flags, dict(self.config.to_dict(), sampler=dataclasses.asdict(sampler_config)))
        self.train_log = CsvLogger(self.run_dir.train_log_path)
        self.eval_log = CsvLogger(self.run_dir.eval_log_path)
        self.train_log.truncate_after(start_step)
        self.eval_log.truncate_after(start_step)
        self.recent_success = [float(r['evaluation/overall_success']) for r in self.eval_log.rows()][-2:]
        self.wandb = WandbLogger(
            FLAGS.wandb_mode, FLAGS.wandb_project, FLAGS.run_group, os.path.basename(self.dir),
            dict(self.flags, agent=self.config.to_dict()), self.dir, FLAGS.resume,
        )

    def log_train(self, metrics, step):
        self.train_log.log(metrics, step)
        self.wandb.log(metrics, step)

    def log_eval(self, metrics, step):
        self.recent_success = (self.recent_success + [metrics['evaluation/overall_success']])[-3:]
        metrics['evaluation/overall_success_last3'] = float(np.mean(self.recent_success))
        self.eval_log.log(metrics, step)
        self.wandb.log(metrics, step)

    def finish(self, done: bool):
        self.wandb.finish()
        if done:
            self.run_dir.mark_done()


def check_flags():
    for name in ('num_seeds', 'train_steps', 'log_interval', 'eval_interval', 'eval_episodes', 'save_interval', 'steps_per_call'):
        if FLAGS[name].value <= 0:
            raise ConfigError(f'--{name} must be positive, got {FLAGS[name].value}.')
    if FLAGS.eval_workers < 0:
        raise ConfigError(f'--eval_workers must be 0 (one per usable core) or a positive count, got {FLAGS.eval_workers}.')
    try:
        tasks = tuple(int(t) for t in FLAGS.eval_tasks.split(','))
    except ValueError:
        raise ConfigError(f'--eval_tasks must be comma-separated integers like 1,2,3,4,5, got {FLAGS.eval_tasks!r}.')
    return tasks


def first_nonfinite(infos, start_step):
    """(step, metric) of the first non-finite metric in a chunk's stacked infos, or None."""
    bad = None
    for key, values in infos.items():
        values = np.asarray(values)
        idx = np.flatnonzero(~np.isfinite(values))
        if len(idx) and (bad is None or idx[0] < bad[0]):
            bad = (int(idx[0]), key)
    return None if bad is None else (start_step + bad[0] + 1, bad[1])


def main(_):
    try:
        train()
    except (ConfigError, DatasetError, NonFiniteLossError, FileExistsError) as e:
        print(f'\nError: {e}', file=sys.stderr)
        sys.exit(1)


def train():
    eval_tasks = check_flags()
    config = FLAGS.agent
    check_types(config, load_config_file(config_flags.get_config_filename(FLAGS['agent'])))
    agent_class = get_agent_class(config.agent_name)
    validate_config(config, getattr(agent_class, 'CONFIG_RULES', None))
    env_id_for(FLAGS.env_name)
    seeds = [FLAGS.seed + k for k in range(FLAGS.num_seeds)]
    runs = [SeedRun(seed, {name: FLAGS[name].value for name in RUN_FLAGS}, config) for seed in seeds]

    # Data: validated numpy arrays -> device.
    train_path, val_path = ensure_dataset(FLAGS.env_name, FLAGS.dataset_dir, download=FLAGS.download)
    check_dataset_fits([train_path, val_path])
    # Gym-stepped envs (those the native stepper does not support) need one env per seed at least.
    eval_envs = make_eval_envs(FLAGS.env_name, max(FLAGS.eval_episodes, FLAGS.num_seeds), num_workers=FLAGS.eval_workers or usable_cpus())
    spaces = env_spaces(eval_envs)
    train_np, val_np = load_dataset(train_path, *spaces), load_dataset(val_path, *spaces)
    train_data, val_data = DeviceDataset.from_numpy(**train_np), DeviceDataset.from_numpy(**val_np)
    sampler_config = SamplerConfig.from_config(config)
    logging.info(f'Loaded {train_path}: {train_data.size} rows, {int(train_np["terminals"].sum())} episodes.')

    # One agent and one set of keys per seed, exactly as a single-seed run with that seed would make them.
    agents, start_steps = [], []
    for run in runs:
        ex_observations = example_observations(train_np['observations'], sampler_config.frame_stack)
        agent = agent_class.create(run.seed, ex_observations, train_np['actions'][:1], config)
        step = 0
        if FLAGS.resume and os.path.exists(run.checkpoint_path):
            agent, step, _ = load_checkpoint(run.checkpoint_path, agent)
            logging.info(f'Resumed {run.dir} from step {step}.')
        agents.append(agent)
        start_steps.append(step)
    if len(set(start_steps)) > 1:
        raise ConfigError(
            f'Seeds {seeds} have checkpoints at different steps {start_steps}; resume them as separate runs '
            f'(--num_seeds=1 --seed=...), or delete the lagging checkpoints.'
        )
    keys = np.stack([np.asarray(jax.random.split(jax.random.PRNGKey(seed), 3)) for seed in seeds])  # [N, 3, 2]
    data_keys, val_keys, eval_seed_keys = (jnp.asarray(keys[:, i]) for i in range(3))
    multi = len(seeds) > 1
    state = stack_trees(agents) if multi else agents[0]
    for run in runs:
        run.open_logs(start_steps[0], sampler_config)

    def seed_agent(k):
        return jax.tree_util.tree_map(lambda x: x[k], state) if multi else state

    preempted = []
    signal.signal(signal.SIGTERM, lambda *_: preempted.append(True))

    step = start_steps[0]
    desc = os.path.basename(runs[0].dir) + (f' (+{len(runs) - 1} seeds)' if multi else '')
    progress = tqdm.tqdm(total=FLAGS.train_steps, initial=step, smoothing=0.1, dynamic_ncols=True, desc=desc)
    chunk_start_time, chunk_start_step = time.time(), step
    while step < FLAGS.train_steps:
        stop = min(
            FLAGS.train_steps, step + FLAGS.steps_per_call, next_boundary(step, FLAGS.log_interval),
            next_boundary(step, FLAGS.eval_interval), next_boundary(step, FLAGS.save_interval),
        )
        if multi:
            state, infos = train_steps_multi(state, train_data, data_keys, step, sampler_config, stop - step)
        else:
            state, infos = train_steps(state, train_data, data_keys[0], step, sampler_config, stop - step)
            infos = jax.tree_util.tree_map(lambda x: x[None], infos)
        infos = jax.device_get(infos)  # [N, steps] per metric: one transfer per chunk
        for k, run in enumerate(runs):
            bad = first_nonfinite({key: v[k] for key, v in infos.items()}, step)
            if bad is not None:
                progress.close()
                raise NonFiniteLossError(
                    f'Non-finite {bad[1]} at step {bad[0]} (seed {run.seed}): training stopped. The last good '
                    f'checkpoint ({run.checkpoint_path}, if any) was kept. Try a lower --agent.lr or auxiliary '
                    f'weight (alpha), then rerun with --resume.'
                )
        progress.update(stop - step)
        step = stop

        if step % FLAGS.log_interval == 0 or step == FLAGS.train_steps:
            steps_per_second = (step - chunk_start_step) / max(time.time() - chunk_start_time, 1e-9)
            chunk_start_time, chunk_start_step = time.time(), step
            for k, run in enumerate(runs):
                metrics = {f'training/{key}': float(np.mean(v[k])) for key, v in infos.items()}
                val_info = validation_metrics(seed_agent(k), val_data, jax.random.fold_in(val_keys[k], step), sampler_config)
                metrics.update({f'validation/{key}': float(v) for key, v in val_info.items()})
                metrics['time/steps_per_second'] = steps_per_second
                run.log_train(metrics, step)
            progress.set_postfix(loss=f"{np.mean(infos['total_loss'][:, -1]):.3f}")

        if step % FLAGS.eval_interval == 0 or step == FLAGS.train_steps:
            # All seeds' episodes in one lockstep batch; each seed's results are its own evaluation's.
            eval_seeds = [int(jax.random.randint(jax.random.fold_in(eval_seed_keys[k], step), (), 0, 2**31 - 1)) for k in range(len(runs))]
            seed_results = evaluate_seeds(
                seeds_policy(state, len(runs), sampler_config.frame_stack), eval_envs, eval_seeds, task_ids=eval_tasks,
                episodes_per_task=FLAGS.eval_episodes, max_steps=FLAGS.eval_max_steps or None, num_video_episodes=FLAGS.video_episodes,
            )
            for run, results in zip(runs, seed_results):
                metrics = {key: float(v) for key, v in results.items() if key.startswith('evaluation/')}
                if results.get('videos'):
                    metrics['evaluation/video'] = videos_to_wandb(results['videos'])
                run.log_eval(metrics, step)
                tqdm.tqdm.write(f'seed {run.seed} step {step}: success {metrics["evaluation/overall_success"]:.3f} ' + ' '.join(
                    f'{key.split("/")[-1]}={v:.2f}' for key, v in metrics.items() if '/task' in key))

        if step % FLAGS.save_interval == 0 or step == FLAGS.train_steps or preempted:
            for k, run in enumerate(runs):
                save_checkpoint(run.dir, seed_agent(k), step)
        if preempted:
            progress.close()
            logging.warning(f'SIGTERM received: checkpoints saved at step {step}; rerun with --resume.')
            for run in runs:
                run.finish(done=False)
            sys.exit(PREEMPTED_EXIT_CODE)
    progress.close()
    for run in runs:
        run.finish(done=True)
        logging.info(f'Finished: {run.dir}')


if __name__ == '__main__':
    app.run(main)
