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


def expected_offset_pmf(length, row_pmf, final_offset=1):
    """Marginal pmf of the goal offset when the row i is uniform over rows with a successor (0..length-2; the last
    row is T = length - 1) and, given i, the offset has pmf row_pmf(i, F), trajectory goals ending at row
    F = T - `final_offset` (1: OGBench's rule, the last row with a successor; 0: goal_rule='last_row')."""
    pmf = np.zeros(length + 1)
    rows = np.arange(length - 1)
    for i in rows:
        row = row_pmf(i, length - 1 - final_offset)
        pmf[:len(row)] += row / len(rows)
    return pmf


def truncated_geometric(gamma):
    """pmf of the geometric goal offset of row i when trajectory goals end at row F."""
    def pmf(i, F):
        out = np.zeros(F + 2)
        if i == F:
            out[0] = 1.0  # the last row with a successor: its trajectory goal is itself
            return out
        ks = np.arange(1, F - i)
        out[ks] = (1 - gamma) * gamma ** (ks - 1)
        out[F - i] = gamma ** (F - i - 1)  # all k >= F - i land on row F
        return out

    return pmf


def ogbench_uniform(i, F):
    """pmf of OGBench's uniform trajectory goal offset of row i: round(lo * d + F * (1 - d)) - i, d ~ U[0, 1),
    lo = min(i + 1, F): half weight on lo and F."""
    out = np.zeros(F + 2)
    lo = min(i + 1, F)
    span = F - lo
    if span == 0:
        out[F - i] = 1.0
        return out
    out[lo - i:F - i + 1] = 1.0 / span
    out[lo - i] = out[F - i] = 0.5 / span
    return out


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
    # Geometric(1 - gamma) has mean 1 / (1 - gamma) and standard deviation sqrt(gamma) / (1 - gamma): within 5 standard
    # errors of the n draws' mean, as the pmf below.
    assert abs(k.mean() - 1 / (1 - gamma)) < 5 * np.sqrt(gamma) / (1 - gamma) / np.sqrt(n)
    support = np.arange(60)
    pmf = np.where(support >= 1, (1 - gamma) * gamma ** (support - 1.0), 0.0)
    counts = np.bincount(np.minimum(k, 59), minlength=60)[:59] / n
    np.testing.assert_array_less(np.abs(counts - pmf[:59]), 5 * np.sqrt(pmf[:59] * (1 - pmf[:59]) / n) + 1e-4)


def test_gamma_zero_gives_next_state():
    """k = 1: the next state, except for the last row with a successor under OGBench's rule (the paper's authors'
    one-step targets too), whose goal is itself; with goal_rule='last_row', always the next state."""
    data = make_data(20, 30)
    batch = draw(data, 4096, gamma=0.0, value_goals=GoalMixture(geom_sample=True))
    last = batch['observations'][:, 1] == 28
    assert 0 < last.sum() < 4096
    np.testing.assert_array_equal(batch['value_goals'][~last], batch['next_observations'][~last])
    np.testing.assert_array_equal(batch['value_goals'][last], batch['observations'][last])
    batch = draw(data, 4096, gamma=0.0, goal_rule='last_row', value_goals=GoalMixture(geom_sample=True))
    np.testing.assert_array_equal(batch['value_goals'], batch['next_observations'])


@pytest.mark.parametrize('gamma', [0.8, 0.95])
def test_geometric_goals_are_truncated_geometric_at_the_last_row_with_a_successor(gamma):
    length, n = 25, 400_000
    data = make_data(40, length)
    batch = draw(data, n, gamma=gamma, value_goals=GoalMixture(geom_sample=True))
    offsets = batch['value_goals'][:, 1] - batch['observations'][:, 1]
    assert_pmf_matches(offsets.astype(int), expected_offset_pmf(length, truncated_geometric(gamma)), n)


