"""Statistical and exact tests of every sampler rule (docs/method.md, section 3).

Observations encode (episode id, time index), so every sampled goal can be decoded back to the
row it came from.
"""

import jax
import numpy as np
import pytest

from tests.helpers import sampler_config
from utils.training import DeviceDataset, GoalMixture, geometric_offset, sample_batch


def make_data(num_episodes, length, action_dim=2):
    episode = np.repeat(np.arange(num_episodes), length)
    t = np.tile(np.arange(length), num_episodes)
    observations = np.stack([episode, t], axis=1).astype(np.float32)
    actions = np.stack([episode * 1000 + t, -t], axis=1).astype(np.float32)[:, :action_dim]
    terminals = t == length - 1
    return DeviceDataset.from_numpy(observations, actions, terminals)


def draw(data, n, seed=0, **kwargs):
    config = sampler_config(n, **kwargs)
    return jax.tree_util.tree_map(np.asarray, jax.jit(sample_batch, static_argnums=2)(jax.random.PRNGKey(seed), data, config))


def expected_offset_pmf(length, row_pmf):
    """Marginal pmf of the goal offset when the row i is uniform over rows with a successor
    (0..length-2, last row T = length-1) and, given i, the offset has pmf row_pmf(i, T)."""
    pmf = np.zeros(length)
    rows = np.arange(length - 1)
    for i in rows:
        pmf += row_pmf(i, length - 1) / len(rows)
    return pmf


def truncated_geometric(gamma):
    def pmf(i, T):
        out = np.zeros(T + 1)
        ks = np.arange(1, T - i)
        out[ks] = (1 - gamma) * gamma ** (ks - 1)
        out[T - i] = gamma ** (T - i - 1)  # all k >= T - i land on the last row
        return out

    return pmf


def assert_pmf_matches(samples, pmf, n):
    counts = np.bincount(samples, minlength=len(pmf))[: len(pmf)]
    assert counts.sum() == n, 'samples fell outside the support'
    freq = counts / n
    # Each bin within 5 binomial standard deviations, plus a small total-variation bound.
    tolerance = 5 * np.sqrt(pmf * (1 - pmf) / n) + 1e-4
    np.testing.assert_array_less(np.abs(freq - pmf), tolerance)
    assert 0.5 * np.abs(freq - pmf).sum() < 0.01


@pytest.mark.parametrize('gamma', [0.5, 0.9, 0.99])
def test_geometric_offset_matches_geometric_distribution(gamma):
    n = 200_000
    k = np.asarray(geometric_offset(jax.random.PRNGKey(1), gamma, (n,)))
    assert k.min() >= 1
    np.testing.assert_allclose(k.mean(), 1 / (1 - gamma), rtol=0.02)
    support = np.arange(60)
    pmf = np.where(support >= 1, (1 - gamma) * gamma ** (support - 1.0), 0.0)
    counts = np.bincount(np.minimum(k, 59), minlength=60)[:59] / n
    np.testing.assert_array_less(np.abs(counts - pmf[:59]), 5 * np.sqrt(pmf[:59] * (1 - pmf[:59]) / n) + 1e-4)


def test_gamma_zero_gives_next_state():
    data = make_data(20, 30)
    batch = draw(data, 4096, gamma=0.0, value_goals=GoalMixture(geom_sample=True))
    np.testing.assert_array_equal(batch['value_goals'][:, 1] - batch['observations'][:, 1], 1)
    np.testing.assert_array_equal(batch['value_goals'], batch['next_observations'])


@pytest.mark.parametrize('gamma', [0.8, 0.95])
def test_geometric_goals_are_truncated_geometric(gamma):
    length, n = 25, 400_000
    data = make_data(40, length)
    batch = draw(data, n, gamma=gamma, value_goals=GoalMixture(geom_sample=True))
    offsets = batch['value_goals'][:, 1] - batch['observations'][:, 1]
    assert_pmf_matches(offsets.astype(int), expected_offset_pmf(length, truncated_geometric(gamma)), n)


def test_uniform_trajectory_goals_are_uniform_over_the_future():
    length, n = 25, 400_000
    data = make_data(40, length)
    batch = draw(data, n, actor_goals=GoalMixture(geom_sample=False))

    def uniform(i, T):
        out = np.zeros(T + 1)
        out[1 : T - i + 1] = 1.0 / (T - i)
        return out

    offsets = (batch['actor_goals'][:, 1] - batch['observations'][:, 1]).astype(int)
    assert_pmf_matches(offsets, expected_offset_pmf(length, uniform), n)


