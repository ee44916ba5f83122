"""Tests for the offline pointmaze dataset generator (datagen/pointmaze.py)."""

import math
import os
import sys

import numpy as np
import ogbench
import pytest
from ogbench.utils import load_dataset

import datagen
from datagen import pointmaze
from datagen.pointmaze import (
    ACTION_NOISE,
    GENERATABLE_DATASETS,
    _random_cell,
    _reset,
    _sample_task,
    _seeded_global_np_random,
    _streams,
    can_generate,
    dataset_spec,
    generate_pointmaze_dataset,
    make_collection_env,
    write_dataset,
)
from runtime.dataset_files import check_writable_space, ensure_dataset
from runtime.provenance import file_source, project_version, read_sidecar, source_label
from utils.errors import DatasetError
from utils.maze import MazeOracle, free_and_vertex_cells

STITCH = 'pointmaze-medium-stitch-v0'
LENGTH = 201
NUM_TRAIN, NUM_VAL = 30, 5
KEYS = ('observations', 'actions', 'terminals', 'qpos', 'qvel')


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    dataset_dir = tmp_path_factory.mktemp('data')
    train_path, val_path = write_dataset(
        STITCH, str(dataset_dir), seed=0, num_train_episodes=NUM_TRAIN, num_val_episodes=NUM_VAL, progress=False
    )
    return dataset_dir, train_path, val_path


def _oracle(dataset_name):
    env = make_collection_env(dataset_spec(dataset_name))
    return env, MazeOracle(env)


def test_spec_sizes_match_ogbench():
    assert dataset_spec('pointmaze-large-stitch-v0').num_train_episodes == 5000
    assert dataset_spec('pointmaze-large-stitch-v0').episode_length == 201
    assert dataset_spec('pointmaze-teleport-navigate-v0').num_train_episodes == 1000
    assert dataset_spec('pointmaze-teleport-navigate-v0').episode_length == 1001
    assert dataset_spec('pointmaze-giant-navigate-v0').episode_length == 2001


def test_files_are_ogbench_format(written):
    dataset_dir, train_path, val_path = written
    assert train_path == os.path.join(dataset_dir, f'{STITCH}.npz')
    assert val_path == os.path.join(dataset_dir, f'{STITCH}-val.npz')
    # No temp files left; each file has its provenance sidecar (the .npz holds OGBench's keys only).
    names = [f'{STITCH}.npz', f'{STITCH}-val.npz']
    assert sorted(os.listdir(dataset_dir)) == sorted(names + [n + '.provenance.json' for n in names])
    record = read_sidecar(train_path)
    assert record['source'] == 'generated' and record['generator'] == 'datagen.pointmaze' and record['faithful']
    assert (record['seed'], record['num_train_episodes'], record['num_val_episodes']) == (0, NUM_TRAIN, NUM_VAL)
    assert record['split'] == 'train' and record['size'] == os.path.getsize(train_path)
    assert record['project_version'] == project_version() != 'unknown'

    for path, num_episodes in [(train_path, NUM_TRAIN), (val_path, NUM_VAL)]:
        with np.load(path) as file:
            assert sorted(file.files) == sorted(KEYS)
            raw = {key: file[key] for key in KEYS}
        num_rows = num_episodes * LENGTH
        for key in ('observations', 'actions', 'qpos', 'qvel'):
            assert raw[key].dtype == np.float32 and raw[key].shape == (num_rows, 2), key
        assert raw['terminals'].dtype == bool and raw['terminals'].shape == (num_rows,)
        np.testing.assert_array_equal(np.nonzero(raw['terminals'])[0], np.arange(LENGTH - 1, num_rows, LENGTH))
        assert np.all(np.abs(raw['actions']) <= 1.0)
        # Without teleporters the observation is the pre-step qpos.
        np.testing.assert_array_equal(raw['observations'], raw['qpos'])
        # Row t's action moves row t's observation to row t + 1 (0.2 * action, unless a wall is hit).
        obs = raw['observations'].reshape(num_episodes, LENGTH, 2)
        act = raw['actions'].reshape(num_episodes, LENGTH, 2)
        moved_freely = np.all(np.abs(obs[:, :-1] + 0.2 * act[:, :-1] - obs[:, 1:]) < 1e-4, axis=-1)
        assert moved_freely.mean() > 0.95

        compact = load_dataset(path, compact_dataset=True)
        assert compact['observations'].shape == (num_rows, 2)
        assert compact['valids'].sum() == num_rows - num_episodes

    env, train, val = ogbench.make_env_and_datasets(STITCH, dataset_path=train_path, compact_dataset=True)
    assert train['observations'].shape == (NUM_TRAIN * LENGTH, 2)
    assert val['observations'].shape == (NUM_VAL * LENGTH, 2)
    assert env.observation_space.shape == (2,) and env.action_space.shape == (2,)
    _, train, _ = ogbench.make_env_and_datasets(STITCH, dataset_path=train_path, add_info=True)
    assert train['next_observations'].shape == (NUM_TRAIN * (LENGTH - 1), 2)
    assert train['qpos'].shape == (NUM_TRAIN * (LENGTH - 1), 2)


