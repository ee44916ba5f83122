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

from tests.helpers import float32_tolerance, network_operations, pointmaze_oracle_policy, skip_without_rendering
from utils.evaluation import (
    FrameStackPolicy,
    evaluate,
    evaluate_seeds,
    evaluation_metrics,
    make_env,
    make_eval_envs,
    native,
    one_env,
    seeds_policy,
    tile_videos,
    videos_to_wandb,
)
from utils.evaluation.envs import GymEpisodes
from utils.evaluation.native import NativeEpisodes
from utils.evaluation.workers import EnvWorkers

EPISODES = 3
MAX_STEPS = 150


@pytest.fixture(scope='module')
def medium_native():
    return make_eval_envs('pointmaze-medium-v0', EPISODES)


@pytest.fixture(scope='module')
def medium_envs():
    return make_eval_envs('pointmaze-medium-v0', EPISODES, native=False)


@pytest.fixture(scope='module')
def teleport_envs():
    return make_eval_envs('pointmaze-teleport-v0', EPISODES)


# Clipped, not normalised: only exactly rounded element-wise ops, so a row's action cannot depend on the batch size
# (XLA may compile a norm differently for B=1 and B=3, see utils/evaluation/episodes.py).
straight_to_goal = jax.jit(lambda observations, goals: jnp.clip(goals - observations, -1.0, 1.0))


def _outcomes(episodes):
    return np.array([record.success for record in episodes])


def _of_task(episodes, task, field):
    """`field` of the records of `task`'s episodes, in order, as one array."""
    return np.array([getattr(record, field) for record in episodes if record.task == task])


