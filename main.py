"""Train and evaluate one agent on one OGBench dataset.

    python main.py --env_name=pointmaze-medium-stitch-v0 --agent=agents/gcbc.py --agent.batch_size=256

Flag defaults follow the paper's protocol (1M steps, batch 1024, 50 evaluation episodes per task).
Data flows one way: dataset file -> validated arrays on device -> sampler inside the jitted update
-> agent -> metrics; this file orchestrates and never computes a loss.
"""

import dataclasses
import json
import os
import signal
import sys
import time

import jax
import numpy as np
import tqdm
from absl import app, flags, logging
from ml_collections import config_flags

from agents import get_agent_class
from utils.checkpoints import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from utils.config_checks import check_override_keys, check_types, load_config_file
from utils.datasets import ensure_dataset, env_id_for, load_dataset
from utils.errors import ConfigError, DatasetError, NonFiniteLossError
from utils.evaluation import evaluate, make_eval_envs
from utils.loggers import CsvLogger, WandbLogger
from utils.sampler import DeviceDataset, SamplerConfig
from utils.training import train_steps, validation_metrics

FLAGS = flags.FLAGS
_ABSL_FLAGS = set(FLAGS)
flags.DEFINE_string('env_name', 'pointmaze-medium-stitch-v0', 'OGBench dataset name, e.g. antmaze-medium-stitch-v0.')
flags.DEFINE_integer('seed', 0, 'Random seed (network init, sampling, evaluation).')
flags.DEFINE_integer('train_steps', 1_000_000, 'Number of gradient steps.')
flags.DEFINE_integer('log_interval', 5000, 'Steps between training-metric logs.')
flags.DEFINE_integer('eval_interval', 100_000, 'Steps between evaluations (and one at the end).')
flags.DEFINE_integer('eval_episodes', 50, 'Evaluation episodes per task.')
flags.DEFINE_string('eval_tasks', '1,2,3,4,5', 'Comma-separated OGBench task ids to evaluate on.')
flags.DEFINE_integer('eval_max_steps', 0, 'Episode step limit at evaluation; 0 = the environment time limit.')
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
DEFAULT_AGENT = 'agents/gcbc.py'
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


def run_directory() -> str:
    name = FLAGS.run_name or f'{FLAGS.agent.agent_name}_{FLAGS.env_name}_sd{FLAGS.seed}'
    return os.path.join(os.path.expanduser(FLAGS.save_dir), FLAGS.run_group, name)


def check_flags():
    for name in ('train_steps', 'log_interval', 'eval_interval', 'eval_episodes', 'save_interval', 'steps_per_call'):
        if FLAGS[name].value <= 0:
            raise ConfigError(f'--{name} must be positive, got {FLAGS[name].value}.')
    try:
        tasks = tuple(int(t) for t in FLAGS.eval_tasks.split(','))
    except ValueError:
        raise ConfigError(f'--eval_tasks must be comma-separated integers like 1,2,3,4,5, got {FLAGS.eval_tasks!r}.')
    return tasks