def test_stitch_episodes_reach_their_goal_cell():
    # Measured over 300 episodes x 2 seeds: 1.000 on medium, large and giant; 0.80-0.81 on
    # teleport, whose teleporters throw the point away from the goal. These 40 episodes of seed 1
    # give 1.000 (medium) and 0.725 (teleport).
    for dataset_name, threshold in [(STITCH, 0.95), ('pointmaze-teleport-stitch-v0', 0.6)]:
        num_episodes = 40
        dataset, goal_cells = generate_pointmaze_dataset(
            dataset_name, num_episodes, seed=1, progress=False, return_goal_cells=True
        )
        _, oracle = _oracle(dataset_name)
        final_cells = np.array([oracle.cell(xy) for xy in dataset['observations'][LENGTH - 1 :: LENGTH]])
        assert np.mean(np.all(final_cells == goal_cells, axis=1)) > threshold, dataset_name
        # Goals are 4 BFS steps from the start cell (or the start itself when none is).
        for start_xy, goal_ij in zip(dataset['observations'][::LENGTH], goal_cells):
            start_ij = oracle.cell(start_xy)
            distances = oracle.distances[start_ij]
            expected = 4 if np.any(distances == 4) else 0
            assert distances[tuple(goal_ij)] == expected


@pytest.mark.parametrize('dataset_name', GENERATABLE_DATASETS[::2])  # One per maze.
def test_cached_oracle_matches_env(dataset_name):
    env, oracle = _oracle(dataset_name)
    maze = env.unwrapped
    height, width = oracle.maze_map.shape
    rng = np.random.default_rng(0)

    def random_xy():
        # Half anywhere in the grid (walls included), half in free cells; uniform within the cell.
        if rng.random() < 0.5:
            i, j = rng.integers(height), rng.integers(width)
        else:
            i, j = oracle.free_cells[rng.integers(len(oracle.free_cells))]
        return np.array(maze.ij_to_xy((i, j))) + rng.uniform(-2.0, 2.0, size=2)

    for _ in range(300):
        agent_xy, goal_xy = random_xy(), random_xy()
        expected, bfs_map = maze.get_oracle_subgoal(agent_xy, goal_xy)
        assert oracle.cell(agent_xy) == maze.xy_to_ij(agent_xy)
        np.testing.assert_array_equal(oracle.distances[oracle.cell(goal_xy)], bfs_map)
        np.testing.assert_array_equal(oracle.subgoal(agent_xy, goal_xy), expected)


def test_seeding():
    state = np.random.get_state()
    first = generate_pointmaze_dataset(STITCH, 4, seed=7, progress=False)
    again = generate_pointmaze_dataset(STITCH, 4, seed=7, progress=False)
    other = generate_pointmaze_dataset(STITCH, 4, seed=8, progress=False)
    for key in KEYS:
        np.testing.assert_array_equal(first[key], again[key])
    for key in ('observations', 'actions', 'qpos', 'qvel'):
        assert not np.array_equal(first[key], other[key]), key
    # The env's global np.random is seeded inside, and the caller's state is restored.
    np.testing.assert_equal(np.random.get_state(), state)