def test_uniform_trajectory_goals_follow_ogbench_rounding():
    length, n = 25, 400_000
    data = make_data(40, length)
    batch = draw(data, n, actor_goals=GoalMixture(geom_sample=False))
    offsets = (batch['actor_goals'][:, 1] - batch['observations'][:, 1]).astype(int)
    assert_pmf_matches(offsets, expected_offset_pmf(length, ogbench_uniform), n)


def test_last_row_rule_reaches_the_episode_end_with_uniform_integers():
    """goal_rule='last_row': geometric offsets truncated at the episode's last row T, uniform goals uniform over the
    integers [i + 1, T]."""
    length, n = 25, 400_000
    data = make_data(40, length)
    batch = draw(data, n, gamma=0.9, goal_rule='last_row', actor_goals=GoalMixture(geom_sample=False),
                 value_goals=GoalMixture(geom_sample=True))

    def uniform(i, T):
        out = np.zeros(T + 2)
        out[1:T - i + 1] = 1.0 / (T - i)
        return out

    for key, row_pmf in (('actor_goals', uniform), ('value_goals', truncated_geometric(0.9))):
        offsets = (batch[key][:, 1] - batch['observations'][:, 1]).astype(int)
        assert_pmf_matches(offsets, expected_offset_pmf(length, row_pmf, final_offset=0), n)


def test_trajectory_goals_never_leave_their_trajectory():
    data = make_data(50, 17)
    for rule, last in (('ogbench', 15), ('last_row', 16)):
        for geom in (True, False):
            batch = draw(data, 50_000, gamma=0.99, goal_rule=rule, actor_goals=GoalMixture(geom_sample=geom),
                         value_goals=GoalMixture(geom_sample=geom))
            t = batch['observations'][:, 1]
            for key in ('actor_goals', 'value_goals'):
                np.testing.assert_array_equal(batch[key][:, 0], batch['observations'][:, 0])
                # Ahead of the row, except OGBench's last row with a successor, whose goal is itself.
                assert np.all((batch[key][:, 1] > t) | ((t == last) & (batch[key][:, 1] == t)))
                assert batch[key][:, 1].max() == last
            # Sampled rows always have a successor in the same episode.
            assert np.all(t < 16)
            np.testing.assert_array_equal(batch['next_observations'][:, 0], batch['observations'][:, 0])
            np.testing.assert_array_equal(batch['next_observations'][:, 1], t + 1)


def ogbench_goals(rng, terminals, idxs, p_curgoal, p_trajgoal, geom_sample, gamma):
    """OGBench 1.2.2's GCDataset.sample_goals on the compact dataset its impls load, written out here from its rule:
    a compact dataset marks the last two rows of each episode terminal and the rows with a successor valid;
    trajectory goals end at the first terminal row at or after the sampled row."""
    valid_rows = np.nonzero(~terminals)[0]
    compact_terminals = terminals | np.concatenate([terminals[1:], [True]])
    terminal_rows = np.nonzero(compact_terminals)[0]
    n = len(idxs)
    random_goals = valid_rows[rng.integers(len(valid_rows), size=n)]
    final = terminal_rows[np.searchsorted(terminal_rows, idxs)]
    if geom_sample:
        traj_goals = np.minimum(idxs + rng.geometric(1 - gamma, size=n), final)
    else:
        d = rng.random(n)
        traj_goals = np.round(np.minimum(idxs + 1, final) * d + final * (1 - d)).astype(int)
    goals = np.where(rng.random(n) < p_trajgoal / (1.0 - p_curgoal), traj_goals, random_goals)
    return np.where(rng.random(n) < p_curgoal, idxs, goals)