def _assert_same_evaluation(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a[:6] == b[:6]  # seed, task, episode, success, return, length
        np.testing.assert_array_equal(a.final_observation, b.final_observation)
        assert (a.video is None) == (b.video is None)
    assert evaluation_metrics(got) == evaluation_metrics(expected)


# The choice of stepping: native where supported, gym envs (here or in worker processes) elsewhere.


@pytest.mark.filterwarnings('ignore:.*precision lowered by casting')  # gymnasium on the cube env's spaces
@pytest.mark.parametrize('env_name, reason', [
    ('pointmaze-medium-v0', None),
    ('pointmaze-giant-stitch-v0', None),
    ('antmaze-large-navigate-v0', None),
    ('humanoidmaze-medium-v0', None),
    ('pointmaze-teleport-v0', 'teleport'),
    ('antmaze-teleport-v0', 'teleport'),
    ('antsoccer-arena-v0', 'not an OGBench point, ant or humanoid maze'),
    ('cube-single-v0', 'not an OGBench point, ant or humanoid maze'),
])
def test_native_stepping_is_chosen_where_supported(env_name, reason):
    env = make_env(env_name)
    assert native.supports(env) == (reason is None)
    if reason is not None:
        assert reason in native.why_not(env)
        with pytest.raises(ValueError, match='cannot be stepped natively'):
            NativeEpisodes(env)
    chosen = make_eval_envs(env_name, 2)
    assert isinstance(chosen, NativeEpisodes if reason is None else list)
    assert one_env(chosen).spec.id == env.spec.id


def test_pixel_and_single_task_mazes_fall_back():
    assert 'observations are rendered' in native.why_not(gymnasium.make('antmaze-medium-v0', ob_type='pixels'))
    assert 'single-task' in native.why_not(gymnasium.make('pointmaze-medium-v0', reward_task_id=1))
    assert 'timing' in native.why_not(gymnasium.make('pointmaze-medium-v0', success_timing='pre'))


def test_gym_paths_on_request():
    assert isinstance(make_eval_envs('pointmaze-medium-v0', 2, native=False), list)
    assert make_eval_envs('pointmaze-medium-v0', 1, num_workers=4, native=False).__class__ is list  # capped
    pool = make_eval_envs('pointmaze-medium-v0', 2, num_workers=2, native=False)
    try:
        assert isinstance(pool, EnvWorkers)
    finally:
        pool.close()


# Native stepping against the gym env, step by step.


def _seed_generators_and_reset(env, task, seed):
    """The seeding every evaluation episode gets (utils/evaluation/episodes.py), spelled out independently."""
    np.random.seed(seed)
    env.action_space.seed(seed)
    options = dict(task_info=task) if isinstance(task, dict) else dict(task_id=task)
    return env.reset(seed=seed, options=dict(options, render_goal=False))


def _gym_rollouts(make, tasks, seeds, actions, limit):
    """Each row's episode stepped through its own gym env with its row of `actions` [rows, steps, dim]: per-step
    observations, rewards, final success and length."""
    rollouts = []
    for task, seed, row_actions in zip(tasks, seeds, actions):
        env = make()
        ob, info = _seed_generators_and_reset(env, task, seed)
        low, high = env.action_space.low, env.action_space.high
        observations, rewards, success = [ob], [], 0.0
        for action in row_actions:
            ob, reward, terminated, _, step_info = env.unwrapped.step(np.clip(action, low, high))
            observations.append(ob)
            rewards.append(reward)
            success = step_info['success']
            if terminated or len(rewards) >= limit:
                break
        rollouts.append(dict(goal=info['goal'], observations=np.stack(observations), rewards=np.array(rewards),
                             success=success))
    return rollouts


def _stepper_rollouts(episodes, tasks, seeds, actions, limit):
    observations, goals = episodes.start(tasks, seeds, [False] * len(seeds), limit, 1)
    trajectories = [[row.copy()] for row in observations]
    for step in range(actions.shape[1]):
        if not episodes.live.any():
            break
        live = episodes.live.copy()
        observations = episodes.step(actions[:, step])
        for i in np.flatnonzero(live):
            trajectories[i].append(observations[i].copy())
    return goals, [np.stack(t) for t in trajectories], episodes.results()


# Near-goal tasks (start and goal in one cell) succeed within a few random steps in some episodes and not in others,
# so success, termination and returns are all exercised; task 1 never succeeds this early.
NEAR = dict(init_ij=(1, 1), goal_ij=(1, 1))


@pytest.mark.parametrize('env_name, kwargs, steps, threads', [
    ('pointmaze-medium-v0', {}, 60, 2),
    ('pointmaze-large-v0', dict(terminate_at_goal=False), 60, 1),  # hovers at the goal: returns above 1
    ('antmaze-medium-v0', {}, 40, 2),
    ('humanoidmaze-medium-v0', {}, 12, 2),
])
def test_native_steps_equal_the_gym_env(env_name, kwargs, steps, threads):
    """The same episodes through both steppers, native and gym (`GymEpisodes`, which every gym path and worker
    process runs), each compared step by step with the gym env stepped directly: observations, and the length,
    return and success that `EpisodeBatch._end_step`, their one rule, makes of them."""
    make = lambda: gymnasium.make(env_name, **kwargs)
    env = make()
    tasks = [NEAR] * 5 + [1] * 2
    seeds = [119 + i for i in range(len(tasks))]  # two of the near-goal episodes start within the ant's tolerance
    # Beyond the action bounds on purpose: clipping is part of the step.
    actions = np.random.default_rng(0).uniform(-1.5, 1.5, size=(len(tasks), steps) + env.action_space.shape)
    actions = actions.astype(np.float32)
    expected = _gym_rollouts(make, tasks, seeds, actions, steps)
    results = _assert_rollouts_equal(NativeEpisodes(env, threads), expected, tasks, seeds, actions, steps)
    gym_results = _assert_rollouts_equal(GymEpisodes([make() for _ in tasks]), expected, tasks, seeds, actions, steps)
    for key in ('length', 'return', 'success', 'final_observation'):
        np.testing.assert_array_equal(results[key], gym_results[key])
    if kwargs.get('terminate_at_goal') is False:
        assert results['return'].max() > 1  # steps at the goal after the first count too
    else:
        assert 0 < results['success'].sum() < len(tasks), results['success']  # both outcomes were compared
        assert results['length'].min() < steps


def _assert_rollouts_equal(stepper, expected, tasks, seeds, actions, steps):
    goals, trajectories, results = _stepper_rollouts(stepper, tasks, seeds, actions, steps)
    for i, rollout in enumerate(expected):
        np.testing.assert_array_equal(goals[i], rollout['goal'])
        np.testing.assert_array_equal(trajectories[i], rollout['observations'])
        assert results['length'][i] == len(rollout['rewards'])
        assert results['return'][i] == rollout['rewards'].sum()
        assert results['success'][i] == rollout['success']
        np.testing.assert_array_equal(results['final_observation'][i], rollout['observations'][-1])
    return results


# Evaluations of N seeds in one batch against an independent evaluation of each seed.


def _reference_evaluation(env, make_policy, seed, task_ids, episodes, max_steps):
    """One seed's evaluation computed the plain way: episode by episode, batch-1 policy calls (a fresh policy per
    episode), the gym env's own step. Returns {task: (successes, returns, lengths, final observations)}."""
    results = {}
    low, high = env.action_space.low, env.action_space.high
    for position, task in enumerate(task_ids):
        key = 2**32 + position if isinstance(task, dict) else task
        rows = []
        for j in range(episodes):
            episode_seed = int(np.random.SeedSequence([seed, key, j]).generate_state(1)[0])
            ob, info = _seed_generators_and_reset(env, task, episode_seed)
            policy, total, length = make_policy(), 0.0, 0
            while True:
                action = np.asarray(policy(ob[None], info['goal'][None]))[0]
                ob, reward, terminated, _, step_info = env.unwrapped.step(np.clip(action, low, high))
                total, length = total + reward, length + 1
                if terminated or length >= max_steps:
                    break
            rows.append((step_info['success'], total, length, ob))
        label = f'info{position}' if isinstance(task, dict) else task
        results[label] = tuple(np.array(column) for column in zip(*rows))
    return results


def _seed_scaled_oracle(env, num_seeds, frame_stack):
    """A policy that tells seeds apart (seed k's rows move at speed 1 - 0.25 k), as a seeds policy gets them:
    seed-major, each seed's rows a contiguous slice. With frame_stack > 1 it also reads the oldest stacked frame,
    so a row's history matters."""
    oracle = pointmaze_oracle_policy(env)

    def policy(observations, goals):
        latest, oldest = observations[:, -2:], observations[:, :2]
        speeds = np.repeat(1.0 - 0.25 * np.arange(num_seeds), len(observations) // num_seeds)[:, None]
        return speeds * oracle(latest, goals[:, :2]) + 0.3 * (latest - oldest)

    return policy if frame_stack == 1 else FrameStackPolicy(policy, frame_stack)


@pytest.fixture(scope='module')
def medium_pool():
    pool = make_eval_envs('pointmaze-medium-v0', 5, num_workers=3, native=False)  # 2 + 2 envs in workers, 1 here
    yield pool
    pool.close()


@pytest.mark.parametrize('num_seeds', [1, 3])
@pytest.mark.parametrize('frame_stack', [1, 3])
@pytest.mark.parametrize('path', ['native', 'native, 2 threads', 'gym', 'gym, 2 rows per batch', 'workers'])
def test_seeds_in_one_batch_equal_each_seeds_own_evaluation(request, num_seeds, frame_stack, path):
    task_ids, episodes, max_steps = (3, NEAR), 2, 80
    seeds = [17, 3, 2**31 - 2][:num_seeds]
    rows = num_seeds * len(task_ids) * episodes
    envs = {
        'native': lambda: make_eval_envs('pointmaze-medium-v0', 1),
        'native, 2 threads': lambda: make_eval_envs('pointmaze-medium-v0', 1, num_workers=2),
        'gym': lambda: make_eval_envs('pointmaze-medium-v0', rows, native=False),
        'gym, 2 rows per batch': lambda: make_eval_envs('pointmaze-medium-v0', 2 * num_seeds, native=False),
        'workers': lambda: request.getfixturevalue('medium_pool'),  # 5 envs: batches of 1 row per seed (N = 3)
    }[path]()
    env = one_env(envs)
    calls = []

    def counted(policy):
        def call(observations, goals):
            calls.append(len(observations))
            return policy(observations, goals)
        call.reset = getattr(policy, 'reset', lambda: None)
        return call

    got = evaluate_seeds(counted(_seed_scaled_oracle(env, num_seeds, frame_stack)), envs, seeds, task_ids, episodes,
                         max_steps=max_steps)
    if path.startswith('native') or path == 'gym':
        assert set(calls) == {rows}  # one batch: every call covers every row
    assert len(got) == num_seeds
    for k, seed in enumerate(seeds):
        # Seed k's rows of the seeds policy act as this single-seed policy.
        expected = _reference_evaluation(env, lambda k=k: _single_seed_policy(env, k, frame_stack), seed, task_ids,
                                         episodes, max_steps)
        records = got[k]
        assert [(r.seed, r.task, r.episode) for r in records] == [
            (seed, label, j) for label in expected for j in range(episodes)]
        for label, (success, returns, lengths, final) in expected.items():
            np.testing.assert_array_equal(_of_task(records, label, 'success'), success)
            np.testing.assert_array_equal(_of_task(records, label, 'return_'), returns)
            np.testing.assert_array_equal(_of_task(records, label, 'length'), lengths)
            np.testing.assert_array_equal(_of_task(records, label, 'final_observation'), final)
        metrics = evaluation_metrics(records)
        assert metrics['evaluation/overall_length'] == np.mean([e[2] for e in expected.values()])
        assert metrics['evaluation/overall_return'] == np.mean([e[1] for e in expected.values()])
        assert metrics['evaluation/overall_success'] == np.mean([e[0].mean() for e in expected.values()])
    outcomes = np.concatenate([_outcomes(r) for r in got])
    assert 0 < outcomes.mean() < 1  # task 3 needs ~100 steps at full speed: episodes both succeed and fail


def _single_seed_policy(env, k, frame_stack):
    """Seed k's rows of `_seed_scaled_oracle`, as a one-seed policy."""
    oracle = pointmaze_oracle_policy(env)

    def policy(observations, goals):
        latest, oldest = observations[:, -2:], observations[:, :2]
        return (1.0 - 0.25 * k) * oracle(latest, goals[:, :2]) + 0.3 * (latest - oldest)

    return policy if frame_stack == 1 else FrameStackPolicy(policy, frame_stack)


def test_bad_inputs_fail_before_any_episode(medium_native):
    def never(observations, goals):
        raise AssertionError('no episode should run')

    with pytest.raises(ValueError, match=r'Task id 9 is out of range: pointmaze-medium-v0 has task ids 1\.\.5'):
        evaluate(never, medium_native, task_ids=(1, 9))
    with pytest.raises(ValueError, match='repeat a task'):
        evaluate(never, medium_native, task_ids=(2, 2))
    with pytest.raises(ValueError, match='neither a task id'):
        evaluate(never, medium_native, task_ids=('1',))
    with pytest.raises(ValueError, match='at least one seed'):
        evaluate_seeds(never, medium_native, seeds=[])
    with pytest.raises(ValueError, match='episodes_per_task must be positive'):
        evaluate(never, medium_native, episodes_per_task=0)


def test_fewer_gym_envs_than_seeds(medium_envs):
    with pytest.raises(ValueError, match='Evaluating 4 seeds together needs at least 4 envs'):
        evaluate_seeds(straight_to_goal, medium_envs, seeds=[0, 1, 2, 3], task_ids=(1,), episodes_per_task=1)


# The evaluation's own guarantees, on every path.


@pytest.mark.parametrize(
    'env_fixture, policy_name, task_ids',
    [
        # Each choice succeeds in some episodes and not in others within MAX_STEPS, so a mix-up of episodes shows.
        ('medium_native', 'straight', (1, 2)),
        ('medium_envs', 'straight', (1, 2)),
        ('medium_native', 'oracle', (3, 4)),
        ('medium_envs', 'oracle', (3, 4)),
        # Every episode walks into a teleport, whose exit is drawn from the global np.random inside step().
        ('teleport_envs', 'oracle', (3,)),
    ],
)
def test_lockstep_equals_sequential(request, env_fixture, policy_name, task_ids):
    envs = request.getfixturevalue(env_fixture)
    policy = straight_to_goal if policy_name == 'straight' else pointmaze_oracle_policy(one_env(envs))
    kwargs = dict(task_ids=task_ids, episodes_per_task=EPISODES, seed=3, max_steps=MAX_STEPS)
    lockstep = evaluate(policy, envs, lockstep=True, **kwargs)
    sequential = evaluate(policy, envs, lockstep=False, **kwargs)
    assert len(np.unique(_outcomes(lockstep))) == 2
    _assert_same_evaluation(lockstep, sequential)


def test_lockstep_equals_sequential_antmaze():
    # The ant's goal observation (its joint angles) comes from random actions of env.action_space inside reset.
    envs = make_eval_envs('antmaze-medium-v0', 2)
    assert isinstance(envs, NativeEpisodes)
    action_dim = one_env(envs).action_space.shape[0]

    def elementwise(observations, goals):
        return np.sin(3.0 * (goals[:, :action_dim] - observations[:, :action_dim]) + np.arange(action_dim))

    kwargs = dict(task_ids=(1,), episodes_per_task=2, seed=0, max_steps=20)
    lockstep = evaluate(elementwise, envs, lockstep=True, **kwargs)
    sequential = evaluate(elementwise, envs, lockstep=False, **kwargs)
    np.testing.assert_array_equal(_of_task(lockstep, 1, 'final_observation'),
                                  _of_task(sequential, 1, 'final_observation'))


@pytest.mark.parametrize('env_fixture', ['medium_native', 'medium_envs'])
def test_metrics_are_means_of_episodes(request, env_fixture):
    envs = request.getfixturevalue(env_fixture)
    episodes = evaluate(straight_to_goal, envs, task_ids=(1, 2), episodes_per_task=EPISODES, seed=4,
                        max_steps=MAX_STEPS)
    assert [(r.seed, r.task, r.episode) for r in episodes] == [(4, t, j) for t in (1, 2) for j in range(EPISODES)]
    metrics = evaluation_metrics(episodes)
    assert list(metrics) == ['evaluation/task1_success', 'evaluation/task2_success', 'evaluation/overall_success',
                             'evaluation/overall_return', 'evaluation/overall_length']
    for t in (1, 2):
        assert metrics[f'evaluation/task{t}_success'] == _of_task(episodes, t, 'success').mean()
    assert metrics['evaluation/overall_success'] == _outcomes(episodes).mean()
    # Rewards are 1 at the success step only, and a success ends the episode.
    assert metrics['evaluation/overall_return'] == _outcomes(episodes).mean()
    assert 0 < metrics['evaluation/overall_length'] <= MAX_STEPS


def test_oracle_reaches_goal_of_task3(medium_native):
    # (5, 3) -> (4, 2) are diagonal neighbours with walls on both sides of the corner: about six cells by BFS.
    oracle = pointmaze_oracle_policy(one_env(medium_native))
    episodes = evaluate(oracle, medium_native, task_ids=(3,), episodes_per_task=EPISODES, max_steps=200)
    np.testing.assert_array_equal(_outcomes(episodes), [1.0] * EPISODES)
    assert evaluation_metrics(episodes)['evaluation/overall_length'] < 200


@pytest.mark.parametrize('native_stepping', [True, False])
def test_success_is_read_at_the_last_step(native_stepping):
    # Without termination at the goal the oracle arrives by step ~100 and hovers there; the policy then walks west,
    # out of the goal's cell, from step LEAVE on.
    envs = [gymnasium.make('pointmaze-medium-v0', terminate_at_goal=False) for _ in range(EPISODES)]
    if native_stepping:
        envs = NativeEpisodes(envs[0])
    oracle = pointmaze_oracle_policy(one_env(envs))
    LEAVE = 150
    calls = []

    def reach_then_leave(observations, goals):
        calls.append(None)
        if len(calls) > LEAVE:
            return np.tile([-1.0, 0.0], (len(observations), 1))
        return oracle(observations, goals)

    def run(max_steps):
        calls.clear()
        episodes = evaluate(reach_then_leave, envs, task_ids=(3,), episodes_per_task=EPISODES, max_steps=max_steps)
        assert [record.length for record in episodes] == [max_steps] * EPISODES
        return _outcomes(episodes)

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


def test_seeds_set_initial_states(medium_native):
    obs0, goals0 = _initial_states(medium_native, seed=0)
    obs0_again, goals0_again = _initial_states(medium_native, seed=0)
    obs1, goals1 = _initial_states(medium_native, seed=1)
    np.testing.assert_array_equal(obs0, obs0_again)
    np.testing.assert_array_equal(goals0, goals0_again)
    assert not np.any(np.all(obs0 == obs1, axis=-1))
    assert not np.any(np.all(goals0 == goals1, axis=-1))
    assert len(np.unique(obs0, axis=0)) == EPISODES  # episodes of one task differ too



def test_evaluations_of_a_run_at_different_steps_start_from_different_states(medium_native):
    """main.py evaluates a run at step t with the evaluation seed drawn from fold_in(its evaluation stream, t)
    (`evaluate_agents`): the evaluations of one run at two steps start their episodes from different states (a score
    averaging several evaluations averages that many sets of episodes), and one step's are the same each time."""
    from utils.evaluation import evaluate_agents
    from utils.random_streams import stream_key

    class RecordingAgent:
        """An agent that acts with zeros and records the observations and goals its episodes start from."""

        def __init__(self):
            self.starts = []

        def evaluation_policy(self):
            calls = []

            def policy(observations, goals):
                if not calls:
                    self.starts.append((observations.copy(), goals.copy()))
                calls.append(1)
                return np.zeros((len(observations), 2))
            return policy

    def starts_at(step):
        agent = RecordingAgent()
        evaluate_agents(agent, 1, medium_native, jnp.stack([stream_key(0, 'evaluation')]), step, task_ids=(1,),
                        episodes_per_task=EPISODES, max_steps=1)
        return agent.starts[0]

    (obs_a, goals_a), (obs_a_again, goals_a_again), (obs_b, goals_b) = starts_at(100), starts_at(100), starts_at(200)
    np.testing.assert_array_equal(obs_a, obs_a_again)
    np.testing.assert_array_equal(goals_a, goals_a_again)
    assert not np.any(np.all(obs_a == obs_b, axis=-1)) and not np.any(np.all(goals_a == goals_b, axis=-1))

@pytest.mark.parametrize('env_fixture', ['medium_native', 'medium_envs'])
def test_global_numpy_rng_is_restored(request, env_fixture):
    envs = request.getfixturevalue(env_fixture)
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    evaluate(straight_to_goal, envs, task_ids=(1,), episodes_per_task=EPISODES, max_steps=5)
    assert np.random.random() == expected


def test_fewer_gym_envs_than_episodes_run_in_batches(medium_envs, medium_native):
    # 3 envs for 2 tasks x 3 episodes: two batches of three rows, the same episodes as one batch of all six.
    sizes = []

    def policy(observations, goals):
        sizes.append(len(observations))
        return pointmaze_oracle_policy(one_env(medium_envs))(observations, goals)

    kwargs = dict(task_ids=(3, 4), episodes_per_task=EPISODES, seed=5, max_steps=MAX_STEPS)
    batched = evaluate(policy, medium_envs, **kwargs)
    assert set(sizes) == {EPISODES}
    sizes.clear()
    _assert_same_evaluation(batched, evaluate(policy, medium_native, **kwargs))
    assert set(sizes) == {2 * EPISODES}


def test_make_eval_envs_from_dataset_name():
    for envs in (make_eval_envs('pointmaze-medium-stitch-v0', 1), make_eval_envs('pointmaze-medium-stitch-v0', 1, native=False)):
        assert one_env(envs).spec.id == 'pointmaze-medium-v0'
        assert one_env(envs).spec.max_episode_steps == 1000


def test_oracle_matches_ogbench(medium_native):
    maze = one_env(medium_native).unwrapped
    oracle = pointmaze_oracle_policy(one_env(medium_native))
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
        # Both in float64 from the same subgoal: a difference, a 2-term norm and a division, within 8 u = 1e-15.
        np.testing.assert_allclose(oracle(xy[None], goal[None])[0], expected, rtol=0, atol=8 * 2.0**-53)
        checked += 1
    assert checked > 150


def _videos_or_skip(policy, envs, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        episodes = evaluate(policy, envs, **kwargs)
    render_failures = [w for w in caught if 'env.render() failed' in str(w.message)]
    if render_failures:
        skip_without_rendering(f'rendering unavailable here: {render_failures[0].message}')
    return _videos(episodes)


def _videos(episodes):
    return [record.video for record in episodes if record.video is not None]


def test_videos(medium_native, medium_envs):
    kwargs = dict(task_ids=(1, 2), episodes_per_task=EPISODES, max_steps=7, num_video_episodes=2, video_frame_skip=3)
    videos = _videos_or_skip(straight_to_goal, medium_envs, **kwargs)
    assert len(videos) == 4  # two per task: the first two episodes of each
    for video in videos:
        assert video.dtype == np.uint8
        assert video.shape[0] == 4  # steps 0, 3, 6 and the last one, 7
        assert video.shape[-1] == 3
    # Native episodes are drawn by the env from each episode's own state and goal marker: the same frames.
    native_videos = _videos_or_skip(straight_to_goal, medium_native, **kwargs)
    assert len(native_videos) == 4
    for got, want in zip(native_videos, videos):
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(videos[0], videos[1])  # different episodes, different frames


@pytest.mark.parametrize('native_stepping', [True, False])
def test_render_failure_warns_and_evaluation_goes_on(native_stepping):
    envs = make_eval_envs('pointmaze-medium-v0', 2, native=native_stepping)

    def broken_render():
        raise RuntimeError('no GL')

    for env in ([one_env(envs)] if native_stepping else envs):
        env.render = broken_render
    with pytest.warns(UserWarning, match='no GL'):
        episodes = evaluate(straight_to_goal, envs, task_ids=(1, 2), episodes_per_task=2, max_steps=5,
                            num_video_episodes=1)
    assert len(episodes) == 4 and all(record.video is None for record in episodes)


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


# Seeds policies: N agents' actions in one call.


def test_seeds_policy_acts_with_each_seeds_agent():
    from configs.presets import get_config
    from tests.helpers import make_agent, small
    from utils.training import stack_trees

    config = small(get_config('gcbc'))
    agents = [make_agent(config, seed) for seed in (0, 1, 2)]
    observations, goals = np.random.default_rng(0).normal(size=(2, 3 * 5, 4)).astype(np.float32)
    actions = seeds_policy(stack_trees(agents), 3)(observations, goals)
    assert actions.shape == (15, 2)
    for k, agent in enumerate(agents):
        rows = slice(5 * k, 5 * (k + 1))
        expected = agent.sample_actions(observations[rows], goals[rows], temperature=0.0)
        # GCBC's actor (fan-ins 8, 64, 64 on unit normals) vmapped over seeds and alone: both evaluations' rounding.
        np.testing.assert_allclose(actions[rows], expected, **float32_tolerance(2 * network_operations((8, 64, 64)), 8))
    single = seeds_policy(agents[1], 1)(observations[:5], goals[:5])
    np.testing.assert_array_equal(single, agents[1].sample_actions(observations[:5], goals[:5], temperature=0.0))
    with pytest.raises(ValueError, match='does not split into 3 seeds'):
        seeds_policy(stack_trees(agents), 3)(observations[:7], goals[:7])


def test_seeds_policy_runs_each_seeds_own_stateful_policy():
    from configs.presets import get_config
    from tests.helpers import make_agent, small
    from utils.training import stack_trees

    config = small(get_config('hgcbc'))
    config.replan_every = 4
    agents = [make_agent(config, seed) for seed in (0, 1)]
    policy = seeds_policy(stack_trees(agents), 2, frame_stack=1)
    observations, goals = np.random.default_rng(1).normal(size=(2, 6, 4)).astype(np.float32)
    actions = policy(observations, goals)
    for k, agent in enumerate(agents):
        own = agent.evaluation_policy()
        # pi_h and pi_l (fan-ins 8, 64, 64 each) vmapped over seeds and alone: both evaluations' rounding.
        np.testing.assert_allclose(actions[3 * k:3 * (k + 1)], own(observations[3 * k:3 * (k + 1)], goals[3 * k:3 * (k + 1)]),
                                   **float32_tolerance(2 * 2 * network_operations((8, 64, 64)), 8))
    # Held subgoals: a new goal alone does not change the actions until the next re-plan, which reset() brings.
    np.testing.assert_array_equal(policy(observations, goals + 5.0), policy(observations, goals))
    policy.reset()
    assert not np.allclose(policy(observations, goals + 5.0), actions)


# Parallel lockstep over processes (EnvWorkers): the policy called here on the full batch.


def _mixing_policy(observations, goals):
    # Mixes rows' coordinates through a matrix product, so XLA's code (and the last bit of an action) could depend
    # on the batch size; the pool must hand the policy the same full batch as in-process lockstep does.
    weights = jnp.array([[0.9, 0.3], [-0.2, 1.1]])
    return jnp.tanh(3.0 * (goals - observations) @ weights)


@pytest.fixture(scope='module')
def medium_envs_5():
    return make_eval_envs('pointmaze-medium-v0', 5, native=False)


@pytest.mark.parametrize('episodes', [5, 3])  # one task per batch, and batches that mix tasks
def test_parallel_lockstep_equals_lockstep(medium_envs, medium_envs_5, medium_pool, episodes):
    policy = jax.jit(_mixing_policy)
    kwargs = dict(task_ids=(1, 2), episodes_per_task=episodes, seed=7, max_steps=MAX_STEPS)
    expected = evaluate(policy, medium_envs_5, **kwargs)  # as many envs as the pool: the same batches
    parallel = evaluate(policy, medium_pool, **kwargs)
    assert len(np.unique(_outcomes(expected))) == 2
    _assert_same_evaluation(parallel, expected)
    # Sequential evaluation through a pool: same episodes, batch-1 calls.
    oracle = pointmaze_oracle_policy(one_env(medium_envs))
    sequential = evaluate(oracle, medium_pool, task_ids=(3,), episodes_per_task=2, lockstep=False, seed=7,
                          max_steps=MAX_STEPS)
    reference = evaluate(oracle, medium_envs, task_ids=(3,), episodes_per_task=2, seed=7, max_steps=MAX_STEPS)
    np.testing.assert_array_equal(_of_task(sequential, 3, 'final_observation'),
                                  _of_task(reference, 3, 'final_observation'))


def test_parallel_lockstep_teleport(teleport_envs):
    # Teleport exits are drawn from each worker's own global np.random, re-seeded per episode and step.
    pool = make_eval_envs('pointmaze-teleport-v0', EPISODES, num_workers=2)
    assert isinstance(pool, EnvWorkers)  # the teleport maze falls back to gym stepping
    oracle = pointmaze_oracle_policy(one_env(teleport_envs))
    kwargs = dict(task_ids=(3,), episodes_per_task=EPISODES, seed=3, max_steps=MAX_STEPS)
    try:
        np.testing.assert_array_equal(_of_task(evaluate(oracle, pool, **kwargs), 3, 'final_observation'),
                                      _of_task(evaluate(oracle, teleport_envs, **kwargs), 3, 'final_observation'))
    finally:
        pool.close()
    assert [p.poll() for p in pool._processes] == [0]  # one worker; this process stepped the other slice


def test_worker_error_is_reported_and_stops_the_pool():
    pool = make_eval_envs('pointmaze-medium-v0', 3, num_workers=3, native=False)
    # One episode goes to the first worker alone (this process steps the last slice, empty here). A task_info without
    # a goal passes the evaluation's checks but fails the worker's reset, and its traceback comes back.
    with pytest.raises(RuntimeError, match=r"(?s)Evaluation worker 0 \(pid \d+\) of pointmaze-medium-v0 failed: .*goal_ij.*"
                                           r"\nTraceback.*goal_ij"):
        evaluate(straight_to_goal, pool, task_ids=(dict(init_ij=(1, 1)),), episodes_per_task=1, max_steps=5)
    assert pool.closed and all(p.poll() is not None for p in pool._processes)
    with pytest.raises(RuntimeError, match='closed'):
        evaluate(straight_to_goal, pool, task_ids=(1,), episodes_per_task=3, max_steps=5)


def test_dead_worker_is_reported():
    pool = make_eval_envs('pointmaze-medium-v0', 2, num_workers=2, native=False)
    pool._processes[0].kill()
    pool._processes[0].wait()  # dead before the first message: sending to it fails, not only receiving
    with pytest.raises(RuntimeError, match=rf'Evaluation worker 0 \(pid {pool._processes[0].pid}\) of pointmaze-medium-v0 '
                                           r'was killed by SIGKILL, which leaves no error message') as error:
        evaluate(straight_to_goal, pool, task_ids=(1,), episodes_per_task=2, max_steps=5)
    assert 'output above' not in str(error.value)
    assert pool.closed


_POOL_OWNER = '''
import signal, sys, time
from utils.evaluation import evaluate, make_eval_envs
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # what main.py's preemption handling ends in
pool = make_eval_envs('pointmaze-medium-v0', 3, num_workers=3, native=False)
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
    expected = _videos_or_skip(straight_to_goal, medium_envs, **kwargs)
    parallel = _videos(evaluate(straight_to_goal, medium_pool, **kwargs))
    assert len(parallel) == 2
    for got, want in zip(parallel, expected):
        np.testing.assert_array_equal(got, want)