def test_same_seed_same_file_bytes(tmp_path):
    contents = []
    for folder in ('a', 'b'):
        paths = write_dataset(STITCH, str(tmp_path / folder), seed=3, num_train_episodes=3, progress=False)
        contents.append([open(path, 'rb').read() for path in paths])
    assert contents[0] == contents[1]


# The arrays of 150 episodes of pointmaze-medium-stitch at seed 0, as sha256 over KEYS in order: the same on every
# machine. 150 episodes are enough for OpenBLAS's AVX-512 dot kernel to round one action differently from its AVX2
# kernel when the action's norm goes through BLAS (np.linalg.norm), as it did before version 0.6.0.
MACHINE_INDEPENDENT_EPISODES = 150
MACHINE_INDEPENDENT_SHA256 = '28d5596e5381bd00a0fec633f4084b1d90f131d3ab7b72fc7233b94c214f295e'
HASH_ARRAYS = f"""
import hashlib, numpy as np
from datagen.pointmaze import generate_pointmaze_dataset
arrays = generate_pointmaze_dataset({STITCH!r}, {MACHINE_INDEPENDENT_EPISODES}, seed=0, progress=False)
digest = hashlib.sha256()
for key in {KEYS!r}:
    digest.update(np.ascontiguousarray(arrays[key]).tobytes())
print(digest.hexdigest())
"""


def test_generated_arrays_are_the_same_under_every_blas_kernel():
    """The same seed gives the same arrays whichever BLAS kernel numpy runs: OpenBLAS's generic kernel, its AVX2
    kernel and, on a CPU that has it, its AVX-512 one (OPENBLAS_CORETYPE picks the kernel), each equal to the
    recorded hash, so a machine-dependent generator fails here on any machine that computes differently."""
    import subprocess

    with open('/proc/cpuinfo') as f:
        flags = f.read()
    kernels = ['Prescott', 'Haswell'] + (['SkylakeX'] if 'avx512f' in flags else [])
    digests = {}
    for kernel in kernels:
        result = subprocess.run([sys.executable, '-c', HASH_ARRAYS], capture_output=True, text=True, timeout=300,
                                env={**os.environ, 'OPENBLAS_CORETYPE': kernel})
        assert result.returncode == 0, result.stderr[-2000:]
        digests[kernel] = result.stdout.strip()
    assert digests == {kernel: MACHINE_INDEPENDENT_SHA256 for kernel in kernels}


def generate_pointmaze_dataset_reference(dataset_name, num_episodes, seed):
    """OGBench's collection loop, reimplemented: the wrapped env, get_oracle_subgoal (a BFS) every step. Slow; the
    ground truth of the cached generator, which consumes the same random streams: the same seed gives the same
    arrays."""
    spec = dataset_spec(dataset_name)
    env = make_collection_env(spec)
    maze = env.unwrapped
    free_cells, vertex_cells = free_and_vertex_cells(maze.maze_map)

    def start_distances(init_ij):
        # OGBench runs a BFS from the start cell; get_oracle_subgoal returns that BFS map.
        init_xy = maze.ij_to_xy(init_ij)
        return maze.get_oracle_subgoal(init_xy, init_xy)[1]

    columns = {key: [] for key in KEYS}
    with _seeded_global_np_random(seed):
        cell_rng, noise_rng = _streams(seed)
        for episode in range(num_episodes):
            init_ij, goal_ij = _sample_task(cell_rng, spec.dataset_type, free_cells, vertex_cells, start_distances)
            ob, _ = _reset(env, seed, episode, init_ij, goal_ij)
            done = False
            while not done:
                subgoal_xy, _ = maze.get_oracle_subgoal(maze.get_xy(), maze.cur_goal_xy)
                subgoal_dir = subgoal_xy - maze.get_xy()
                subgoal_dir = subgoal_dir / (math.sqrt(subgoal_dir[0] ** 2 + subgoal_dir[1] ** 2) + 1e-6)
                action = np.clip(subgoal_dir + noise_rng.normal(0.0, ACTION_NOISE, 2), -1, 1)
                next_ob, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                if spec.dataset_type == 'navigate' and info['success']:
                    maze.set_goal(_random_cell(cell_rng, vertex_cells))
                for key, value in zip(KEYS, (ob, action, done, info['prev_qpos'], info['prev_qvel'])):
                    columns[key].append(value)
                ob = next_ob
    env.close()
    return {key: np.array(values, dtype=bool if key == 'terminals' else np.float32) for key, values in columns.items()}


