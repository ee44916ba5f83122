import os
import signal
import subprocess
import sys
import time
import warnings

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from utils.evaluation import evaluate, make_eval_envs, pointmaze_oracle_policy, tile_videos, videos_to_wandb

EPISODES = 3
MAX_STEPS = 150


@pytest.fixture(scope='module')
def medium_envs():
    return make_eval_envs('pointmaze-medium-v0', EPISODES)


@pytest.fixture(scope='module')
def teleport_envs():
    return make_eval_envs('pointmaze-teleport-v0', EPISODES)


# Clipped, not normalised: only exactly rounded element-wise ops, so a row's action cannot depend on the batch size
# (XLA may compile a norm differently for B=1 and B=3, see utils/evaluation.py).
straight_to_goal = jax.jit(lambda observations, goals: jnp.clip(goals - observations, -1.0, 1.0))


def _outcomes(result):
    return np.concatenate([result['per_episode'][t] for t in sorted(result['per_episode'])])


@pytest.mark.parametrize(
    'env_fixture, policy_name, task_ids',
    [
        # Each choice succeeds in some episodes and not in others within MAX_STEPS, so a mix-up of episodes shows.
        ('medium_envs', 'straight', (1, 2)),
        ('medium_envs', 'oracle', (3, 4)),
        # Every episode walks into a teleport, whose exit is drawn from the global np.random inside step().
        ('teleport_envs', 'oracle', (3,)),
    ],
)
def test_lockstep_equals_sequential(request, env_fixture, policy_name, task_ids):
    envs = request.getfixturevalue(env_fixture)
    policy = straight_to_goal if policy_name == 'straight' else pointmaze_oracle_policy(envs[0])
    kwargs = dict(task_ids=task_ids, episodes_per_task=EPISODES, seed=3, max_steps=MAX_STEPS)
    lockstep = evaluate(policy, envs, lockstep=True, **kwargs)
    sequential = evaluate(policy, envs, lockstep=False, **kwargs)

    assert len(np.unique(_outcomes(lockstep))) == 2
    for t in task_ids:
        np.testing.assert_array_equal(lockstep['per_episode'][t], sequential['per_episode'][t])
        np.testing.assert_array_equal(lockstep['final_observations'][t], sequential['final_observations'][t])
    for key in lockstep:
        if key.startswith('evaluation/'):
            assert lockstep[key] == sequential[key], key


def test_lockstep_equals_sequential_antmaze():
    # The ant's goal observation (its joint angles) comes from random actions of env.action_space inside reset.
    envs = make_eval_envs('antmaze-medium-v0', 2)
    action_dim = envs[0].action_space.shape[0]

    def elementwise(observations, goals):
        return np.sin(3.0 * (goals[:, :action_dim] - observations[:, :action_dim]) + np.arange(action_dim))

    kwargs = dict(task_ids=(1,), episodes_per_task=2, seed=0, max_steps=20)
    lockstep = evaluate(elementwise, envs, lockstep=True, **kwargs)
    sequential = evaluate(elementwise, envs, lockstep=False, **kwargs)
    np.testing.assert_array_equal(lockstep['final_observations'][1], sequential['final_observations'][1])


def test_metrics_are_means_of_episodes(medium_envs):
    result = evaluate(straight_to_goal, medium_envs, task_ids=(1, 2), episodes_per_task=EPISODES, max_steps=MAX_STEPS)
    for t in (1, 2):
        assert result[f'evaluation/task{t}_success'] == result['per_episode'][t].mean()
        assert result['per_episode'][t].shape == (EPISODES,)
    assert result['evaluation/overall_success'] == _outcomes(result).mean()
    # Rewards are 1 at the success step only, and a success ends the episode.
    assert result['evaluation/overall_return'] == _outcomes(result).mean()
    assert 0 < result['evaluation/overall_length'] <= MAX_STEPS


def test_oracle_reaches_goal_of_task3(medium_envs):
    # (5, 3) -> (4, 2) are diagonal neighbours with walls on both sides of the corner: about six cells by BFS.
    oracle = pointmaze_oracle_policy(medium_envs[0])
    result = evaluate(oracle, medium_envs, task_ids=(3,), episodes_per_task=EPISODES, max_steps=200)
    np.testing.assert_array_equal(result['per_episode'][3], 1.0)
    assert result['evaluation/overall_length'] < 200


