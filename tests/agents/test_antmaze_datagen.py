"""Tests for the committed ant expert and the antmaze generator (datagen/antmaze.py)."""

import gymnasium
import numpy as np
import ogbench
import pytest
from ogbench.online_locomotion.wrappers import GymXYWrapper

import datagen
from datagen import antmaze
from utils.maze import MazeOracle

STITCH = 'antmaze-medium-stitch-v0'
NUM_TRAIN, NUM_VAL, LENGTH = 2, 1, 201
SHAPES = dict(observations=(29,), actions=(8,), terminals=(), qpos=(15,), qvel=(14,))


@pytest.fixture(scope='module')
def expert():
    return antmaze.load_expert()


@pytest.mark.parametrize('direction', [(1.0, 0.0), (-0.6, 0.8)])
def test_committed_expert_walks_along_a_commanded_direction(expert, direction):
    direction = np.array(direction)
    # No re-draw within the test: the wrapper keeps `z` for resample_interval steps.
    env = GymXYWrapper(gymnasium.make('online-ant-v0'), resample_interval=10_000)
    observation, _ = env.reset(seed=0)
    env.z = direction
    observation[-2:] = direction
    start_xy = env.unwrapped.data.qpos[:2].copy()
    steps = 300
    for _ in range(steps):
        observation, _, terminated, _, _ = env.step(expert(observation[None])[0])
        assert not terminated, 'the ant fell over'
    displacement = env.unwrapped.data.qpos[:2] - start_xy
    velocity_along = displacement.dot(direction) / (steps * env.unwrapped.dt)
    # OGBench's ant walks at roughly 1 m/s; well above zero means it follows the command.
    assert velocity_along > 0.3, velocity_along
    assert abs(displacement[0] * direction[1] - displacement[1] * direction[0]) < 0.5 * displacement.dot(direction)


def test_registry_and_sizes():
    for maze in antmaze.MAZE_TYPES:
        assert datagen.can_generate(f'antmaze-{maze}-stitch-v0')
        assert antmaze.dataset_spec(f'antmaze-{maze}-stitch-v0').num_train_episodes == 5000
        assert antmaze.dataset_spec(f'antmaze-{maze}-stitch-v0').episode_length == 201
    assert antmaze.dataset_spec('antmaze-giant-navigate-v0').episode_length == 2001
    assert not datagen.can_generate('antmaze-teleport-explore-v0')


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    dataset_dir = tmp_path_factory.mktemp('data')
    return datagen.write_dataset(
        STITCH, str(dataset_dir), seed=0, num_train_episodes=NUM_TRAIN, num_val_episodes=NUM_VAL, progress=False
    )


def test_written_files_load_with_ogbench(written):
    train_path, val_path = written
    for path, episodes in ((train_path, NUM_TRAIN), (val_path, NUM_VAL)):
        with np.load(path) as raw:
            assert sorted(raw.files) == sorted(SHAPES)
            assert raw['observations'].dtype == np.float32 and raw['terminals'].dtype == bool
            assert np.flatnonzero(raw['terminals']).tolist() == [LENGTH * (e + 1) - 1 for e in range(episodes)]
    env, train, val = ogbench.make_env_and_datasets(STITCH, dataset_path=train_path, compact_dataset=True, add_info=True)
    for dataset, episodes in ((train, NUM_TRAIN), (val, NUM_VAL)):
        for key, shape in SHAPES.items():
            assert dataset[key].shape == (episodes * LENGTH, *shape), key
            assert np.isfinite(dataset[key]).all() if key != 'terminals' else True
        assert dataset['valids'].sum() == episodes * (LENGTH - 1)
        # The observation is the full ant state: qpos then qvel.
        np.testing.assert_array_equal(dataset['observations'], np.concatenate([dataset['qpos'], dataset['qvel']], -1))
        assert np.abs(dataset['actions']).max() <= 1.0
    assert env.observation_space.shape == (29,)
    env.close()


def test_rows_follow_the_dynamics(written):
    """Each row's observation is the state the previous row's action led to, within an episode."""
    train_path, _ = written
    with np.load(train_path) as data:
        observations, actions = data['observations'], data['actions']
    env = gymnasium.make('antmaze-medium-v0', terminate_at_goal=False).unwrapped
    env.reset(seed=0)
    for row in (0, 57, 199):
        env.set_state(observations[row, :15].astype(np.float64), observations[row, 15:].astype(np.float64))
        next_state, *_ = env.step(actions[row])
        # float32 storage of the start state perturbs the simulation slightly.
        np.testing.assert_allclose(next_state, observations[row + 1], atol=2e-2)
    env.close()


def test_generation_is_deterministic_and_the_expert_plus_noise(expert):
    first, info = antmaze.generate_antmaze_dataset(STITCH, 2, seed=3, progress=False, expert=expert, return_episode_info=True)
    second = antmaze.generate_antmaze_dataset(STITCH, 2, seed=3, progress=False, expert=expert)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
    other = antmaze.generate_antmaze_dataset(STITCH, 2, seed=4, progress=False, expert=expert)
    assert not np.array_equal(first['observations'], other['observations'])

    # Recompute what the expert saw: stitch goals stay fixed, so each row's subgoal follows from the
    # episode's goal cell and the ant's cell.
    env = gymnasium.make('antmaze-medium-v0').unwrapped
    oracle = MazeOracle(env)
    env.close()
    goal_cells = np.repeat(info['goal_cells'], LENGTH, axis=0)
    xys = first['qpos'][:, :2].astype(np.float64)
    subgoals = np.stack([oracle.subgoal_xy[tuple(goal) + oracle.cell(xy)] for goal, xy in zip(goal_cells, xys)])
    directions = subgoals - xys
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True) + 1e-6
    clean = expert(antmaze.expert_observations(first['observations'], directions))
    # Where the stored action was not clipped, it is the clean action plus N(0, 0.2^2) noise.
    unclipped = np.abs(first['actions']) < 1.0
    residual = (first['actions'] - clean)[unclipped]
    assert abs(residual.mean()) < 0.03
    assert 0.17 < residual.std() < 0.23


def test_worker_processes_write_byte_identical_files(tmp_path):
    """Batches of 2 episodes: 3 batches, split 2 + 1 between two workers (the second replays the
    first two batches' random draws before simulating its own)."""
    paths = {}
    for workers in (1, 2):
        paths[workers] = datagen.write_dataset(STITCH, str(tmp_path / f'w{workers}'), seed=5, num_train_episodes=4,
                                               num_val_episodes=2, progress=False, num_workers=workers, lockstep_envs=2)
    for one, two in zip(paths[1], paths[2]):
        with open(one, 'rb') as a, open(two, 'rb') as b:
            assert a.read() == b.read(), (one, two)


def test_worker_episode_info_matches_one_process():
    kwargs = dict(progress=False, return_episode_info=True, lockstep_envs=1)
    one = antmaze.generate_antmaze_dataset(STITCH, 3, seed=1, num_workers=1, **kwargs)
    two = antmaze.generate_antmaze_dataset(STITCH, 3, seed=1, num_workers=2, **kwargs)  # episodes split 2 + 1
    for part_one, part_two in zip(one, two):
        assert part_one.keys() == part_two.keys()
        for key in part_one:
            np.testing.assert_array_equal(part_one[key], part_two[key])
    with pytest.raises(ValueError, match='expert=None'):
        antmaze.generate_antmaze_dataset(STITCH, 2, seed=1, num_workers=2, lockstep_envs=1, expert=lambda x: x)
