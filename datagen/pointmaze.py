"""Offline generator for OGBench pointmaze datasets (stitch and navigate).

OGBench's pointmaze "expert" is a scripted oracle, so its datasets can be regenerated without a
download. This follows OGBench's ``data_gen_scripts/generate_locomaze.py`` and the pointmaze lines
of ``data_gen_scripts/commands.sh``:

- env: ``gymnasium.make('pointmaze-<maze>-v0', terminate_at_goal=False, max_episode_steps=T)``;
  nothing terminates early, so every episode is exactly T rows.
- start cell: uniform over free cells. Goal cell: *stitch*, uniform over the cells exactly 4 BFS
  steps from the start (the start itself if there are none); *navigate*, uniform over "vertex"
  cells (free cells that are not straight corridor cells), re-drawn with ``env.set_goal`` (which
  re-noises it) after every step on which the env reports success.
- action: unit vector from the agent to ``env.get_oracle_subgoal`` (centre of the neighbouring
  cell with the smallest BFS distance to the goal cell), plus N(0, 0.5^2) noise, clipped to
  [-1, 1]. The BFS ignores teleporters in the teleport maze, as OGBench's does.
- rows: the observation before the step, the action, ``terminal`` on the last step, and the
  pre-step ``qpos``/``qvel`` (``info['prev_qpos']``/``info['prev_qvel']``). Train and val
  episodes come from one stream, val holding a tenth as many episodes as train.

The oracle's BFS depends only on the goal cell, so ``MazeOracle`` tabulates the subgoal of every
(goal cell, agent cell) pair once per maze, and the loop runs the env's step logic inline on the
unwrapped env. The result is identical, array for array, to the per-step-BFS loop through the
wrapped env on the same seed (tests/agents/test_datagen.py runs that loop beside it).

Both compute the action's norm in plain float64 arithmetic, not with ``np.linalg.norm`` as OGBench does: a
vector's norm in numpy is a BLAS dot product, and OpenBLAS chooses its kernel for the CPU at run time (its
AVX-512 kernel rounds the sum differently), which made the files depend on the machine. The same seed gives the
same bytes on every x86-64 machine (tests/agents/test_datagen.py regenerates a small dataset under two kernels).
"""

import contextlib
import dataclasses
import math
import os
import zipfile

import gymnasium
import mujoco
import numpy as np
import ogbench.locomaze  # noqa: F401  (registers the pointmaze envs with gymnasium)

from runtime.atomic_io import atomic_open
from runtime.provenance import read_sidecar, write_sidecar
from utils.errors import DatasetError
from utils.maze import MazeOracle
from utils.progress import progress_bar

MAZE_TYPES = ('medium', 'large', 'giant', 'teleport')
DATASET_TYPES = ('stitch', 'navigate')
GENERATABLE_DATASETS = tuple(f'pointmaze-{maze}-{kind}-v0' for maze in MAZE_TYPES for kind in DATASET_TYPES)
# OGBench's own pointmaze data were collected by this same scripted oracle: generating them when the
# download fails reproduces OGBench's collection (not its exact files), so main.py may do it unasked.
FAITHFUL = True
DESCRIPTION = 'pointmaze scripted oracle'
# Bytes per row before compression: observation, action, qpos, qvel (2 float32 each) and the terminal flag.
ROW_BYTES = 4 * (2 + 2 + 2 + 2) + 1

ACTION_NOISE = 0.5  # `--noise=0.5` in every pointmaze line of OGBench's commands.sh.
STITCH_GOAL_DISTANCE = 4  # `adj_steps` in generate_locomaze.py.

_POINT_ACTION_SCALE = 0.2  # PointEnv.step moves the point by 0.2 * action before simulating.
# (train episodes, rows per episode = max_episode_steps), from OGBench's commands.sh.
_SIZES = {
    'stitch': {maze: (5000, 201) for maze in MAZE_TYPES},
    'navigate': {'medium': (1000, 1001), 'large': (1000, 1001), 'giant': (500, 2001), 'teleport': (1000, 1001)},
}
# numpy's savez stamps the wall-clock time into every zip entry; a fixed stamp makes the bytes a
# function of the data alone.
_ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """How OGBench collected one maze dataset (`<robot>-<maze>-<type>-v0`)."""

    dataset_name: str
    maze_type: str
    dataset_type: str
    num_train_episodes: int
    episode_length: int

    @property
    def env_name(self):
        return f'{self.dataset_name.split("-")[0]}-{self.maze_type}-v0'


