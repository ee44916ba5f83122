"""What the paper's analyses of a trained run share (scripts/horizon.py, rep_heatmap.py, sp_correlation.py):
restoring the agent from its run directory, its dataset states, representation similarities, and maze geometry.

A run directory is what main.py writes: flags.json (env_name, seed, dataset_dir, ...), config.json (the agent
config plus the sampler's) and checkpoint.msgpack. Maze geometry is OGBench's: a cell (i, j) of `maze_map` is
centred at `env.ij_to_xy((i, j))`, and shortest paths are BFS paths over free cells (teleporters ignored, as in
OGBench's own oracle).
"""

import dataclasses
import functools
import os
import sys
from typing import Any, Dict, List, Tuple

import jax
import ml_collections
import numpy as np

from runtime.checkpoints import CHECKPOINT_NAME, load_checkpoint
from runtime.run_dir import RunDir
from utils.errors import ConfigError, DatasetError
from utils.evaluation import make_env

# Keys main.py adds to config.json that are not agent config.
_NON_AGENT_CONFIG_KEYS = ('sampler',)


@dataclasses.dataclass
class TrainedRun:
    run_dir: str
    agent: Any
    step: int
    config: ml_collections.ConfigDict
    flags: Dict[str, Any]
    env: Any  # one evaluation env copy: spaces, maze layout and evaluation tasks

    @property
    def env_name(self) -> str:
        return self.flags['env_name']

    @property
    def method(self) -> str:
        """The preset the run was started with (as scripts/results.py names methods), else the agent name."""
        return self.config.get('preset') or self.config.agent_name


def _tuples(value):
    """JSON turns the config's tuples (hidden dims, ...) into lists; the agents keep their config as a hashable
    static field of jitted methods, which lists are not."""
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def example_batch(space):
    """One all-zero row shaped like `space`, in the dtype load_dataset gives (float32 for float observations)."""
    dtype = np.float32 if np.issubdtype(space.dtype, np.floating) else space.dtype
    return np.zeros((1, *space.shape), dtype=dtype)


def load_run(run_dir: str) -> TrainedRun:
    """Restore the agent of a main.py run directory at its checkpoint, with one env of its dataset's environment."""
    from agents import get_agent_class

    run_dir = os.path.expanduser(run_dir)
    if not os.path.isdir(run_dir):
        raise ConfigError(f'Run directory {run_dir} ' + ('is a file, not a directory' if os.path.exists(run_dir) else 'does not exist')
                          + ': pass main.py run directories (a glob that matches their .log files too can end in "/").')
    missing = RunDir(run_dir).missing()
    if missing:
        raise ConfigError(
            f'{run_dir} is not a trained main.py run directory: it lacks {", ".join(missing)}. Point --run_dir at a '
            f'directory holding flags.json, config.json and {CHECKPOINT_NAME} (main.py writes the checkpoint every '
            f'--save_interval steps and at the end).'
        )
    flags, saved_config = RunDir(run_dir).read_flags(), RunDir(run_dir).read_config()
    saved = _tuples({k: v for k, v in saved_config.items() if k not in _NON_AGENT_CONFIG_KEYS})
    agent_class = get_agent_class(saved['agent_name'])
    # A field added after the run started has its default, as main.py --resume assumes.
    config = sys.modules[agent_class.__module__].get_config()
    config.update(saved)
    if config.get('stage1_checkpoint'):
        # The checkpoint holds the loaded low level too; the template need not read (or find) that file.
        config.stage1_checkpoint = ''
    env = make_env(flags['env_name'])
    ex_observations, ex_actions = example_batch(env.observation_space), example_batch(env.action_space)
    # The checkpoint overwrites every array of the template, so only its structure and shapes matter: tracing
    # `create` for them costs a fraction of running its network initialisation op by op.
    shapes = jax.eval_shape(lambda: agent_class.create(int(flags.get('seed', 0)), ex_observations, ex_actions, config))
    template = jax.tree_util.tree_map(lambda leaf: np.zeros(leaf.shape, leaf.dtype), shapes)
    try:
        agent, step, _ = load_checkpoint(run_dir, template)
    except ValueError as e:
        raise ConfigError(f'The checkpoint of {run_dir} does not match the agent rebuilt from its config.json: {e}') from e
    # On the device once: numpy leaves would be copied over again at every jitted call.
    return TrainedRun(run_dir, jax.device_put(agent), step, config, flags, env)


@jax.jit
def _agent_representations(agent, observations, actions, goals):
    return agent.representations(observations, actions, goals)