def test_success_is_read_at_the_last_step():
    # Without termination at the goal the oracle arrives by step ~100 and hovers there; the policy then walks west,
    # out of the goal's cell, from step LEAVE on.
    envs = [gymnasium.make('pointmaze-medium-v0', terminate_at_goal=False) for _ in range(EPISODES)]
    oracle = pointmaze_oracle_policy(envs[0])
    LEAVE = 150
    calls = []

    def reach_then_leave(observations, goals):
        calls.append(None)
        if len(calls) > LEAVE:
            return np.tile([-1.0, 0.0], (len(observations), 1))
        return oracle(observations, goals)

    def run(max_steps):
        calls.clear()
        result = evaluate(reach_then_leave, envs, task_ids=(3,), episodes_per_task=EPISODES, max_steps=max_steps)
        assert result['evaluation/overall_length'] == max_steps
        return result['per_episode'][3]

    np.testing.assert_array_equal(run(LEAVE), 1.0)
    np.testing.assert_array_equal(run(LEAVE + 40), 0.0)


def _initial_states(envs, seed):
    first_calls = []

    def record(observations, goals):
        if not first_calls:
            first_calls.append((observations.copy(), goals.copy()))
        return np.zeros((len(observations), 2))

    evaluate(record, envs, task_ids=(1,), episodes_per_task=EPISODES, seed=seed, max_steps=1)
    return first_calls[0]


def test_seeds_set_initial_states(medium_envs):
    obs0, goals0 = _initial_states(medium_envs, seed=0)
    obs0_again, goals0_again = _initial_states(medium_envs, seed=0)
    obs1, goals1 = _initial_states(medium_envs, seed=1)
    np.testing.assert_array_equal(obs0, obs0_again)
    np.testing.assert_array_equal(goals0, goals0_again)
    assert not np.any(np.all(obs0 == obs1, axis=-1))
    assert not np.any(np.all(goals0 == goals1, axis=-1))
    assert len(np.unique(obs0, axis=0)) == EPISODES  # episodes of one task differ too


def test_global_numpy_rng_is_restored(medium_envs):
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    evaluate(straight_to_goal, medium_envs, task_ids=(1,), episodes_per_task=EPISODES, max_steps=5)
    assert np.random.random() == expected


def test_too_few_envs(medium_envs):
    with pytest.raises(ValueError, match='needs at least'):
        evaluate(straight_to_goal, medium_envs, episodes_per_task=EPISODES + 1)
    # Sequential evaluation gets by with one env.
    evaluate(straight_to_goal, medium_envs[:1], task_ids=(1,), episodes_per_task=2, lockstep=False, max_steps=5)


def test_make_eval_envs_from_dataset_name():
    (env,) = make_eval_envs('pointmaze-medium-stitch-v0', 1)
    assert env.spec.id == 'pointmaze-medium-v0'
    assert env.spec.max_episode_steps == 1000


def test_oracle_matches_ogbench(medium_envs):
    maze = medium_envs[0].unwrapped
    oracle = pointmaze_oracle_policy(medium_envs[0])
    free = list(zip(*np.nonzero(maze.maze_map == 0)))
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(200):
        cell, goal_cell = (free[k] for k in rng.integers(len(free), size=2))
        xy = np.array(maze.ij_to_xy(cell)) + rng.uniform(-1.9, 1.9, size=2)
        goal = np.array(maze.ij_to_xy(goal_cell)) + rng.uniform(-1.0, 1.0, size=2)
        if cell == goal_cell:
            continue
        subgoal, _ = maze.get_oracle_subgoal(xy, goal)
        expected = (subgoal - xy) / np.linalg.norm(subgoal - xy)
        np.testing.assert_allclose(oracle(xy[None], goal[None])[0], expected, rtol=1e-12)
        checked += 1
    assert checked > 150


