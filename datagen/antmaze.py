"""Offline generator for OGBench antmaze datasets, driving the committed SAC ant expert.

Follows OGBench's ``data_gen_scripts/generate_locomaze.py`` with ``--restore_path=experts/ant``:

- env: ``gymnasium.make('antmaze-<maze>-v0', terminate_at_goal=False, max_episode_steps=T)``;
- start/goal cells exactly as for pointmaze (stitch: a cell 4 BFS steps away; navigate: vertex
  cells, re-drawn after each success), via ``datagen.pointmaze``;
- each step: the BFS-oracle subgoal (``MazeOracle``), its unit direction from the ant's xy, the
  expert's deterministic action on ``concat(state[2:], direction)`` (the direction-following
  observation it was trained on), plus N(0, 0.2^2) noise, clipped to [-1, 1];
- rows: the 29-D observation before the step, the action, ``terminal`` on the last step, and the
  pre-step ``qpos`` (15) / ``qvel`` (14).

Episodes run in lockstep batches of envs so that one jitted policy call serves the whole batch.
"""

import logging
import os

import gymnasium
import numpy as np
import ogbench.locomaze  # noqa: F401  (registers the antmaze envs with gymnasium)
from tqdm import tqdm

from utils.maze import MazeOracle
from datagen.pointmaze import (
    DATASET_TYPES,
    _random_cell,
    _sample_task,
    _seeded_global_np_random,
    _streams,
    episode_counts,
    generator_record,
    maze_dataset_spec,
    save_train_val,
)

MAZE_TYPES = ('medium', 'large', 'giant')
GENERATABLE_DATASETS = tuple(f'antmaze-{maze}-{kind}-v0' for maze in MAZE_TYPES for kind in DATASET_TYPES)

# This project's own SAC expert drives the ant (OGBench's expert is not published): the data are
# collected as OGBench collects them, but they are not OGBench's data, so they are generated only on request.
FAITHFUL = False
DESCRIPTION = "this project's SAC ant expert (not OGBench's expert)"
# Bytes per row before compression: observation 29, action 8, qpos 15, qvel 14 (float32) and the terminal flag.
ROW_BYTES = 4 * (29 + 8 + 15 + 14) + 1
ACTION_NOISE = 0.2  # generate_locomaze.py's default `--noise`, which every antmaze line of commands.sh keeps.
# (train episodes, rows per episode = max_episode_steps), from OGBench's commands.sh.
_SIZES = {
    'stitch': {maze: (5000, 201) for maze in MAZE_TYPES},
    'navigate': {'medium': (1000, 1001), 'large': (1000, 1001), 'giant': (500, 2001)},
}
# Episodes simulated in lockstep: one policy call per step serves them all.
_LOCKSTEP_ENVS = 100
# MuJoCo-bound; measured 500-2500 on this project's shared 2-core machines. For the log's time estimate.
_APPROX_ENV_STEPS_PER_SECOND = 1500

EXPERT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'experts')
EXPERT_WEIGHTS = os.path.join(EXPERT_DIR, 'ant_xy_expert.msgpack')
EXPERT_RECORD = os.path.join(EXPERT_DIR, 'ant_xy_expert.json')


def can_generate(dataset_name):
    return dataset_name in GENERATABLE_DATASETS


def dataset_spec(dataset_name):
    return maze_dataset_spec(dataset_name, GENERATABLE_DATASETS, _SIZES)


def load_expert():
    from datagen.sac import load_actor

    if not (os.path.exists(EXPERT_WEIGHTS) and os.path.exists(EXPERT_RECORD)):
        raise FileNotFoundError(
            f'The ant expert ({EXPERT_WEIGHTS}) is missing; train it with scripts/train_expert.py.'
        )
    return load_actor(EXPERT_WEIGHTS, EXPERT_RECORD)


def expert_observations(states, directions):
    """What the expert sees: the ant state without its xy, then the unit subgoal direction."""
    return np.concatenate([states[:, 2:], directions], axis=-1).astype(np.float32)


