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
Stitch datasets split those batches over worker processes (`num_workers`), each replaying the
random streams up to its first batch, so that the files are byte-identical for any worker count.
"""

import logging
import multiprocessing
import os
import queue
from concurrent.futures import ProcessPoolExecutor

import gymnasium
import numpy as np
import ogbench.locomaze  # noqa: F401  (registers the antmaze envs with gymnasium)

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
from utils.maze import MazeOracle
from utils.progress import progress_bar

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
# Per process, MuJoCo-bound; measured 500-2500 on this project's shared 2-core machines and 2.4k in each
# of 16 workers on a 16-core GPU machine (5500 stitch episodes in 64 s). For the log's time estimate.
_APPROX_ENV_STEPS_PER_SECOND = 1500

EXPERT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'experts')
EXPERT_WEIGHTS = os.path.join(EXPERT_DIR, 'ant_xy_expert.msgpack')
EXPERT_RECORD = os.path.join(EXPERT_DIR, 'ant_xy_expert.json')


def can_generate(dataset_name):
    return dataset_name in GENERATABLE_DATASETS


def dataset_spec(dataset_name):
    return maze_dataset_spec(dataset_name, GENERATABLE_DATASETS, _SIZES)


def load_expert():
    """The committed expert, run on the CPU wherever JAX has one: a GPU's matrix products round
    differently, and the same seed must give the same files on every machine."""
    import jax

    from datagen.sac import load_actor

    if not (os.path.exists(EXPERT_WEIGHTS) and os.path.exists(EXPERT_RECORD)):
        raise FileNotFoundError(
            f'The ant expert ({EXPERT_WEIGHTS}) is missing; train it with scripts/train_expert.py.'
        )
    expert = load_actor(EXPERT_WEIGHTS, EXPERT_RECORD)
    try:
        cpu = jax.devices('cpu')[0]
    except RuntimeError:  # JAX_PLATFORMS excludes the CPU: the default device it is.
        logging.warning('No CPU device for the ant expert: generated files may differ from CPU-generated ones.')
    else:
        expert.params = jax.device_put(expert.params, cpu)
    return expert


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


def generate_antmaze_dataset(dataset_name, num_episodes, seed, progress=True, expert=None, return_episode_info=False,
                             num_workers=1, lockstep_envs=_LOCKSTEP_ENVS):
    """Collects `num_episodes` episodes of an OGBench antmaze dataset with the ant expert.

    Returns a dict with OGBench's keys and dtypes: observations [N, 29], actions [N, 8], qpos
    [N, 15], qvel [N, 14] (float32) and terminals (bool [N]), N = num_episodes * episode_length.
    With `return_episode_info`, also a dict of int arrays [num_episodes, 2]: `goal_cells` (the goal
    in force at the end) and `final_cells` (the ant's cell after the last step). Same seed, expert
    and `lockstep_envs`, same arrays, whatever `num_workers`.

    Episodes run in lockstep batches of `lockstep_envs` (the data depend on it: one noise draw and
    one policy call per step serve a whole batch). With `num_workers` > 1, stitch datasets split
    their batches into contiguous ranges, one per worker process (`spawn`; each loads the committed
    expert itself, so `expert` must be None); navigate datasets re-draw goals mid-episode from
    streams shared by the whole generation, so they always run in this process.
    """
    spec = dataset_spec(dataset_name)
    num_batches = len(_batch_starts(num_episodes, lockstep_envs))
    if spec.dataset_type != 'stitch' and num_workers > 1:
        logging.info('%s: navigate episodes share one goal stream across batches; generating in one process.', dataset_name)
        num_workers = 1
    num_workers = max(1, min(num_workers, num_batches))
    if num_workers > 1 and expert is not None:
        raise ValueError('With num_workers > 1 each worker loads the committed expert: pass expert=None.')
    length = spec.episode_length
    bar = progress_bar(total=num_episodes * length, desc=dataset_name, unit='step', unit_scale=True, disable=not progress)
    if num_workers == 1:
        expert = load_expert() if expert is None else expert
        parts = [_simulate_batches(spec, expert, seed, num_episodes, lockstep_envs, range(num_batches), bar.update)]
    else:
        parts = _simulate_in_workers(dataset_name, seed, num_episodes, lockstep_envs, num_batches, num_workers, bar)
    bar.close()
    dataset = {key: np.concatenate([part[0][key] for part in parts]) for key in parts[0][0]}
    dataset['terminals'] = np.zeros(num_episodes * length, dtype=bool)
    dataset['terminals'][length - 1 :: length] = True
    dataset = {key: dataset[key] for key in ('observations', 'actions', 'terminals', 'qpos', 'qvel')}
    if return_episode_info:
        return dataset, {key: np.concatenate([part[1][key] for part in parts]) for key in parts[0][1]}
    return dataset


def _batch_starts(num_episodes, lockstep_envs):
    """First episode of each lockstep batch: every batch has min(num_episodes, lockstep_envs) envs but the last."""
    return list(range(0, num_episodes, min(num_episodes, lockstep_envs)))


def _simulate_batches(spec, expert, seed, num_episodes, lockstep_envs, batches, on_step=None):
    """Rows and episode info of the lockstep batches `batches` (a range of batch indices) of the
    generation stream `seed`. The batches before them are replayed without physics: their task
    draws, env resets and noise draws, which leaves every random stream (the cell and noise
    streams, each env's own generators and the global np.random the maze draws position noise from)
    exactly where the full generation has them. Stitch only: a navigate episode's mid-episode goal
    re-draws depend on its physics. `on_step(n)` is called after each step of n envs."""
    if batches.start > 0 and spec.dataset_type != 'stitch':
        raise ValueError('Only stitch datasets can start generating after their first batch.')
    length = spec.episode_length
    starts = _batch_starts(num_episodes, lockstep_envs)
    batch_size = min(num_episodes, lockstep_envs)
    first_episode = starts[batches.start]
    last_episode = min(starts[batches.stop - 1] + batch_size, num_episodes)
    num_rows = (last_episode - first_episode) * length
    dataset = dict(
        observations=np.empty((num_rows, 29), np.float32),
        actions=np.empty((num_rows, 8), np.float32),
        qpos=np.empty((num_rows, 15), np.float32),
        qvel=np.empty((num_rows, 14), np.float32),
    )
    goal_cells = np.empty((last_episode - first_episode, 2), np.int64)
    final_cells = np.empty((last_episode - first_episode, 2), np.int64)

    # Unwrapped envs: the loop counts steps itself, and nothing else in the wrappers acts.
    envs = [
        gymnasium.make(spec.env_name, terminate_at_goal=False, max_episode_steps=length).unwrapped
        for _ in range(batch_size)
    ]
    action_dim = envs[0].action_space.shape[0]
    oracle = MazeOracle(envs[0])
    with _seeded_global_np_random(seed):
        cell_rng, noise_rng = _streams(seed)
        for index, first in enumerate(starts[: batches.stop]):
            episodes = np.arange(first, min(first + batch_size, num_episodes))
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
            if index < batches.start:  # Replay: the batch's noise draws, without its physics.
                for _ in range(length):
                    noise_rng.normal(0.0, ACTION_NOISE, (len(batch), action_dim))
                continue
            states = np.stack(states)
            for step in range(length):
                xys = states[:, :2]
                goal_xys = np.stack([env.cur_goal_xy for env in batch])
                actions = expert(expert_observations(states, subgoal_directions(oracle, xys, goal_xys)))
                actions = np.clip(actions + noise_rng.normal(0.0, ACTION_NOISE, actions.shape), -1.0, 1.0)
                rows = (episodes - first_episode) * length + step
                dataset['observations'][rows] = states
                dataset['actions'][rows] = actions
                for k, env in enumerate(batch):
                    dataset['qpos'][rows[k]] = env.data.qpos
                    dataset['qvel'][rows[k]] = env.data.qvel
                    states[k], _, _, _, info = env.step(actions[k])
                    if spec.dataset_type == 'navigate' and info['success']:
                        env.set_goal(goal_ij=_random_cell(cell_rng, oracle.vertex_cells))
                if on_step is not None:
                    on_step(len(batch))
            goal_cells[episodes - first_episode] = [oracle.cell(env.cur_goal_xy) for env in batch]
            final_cells[episodes - first_episode] = [oracle.cell(env.get_xy()) for env in batch]
    for env in envs:
        env.close()
    return dataset, dict(goal_cells=goal_cells, final_cells=final_cells)


_worker_progress = None  # A worker process's queue for its step counts.


def _init_worker(progress_queue):
    global _worker_progress
    _worker_progress = progress_queue
    # Before this process's first JAX call: the expert runs on the CPU (as in the parent, see
    # load_expert), single-threaded (many workers share the cores; the results are the same bits).
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_cpu_multi_thread_eigen=false'
                               ' intra_op_parallelism_threads=1').strip()
    import jax

    jax.config.update('jax_platforms', 'cpu')


def _worker(dataset_name, seed, num_episodes, lockstep_envs, first_batch, stop_batch):
    spec = dataset_spec(dataset_name)
    return _simulate_batches(spec, load_expert(), seed, num_episodes, lockstep_envs, range(first_batch, stop_batch),
                             _worker_progress.put)


def _simulate_in_workers(dataset_name, seed, num_episodes, lockstep_envs, num_batches, num_workers, bar):
    """The batches split into `num_workers` contiguous ranges, simulated in parallel; the parts in episode order."""
    context = multiprocessing.get_context('spawn')
    progress_queue = context.Queue()
    bounds = np.linspace(0, num_batches, num_workers + 1).round().astype(int)
    with ProcessPoolExecutor(num_workers, mp_context=context, initializer=_init_worker,
                             initargs=(progress_queue,)) as pool:
        futures = [pool.submit(_worker, dataset_name, seed, num_episodes, lockstep_envs, int(start), int(stop))
                   for start, stop in zip(bounds[:-1], bounds[1:])]
        while not all(future.done() for future in futures):
            try:
                bar.update(progress_queue.get(timeout=0.5))
            except queue.Empty:
                pass
        while not progress_queue.empty():
            bar.update(progress_queue.get())
        return [future.result() for future in futures]  # Re-raises a worker's error.


def usable_cpus():
    """Cores this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)


def write_dataset(dataset_name, dataset_dir, seed=0, num_train_episodes=None, num_val_episodes=None, progress=True,
                  num_workers=None, lockstep_envs=_LOCKSTEP_ENVS):
    """Generates and writes `<dataset_dir>/<dataset_name>.npz` and `<dataset_name>-val.npz`.

    Defaults: OGBench's episode count for train, a tenth of it (at least one) for val; both splits
    come from one seeded stream, val after train. `num_workers` processes (default: one per usable
    core) simulate stitch episodes; the files are byte-identical for any number of them.
    Returns (train_path, val_path).
    """
    spec = dataset_spec(dataset_name)
    num_train_episodes, num_val_episodes = episode_counts(spec, num_train_episodes, num_val_episodes)
    num_episodes = num_train_episodes + num_val_episodes
    num_workers = usable_cpus() if num_workers is None else num_workers
    if spec.dataset_type != 'stitch':
        num_workers = 1
    # Whole batches per worker: the slowest worker runs ceil(batches / workers) of them.
    num_batches = len(_batch_starts(num_episodes, lockstep_envs))
    num_workers = max(1, min(num_workers, num_batches))
    slowest_steps = -(-num_batches // num_workers) * min(num_episodes, lockstep_envs) * spec.episode_length
    logging.info(
        'Generating %s offline with the ant expert: %d episodes x %d steps in %d process(es); this takes about %d minutes.',
        dataset_name, num_episodes, spec.episode_length, num_workers,
        max(1, round(slowest_steps / _APPROX_ENV_STEPS_PER_SECOND / 60)),
    )
    dataset = generate_antmaze_dataset(dataset_name, num_episodes, seed, progress, num_workers=num_workers,
                                       lockstep_envs=lockstep_envs)
    provenance = generator_record(__name__, DESCRIPTION, FAITHFUL, dataset_name, seed, num_train_episodes, num_val_episodes,
                                  expert=os.path.relpath(EXPERT_WEIGHTS, os.path.dirname(EXPERT_DIR)))
    return save_train_val(dataset, dataset_name, dataset_dir, num_train_episodes * spec.episode_length, provenance)


def estimated_bytes(dataset_name, num_train_episodes=None, num_val_episodes=None, **_):
    """Upper bound of the bytes write_dataset puts on disk (uncompressed rows)."""
    spec = dataset_spec(dataset_name)
    num_train_episodes, num_val_episodes = episode_counts(spec, num_train_episodes, num_val_episodes)
    return (num_train_episodes + num_val_episodes) * spec.episode_length * ROW_BYTES