def representation_fn(run: TrainedRun):
    """`(observations, actions, goals) -> (prediction, goal_representation)` of the run's agent, jitted; a clear
    error for agents without a learned representation (plain GCBC, ...)."""
    agent = run.agent
    ex_obs, ex_actions = example_batch(run.env.observation_space), example_batch(run.env.action_space)
    try:
        jax.eval_shape(agent.representations, ex_obs, ex_actions, ex_obs)
    except (NotImplementedError, AttributeError) as e:
        raise ConfigError(
            f'{run.run_dir} trained {run.method} ({type(agent).__name__}), which has no learned representation to '
            f'analyse ({e}). Use a run of BYOL-gamma, BYOL, TRA, TD-SR, GCBC-phi or FB.'
        ) from e
    return functools.partial(_agent_representations, agent)


def cosine_similarity(a, b, eps=1e-8):
    """Row-wise cos(a_k, b_k)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), eps)
    return np.sum(a * b, axis=-1) / norms


def representation_similarities(representations, observations, actions, goals, batch_size=4096):
    """cos(prediction(s_k, a_k, g_k), goal_representation(g_k)) for every row k, `batch_size` rows per call.

    Short chunks are padded to the full size, so a jitted `representations` compiles for one shape only.
    """
    n = len(observations)
    similarities = np.empty(n)
    for start in range(0, n, batch_size):
        rows = slice(start, min(start + batch_size, n))
        chunk = [np.asarray(x[rows]) for x in (observations, actions, goals)]
        size = len(chunk[0])
        if size < batch_size:
            chunk = [np.concatenate([x, np.repeat(x[-1:], batch_size - size, axis=0)]) for x in chunk]
        prediction, goal_representation = representations(*chunk)
        similarities[rows] = cosine_similarity(prediction, goal_representation)[:size]
    return similarities


def load_states(run: TrainedRun, dataset_dir: str = '') -> Dict[str, np.ndarray]:
    """The run's training dataset: observations, actions and the agent's xy position of every row.

    xy comes from the file's `qpos` (OGBench files and this repository's generated ones have it), else from the
    first two observation entries, which are the xy position in every state-based maze (point, ant, humanoid).
    The file is read where it is, never downloaded or generated: the folder the run recorded is not one the user named
    to the analysis, so a missing file is a DatasetError with the commands that obtain it.
    """
    from runtime.dataset_files import dataset_paths
    from runtime.provenance import record_label
    from utils.datasets import load_dataset

    folder = dataset_dir or run.flags['dataset_dir']
    train_path, _ = dataset_paths(run.env_name, folder)
    if not os.path.exists(train_path):
        raise DatasetError(
            f'{train_path}, the dataset {run.run_dir} trained on ({record_label(RunDir(run.run_dir).read_dataset_record())}), '
            f'is not there, and the analyses never download or generate data. Pass --dataset_dir=<the folder that holds '
            f'it>, or obtain it there first: python scripts/generate_dataset.py --env_name={run.env_name} '
            f'--dataset_dir={folder} (this project\'s generator), or python -c "import ogbench; '
            f'ogbench.download_datasets([\'{run.env_name}\'], dataset_dir=\'{folder}\')" (OGBench\'s files).')
    data = load_dataset(train_path, run.env.observation_space, run.env.action_space)
    with np.load(train_path) as file:
        qpos = file['qpos'][:, :2] if 'qpos' in file else None
    if qpos is not None:
        xy = qpos.astype(np.float64)
    elif data['observations'].ndim == 2:
        xy = data['observations'][:, :2].astype(np.float64)
    else:
        raise ConfigError(f'{train_path} has image observations and no qpos: the positions of its states are unknown.')
    return dict(observations=data['observations'], actions=data['actions'], xy=xy)


# --- Maze geometry -------------------------------------------------------------------------------------------------


def maze_oracle(env):
    """The env's BFS distance/subgoal tables; a clear error for environments without a maze."""
    from utils.maze import MazeOracle

    if not hasattr(env.unwrapped, 'maze_map'):
        raise ConfigError(f'{env.spec.id} is not a maze environment: the maze analyses need a maze layout.')
    return MazeOracle(env)


def check_free_cell(oracle, cell):
    height, width = oracle.maze_map.shape
    i, j = cell
    if not (0 <= i < height and 0 <= j < width) or oracle.maze_map[i, j] != 0:
        raise ConfigError(
            f'Cell {tuple(cell)} is not a free cell of this {height}x{width} maze. Free cells: '
            f'{", ".join(f"{a},{b}" for a, b in oracle.free_cells)}.'
        )