def write_json(path, obj):
    with open(path + '.tmp', 'w') as f:
        json.dump(obj, f, indent=2, default=str)
    os.replace(path + '.tmp', path)


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
    env_id_for(FLAGS.env_name)

    run_dir = run_directory()
    checkpoint_path = os.path.join(run_dir, CHECKPOINT_NAME)
    if os.path.exists(checkpoint_path) and not FLAGS.resume:
        raise FileExistsError(
            f'Run directory {run_dir} already holds a checkpoint. Pass --resume to continue it, or choose '
            f'another --run_name / --run_group (nothing was overwritten).'
        )
    os.makedirs(run_dir, exist_ok=True)

    # Data: validated numpy arrays -> device.
    train_path, val_path = ensure_dataset(FLAGS.env_name, FLAGS.dataset_dir, download=FLAGS.download)
    eval_envs = make_eval_envs(FLAGS.env_name, FLAGS.eval_episodes)
    spaces = (eval_envs[0].observation_space, eval_envs[0].action_space)
    train_np, val_np = load_dataset(train_path, *spaces), load_dataset(val_path, *spaces)
    train_data, val_data = DeviceDataset.from_numpy(**train_np), DeviceDataset.from_numpy(**val_np)
    sampler_config = SamplerConfig.from_config(config)
    logging.info(f'Loaded {train_path}: {train_data.size} rows, {int(train_np["terminals"].sum())} episodes.')

    agent = agent_class.create(FLAGS.seed, train_np['observations'][:1], train_np['actions'][:1], config)
    data_key, val_key, eval_seed_key = jax.random.split(jax.random.PRNGKey(FLAGS.seed), 3)
    start_step = 0
    if FLAGS.resume and os.path.exists(checkpoint_path):
        agent, start_step, _ = load_checkpoint(checkpoint_path, agent)
        logging.info(f'Resumed {run_dir} from step {start_step}.')

    run_flags = {name: FLAGS[name].value for name in RUN_FLAGS}
    write_json(os.path.join(run_dir, 'flags.json'), run_flags)
    write_json(os.path.join(run_dir, 'config.json'), dict(config.to_dict(), sampler=dataclasses.asdict(sampler_config)))
    train_logger, eval_logger = CsvLogger(os.path.join(run_dir, 'train.csv')), CsvLogger(os.path.join(run_dir, 'eval.csv'))
    train_logger.truncate_after(start_step)
    eval_logger.truncate_after(start_step)
    recent_success = [float(r['evaluation/overall_success']) for r in eval_logger.rows()][-2:]
    wandb_logger = WandbLogger(
        FLAGS.wandb_mode, FLAGS.wandb_project, FLAGS.run_group, os.path.basename(run_dir),
        dict(run_flags, agent=config.to_dict()),
        run_dir, FLAGS.resume,
    )

    preempted = []
    signal.signal(signal.SIGTERM, lambda *_: preempted.append(True))

    def policy_fn(observations, goals):
        return np.asarray(agent.sample_actions(observations, goals, temperature=0.0))

    step = start_step
    progress = tqdm.tqdm(total=FLAGS.train_steps, initial=step, smoothing=0.1, dynamic_ncols=True, desc=os.path.basename(run_dir))
    chunk_start_time, chunk_start_step = time.time(), step
    while step < FLAGS.train_steps:
        stop = min(
            FLAGS.train_steps, step + FLAGS.steps_per_call, next_boundary(step, FLAGS.log_interval),
            next_boundary(step, FLAGS.eval_interval), next_boundary(step, FLAGS.save_interval),
        )
        agent, infos = train_steps(agent, train_data, data_key, step, sampler_config, stop - step)
        bad = first_nonfinite(infos, step)
        if bad is not None:
            progress.close()
            raise NonFiniteLossError(
                f'Non-finite {bad[1]} at step {bad[0]}: training stopped. The last good checkpoint '
                f'({checkpoint_path}, if any) was kept. Try a lower --agent.lr or auxiliary weight (alpha), '
                f'then rerun with --resume.'
            )
        progress.update(stop - step)
        step = stop

        if step % FLAGS.log_interval == 0 or step == FLAGS.train_steps:
            elapsed = time.time() - chunk_start_time
            metrics = {f'training/{k}': float(np.mean(v)) for k, v in infos.items()}
            val_info = validation_metrics(agent, val_data, jax.random.fold_in(val_key, step), sampler_config)
            metrics.update({f'validation/{k}': float(v) for k, v in val_info.items()})
            metrics['time/steps_per_second'] = (step - chunk_start_step) / max(elapsed, 1e-9)
            chunk_start_time, chunk_start_step = time.time(), step
            train_logger.log(metrics, step)
            wandb_logger.log(metrics, step)
            progress.set_postfix(loss=f"{metrics['training/total_loss']:.3f}")

        if step % FLAGS.eval_interval == 0 or step == FLAGS.train_steps:
            eval_seed = int(jax.random.randint(jax.random.fold_in(eval_seed_key, step), (), 0, 2**31 - 1))
            results = evaluate(
                policy_fn, eval_envs, task_ids=eval_tasks, episodes_per_task=FLAGS.eval_episodes, seed=eval_seed,
                max_steps=FLAGS.eval_max_steps or None, num_video_episodes=FLAGS.video_episodes,
            )
            metrics = {k: float(v) for k, v in results.items() if k.startswith('evaluation/')}
            recent_success = (recent_success + [metrics['evaluation/overall_success']])[-3:]
            metrics['evaluation/overall_success_last3'] = float(np.mean(recent_success))
            eval_logger.log(metrics, step)
            wandb_logger.log(metrics, step)
            tqdm.tqdm.write(f'step {step}: success {metrics["evaluation/overall_success"]:.3f} ' + ' '.join(
                f'{k.split("/")[-1]}={v:.2f}' for k, v in metrics.items() if '/task' in k))

        if step % FLAGS.save_interval == 0 or step == FLAGS.train_steps or preempted:
            save_checkpoint(run_dir, agent, step)
        if preempted:
            progress.close()
            logging.warning(f'SIGTERM received: checkpoint saved at step {step} in {run_dir}; rerun with --resume.')
            wandb_logger.finish()
            sys.exit(PREEMPTED_EXIT_CODE)
    progress.close()
    wandb_logger.finish()
    open(os.path.join(run_dir, 'DONE'), 'w').close()
    logging.info(f'Finished: {run_dir}')


if __name__ == '__main__':
    app.run(main)