def subgoal_directions(oracle, xys, goal_xys):
    """Unit vectors [N, 2] from each ant's xy to its BFS-oracle subgoal (as generate_locomaze.py)."""
    directions = np.stack([oracle.subgoal(xy, goal_xy) for xy, goal_xy in zip(xys, goal_xys)]) - xys
    return directions / (np.linalg.norm(directions, axis=-1, keepdims=True) + 1e-6)


def evaluate_subgoal_following(policy, maze_type='medium', episodes_per_task=1, seed=0):
    """Success of `policy` (a batched map from expert observations to actions) at reaching the goals
    of the maze's 5 evaluation tasks by following oracle subgoal directions, without noise, within
    the env's 1000 steps. Returns overall and per-task success rates."""
    num_tasks = 5
    task_ids = np.repeat(np.arange(1, num_tasks + 1), episodes_per_task)
    envs = [gymnasium.make(f'antmaze-{maze_type}-v0') for _ in task_ids]
    oracle = MazeOracle(envs[0])
    succeeded = np.zeros(len(envs), dtype=bool)
    with _seeded_global_np_random(seed):
        states = np.stack(
            [env.reset(seed=seed + k, options=dict(task_id=int(task)))[0] for k, (env, task) in enumerate(zip(envs, task_ids))]
        )
        active = np.ones(len(envs), dtype=bool)
        while active.any():
            xys = np.stack([env.unwrapped.get_xy() for env in envs])
            goal_xys = np.stack([env.unwrapped.cur_goal_xy for env in envs])
            actions = policy(expert_observations(states, subgoal_directions(oracle, xys, goal_xys)))
            for k in np.flatnonzero(active):
                states[k], _, terminated, truncated, info = envs[k].step(np.clip(actions[k], -1, 1))
                succeeded[k] |= bool(info['success'])
                active[k] = not (terminated or truncated)
    for env in envs:
        env.close()
    per_task = succeeded.reshape(num_tasks, episodes_per_task).mean(axis=1)
    return dict(success=float(succeeded.mean()), per_task_success=[float(s) for s in per_task], episodes=len(envs))


