"""Train the ant locomotion expert that antmaze data collection drives (OGBench's `main_sac.py`).

    python scripts/train_expert.py --run_dir=runs/ant_expert [--train_steps=400000] [--resume]
    python scripts/train_expert.py --run_dir=runs/ant_expert --export_only   # evaluate + export

Env: OGBench's `online-ant-xy-v0`, i.e. `online-ant-v0` (1000-step episodes, terminates when the
torso leaves z in [0.2, 1]) under `GymXYWrapper(resample_interval=100)`: the observation is the
ant state without its xy (27) plus a unit direction (2), re-drawn every 100 steps; the reward is
the xy displacement along the direction. As in OGBench: 10k uniformly random seed steps, one
gradient update per env step, time-limit truncation stored as terminal.

Difference from OGBench: the updates run `--updates_per_call` at a time in one jitted `lax.scan`
after that many env steps (same update-to-data ratio, the behaviour policy lags by < 50 updates).

Checkpoints (agent + replay buffer, both written atomically) every `--checkpoint_seconds`;
`--resume` continues from the last one with a fresh episode. Every `--eval_interval` steps the
deterministic policy is scored on direction tracking; at the end, and with `--export_only`, also on
following BFS subgoal directions through antmaze-medium's 5 evaluation tasks, and the actor is
exported to `--export_dir`.
"""

import json
import os
import sys
import time

import gymnasium
import jax
import numpy as np
import ogbench.online_locomotion  # noqa: F401  (registers online-ant-v0)
from absl import app, flags
from ogbench.online_locomotion.wrappers import GymXYWrapper

from datagen.antmaze import evaluate_subgoal_following
from datagen.sac import SACAgent, export_actor, get_config
from runtime.atomic_io import atomic_open
from runtime.checkpoints import load_checkpoint, save_checkpoint
from runtime.exits import parse_absl_flags
from utils.progress import progress_bar

FLAGS = flags.FLAGS
flags.DEFINE_string('run_dir', 'runs/ant_expert', 'Checkpoints, logs and evaluation records.')
flags.DEFINE_string('export_dir', 'experts', 'Where the final actor weights and record go.')
flags.DEFINE_integer('seed', 0, 'Random seed.')
flags.DEFINE_integer('train_steps', 400_000, 'Env steps (= gradient updates); OGBench used 400k.')
flags.DEFINE_integer('seed_steps', 10_000, 'Uniformly random env steps before learning starts.')
flags.DEFINE_integer('updates_per_call', 50, 'Env steps between jitted calls, each running that many updates.')
flags.DEFINE_integer('eval_interval', 25_000, 'Env steps between direction-tracking evaluations.')
flags.DEFINE_integer('eval_episodes', 3, 'Direction-tracking episodes (1000 steps, 10 directions each).')
flags.DEFINE_integer('maze_episodes_per_task', 2, 'Final antmaze-medium subgoal-following episodes per task.')
flags.DEFINE_integer('checkpoint_seconds', 240, 'Wall-clock seconds between checkpoints.')
flags.DEFINE_bool('resume', False, 'Continue from the checkpoint in --run_dir.')
flags.DEFINE_bool('export_only', False, 'Skip training: evaluate the checkpoint in --run_dir and export it.')

ENV_NAME = 'online-ant-xy-v0'
DIRECTION_RESAMPLE_INTERVAL = 100
REPLAY_NAME = 'replay.npz'
EVAL_LOG_NAME = 'eval.jsonl'


def make_direction_env():
    """OGBench's online-ant-xy-v0: the wrapper draws directions from the global np.random."""
    return GymXYWrapper(gymnasium.make('online-ant-v0'), resample_interval=DIRECTION_RESAMPLE_INTERVAL)


