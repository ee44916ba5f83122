"""The offline RL losses (utils/rl_losses.py) against direct NumPy loops on small arrays: values, and
gradients by central differences of the NumPy reference (float64); the sampler's rewards and masks. JAX computes in
float32 from the float64 inputs rounded: the tolerances are float32's rounding bound (tests/helpers.py
`float32_tolerance`), counted at TOL."""

import itertools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import float32_tolerance, numeric_grad, sampler_config
from utils import rl_losses as L, value_networks
from utils.training import DeviceDataset, GoalMixture, sample_batch

RNG = None  # each test's generator, set by fresh_rng


@pytest.fixture(autouse=True)
def fresh_rng(request):
    """Each test draws its inputs from a generator seeded by its own name: the same arrays whichever tests ran
    before it in this process (pytest-xdist splits a module between workers)."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


# Every loss here takes under 32 rounded operations in sequence (the inputs' rounding to float32, sums over at most 12
# entries, a few elementwise operations), on values of magnitude below 16 (unit-normal inputs), and so do their
# gradients; AWR's weights (up to 100) times log-likelihoods and QRL's negative term, 100 softplus(5 - d / 100) of
# distances up to 250, stay below 512 (LARGE_TOL).
TOL = float32_tolerance(32, 16)
LARGE_TOL = float32_tolerance(32, 512)


def assert_grad(jax_f, np_f, x, tolerance=TOL):
    got = np.asarray(jax.grad(lambda v: jax_f(v))(jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(got, numeric_grad(np_f, x), **tolerance)


# ----------------------------------------------------------------------------- NumPy references


def np_expectile(adv, diff, tau):
    out = np.zeros_like(diff, dtype=np.float64)
    for i in np.ndindex(diff.shape):
        out[i] = (tau if adv[i] >= 0 else 1 - tau) * diff[i] ** 2
    return out


def np_implicit_v(values, target, next_target, r, m, gamma, tau):
    E, B = values.shape
    total = 0.0
    for e in range(E):
        member = 0.0
        for b in range(B):
            adv = r[b] + gamma * m[b] * min(next_target[:, b]) - np.mean(target[:, b])
            q = r[b] + gamma * m[b] * next_target[e, b]
            member += (tau if adv >= 0 else 1 - tau) * (q - values[e, b]) ** 2
        total += member / B
    return total


def np_union_length(intervals):
    """Merge sorted intervals one by one."""
    total, current = 0.0, None
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    return total + (current[1] - current[0] if current else 0.0)


def np_iqe(x, y, k, mix):
    components = [np_union_length([(x[c * k + i], max(x[c * k + i], y[c * k + i])) for i in range(k)]) for c in range(len(x) // k)]
    return mix * np.mean(components) + (1 - mix) * np.max(components)


def softplus(x):
    return np.log1p(np.exp(-abs(x))) + max(x, 0.0)


# ----------------------------------------------------------------------------- value losses


def test_expectile_loss_weights_each_side():
    adv, diff = RNG.normal(size=7), RNG.normal(size=7)
    np.testing.assert_allclose(L.expectile_loss(adv, diff, 0.9), np_expectile(adv, diff, 0.9), **TOL)
    assert_grad(lambda d: L.expectile_loss(adv, d, 0.7).sum(), lambda d: np_expectile(adv, d, 0.7).sum(), diff)
    # tau = 0.5 is half the squared error.
    np.testing.assert_allclose(L.expectile_loss(adv, diff, 0.5), 0.5 * diff**2, **TOL)


def test_implicit_v_loss_matches_loop_and_only_trains_online_values():
    E, B, gamma, tau = 2, 6, 0.9, 0.8
    values, target, next_target = (RNG.normal(size=(E, B)) for _ in range(3))
    m = (RNG.uniform(size=B) > 0.3).astype(np.float64)
    r = m - 1.0
    loss, _ = L.implicit_v_loss(values, target, next_target, r, m, gamma, tau)
    np.testing.assert_allclose(loss, np_implicit_v(values, target, next_target, r, m, gamma, tau), **TOL)
    assert_grad(lambda v: L.implicit_v_loss(v, target, next_target, r, m, gamma, tau)[0],
                lambda v: np_implicit_v(v, target, next_target, r, m, gamma, tau), values)
    grads = jax.grad(lambda t, n: L.implicit_v_loss(values, t, n, r, m, gamma, tau)[0], argnums=(0, 1))(target, next_target)
    assert all(np.all(np.asarray(g) == 0) for g in grads)


def test_iql_value_and_critic_losses():
    E, B, gamma, tau = 2, 5, 0.99, 0.9
    v, target_q, next_v, q = RNG.normal(size=B), RNG.normal(size=(E, B)), RNG.normal(size=B), RNG.normal(size=(E, B))
    m = np.array([1, 0, 1, 1, 0], np.float64)
    r = m - 1.0

    def np_value(v):
        return np.mean([np_expectile(np.array([min(target_q[:, b]) - v[b]]), np.array([min(target_q[:, b]) - v[b]]), tau)[0] for b in range(B)])

    def np_critic(q):
        return sum(np.mean([(r[b] + gamma * m[b] * next_v[b] - q[e, b]) ** 2 for b in range(B)]) for e in range(E))

    np.testing.assert_allclose(L.iql_value_loss(v, target_q, tau), np_value(v), **TOL)
    np.testing.assert_allclose(L.iql_critic_loss(q, next_v, r, m, gamma), np_critic(q), **TOL)
    assert_grad(lambda x: L.iql_value_loss(x, target_q, tau), np_value, v)
    assert_grad(lambda x: L.iql_critic_loss(x, next_v, r, m, gamma), np_critic, q)
    assert np.all(np.asarray(jax.grad(lambda n: L.iql_critic_loss(q, n, r, m, gamma))(next_v)) == 0)


# ----------------------------------------------------------------------------- actor losses


def test_awr_weights_and_loss():
    adv = np.array([-1.0, 0.0, 0.2, 3.0])  # exp(2 * 3) > 100: clipped
    log_probs = RNG.normal(size=4)
    weights = L.awr_weights(adv, 2.0)
    np.testing.assert_allclose(weights, [min(np.exp(2 * a), 100.0) for a in adv], **LARGE_TOL)
    np.testing.assert_allclose(L.awr_loss(log_probs, weights), -np.mean(np.asarray(weights) * log_probs), **LARGE_TOL)
    assert_grad(lambda lp: L.awr_loss(lp, weights), lambda lp: -np.mean(np.asarray(weights, np.float64) * lp), log_probs,
                LARGE_TOL)
    # The weights are constants: no gradient reaches the advantages.
    assert float(jax.grad(lambda a: L.awr_loss(jnp.asarray(log_probs), L.awr_weights(a, 2.0)))(jnp.asarray(adv)).sum()) == 0.0


def test_ddpg_bc_loss_normalises_q_by_a_constant():
    q, log_probs, alpha = RNG.normal(size=6), RNG.normal(size=6), 0.3
    loss, q_term, bc_term = L.ddpg_bc_loss(q, log_probs, alpha)
    scale = np.mean(np.abs(q)) + 1e-6
    np.testing.assert_allclose(loss, -np.mean(q) / scale - alpha * np.mean(log_probs), **TOL)
    np.testing.assert_allclose((q_term, bc_term), (-np.mean(q) / scale, -alpha * np.mean(log_probs)), **TOL)
    # The scale is stop-gradient: d/dq = -1 / (B * scale) for every entry.
    np.testing.assert_allclose(jax.grad(lambda x: L.ddpg_bc_loss(x, log_probs, alpha)[0])(q), -np.ones(6) / (6 * scale), **TOL)
    assert_grad(lambda lp: L.ddpg_bc_loss(q, lp, alpha)[0], lambda lp: -np.mean(q) / scale - alpha * np.mean(lp), log_probs)


def np_gaussian_log_prob(means, log_stds, x):
    means, log_stds, x = (np.float64(v) for v in (means, log_stds, x))
    return np.sum(-0.5 * ((x - means) / np.exp(log_stds)) ** 2 - log_stds - 0.5 * np.log(2 * np.pi), axis=-1)


def test_awr_actor_loss_weights_the_log_likelihood_and_reports_its_terms():
    means, log_stds, targets = RNG.normal(size=(5, 3)), 0.3 * RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3))
    adv, temperature = np.array([-2.0, -0.1, 0.0, 0.5, 4.0]), 1.5
    loss, info = L.awr_actor_loss(means, log_stds, targets, adv, temperature)
    weights = np.minimum(np.exp(temperature * adv), 100.0)
    log_probs = np_gaussian_log_prob(means, log_stds, targets)
    np.testing.assert_allclose(loss, -np.mean(weights * log_probs), **LARGE_TOL)
    np.testing.assert_allclose([info['adv'], info['weight_mean'], info['bc_loss'], info['mse']],
                               [np.mean(adv), np.mean(weights), -np.mean(log_probs), np.mean((means - targets) ** 2)],
                               **LARGE_TOL)
    assert_grad(lambda m: L.awr_actor_loss(m, log_stds, targets, adv, temperature)[0],
                lambda m: -np.mean(weights * np_gaussian_log_prob(m, log_stds, targets)), means, LARGE_TOL)
    # Advantages are constants of the actor loss.
    assert float(jnp.abs(jax.grad(lambda a: L.awr_actor_loss(means, log_stds, targets, a, temperature)[0])(adv)).sum()) == 0.0


def test_ddpg_bc_actor_loss_scores_the_clipped_mean_action():
    means, log_stds, actions = 1.5 * RNG.normal(size=(6, 2)), np.zeros((6, 2)), np.clip(RNG.normal(size=(6, 2)), -1, 1)
    w, bc_coef = np.array([0.7, -1.3]), 0.4
    q_fn = lambda a: jnp.sum(a * w, axis=-1) + 2.0  # a linear critic of the action
    loss, info = L.ddpg_bc_actor_loss(means, log_stds, actions, q_fn, bc_coef)
    q = np.clip(means, -1, 1) @ w + 2.0
    log_probs = np_gaussian_log_prob(means, log_stds, actions)
    scale = np.mean(np.abs(q)) + 1e-6
    np.testing.assert_allclose(loss, -np.mean(q) / scale - bc_coef * np.mean(log_probs), **TOL)
    np.testing.assert_allclose([info['q_loss'], info['bc_term'], info['q_mean'], info['bc_loss'], info['mse']],
                               [-np.mean(q) / scale, -bc_coef * np.mean(log_probs), np.mean(q), -np.mean(log_probs),
                                np.mean((means - actions) ** 2)], **TOL)
    # The Q term reaches the mean through the critic only inside [-1, 1] (the clip); the BC term everywhere.
    grad = np.asarray(jax.grad(lambda m: L.ddpg_bc_actor_loss(m, log_stds, actions, q_fn, bc_coef)[0])(jnp.asarray(means, jnp.float32)))
    inside = (np.abs(means) < 1.0).astype(np.float64)
    expected = -inside * w / (6 * scale) - bc_coef * (actions - means) / 6
    np.testing.assert_allclose(grad, expected, **TOL)


# ----------------------------------------------------------------------------- QRL


def test_interval_union_length_matches_merging():
    for _ in range(20):
        starts, ends = RNG.normal(size=5), RNG.normal(size=5)
        np.testing.assert_allclose(value_networks.interval_union_length(starts, ends), np_union_length(zip(starts, ends)), **TOL)


def test_iqe_matches_loop_is_a_quasimetric_and_has_the_right_gradient():
    k, D, mix = 4, 12, 0.3
    x, y, z = (RNG.normal(size=D) for _ in range(3))
    np.testing.assert_allclose(value_networks.iqe_distance(x, y, k, mix), np_iqe(x, y, k, mix), **TOL)
    assert float(value_networks.iqe_distance(x, x, k, mix)) == 0.0
    assert abs(float(value_networks.iqe_distance(x, y, k, mix) - value_networks.iqe_distance(y, x, k, mix))) > 2 * TOL['atol']  # asymmetric
    for a, b, c in itertools.permutations((x, y, z)):
        # The triangle inequality, up to the rounding of the three distances.
        assert float(value_networks.iqe_distance(a, c, k, mix)) <= float(value_networks.iqe_distance(a, b, k, mix) + value_networks.iqe_distance(b, c, k, mix)) + 3 * TOL['atol']
    assert_grad(lambda v: value_networks.iqe_distance(v, y, k, mix), lambda v: np_iqe(v, y, k, mix), x)
    assert_grad(lambda v: value_networks.iqe_distance(x, v, k, mix), lambda v: np_iqe(x, v, k, mix), y)
    batched = value_networks.iqe_distance(np.stack([x, y]), np.stack([y, z]), k, mix)
    np.testing.assert_allclose(batched, [np_iqe(x, y, k, mix), np_iqe(y, z, k, mix)], **TOL)


def test_qrl_value_loss_matches_loop():
    d_random, d_next, lam, eps = np.abs(RNG.normal(size=5)) * 50, 1 + RNG.normal(size=5), 1.7, 0.05

    def np_loss(d_random, d_next, lam):
        neg = np.mean([100 * softplus(5 - d / 100) for d in d_random])
        pos = np.mean([max(d - 1, 0.0) ** 2 for d in d_next])
        return neg + lam * pos + lam * (eps - pos)  # value of the Lagrangian (stop-gradients change gradients only)

    loss, info = L.qrl_value_loss(d_random, d_next, lam, eps)
    np.testing.assert_allclose(loss, np_loss(d_random, d_next, lam), **LARGE_TOL)
    assert_grad(lambda d: L.qrl_value_loss(d, d_next, lam, eps)[0], lambda d: np_loss(d, d_next, lam), d_random)
    # d(s, s') sees lambda * L_pos only (the lambda term stops its gradient), lambda sees eps - L_pos only.
    pos = lambda d: np.mean([max(v - 1, 0.0) ** 2 for v in d])
    assert_grad(lambda d: L.qrl_value_loss(d_random, d, lam, eps)[0], lambda d: lam * pos(d), d_next)
    np.testing.assert_allclose(jax.grad(lambda l: L.qrl_value_loss(d_random, d_next, l, eps)[0])(lam), eps - pos(d_next), **TOL)


def test_latent_dynamics_loss():
    a, b = RNG.normal(size=4), RNG.normal(size=4)
    np.testing.assert_allclose(L.latent_dynamics_loss(a, b), np.mean([(u + v) / 2 for u, v in zip(a, b)]), **TOL)


# ----------------------------------------------------------------------------- CRL


def test_contrastive_logits_and_binary_nce_match_loops():
    E, B, d = 2, 4, 3
    phi, psi = RNG.normal(size=(E, B, d)), RNG.normal(size=(E, B, d))
    logits = L.contrastive_logits(phi, psi)
    for e, i, j in np.ndindex(E, B, B):
        np.testing.assert_allclose(logits[e, i, j], phi[e, i] @ psi[e, j] / np.sqrt(d), **TOL)

    def np_nce(x):
        total = 0.0
        for e, i, j in np.ndindex(E, B, B):
            p = 1 / (1 + np.exp(-x[e, i, j]))
            total += -np.log(p) if i == j else -np.log(1 - p)
        return total / (E * B * B)

    x = np.asarray(logits, np.float64)
    np.testing.assert_allclose(L.binary_nce_loss(x), np_nce(x), **TOL)
    assert_grad(L.binary_nce_loss, np_nce, x)


# ----------------------------------------------------------------------------- sampler rewards


@pytest.mark.parametrize('gc_negative', [True, False])
def test_sampler_rewards_and_masks_follow_the_current_goal_probability(gc_negative):
    rng = np.random.default_rng(1)
    observations = rng.normal(size=(50 * 20, 3)).astype(np.float32)  # distinct rows: equal goal <=> same row
    data = DeviceDataset.from_numpy(observations, np.zeros((1000, 2), np.float32), np.tile(np.arange(20) == 19, 50))
    p_cur = 0.2
    config = sampler_config(20000, value_goals=GoalMixture(p_cur, 0.5, 0.3, True), gc_negative=gc_negative)
    batch = jax.tree_util.tree_map(np.asarray, sample_batch(jax.random.PRNGKey(0), data, config))
    reached = np.all(batch['value_goals'] == batch['observations'], axis=-1)
    np.testing.assert_array_equal(batch['masks'], 1.0 - reached)
    np.testing.assert_array_equal(batch['rewards'], reached - 1.0 if gc_negative else reached.astype(np.float32))
    # P(reached) = p_cur + p_traj / 19 (the last of the 19 rows with a successor is its own trajectory goal, as in
    # OGBench) + p_random / (number of rows a random goal can be): a binomial, checked within 5 sigma.
    expected = p_cur + 0.5 / 19 + 0.3 / int(data.sample_idxs.shape[0])
    assert abs(reached.mean() - expected) < 5 * np.sqrt(expected * (1 - expected) / len(reached))