def generate_antmaze_dataset(dataset_name, num_episodes, seed, progress=True, expert=None, return_episode_info=False):
    """Collects `num_episodes` episodes of an OGBench antmaze dataset with the ant expert.

    Returns a dict with OGBench's keys and dtypes: observations [N, 29], actions [N, 8], qpos
    [N, 15], qvel [N, 14] (float32) and terminals (bool [N]), N = num_episodes * episode_length.
    With `return_episode_info`, also a dict of int arrays [num_episodes, 2]: `goal_cells` (the goal
    in force at the end) and `final_cells` (the ant's cell after the last step). Same seed and
    expert, same arrays.
    """
    spec = dataset_spec(dataset_name)
    expert = load_expert() if expert is None else expert
    length = spec.episode_length
    num_rows = num_episodes * length
    dataset = dict(
        observations=np.empty((num_rows, 29), np.float32),
        actions=np.empty((num_rows, 8), np.float32),
        terminals=np.zeros(num_rows, dtype=bool),
        qpos=np.empty((num_rows, 15), np.float32),
        qvel=np.empty((num_rows, 14), np.float32),
    )
    dataset['terminals'][length - 1 :: length] = True
    goal_cells = np.empty((num_episodes, 2), np.int64)
    final_cells = np.empty((num_episodes, 2), np.int64)

    # Unwrapped envs: the loop counts steps itself, and nothing else in the wrappers acts.
    envs = [
        gymnasium.make(spec.env_name, terminate_at_goal=False, max_episode_steps=length).unwrapped
        for _ in range(min(num_episodes, _LOCKSTEP_ENVS))
    ]
    oracle = MazeOracle(envs[0])
    progress_bar = tqdm(total=num_rows, desc=dataset_name, unit='step', unit_scale=True, disable=not progress)
    with _seeded_global_np_random(seed):
        cell_rng, noise_rng = _streams(seed)
        for first in range(0, num_episodes, len(envs)):
            episodes = np.arange(first, min(first + len(envs), num_episodes))
            batch = envs[: len(episodes)]
            states = []
            for k, env in enumerate(batch):
                init_ij, goal_ij = _sample_task(
                    cell_rng, spec.dataset_type, oracle.free_cells, oracle.vertex_cells, lambda ij: oracle.distances[ij]
                )
                if first == 0:  # Seeds each env's own streams once; later resets continue them.
                    env.action_space.seed(seed + k)
                state, _ = env.reset(
                    seed=seed + k if first == 0 else None,
                    options=dict(task_info=dict(init_ij=init_ij, goal_ij=goal_ij)),
                )
                states.append(state)
            states = np.stack(states)
            for step in range(length):
                xys = states[:, :2]
                goal_xys = np.stack([env.cur_goal_xy for env in batch])
                actions = expert(expert_observations(states, subgoal_directions(oracle, xys, goal_xys)))
                actions = np.clip(actions + noise_rng.normal(0.0, ACTION_NOISE, actions.shape), -1.0, 1.0)
                rows = episodes * length + step
                dataset['observations'][rows] = states
                dataset['actions'][rows] = actions
                for k, env in enumerate(batch):
                    dataset['qpos'][rows[k]] = env.data.qpos
                    dataset['qvel'][rows[k]] = env.data.qvel
                    states[k], _, _, _, info = env.step(actions[k])
                    if spec.dataset_type == 'navigate' and info['success']:
                        env.set_goal(goal_ij=_random_cell(cell_rng, oracle.vertex_cells))
                progress_bar.update(len(batch))
            goal_cells[episodes] = [oracle.cell(env.cur_goal_xy) for env in batch]
            final_cells[episodes] = [oracle.cell(env.get_xy()) for env in batch]
    progress_bar.close()
    for env in envs:
        env.close()
    if return_episode_info:
        return dataset, dict(goal_cells=goal_cells, final_cells=final_cells)
    return dataset


def write_dataset(dataset_name, dataset_dir, seed=0, num_train_episodes=None, num_val_episodes=None, progress=True):
    """Generates and writes `<dataset_dir>/<dataset_name>.npz` and `<dataset_name>-val.npz`.

    Defaults: OGBench's episode count for train, a tenth of it (at least one) for val; both splits
    come from one seeded stream, val after train. Returns (train_path, val_path).
    """
    spec = dataset_spec(dataset_name)
    num_train_episodes, num_val_episodes = episode_counts(spec, num_train_episodes, num_val_episodes)
    total_steps = (num_train_episodes + num_val_episodes) * spec.episode_length
    logging.info(
        'Generating %s offline with the ant expert: %d episodes x %d steps; this takes about %d minutes.',
        dataset_name, num_train_episodes + num_val_episodes, spec.episode_length,
        max(1, round(total_steps / _APPROX_ENV_STEPS_PER_SECOND / 60)),
    )
    dataset = generate_antmaze_dataset(dataset_name, num_train_episodes + num_val_episodes, seed, progress)
    provenance = generator_record(__name__, DESCRIPTION, FAITHFUL, dataset_name, seed, num_train_episodes, num_val_episodes,
                                  expert=os.path.relpath(EXPERT_WEIGHTS, os.path.dirname(EXPERT_DIR)))
    return save_train_val(dataset, dataset_name, dataset_dir, num_train_episodes * spec.episode_length, provenance)


def estimated_bytes(dataset_name, num_train_episodes=None, num_val_episodes=None, **_):
    """Upper bound of the bytes write_dataset puts on disk (uncompressed rows)."""
    spec = dataset_spec(dataset_name)
    num_train_episodes, num_val_episodes = episode_counts(spec, num_train_episodes, num_val_episodes)
    return (num_train_episodes + num_val_episodes) * spec.episode_length * ROW_BYTES