def test_trajectory_goals_never_leave_their_trajectory():
    data = make_data(50, 17)
    for geom in (True, False):
        batch = draw(data, 50_000, gamma=0.99, actor_goals=GoalMixture(geom_sample=geom), value_goals=GoalMixture(geom_sample=geom))
        for key in ('actor_goals', 'value_goals'):
            np.testing.assert_array_equal(batch[key][:, 0], batch['observations'][:, 0])
            assert np.all(batch[key][:, 1] > batch['observations'][:, 1])
            assert np.all(batch[key][:, 1] <= 16)
        # Sampled rows always have a successor in the same episode.
        assert np.all(batch['observations'][:, 1] < 16)
        np.testing.assert_array_equal(batch['next_observations'][:, 0], batch['observations'][:, 0])
        np.testing.assert_array_equal(batch['next_observations'][:, 1], batch['observations'][:, 1] + 1)


def test_goal_mixture_proportions_and_independence():
    n = 200_000
    data = make_data(2000, 11)
    actor = GoalMixture(p_curgoal=0.2, p_trajgoal=0.5, p_randomgoal=0.3, geom_sample=False)
    value = GoalMixture(p_curgoal=0.6, p_trajgoal=0.1, p_randomgoal=0.3, geom_sample=True)
    batch = draw(data, n, actor_goals=actor, value_goals=value)

    def kinds(goals):
        same_ep = goals[:, 0] == batch['observations'][:, 0]
        cur = same_ep & (goals[:, 1] == batch['observations'][:, 1])
        traj = same_ep & (goals[:, 1] > batch['observations'][:, 1])
        return cur, traj, ~same_ep

    for goals, mixture in ((batch['actor_goals'], actor), (batch['value_goals'], value)):
        cur, traj, other = kinds(goals)
        # A random goal lands in the sampled episode with probability ~1/2000: negligible here.
        for observed, p in ((cur, mixture.p_curgoal), (traj, mixture.p_trajgoal), (other, mixture.p_randomgoal)):
            assert abs(observed.mean() - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-3
    # Actor and value goals are drawn independently.
    a_cur, v_cur = kinds(batch['actor_goals'])[0], kinds(batch['value_goals'])[0]
    assert abs((a_cur & v_cur).mean() - 0.2 * 0.6) < 0.005


def test_random_goals_are_uniform_over_rows():
    n = 300_000
    data = make_data(10, 10)
    batch = draw(data, n, actor_goals=GoalMixture(p_curgoal=0, p_trajgoal=0, p_randomgoal=1))
    rows = (batch['actor_goals'][:, 0] * 10 + batch['actor_goals'][:, 1]).astype(int)
    # Random goals are drawn from rows with a successor (as OGBench does): 9 per episode, uniform.
    pmf = np.where(np.arange(100) % 10 == 9, 0.0, 1.0 / 90)
    assert_pmf_matches(rows, pmf, n)


def test_nstep_windows():
    n_steps = 4
    data = make_data(30, 9)
    batch = draw(data, 20_000, nstep=n_steps)
    t = batch['observations'][:, 1]
    for j in range(n_steps):
        inside = t + j + 1 <= 8
        np.testing.assert_array_equal(batch['nstep_mask'][:, j], inside.astype(np.float32))
        expected_t = np.minimum(t + j + 1, 8)
        np.testing.assert_array_equal(batch['nstep_observations'][:, j, 1], expected_t)
        np.testing.assert_array_equal(batch['nstep_observations'][:, j, 0], batch['observations'][:, 0])
        # a_{t+j} drives s_{t+j} -> s_{t+j+1}; the first action is a_t itself.
        np.testing.assert_array_equal(batch['nstep_actions'][inside, j, 1], -(t[inside] + j))
    np.testing.assert_array_equal(batch['nstep_actions'][:, 0], batch['actions'])
    assert 0 < batch['nstep_mask'][:, -1].mean() < 1


def test_hierarchical_goals():
    subgoal_steps = 5
    data = make_data(40, 21)
    high = GoalMixture(p_curgoal=0.0, p_trajgoal=0.7, p_randomgoal=0.3, geom_sample=False)
    batch = draw(data, 50_000, subgoal_steps=subgoal_steps, high_goals=high)
    obs = batch['observations']
    np.testing.assert_array_equal(batch['low_goals'][:, 1], np.minimum(obs[:, 1] + subgoal_steps, 20))
    np.testing.assert_array_equal(batch['low_goals'][:, 0], obs[:, 0])
    # A goal ahead in the same episode caps the target; any other goal leaves the low-level goal.
    same = (batch['high_goals'][:, 0] == obs[:, 0]) & (batch['high_goals'][:, 1] >= obs[:, 1])
    expected_target = np.where(same, np.minimum(obs[:, 1] + subgoal_steps, batch['high_goals'][:, 1]), np.minimum(obs[:, 1] + subgoal_steps, 20))
    np.testing.assert_array_equal(batch['high_targets'][:, 1], expected_target)
    np.testing.assert_array_equal(batch['high_targets'][:, 0], obs[:, 0])
    assert 0.65 < same.mean() < 0.75