def shortest_path(oracle, start_ij, goal_ij) -> List[Tuple[int, int]]:
    """The BFS shortest path of cells from `start_ij` to `goal_ij`, both included: cell d of it is d steps from the
    start. Among equally short paths it takes the one OGBench's oracle follows (its neighbour order)."""
    from utils.maze import NEIGHBOURS

    check_free_cell(oracle, start_ij)
    check_free_cell(oracle, goal_ij)
    to_goal = oracle.distances[tuple(goal_ij)]
    if to_goal[tuple(start_ij)] < 0:
        raise ConfigError(f'Cell {tuple(goal_ij)} cannot be reached from {tuple(start_ij)}.')
    path = [tuple(int(c) for c in start_ij)]
    while path[-1] != tuple(goal_ij):
        i, j = path[-1]
        path.append(next(
            (i + di, j + dj) for di, dj in NEIGHBOURS
            if oracle.maze_map[i + di, j + dj] == 0 and to_goal[i + di, j + dj] == to_goal[i, j] - 1
        ))
    return path


def cell_distances(oracle, cells_a, cells_b):
    """BFS cell distance of every pair (cells_a[k], cells_b[k]); -1 where either cell is not a free cell."""
    cells_a, cells_b = np.asarray(cells_a), np.asarray(cells_b)
    height, width = oracle.maze_map.shape

    def free(cells):
        inside = (cells[:, 0] >= 0) & (cells[:, 0] < height) & (cells[:, 1] >= 0) & (cells[:, 1] < width)
        clipped = np.clip(cells, 0, [height - 1, width - 1])
        return inside & (oracle.maze_map[clipped[:, 0], clipped[:, 1]] == 0), clipped

    free_a, a = free(cells_a)
    free_b, b = free(cells_b)
    distances = oracle.distances[b[:, 0], b[:, 1], a[:, 0], a[:, 1]]
    return np.where(free_a & free_b, distances, -1)


def cells_of(oracle, xy):
    """The cell of every xy row, as the env's xy_to_ij rounds it."""
    return np.array([oracle.cell(p) for p in np.asarray(xy)], dtype=np.int64).reshape(-1, 2)


def cell_centre(env, cell):
    return np.asarray(env.unwrapped.ij_to_xy(tuple(cell)), dtype=np.float64)


def draw_maze(ax, env, oracle):
    """Walls as grey squares in xy coordinates, y up (the env's own frame)."""
    from matplotlib.patches import Rectangle

    unit = cell_centre(env, (0, 1))[0] - cell_centre(env, (0, 0))[0]
    for i, j in np.argwhere(oracle.maze_map == 1):
        x, y = cell_centre(env, (i, j))
        ax.add_patch(Rectangle((x - unit / 2, y - unit / 2), unit, unit, facecolor='0.45', edgecolor='none', zorder=0))
    height, width = oracle.maze_map.shape
    low, high = cell_centre(env, (0, 0)) - unit / 2, cell_centre(env, (height - 1, width - 1)) + unit / 2
    ax.set_xlim(low[0], high[0])
    ax.set_ylim(low[1], high[1])
    ax.set_aspect('equal')
    ax.set_xticks([])
    ax.set_yticks([])


def goal_observation(env_name: str, goal_ij, seed: int = 0):
    """The goal observation of cell `goal_ij` as an evaluation episode gives it (`info['goal']`), at the cell's
    centre (no goal noise) and, for ant/humanoid, with the env's random stabilising actions drawn from `seed`."""
    import ogbench

    env = ogbench.make_env_and_datasets(env_name, env_only=True, add_noise_to_goal=False)
    check_free_cell(maze_oracle(env), goal_ij)
    goal_ij = tuple(int(c) for c in goal_ij)
    caller_rng_state = np.random.get_state()
    try:
        np.random.seed(seed)  # the maze reset draws the start position's noise from the global generator
        env.action_space.seed(seed)
        options = dict(task_info=dict(init_ij=goal_ij, goal_ij=goal_ij), render_goal=False)
        _, info = env.reset(seed=seed, options=options)
    finally:
        np.random.set_state(caller_rng_state)
    env.close()
    return np.asarray(info['goal'])


def parse_cell(text: str) -> Tuple[int, int]:
    try:
        i, j = (int(part) for part in text.split(','))
    except ValueError:
        raise ConfigError(f'A cell is written i,j (row, column of the maze map), e.g. 6,6; got {text!r}.')
    return i, j


def make_output_dir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path
