"""Tests for the SAC agent that trains the ant expert (datagen/sac.py), on tiny networks and batches."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datagen.sac import SACAgent, get_config, tanh_gaussian_sample
from tests.helpers import FLOAT32_U, as_float64, assert_ema_of, assert_float64_trees_agree, float32_tolerance

pytestmark = pytest.mark.xdist_group('test_sac')  # its module fixtures are built once, in one worker

OBSERVATION_DIM, ACTION_DIM, BATCH = 5, 2, 8


def _config():
    config = get_config()
    config.actor_hidden_dims = (16, 16)
    config.critic_hidden_dims = (16, 16)
    return config


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        observations=rng.normal(size=(BATCH, OBSERVATION_DIM)).astype(np.float32),
        actions=rng.uniform(-1, 1, size=(BATCH, ACTION_DIM)).astype(np.float32),
        rewards=rng.normal(size=BATCH).astype(np.float32),
        masks=np.array([1.0] * (BATCH - 2) + [0.0] * 2, np.float32),
        next_observations=rng.normal(size=(BATCH, OBSERVATION_DIM)).astype(np.float32),
    )


update = jax.jit(SACAgent.update)


@pytest.fixture(scope='module')
def agent():
    agent = SACAgent.create(0, OBSERVATION_DIM, ACTION_DIM, _config())
    # Move the target away from the online critics, so that the EMA check below is not trivial.
    return agent.replace(target_critic_params=jax.tree_util.tree_map(lambda x: x + 1.0, agent.target_critic_params))


@pytest.fixture(scope='module')
def updated(agent):
    return update(agent, _batch())


def test_update_gives_finite_losses_and_changes_every_network(agent, updated):
    new_agent, info = updated
    for key in ('critic_loss', 'actor_loss', 'temperature_loss', 'entropy', 'temperature', 'grad_norm'):
        assert np.isfinite(float(info[key])), key
    for module in ('modules_actor', 'modules_critic', 'modules_log_temperature'):
        before = jax.tree_util.tree_leaves(agent.network.params[module])
        after = jax.tree_util.tree_leaves(new_agent.network.params[module])
        assert any(not np.array_equal(b, a) for b, a in zip(before, after)), module
    assert int(new_agent.network.step) == 1


def test_target_update_is_the_ema_of_the_updated_critics(agent, updated):
    new_agent, _ = updated
    assert_ema_of(new_agent.target_critic_params, new_agent.network.params['modules_critic'], agent.target_critic_params,
                  agent.config.tau)


def test_update_many_equals_repeated_updates(agent):
    """In float64, where the scanned and the looped programs differ only in rounding, by less than FLOAT64_DRIFT of each
    array's scale (tests/helpers.py, RECORD_TOLERANCE; in float32 Adam's first steps, about lr sign(g), amplify it)."""
    batches = [_batch(seed) for seed in range(2)]
    with jax.enable_x64(True):
        batches = [as_float64(batch) for batch in batches]
        stacked = {key: np.stack([batch[key] for batch in batches]) for key in batches[0]}
        scanned, _ = as_float64(agent).update_many(stacked)
        looped = as_float64(agent)
        for batch in batches:
            looped, _ = update(looped, batch)
        assert_float64_trees_agree(scanned, looped)


@pytest.mark.parametrize('entropy_offset, alpha_should', [(+1.0, 'fall'), (-1.0, 'rise')])
def test_temperature_moves_towards_the_target_entropy(agent, entropy_offset, alpha_should):
    target = agent.config.target_entropy
    # Constant log-probs: entropy = -log_prob exactly.
    log_probs = jnp.full((BATCH,), -(target + entropy_offset))

    def loss(params):
        return agent.temperature_loss(log_probs, params)[0]

    gradient = jax.jit(jax.grad(loss))(agent.network.params)['modules_log_temperature']['log_temperature']
    # Gradient descent moves log(alpha) against the gradient.
    assert (gradient > 0) if alpha_should == 'fall' else (gradient < 0)


def test_target_entropy_is_half_the_negative_action_dimension(agent):
    assert agent.config.target_entropy == -0.5 * ACTION_DIM


def test_actor_loss_does_not_train_the_critics(agent):
    def actor_loss(params):
        return agent.actor_loss(_batch(), params, jax.random.PRNGKey(0))[0]

    gradients = jax.jit(jax.grad(actor_loss))(agent.network.params)
    assert all(np.all(g == 0) for g in jax.tree_util.tree_leaves(gradients['modules_critic']))
    assert any(np.any(g != 0) for g in jax.tree_util.tree_leaves(gradients['modules_actor']))


def test_tanh_gaussian_log_prob_is_the_change_of_variables():
    means = jnp.array([[0.3, -1.2]])
    log_stds = jnp.array([[-0.5, 0.2]])
    actions, log_probs = tanh_gaussian_sample(jax.random.PRNGKey(1), means, log_stds)
    pre_tanh = np.arctanh(np.asarray(actions, np.float64))
    stds = np.exp(np.asarray(log_stds, np.float64))
    gaussian = -0.5 * ((pre_tanh - np.asarray(means)) / stds) ** 2 - np.log(stds) - 0.5 * math.log(2 * math.pi)
    expected = np.sum(gaussian - np.log(1 - np.tanh(pre_tanh) ** 2), axis=-1)
    # The float32 action a carries its rounding (u |a|) into arctanh, amplified by 1 / (1 - a^2), and the expected
    # log-probability moves by (x - mean) / std^2 + 2 tanh(x) per unit of the pre-tanh x; the float32 log-probability
    # itself rounds within 32 operations of values below 8.
    a = np.asarray(actions, np.float64)
    carried = FLOAT32_U * np.abs(a) / (1 - a**2) * np.abs((pre_tanh - np.asarray(means)) / stds**2 + 2 * a)
    np.testing.assert_allclose(log_probs, expected, rtol=0, atol=carried.sum() + float32_tolerance(32, 8)['atol'])