@pytest.mark.parametrize(
    'dataset_name, num_episodes',
    [
        (STITCH, 4),
        ('pointmaze-teleport-stitch-v0', 5),  # Episode 1 of seed 0 goes through a teleporter.
        ('pointmaze-medium-navigate-v0', 2),  # Goals get reached and re-drawn mid-episode.
    ],
)
def test_matches_per_step_bfs_reference(dataset_name, num_episodes):
    fast = generate_pointmaze_dataset(dataset_name, num_episodes, seed=0, progress=False)
    reference = generate_pointmaze_dataset_reference(dataset_name, num_episodes, seed=0)
    assert list(fast) == list(reference)
    for key in KEYS:
        assert fast[key].dtype == reference[key].dtype, key
        np.testing.assert_array_equal(fast[key], reference[key], err_msg=key)
    if 'teleport' in dataset_name:
        assert np.any(fast['observations'] != fast['qpos'])  # The teleport path was exercised.


def test_failed_write_leaves_no_file_and_existing_files_are_never_replaced(tmp_path, monkeypatch):
    train_path, val_path = write_dataset(STITCH, str(tmp_path / 'kept'), seed=0, num_train_episodes=2, progress=False)
    before = [open(p, 'rb').read() for p in (train_path, val_path)]
    # Another seed into the same folder: refused before anything is written.
    with pytest.raises(DatasetError, match='already exists and is not what datagen.pointmaze produces'):
        write_dataset(STITCH, str(tmp_path / 'kept'), seed=1, num_train_episodes=2, progress=False)
    assert [open(p, 'rb').read() for p in (train_path, val_path)] == before

    def fail(*args, **kwargs):
        raise OSError('disk full')

    monkeypatch.setattr(pointmaze.np.lib.format, 'write_array', fail)
    with pytest.raises(OSError, match='disk full'):
        write_dataset(STITCH, str(tmp_path / 'new'), seed=1, num_train_episodes=2, progress=False)
    assert os.listdir(tmp_path / 'new') == []  # no partial file, no temp file


def test_a_missing_val_file_is_regenerated_alone_from_the_recorded_provenance(tmp_path):
    train_path, val_path = write_dataset(STITCH, str(tmp_path), seed=5, num_train_episodes=3, num_val_episodes=2, progress=False)
    train_bytes, val_bytes, train_mtime = open(train_path, 'rb').read(), open(val_path, 'rb').read(), os.stat(train_path).st_mtime_ns
    os.remove(val_path)
    os.remove(val_path + '.provenance.json')
    assert ensure_dataset(STITCH, str(tmp_path), download=False, generator=datagen, log=lambda m: None) == (train_path, val_path)
    assert open(val_path, 'rb').read() == val_bytes
    assert open(train_path, 'rb').read() == train_bytes and os.stat(train_path).st_mtime_ns == train_mtime  # not rewritten


def test_a_file_of_unknown_origin_is_never_paired_with_a_generated_one(tmp_path):
    train_path, val_path = write_dataset(STITCH, str(tmp_path), seed=0, num_train_episodes=2, progress=False)
    os.remove(val_path)
    os.remove(train_path + '.provenance.json')  # now an external file (e.g. an OGBench download)
    before = open(train_path, 'rb').read()
    with pytest.raises(DatasetError, match='exists but .*-val.npz is missing.*no provenance record') as error:
        ensure_dataset(STITCH, str(tmp_path), download=False, generator=datagen, log=lambda m: None)
    assert 'Nothing was written or replaced' in str(error.value) and '--dataset_dir' in str(error.value)
    assert open(train_path, 'rb').read() == before and not os.path.exists(val_path)
    assert source_label(file_source(train_path)).startswith('external')