class ReplayBuffer:
    """Flat arrays with one row per env step; the run's step count is the number of rows."""

    def __init__(self, capacity, observation_dim, action_dim):
        self.arrays = dict(
            observations=np.zeros((capacity, observation_dim), np.float32),
            actions=np.zeros((capacity, action_dim), np.float32),
            rewards=np.zeros(capacity, np.float32),
            masks=np.zeros(capacity, np.float32),
            next_observations=np.zeros((capacity, observation_dim), np.float32),
        )
        self.size = 0

    def add(self, **row):
        for key, value in row.items():
            self.arrays[key][self.size] = value
        self.size += 1

    def sample(self, rng, num_batches, batch_size):
        """A dict of [num_batches, batch_size, ...] arrays, rows uniform with replacement."""
        indices = rng.integers(self.size, size=(num_batches, batch_size))
        return {key: value[indices] for key, value in self.arrays.items()}

    def save(self, path):
        with atomic_open(path, 'wb') as f:
            np.savez(f, **{key: value[: self.size] for key, value in self.arrays.items()})

    def load(self, path, size):
        """Restore the first `size` rows (the buffer is saved before the checkpoint, so it may be ahead)."""
        with np.load(path) as saved:
            for key in self.arrays:
                self.arrays[key][:size] = saved[key][:size]
        self.size = size


def evaluate_direction_tracking(policy, num_episodes, seed):
    """Deterministic rollouts in the direction env. Returns the mean velocity (m/s) along and across
    the commanded direction, the fraction of episodes that end by falling, and the mean return."""
    env = make_direction_env()
    dt = env.unwrapped.dt
    along, across, falls, returns = [], [], 0, []
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        for episode in range(num_episodes):
            observation, _ = env.reset(seed=seed + episode)
            episode_return, done = 0.0, False
            while not done:
                direction = env.z.copy()
                xy = env.unwrapped.data.qpos[:2].copy()
                observation, reward, terminated, truncated, _ = env.step(policy(observation[None])[0])
                displacement = env.unwrapped.data.qpos[:2] - xy
                along.append(displacement.dot(direction) / dt)
                across.append(abs(displacement[0] * direction[1] - displacement[1] * direction[0]) / dt)
                episode_return += reward
                falls += int(terminated)
                done = terminated or truncated
            returns.append(episode_return)
    finally:
        np.random.set_state(state)
    env.close()
    return dict(
        velocity_along_direction=float(np.mean(along)),
        velocity_across_direction=float(np.mean(across)),
        fall_rate=falls / num_episodes,
        episode_return=float(np.mean(returns)),
    )


def log_line(run_dir, record):
    with open(os.path.join(run_dir, EVAL_LOG_NAME), 'a') as f:
        f.write(json.dumps(record) + '\n')


def training_curve(run_dir):
    """The direction-tracking evaluations logged during training, for the exported record."""
    path = os.path.join(run_dir, EVAL_LOG_NAME)
    if not os.path.exists(path):
        return []
    keys = ('step', 'wall_s', 'velocity_along_direction', 'velocity_across_direction', 'fall_rate')
    with open(path) as f:
        return [{key: json.loads(line)[key] for key in keys} for line in f]


def train(agent, replay, start_step, run_dir, previous_wall_s, commands):
    """Runs to --train_steps; returns the agent and the total training wall-clock time so far.
    `commands` (every command line that trained this run) goes into each checkpoint."""
    env = make_direction_env()
    env.action_space.seed(FLAGS.seed + start_step)
    np.random.seed(FLAGS.seed + start_step)
    batch_rng = np.random.default_rng(FLAGS.seed + start_step)
    action_rng = jax.random.PRNGKey(FLAGS.seed + start_step)
    observation, _ = env.reset(seed=FLAGS.seed + start_step)
    last_checkpoint = started = time.monotonic()
    info = {}
    progress = progress_bar(range(start_step + 1, FLAGS.train_steps + 1), initial=start_step, total=FLAGS.train_steps,
                    smoothing=0.05, dynamic_ncols=True, mininterval=5.0)
    for step in progress:
        if step <= FLAGS.seed_steps:
            action = env.action_space.sample()
        else:
            action_rng, key = jax.random.split(action_rng)
            action = np.asarray(agent.sample_actions(observation[None].astype(np.float32), key))[0]
        next_observation, reward, terminated, truncated, _ = env.step(action)
        # OGBench's `terminate_at_end`: a time-limit end is stored as terminal too.
        replay.add(observations=observation, actions=action, rewards=reward,
                   masks=float(not (terminated or truncated)), next_observations=next_observation)
        observation = next_observation
        if terminated or truncated:
            observation, _ = env.reset()

        if step >= FLAGS.seed_steps and step % FLAGS.updates_per_call == 0:
            batches = replay.sample(batch_rng, FLAGS.updates_per_call, agent.config.batch_size)
            agent, info = agent.update_many(batches)

        if step % FLAGS.eval_interval == 0 or step == FLAGS.train_steps:
            info = {key: float(value) for key, value in jax.device_get(info).items()}
            evaluation = evaluate_direction_tracking(agent.deterministic_actions, FLAGS.eval_episodes, seed=10_000)
            record = dict(step=step, wall_s=round(previous_wall_s + time.monotonic() - started, 1), **evaluation, **info)
            log_line(run_dir, record)
            progress.write(json.dumps(record))
            progress.set_postfix(v_along=f'{evaluation["velocity_along_direction"]:.2f}')

        if time.monotonic() - last_checkpoint > FLAGS.checkpoint_seconds or step == FLAGS.train_steps:
            replay.save(os.path.join(run_dir, REPLAY_NAME))
            extra = dict(train_wall_s=previous_wall_s + time.monotonic() - started, commands=commands)
            save_checkpoint(run_dir, agent, step, extra=extra)
            last_checkpoint = time.monotonic()
    env.close()
    return agent, previous_wall_s + time.monotonic() - started