@pytest.mark.parametrize('geom_sample', [True, False])
def test_goal_rows_have_ogbench_gcdataset_distribution(geom_sample):
    """The joint law of (sampled row, goal row) on episodes of several lengths equals OGBench's, by a chi-square
    test of homogeneity between this sampler's draws and the NumPy rule's (exact pmfs are tested above)."""
    from scipy.stats import chi2_contingency

    lengths = [2, 3, 6, 9]
    terminals = np.concatenate([np.arange(length) == length - 1 for length in lengths])
    rows = np.arange(len(terminals))
    observations = np.stack([rows, rows], axis=1).astype(np.float32)
    data = DeviceDataset.from_numpy(observations, np.zeros((len(rows), 2), np.float32), terminals)
    n = 400_000
    mixture = GoalMixture(p_curgoal=0.2, p_trajgoal=0.5, p_randomgoal=0.3, geom_sample=geom_sample)
    batch = draw(data, n, gamma=0.7, value_goals=mixture)
    ours = np.stack([batch['observations'][:, 0], batch['value_goals'][:, 0]], axis=1).astype(int)
    rng = np.random.default_rng(0)
    valid_rows = np.nonzero(~terminals)[0]
    idxs = valid_rows[rng.integers(len(valid_rows), size=n)]
    reference = np.stack([idxs, ogbench_goals(rng, terminals, idxs, 0.2, 0.5, geom_sample, 0.7)], axis=1)
    cells = lambda pairs: pairs[:, 0] * len(rows) + pairs[:, 1]  # noqa: E731
    support = np.union1d(cells(ours), cells(reference))
    table = np.stack([np.searchsorted(support, cells(pairs)) for pairs in (ours, reference)])
    counts = np.stack([np.bincount(t, minlength=len(support)) for t in table])
    assert np.array_equal(np.nonzero(counts[0])[0], np.nonzero(counts[1])[0]), 'the supports differ'
    assert chi2_contingency(counts).pvalue > 1e-4


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
        # A random goal lands in the sampled episode with probability ~1/2000: negligible here. Row 9 of the 10 rows
        # with a successor has itself as its trajectory goal.
        p_cur, p_traj = mixture.p_curgoal + mixture.p_trajgoal / 10, mixture.p_trajgoal * 9 / 10
        for observed, p in ((cur, p_cur), (traj, p_traj), (other, mixture.p_randomgoal)):
            assert abs(observed.mean() - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-3
    # Actor and value goals are drawn independently.
    a_cur, v_cur = kinds(batch['actor_goals'])[0], kinds(batch['value_goals'])[0]
    last = batch['observations'][:, 1] == 9
    assert abs((a_cur & v_cur & ~last).mean() - 0.2 * 0.6 * 0.9) < 0.005


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
    """As OGBench's HGCDataset: the low-level goal subgoal_steps ahead, capped at the last row with a successor (19
    here); a trajectory goal caps its own target; a random goal's target is the low-level goal, wherever it lands."""
    subgoal_steps = 5
    data = make_data(40, 21)
    for p_trajgoal in (1.0, 0.0):
        high = GoalMixture(p_curgoal=0.0, p_trajgoal=p_trajgoal, p_randomgoal=1.0 - p_trajgoal, geom_sample=False)
        batch = draw(data, 50_000, subgoal_steps=subgoal_steps, high_goals=high)
        obs = batch['observations']
        low = np.minimum(obs[:, 1] + subgoal_steps, 19)
        np.testing.assert_array_equal(batch['low_goals'][:, 1], low)
        np.testing.assert_array_equal(batch['low_goals'][:, 0], obs[:, 0])
        np.testing.assert_array_equal(batch['high_targets'][:, 0], obs[:, 0])
        if p_trajgoal == 1.0:
            np.testing.assert_array_equal(batch['high_goals'][:, 0], obs[:, 0])
            np.testing.assert_array_equal(batch['high_targets'][:, 1], np.minimum(low, batch['high_goals'][:, 1]))
        else:
            # Some random goals land ahead in the row's own episode, within subgoal_steps: still the low-level goal.
            same = (batch['high_goals'][:, 0] == obs[:, 0]) & (batch['high_goals'][:, 1] > obs[:, 1])
            assert np.any(same & (batch['high_goals'][:, 1] < low))
            np.testing.assert_array_equal(batch['high_targets'][:, 1], low)