class FakeGenerator:
    """Records what ensure_dataset asks of a generator (generating for real takes minutes)."""

    GENERATABLE_DATASETS = ('pointmaze-medium-stitch-v0', 'antmaze-medium-stitch-v0')

    def __init__(self):
        self.calls = []

    def can_generate(self, name):
        return name in self.GENERATABLE_DATASETS

    def is_faithful(self, name):
        return name.startswith('pointmaze')

    def describe(self, name):
        return 'the fake generator'

    def write_dataset(self, name, dataset_dir, **kwargs):
        self.calls.append(name)


def test_only_faithful_datasets_are_generated_unasked(tmp_path):
    generator = FakeGenerator()
    ensure_dataset(STITCH, str(tmp_path), download=False, generator=generator, log=lambda m: None)
    assert generator.calls == [STITCH]  # pointmaze: OGBench's own procedure, generated when not downloadable
    with pytest.raises(DatasetError) as error:
        ensure_dataset('antmaze-medium-stitch-v0', str(tmp_path), download=False, generator=generator, log=lambda m: None)
    message = str(error.value)
    assert "NOT OGBench's data" in message and 'scripts/generate_dataset.py --env_name=antmaze-medium-stitch-v0' in message
    assert '--generate_dataset' in message and generator.calls == [STITCH]
    ensure_dataset('antmaze-medium-stitch-v0', str(tmp_path), download=False, generator=generator, generate=True,
                   log=lambda m: None)  # asked for: generated
    assert generator.calls == [STITCH, 'antmaze-medium-stitch-v0']


def test_a_generator_named_by_its_module_is_imported_only_to_make_a_file(tmp_path, monkeypatch):
    """main.py names its generator ('datagen'): with both files there the name is never imported (the generators
    import every simulator they drive, which such a run does not need); with a file missing it is, and generates."""
    present = tmp_path / 'present'
    paths = write_dataset(STITCH, str(present), seed=0, num_train_episodes=2, num_val_episodes=1, progress=False)
    assert ensure_dataset(STITCH, str(present), download=False, generator='no_such_module', log=lambda m: None) == paths
    generator = FakeGenerator()
    monkeypatch.setitem(sys.modules, 'no_such_module', generator)  # what importlib.import_module then returns
    (tmp_path / 'missing').mkdir()
    ensure_dataset(STITCH, str(tmp_path / 'missing'), download=False, generator='no_such_module', log=lambda m: None)
    assert generator.calls == [STITCH]


def test_the_target_folder_is_checked_before_generating(tmp_path, monkeypatch):
    blocker = tmp_path / 'a-file'
    blocker.write_text('')
    generated = []
    monkeypatch.setattr(pointmaze, 'generate_pointmaze_dataset', lambda *a, **k: generated.append(1))
    with pytest.raises(DatasetError, match='Cannot write .* into .*a-file/data'):
        datagen.write_dataset(STITCH, str(blocker / 'data'), num_train_episodes=2, progress=False)
    with pytest.raises(DatasetError, match='need about .* GB .* free'):
        datagen.write_dataset(STITCH, str(tmp_path), num_train_episodes=10**12, progress=False)
    assert not generated
    check_writable_space(str(tmp_path), 1, 'files')  # fine: writable, with room


def test_unsupported_name():
    assert all(can_generate(name) for name in GENERATABLE_DATASETS)
    assert len(GENERATABLE_DATASETS) == 8
    assert not can_generate('antmaze-medium-stitch-v0')
    for call in (
        lambda: dataset_spec('antmaze-medium-stitch-v0'),
        lambda: generate_pointmaze_dataset('pointmaze-arena-stitch-v0', 1, 0),
        lambda: write_dataset('pointmaze-medium-explore-v0', '/nonexistent', progress=False),
    ):
        with pytest.raises(ValueError) as error:
            call()
        assert all(name in str(error.value) for name in GENERATABLE_DATASETS)