def evaluate_and_export(agent, step, train_wall_s, commands):
    direction = evaluate_direction_tracking(agent.deterministic_actions, num_episodes=5, seed=20_000)
    maze = evaluate_subgoal_following(
        lambda observations: np.asarray(agent.deterministic_actions(observations)),
        maze_type='medium', episodes_per_task=FLAGS.maze_episodes_per_task, seed=FLAGS.seed,
    )
    print(json.dumps(dict(direction_tracking=direction, antmaze_medium_subgoal_following=maze), indent=2))
    os.makedirs(FLAGS.export_dir, exist_ok=True)
    config = agent.config.to_dict()
    record = dict(
        env_name=ENV_NAME,
        direction_resample_interval=DIRECTION_RESAMPLE_INTERVAL,
        observation='ant qpos[2:] (13) + qvel (14) + unit direction (2)',
        train_commands=commands,
        train_steps=step,
        seed_steps=FLAGS.seed_steps,
        updates_per_call=FLAGS.updates_per_call,
        seed=FLAGS.seed,
        train_wall_clock_s=train_wall_s,
        hyperparameters={key: list(value) if isinstance(value, tuple) else value for key, value in config.items()},
        evaluation=dict(direction_tracking=direction, antmaze_medium_subgoal_following=maze),
        training_curve=training_curve(FLAGS.run_dir),
    )
    export_actor(agent, os.path.join(FLAGS.export_dir, 'ant_xy_expert.msgpack'),
                 os.path.join(FLAGS.export_dir, 'ant_xy_expert.json'), record)
    print(f'Exported the actor to {FLAGS.export_dir}/ant_xy_expert.{{msgpack,json}}')


def main(_):
    os.makedirs(FLAGS.run_dir, exist_ok=True)
    env = make_direction_env()
    observation_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    env.close()
    agent = SACAgent.create(FLAGS.seed, observation_dim, action_dim, get_config())
    replay = ReplayBuffer(FLAGS.train_steps, observation_dim, action_dim)
    start_step, wall_s, commands = 0, 0.0, []
    if FLAGS.resume or FLAGS.export_only:
        agent, start_step, extra = load_checkpoint(FLAGS.run_dir, agent)
        wall_s = float(extra.get('train_wall_s', 0.0))
        commands = list(extra.get('commands', []))
        if not FLAGS.export_only:
            replay.load(os.path.join(FLAGS.run_dir, REPLAY_NAME), start_step)
        print(f'Resumed at step {start_step}')

    if not FLAGS.export_only and start_step < FLAGS.train_steps:
        commands.append(' '.join(['python'] + sys.argv))
        agent, wall_s = train(agent, replay, start_step, FLAGS.run_dir, wall_s, commands)
        start_step = FLAGS.train_steps
    evaluate_and_export(agent, start_step, round(wall_s, 1), commands)


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