def test_videos(medium_envs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        result = evaluate(straight_to_goal, medium_envs, task_ids=(1, 2), episodes_per_task=EPISODES, max_steps=7,
                          num_video_episodes=1, video_frame_skip=3)
    render_failures = [w for w in caught if 'env.render() failed' in str(w.message)]
    if render_failures:
        pytest.skip(f'rendering unavailable here: {render_failures[0].message}')
    assert len(result['videos']) == 2  # one per task
    for video in result['videos']:
        assert video.dtype == np.uint8
        assert video.shape[0] == 4  # steps 0, 3, 6 and the last one, 7
        assert video.shape[-1] == 3


def test_render_failure_warns_and_evaluation_goes_on():
    envs = make_eval_envs('pointmaze-medium-v0', 2)

    def broken_render():
        raise RuntimeError('no GL')

    for env in envs:
        env.render = broken_render
    with pytest.warns(UserWarning, match='no GL'):
        result = evaluate(straight_to_goal, envs, task_ids=(1, 2), episodes_per_task=2, max_steps=5,
                          num_video_episodes=1)
    assert result['videos'] == []
    assert result['per_episode'][2].shape == (2,)


def test_tile_videos():
    frame = np.ones((1, 4, 5, 3), dtype=np.uint8)
    videos = [frame * 10, np.concatenate([frame * 20, frame * 21, frame * 22]), np.concatenate([frame * 30] * 2)]
    tiled = tile_videos(videos)
    assert tiled.shape == (3, 8, 10, 3)
    np.testing.assert_array_equal(tiled[:, :4, :5], 10)  # the 1-frame video holds its frame
    for k, value in enumerate([20, 21, 22]):
        np.testing.assert_array_equal(tiled[k, :4, 5:], value)
    np.testing.assert_array_equal(tiled[2, 4:, :5], 30)
    np.testing.assert_array_equal(tiled[:, 4:, 5:], 0)  # empty cell


def test_videos_to_wandb():
    import wandb

    video = videos_to_wandb([np.zeros((3, 8, 8, 3), dtype=np.uint8)] * 2, fps=10)
    assert isinstance(video, wandb.Video)


# Parallel lockstep: episodes stepped by worker processes (EnvWorkers), the policy called here on the full batch.


@pytest.fixture(scope='module')
def medium_pool():
    pool = make_eval_envs('pointmaze-medium-v0', 5, num_workers=3)  # 2 + 2 envs in workers, 1 here: uneven
    yield pool
    pool.close()


def _mixing_policy(observations, goals):
    # Mixes rows' coordinates through a matrix product, so XLA's code (and the last bit of an action) could depend
    # on the batch size; the pool must hand the policy the same full batch as in-process lockstep does.
    weights = jnp.array([[0.9, 0.3], [-0.2, 1.1]])
    return jnp.tanh(3.0 * (goals - observations) @ weights)


@pytest.mark.parametrize('episodes', [5, 3])  # all envs, and fewer episodes than envs
def test_parallel_lockstep_equals_lockstep(medium_envs, medium_pool, episodes):
    in_process = make_eval_envs('pointmaze-medium-v0', 5) if episodes > EPISODES else medium_envs
    policy = jax.jit(_mixing_policy)
    kwargs = dict(task_ids=(1, 2), episodes_per_task=episodes, seed=7, max_steps=MAX_STEPS)
    expected = evaluate(policy, in_process, **kwargs)
    parallel = evaluate(policy, medium_pool, **kwargs)
    assert len(np.unique(_outcomes(expected))) == 2
    for t in (1, 2):
        np.testing.assert_array_equal(parallel['per_episode'][t], expected['per_episode'][t])
        np.testing.assert_array_equal(parallel['final_observations'][t], expected['final_observations'][t])
    for key in expected:
        if key.startswith('evaluation/'):
            assert parallel[key] == expected[key], key
    # Sequential evaluation through a pool runs its local env in this process: same episodes, batch-1 calls.
    sequential = evaluate(pointmaze_oracle_policy(medium_envs[0]), medium_pool, task_ids=(3,), episodes_per_task=2,
                          lockstep=False, seed=7, max_steps=MAX_STEPS)
    reference = evaluate(pointmaze_oracle_policy(medium_envs[0]), medium_envs, task_ids=(3,), episodes_per_task=2,
                         seed=7, max_steps=MAX_STEPS)
    np.testing.assert_array_equal(sequential['final_observations'][3], reference['final_observations'][3])


def test_parallel_lockstep_teleport(teleport_envs):
    # Teleport exits are drawn from each worker's own global np.random, re-seeded per episode and step.
    pool = make_eval_envs('pointmaze-teleport-v0', EPISODES, num_workers=2)
    oracle = pointmaze_oracle_policy(teleport_envs[0])
    kwargs = dict(task_ids=(3,), episodes_per_task=EPISODES, seed=3, max_steps=MAX_STEPS)
    try:
        np.testing.assert_array_equal(evaluate(oracle, pool, **kwargs)['final_observations'][3],
                                      evaluate(oracle, teleport_envs, **kwargs)['final_observations'][3])
    finally:
        pool.close()
    assert [p.poll() for p in pool._processes] == [0]  # one worker; this process stepped the other slice


def test_worker_error_is_reported_and_stops_the_pool():
    pool = make_eval_envs('pointmaze-medium-v0', 3, num_workers=3)
    # One episode goes to the first worker alone (this process steps the last slice, empty here). Mazes have tasks
    # 1..5: the worker's reset fails, and its traceback comes back.
    with pytest.raises(RuntimeError, match='(?s)Evaluation worker 0 of pointmaze-medium-v0 failed.*Traceback'):
        evaluate(straight_to_goal, pool, task_ids=(9,), episodes_per_task=1, max_steps=5)
    assert pool.closed and all(p.poll() is not None for p in pool._processes)
    with pytest.raises(RuntimeError, match='closed'):
        evaluate(straight_to_goal, pool, task_ids=(1,), episodes_per_task=3, max_steps=5)


def test_dead_worker_is_reported():
    pool = make_eval_envs('pointmaze-medium-v0', 2, num_workers=2)
    pool._processes[0].kill()
    pool._processes[0].wait()  # dead before the first message: sending to it fails, not only receiving
    with pytest.raises(RuntimeError, match='Evaluation worker 0 of pointmaze-medium-v0 died'):
        evaluate(straight_to_goal, pool, task_ids=(1,), episodes_per_task=2, max_steps=5)
    assert pool.closed


def test_one_worker_means_in_process():
    envs = make_eval_envs('pointmaze-medium-v0', 2, num_workers=1)
    assert isinstance(envs, list) and len(envs) == 2
    assert make_eval_envs('pointmaze-medium-v0', 1, num_workers=4).__class__ is list  # capped at the env count


_POOL_OWNER = '''
import signal, sys, time
from utils.evaluation import evaluate, make_eval_envs
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # what main.py's preemption handling ends in
pool = make_eval_envs('pointmaze-medium-v0', 3, num_workers=3)
evaluate(lambda o, g: g - o, pool, task_ids=(1,), episodes_per_task=3, max_steps=3)
print(' '.join(str(p.pid) for p in pool._processes), flush=True)
time.sleep(60)
'''


def _gone(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().split(')')[-1].split()[0] in ('Z', 'X')  # exited, maybe not yet reaped
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.exists('/proc'), reason='reads process states from /proc')
@pytest.mark.parametrize('how', ['SIGTERM to the process group', 'SIGKILL to the owner'])
def test_workers_stop_with_their_owner(how):
    owner = subprocess.Popen([sys.executable, '-c', _POOL_OWNER], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        worker_pids = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(worker_pids) == 2
        if how.startswith('SIGTERM'):
            os.killpg(owner.pid, signal.SIGTERM)  # as Slurm preempts: workers ignore it, the owner exits and closes them
            assert owner.wait(timeout=20) == 143
        else:
            owner.kill()
            owner.wait(timeout=20)
        deadline = time.monotonic() + 20
        while not all(_gone(pid) for pid in worker_pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in worker_pids)
    finally:
        if owner.poll() is None:
            owner.kill()


def test_parallel_lockstep_videos(medium_envs, medium_pool):
    kwargs = dict(task_ids=(1, 2), episodes_per_task=EPISODES, max_steps=7, num_video_episodes=1, video_frame_skip=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        expected = evaluate(straight_to_goal, medium_envs, **kwargs)
    if any('env.render() failed' in str(w.message) for w in caught):
        pytest.skip('rendering unavailable here')
    parallel = evaluate(straight_to_goal, medium_pool, **kwargs)
    assert len(parallel['videos']) == 2
    for got, want in zip(parallel['videos'], expected['videos']):
        np.testing.assert_array_equal(got, want)