def maze_dataset_spec(dataset_name, supported, sizes):
    """The DatasetSpec of `dataset_name` from a generator's supported names and its
    {dataset type: {maze: (train episodes, rows per episode)}}; ValueError listing the names otherwise."""
    if dataset_name not in supported:
        raise ValueError(f'Cannot generate dataset {dataset_name!r}; supported datasets: {", ".join(supported)}')
    _, maze_type, dataset_type, _ = dataset_name.split('-')
    num_train_episodes, episode_length = sizes[dataset_type][maze_type]
    return DatasetSpec(dataset_name, maze_type, dataset_type, num_train_episodes, episode_length)


def can_generate(dataset_name):
    return dataset_name in GENERATABLE_DATASETS


def dataset_spec(dataset_name):
    return maze_dataset_spec(dataset_name, GENERATABLE_DATASETS, _SIZES)


def make_collection_env(spec):
    """The wrapped env exactly as OGBench's collection script makes it."""
    return gymnasium.make(spec.env_name, terminate_at_goal=False, max_episode_steps=spec.episode_length)


@contextlib.contextmanager
def _seeded_global_np_random(seed):
    """OGBench's maze env draws reset/goal position noise and teleport exits from the global
    np.random; seed it for reproducibility and restore the caller's state afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _streams(seed):
    """(cell_rng, noise_rng): separate streams, so that a whole episode's action noise can be drawn
    at once without shifting the navigate goal re-draws that happen mid-episode."""
    cell_seed, noise_seed = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(cell_seed), np.random.default_rng(noise_seed)


def _random_cell(rng, cells):
    return cells[rng.integers(len(cells))]


def _sample_task(cell_rng, dataset_type, free_cells, vertex_cells, start_distances):
    """(init_ij, goal_ij) as OGBench samples them; `start_distances(init_ij)` gives BFS distances from
    the start cell (only called for stitch)."""
    init_ij = _random_cell(cell_rng, free_cells)
    if dataset_type == 'navigate':
        return init_ij, _random_cell(cell_rng, vertex_cells)
    candidates = np.argwhere(start_distances(init_ij) == STITCH_GOAL_DISTANCE)
    if len(candidates) == 0:
        return init_ij, init_ij
    goal_i, goal_j = candidates[cell_rng.integers(len(candidates))]
    return init_ij, (int(goal_i), int(goal_j))


def _teleport_entrances(env):
    """Teleport entrance positions [k, 2] of the teleport maze, None for the other mazes."""
    if env._teleport_info is None:
        return None
    return np.array(env._teleport_info['teleport_in_xys'], dtype=np.float64)


def _teleport_if_triggered(env, entrances):
    """MazeEnv.step's teleport rule: within 1.5 radii of an entrance (checked in order), move to an
    exit drawn from the global np.random."""
    info = env._teleport_info
    for entrance in entrances:
        offset = env.data.qpos - entrance
        if math.sqrt(offset.dot(offset)) <= info['teleport_radius'] * 1.5:
            exits = info['teleport_out_xys']
            env.set_xy(np.array(exits[np.random.randint(len(exits))]))
            return


def _reset(env, seed, episode, init_ij, goal_ij):
    # Seeding the first reset seeds env.np_random, which draws the reset qvel noise (it survives
    # into the first row's qvel); later resets continue that stream.
    return env.reset(
        seed=seed if episode == 0 else None,
        options=dict(task_info=dict(init_ij=init_ij, goal_ij=goal_ij)),
    )


def generate_pointmaze_dataset(dataset_name, num_episodes, seed, progress=True, return_goal_cells=False):
    """Collects `num_episodes` episodes of an OGBench pointmaze dataset.

    Returns a dict with OGBench's keys and dtypes: observations, actions, qpos, qvel (float32
    [N, 2]) and terminals (bool [N]), N = num_episodes * episode_length. With
    `return_goal_cells`, also returns an int array [num_episodes, 2] of the goal cell in force at
    the end of each episode. Same seed, same arrays.
    """
    spec = dataset_spec(dataset_name)
    # Unwrapped: the loop counts steps itself (TimeLimit is the only wrapper that acts here).
    env = make_collection_env(spec).unwrapped
    oracle = MazeOracle(env)
    length = spec.episode_length
    num_rows = num_episodes * length
    observations, actions, qpos_rows, qvel_rows = (np.empty((num_rows, 2), dtype=np.float32) for _ in range(4))
    terminals = np.zeros(num_rows, dtype=bool)
    terminals[length - 1 :: length] = True
    goal_cells = np.empty((num_episodes, 2), dtype=np.int64)
    navigate = spec.dataset_type == 'navigate'

    model, data, frame_skip = env.model, env.data, env.frame_skip
    qpos, qvel = data.qpos, data.qvel  # Live views of the MuJoCo state.
    teleport_entrances = _teleport_entrances(env)

    with _seeded_global_np_random(seed):
        cell_rng, noise_rng = _streams(seed)
        for episode in progress_bar(range(num_episodes), desc=dataset_name, unit='ep', disable=not progress):
            init_ij, goal_ij = _sample_task(
                cell_rng, spec.dataset_type, oracle.free_cells, oracle.vertex_cells, lambda ij: oracle.distances[ij]
            )
            ob, _ = _reset(env, seed, episode, init_ij, goal_ij)
            # The oracle maps the env's noisy goal position back to a cell, as get_oracle_subgoal does.
            subgoals = oracle.subgoal_xy[oracle.cell(env.cur_goal_xy)]
            noise = noise_rng.normal(0.0, ACTION_NOISE, size=(length, 2))
            for step in range(length):
                row = episode * length + step
                xy = qpos.copy()
                direction = subgoals[oracle.cell(xy)] - xy
                # OGBench's np.linalg.norm, in plain float64 arithmetic: numpy's norm of a vector is a BLAS dot,
                # whose kernel (OpenBLAS picks one for the CPU) rounds differently on AVX-512 and AVX2 machines.
                dx, dy = direction
                action = direction / (math.sqrt(dx * dx + dy * dy) + 1e-6) + noise[step]
                # np.clip(action, -1, 1), minus np.clip's Python-level dispatch (slower than the ufuncs).
                np.minimum(np.maximum(action, -1.0, out=action), 1.0, out=action)
                observations[row] = ob
                actions[row] = action
                qpos_rows[row] = xy
                qvel_rows[row] = qvel

                # env.step, inlined: its physics is three lines, and the copies, checks and info dict
                # around them took about a sixth of each step (MuJoCo takes most of the rest).
                # PointEnv.step:
                qpos[:] = qpos + _POINT_ACTION_SCALE * action
                qvel[:] = 0.0
                mujoco.mj_step(model, data, nstep=frame_skip)
                ob = qpos.copy()
                # MazeEnv.step (success_timing='post'): success is judged before a teleport, and the
                # returned observation is the pre-teleport position. The collection loop then
                # re-draws a reached navigate goal, after the teleport's global-RNG draw.
                success = navigate and env.compute_success()
                if teleport_entrances is not None:
                    _teleport_if_triggered(env, teleport_entrances)
                if success:
                    env.set_goal(_random_cell(cell_rng, oracle.vertex_cells))
                    subgoals = oracle.subgoal_xy[oracle.cell(env.cur_goal_xy)]
            goal_cells[episode] = oracle.cell(env.cur_goal_xy)
    env.close()
    dataset = dict(observations=observations, actions=actions, terminals=terminals, qpos=qpos_rows, qvel=qvel_rows)
    return (dataset, goal_cells) if return_goal_cells else dataset


def _save_npz_atomic(path, arrays, exclusive=False):
    """np.savez_compressed with a fixed zip timestamp, written to a temp file in the same folder
    and moved into place, so readers never see a partial file. `exclusive`: FileExistsError rather
    than replace an existing file."""
    with atomic_open(path, 'wb', exclusive=exclusive) as file:
        with zipfile.ZipFile(file, 'w', compression=zipfile.ZIP_DEFLATED) as archive:
            for key, value in arrays.items():
                entry = zipfile.ZipInfo(f'{key}.npy', date_time=_ZIP_DATE_TIME)
                entry.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(entry, 'w', force_zip64=True) as member:
                    np.lib.format.write_array(member, np.ascontiguousarray(value), allow_pickle=False)


def write_dataset(dataset_name, dataset_dir, seed=0, num_train_episodes=None, num_val_episodes=None, progress=True):
    """Generates and writes `<dataset_dir>/<dataset_name>.npz` and `<dataset_name>-val.npz`.

    Defaults: OGBench's episode count for train, a tenth of the train episodes (at least one,
    since OGBench's loader always reads the val file) for val. Both splits come from one seeded
    stream, val after train, as in OGBench. Returns (train_path, val_path).
    """
    spec = dataset_spec(dataset_name)
    num_train_episodes, num_val_episodes = episode_counts(spec, num_train_episodes, num_val_episodes)

    dataset = generate_pointmaze_dataset(dataset_name, num_train_episodes + num_val_episodes, seed, progress)
    provenance = generator_record(__name__, DESCRIPTION, FAITHFUL, dataset_name, seed, num_train_episodes, num_val_episodes)
    return save_train_val(dataset, dataset_name, dataset_dir, num_train_episodes * spec.episode_length, provenance)


def estimated_bytes(dataset_name, num_train_episodes=None, num_val_episodes=None, **_):
    """Upper bound of the bytes write_dataset puts on disk (uncompressed rows)."""
    spec = dataset_spec(dataset_name)
    num_train_episodes, num_val_episodes = episode_counts(spec, num_train_episodes, num_val_episodes)
    return (num_train_episodes + num_val_episodes) * spec.episode_length * ROW_BYTES


def generator_record(module, description, faithful, dataset_name, seed, num_train_episodes, num_val_episodes, **extra):
    """The provenance a generator records beside its files (runtime/provenance.py adds size, sha256, version)."""
    return dict(source='generated', generator=module, description=description, faithful=faithful, dataset=dataset_name,
                seed=seed, num_train_episodes=num_train_episodes, num_val_episodes=num_val_episodes, **extra)


def episode_counts(spec, num_train_episodes, num_val_episodes):
    """(train, val) episode counts: OGBench's sizes by default, val a tenth of train (at least 1)."""
    if num_train_episodes is None:
        num_train_episodes = spec.num_train_episodes
    if num_val_episodes is None:
        num_val_episodes = max(1, num_train_episodes // 10)
    if num_train_episodes < 1 or num_val_episodes < 1:
        raise ValueError(
            f'Need at least one train and one val episode, got {num_train_episodes} and {num_val_episodes}.'
        )
    return num_train_episodes, num_val_episodes


def save_train_val(dataset, dataset_name, dataset_dir, split, provenance):
    """Rows [:split] to `<name>.npz` and the rest to `<name>-val.npz`, atomically, each with its
    provenance sidecar; returns both paths.

    Never replaces a file: one that exists already is compared with the rows it would receive and kept
    if identical (so a missing val file is regenerated alone from the same seed and counts), and a
    DatasetError is raised, before anything is written, if it differs."""
    dataset_dir = os.path.expanduser(dataset_dir)
    os.makedirs(dataset_dir, exist_ok=True)
    train_path = os.path.join(dataset_dir, f'{dataset_name}.npz')
    val_path = os.path.join(dataset_dir, f'{dataset_name}-val.npz')
    # Val first: OGBench's loader is pointed at the train file and then reads its val sibling.
    splits = [('val', val_path, {key: value[split:] for key, value in dataset.items()}),
              ('train', train_path, {key: value[:split] for key, value in dataset.items()})]
    settings = ', '.join(f'{k}={provenance.get(k)}' for k in ('seed', 'num_train_episodes', 'num_val_episodes'))
    for _, path, arrays in splits:
        if os.path.exists(path) and not _same_arrays(path, arrays):
            raise DatasetError(
                f'{path} already exists and is not what {provenance["generator"]} produces with {settings}. It was '
                f'left untouched and nothing was written: generation never replaces a dataset file. Move it away '
                f'to generate the pair afresh, or pass another --dataset_dir.'
            )
    for split_name, path, arrays in splits:
        if os.path.exists(path):
            if read_sidecar(path) is None:
                write_sidecar(path, dict(provenance, split=split_name, rows=len(arrays['terminals'])))
            continue
        try:
            _save_npz_atomic(path, arrays, exclusive=True)
        except FileExistsError:
            raise DatasetError(f'{path} appeared while it was being generated (another process?); it was not replaced. '
                               f'Rerun once that process is done.') from None
        write_sidecar(path, dict(provenance, split=split_name, rows=len(arrays['terminals'])))
    return train_path, val_path


def _same_arrays(path, arrays):
    """Whether the `.npz` at `path` holds exactly `arrays` (same keys, dtypes, shapes and values)."""
    try:
        with np.load(path) as file:
            if sorted(file.files) != sorted(arrays):
                return False
            return all(file[k].dtype == arrays[k].dtype and np.array_equal(file[k], arrays[k]) for k in arrays)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False
