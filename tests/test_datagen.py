"""Tests for the offline pointmaze dataset generator (datagen/pointmaze.py)."""

import os

import numpy as np
import ogbench
import pytest
from ogbench.utils import load_dataset

from datagen import pointmaze
from utils.maze import MazeOracle
from datagen.pointmaze import (
    GENERATABLE_DATASETS,
    can_generate,
    dataset_spec,
    generate_pointmaze_dataset,
    generate_pointmaze_dataset_reference,
    make_collection_env,
    write_dataset,
)

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
    assert sorted(os.listdir(dataset_dir)) == sorted([f'{STITCH}.npz', f'{STITCH}-val.npz'])  # No temp files left.

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
    reference = generate_pointmaze_dataset_reference(dataset_name, num_episodes, seed=0, progress=False)
    assert list(fast) == list(reference)
    for key in KEYS:
        assert fast[key].dtype == reference[key].dtype, key
        np.testing.assert_array_equal(fast[key], reference[key], err_msg=key)
    if 'teleport' in dataset_name:
        assert np.any(fast['observations'] != fast['qpos'])  # The teleport path was exercised.


def test_failed_write_leaves_old_file(tmp_path, monkeypatch):
    train_path, _ = write_dataset(STITCH, str(tmp_path), seed=0, num_train_episodes=2, progress=False)
    before = open(train_path, 'rb').read()

    def fail(*args, **kwargs):
        raise OSError('disk full')

    monkeypatch.setattr(pointmaze.np.lib.format, 'write_array', fail)
    with pytest.raises(OSError, match='disk full'):
        write_dataset(STITCH, str(tmp_path), seed=1, num_train_episodes=2, progress=False)
    assert open(train_path, 'rb').read() == before
    assert sorted(os.listdir(tmp_path)) == sorted([f'{STITCH}.npz', f'{STITCH}-val.npz'])


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
