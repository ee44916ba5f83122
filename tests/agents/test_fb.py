"""FB agent: its losses against NumPy, z sampling, gradient routing, EMA targets, training and evaluation."""


import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent_class
from agents.base import update_keys
from agents.fb import FBAgent, get_config, pessimistic_mean
from tests.helpers import (ACTION_DIM, FLOAT32_U, FLOAT64_DRIFT, OBS_DIM, as_float64, assert_ema_of, chain_of_directions,
                           float32_tolerance, make_agent, network_operations, sampler_of, small, toy_dataset)
from utils import losses
from utils.config_checks import validate_config
from utils.errors import ConfigError
from utils.evaluation import env_spaces, evaluate, evaluation_metrics, make_eval_envs
from utils.random_streams import stream_key
from utils.training import sample_batch, train, validation_metrics

pytestmark = pytest.mark.xdist_group('test_fb')  # its module fixtures are built once, in one worker

# The FB losses on small float32 arrays (2 or 3 members, batches of 5 or 6, d = 3) against float64 loops: d-term dot
# products of unit normals (below 10), squared (below 128) and averaged over 30 pairs, under 64 rounded operations
# (tests/helpers.py `float32_tolerance`).
SQUARES_TOL = float32_tolerance(64, 128)


def tree_abs_sum(tree):
    return sum(float(jnp.sum(jnp.abs(leaf))) for leaf in jax.tree_util.tree_leaves(tree))


@pytest.fixture(scope='module')
def data():
    return toy_dataset()


@pytest.fixture(scope='module')
def agent():
    return make_agent(small(get_config()))


@pytest.fixture(scope='module')
def batch(agent, data):
    return sample_batch(jax.random.PRNGKey(0), data, sampler_of(agent.config))


# ---- pure losses ------------------------------------------------------------------------------


def np_fb_loss(forward, backward, target_forward, target_backward, gamma):
    """Loop reference: members e, pairs i != j for the squared term, i == j for the positive term."""
    members, batch, _ = forward.shape
    total = 0.0
    for e in range(members):
        squared, positive = 0.0, 0.0
        for i in range(batch):
            for j in range(batch):
                target = gamma * np.mean([target_forward[k, i] @ target_backward[j] for k in range(members)])
                if i == j:
                    positive += forward[e, i] @ backward[j]
                else:
                    squared += (forward[e, i] @ backward[j] - target) ** 2
        total += squared / (batch * (batch - 1)) - 2.0 * positive / batch
    return total / members


def test_fb_loss_matches_numpy_and_stops_target_gradients():
    rng = np.random.default_rng(0)
    members, batch, d, gamma = 2, 6, 3, 0.9
    args = [rng.normal(size=s).astype(np.float64) for s in [(members, batch, d), (batch, d), (members, batch, d), (batch, d)]]
    loss, info = losses.forward_backward_loss(*[jnp.asarray(a, jnp.float32) for a in args], gamma)
    np.testing.assert_allclose(float(loss), np_fb_loss(*args, gamma), **SQUARES_TOL)
    assert set(info) >= {'td_loss', 'positive', 'm_diag_mean', 'm_offdiag_mean'}

    grads = jax.grad(lambda *x: losses.forward_backward_loss(*x, gamma)[0], argnums=(0, 1, 2, 3))(
        *[jnp.asarray(a, jnp.float32) for a in args]
    )
    assert float(jnp.max(jnp.abs(grads[2]))) == 0.0 and float(jnp.max(jnp.abs(grads[3]))) == 0.0
    # Analytic gradient of the forward: dL/dF_e,i = (1/E) [2/(B(B-1)) sum_{j != i} (M_eij - T_ij) B_j - (2/B) B_i].
    forward, backward, target_forward, target_backward = args
    targets = gamma * target_forward.mean(0) @ target_backward.T
    expected = np.zeros_like(forward)
    for e in range(members):
        residual = (forward[e] @ backward.T - targets) * (1 - np.eye(batch))
        expected[e] = (2 * residual @ backward / (batch * (batch - 1)) - 2 * backward / batch) / members
    np.testing.assert_allclose(np.asarray(grads[0]), expected, **SQUARES_TOL)


def test_orthonormality_loss_matches_numpy():
    rng = np.random.default_rng(1)
    backward = rng.normal(size=(7, 4))
    cov = backward @ backward.T
    offdiag = np.mean([cov[i, j] ** 2 for i in range(7) for j in range(7) if i != j])
    expected = offdiag - 2.0 * np.mean(np.diag(cov))
    loss, info = losses.orthonormality_loss(jnp.asarray(backward, jnp.float32))
    # 4-term dot products of unit normals (below 16), squared (below 256) and averaged over 42 pairs.
    np.testing.assert_allclose(float(loss), expected, **float32_tolerance(64, 256))
    np.testing.assert_allclose(float(info['offdiag']), offdiag, **float32_tolerance(64, 256))


def test_orthonormality_loss_is_minus_d_for_isotropic_embeddings():
    """E[B B^T] = I makes ||E[B B^T] - I||^2 = 0, i.e. the loss (which omits the constant d) = -d."""
    d = 4
    backward = jax.random.normal(jax.random.PRNGKey(0), (4000, d))
    assert abs(float(losses.orthonormality_loss(backward)[0]) + d) < 0.2


def np_metamotivo_fb_loss(forward, backward, target_forward, target_backward, gamma):
    """Meta Motivo's FB loss as their code writes it, with loops: diff_e = M_e - gamma Mbar, then
    0.5 * sum over members and i != j of diff^2 / (B(B-1)) - (mean over members and i of diff_eii) * E."""
    members, batch, _ = forward.shape
    squared, diagonal = 0.0, 0.0
    for e in range(members):
        for i in range(batch):
            for j in range(batch):
                target = gamma * np.mean([target_forward[k, i] @ target_backward[j] for k in range(members)])
                diff = forward[e, i] @ backward[j] - target
                if i == j:
                    diagonal += diff
                else:
                    squared += diff**2
    return 0.5 * squared / (batch * (batch - 1)) - diagonal / (members * batch) * members


def test_fb_metamotivo_scale_matches_their_formula_and_is_e_over_2_times_paper_in_gradient():
    rng = np.random.default_rng(2)
    members, batch, d, gamma = 3, 5, 3, 0.9
    args = [rng.normal(size=s) for s in [(members, batch, d), (batch, d), (members, batch, d), (batch, d)]]
    jargs = [jnp.asarray(a, jnp.float32) for a in args]
    loss = jax.jit(lambda *x: losses.forward_backward_loss(*x, gamma, 'metamotivo')[0])
    np.testing.assert_allclose(float(loss(*jargs)), np_metamotivo_fb_loss(*args, gamma), **SQUARES_TOL)
    paper = jax.jit(lambda *x: losses.forward_backward_loss(*x, gamma, 'paper')[0])
    for grad_mm, grad_paper in zip(jax.grad(loss, argnums=(0, 1))(*jargs), jax.grad(paper, argnums=(0, 1))(*jargs)):
        # Two float32 gradients, each within SQUARES_TOL of the exact one (the paper's scaled by E / 2 = 1.5).
        np.testing.assert_allclose(np.asarray(grad_mm), members / 2 * np.asarray(grad_paper),
                                   **float32_tolerance(64 * (1 + members / 2), 128))


def test_default_critic_uses_metamotivo_orthonormality_with_coefficient_1(agent, batch):
    assert (agent.config['loss_scale'], agent.config['ortho_coef']) == ('metamotivo', 1.0)
    params = agent.network.params
    latents = agent.sample_latents(jax.random.PRNGKey(3), batch['value_goals'], params)
    loss, info = agent.critic_loss(batch, params, latents, jax.random.PRNGKey(4))
    backward = np.float64(agent.network(batch['next_observations'], name='backward', params=agent.network.params))
    cov = backward @ backward.T
    size = cov.shape[0]
    expected = 0.5 * np.sum((cov * (1 - np.eye(size))) ** 2) / (size * (size - 1)) - np.mean(np.diag(cov))
    # B (fan-ins 4, 32, 32, then projected to norm sqrt(d): 2 d + 8 more) evaluated in two programs enters each
    # d-term dot product of the covariance twice, whose squares (below d^2) round in a sum of size^2 terms.
    d = backward.shape[-1]
    network = network_operations((OBS_DIM, 32, 32)) + 2 * d + 8
    ortho = float32_tolerance(2 * 2 * network + d + size**2, d**2)
    np.testing.assert_allclose(float(info['critic/ortho_loss']), expected, **ortho)
    # The critic loss is fb_loss + 1.0 * ortho_loss: one float32 addition, the same on every machine.
    assert float(loss) == float(info['critic/fb_loss'] + info['critic/ortho_loss'])


def test_pessimistic_mean_matches_numpy():
    values = np.array([[1.0, -2.0], [3.0, 0.0], [2.0, 1.0]])
    spread = np.mean([abs(values[a] - values[b]) for a in range(3) for b in range(3) if a != b], axis=0)
    np.testing.assert_allclose(np.asarray(pessimistic_mean(jnp.asarray(values), 0.5)), values.mean(0) - 0.5 * spread)
    np.testing.assert_array_equal(np.asarray(pessimistic_mean(jnp.asarray(values[:1]), 0.5)), values[0])


# ---- z sampling -------------------------------------------------------------------------------


def test_latents_mix_dataset_embeddings_and_sphere_samples(agent):
    d = agent.config['latent_dim']
    states = jax.random.normal(jax.random.PRNGKey(1), (4000, OBS_DIM))
    latents = np.asarray(agent.sample_latents(jax.random.PRNGKey(2), states, agent.network.params))
    embeddings = np.asarray(agent.network(states, name='backward', params=agent.network.params))
    # B is projected to the same sphere as the sphere samples, so every z has norm sqrt(d): the projection and NumPy's
    # norm of it, two d-term sums, two square roots and a few products, round within 2 d + 8 operations of sqrt(d).
    on_sphere = float32_tolerance(2 * d + 8, np.sqrt(d))
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), np.sqrt(d), **on_sphere)
    np.testing.assert_allclose(np.linalg.norm(latents, axis=-1), np.sqrt(d), **on_sphere)
    # A z drawn from the states is B(s) from another program (B: fan-ins 4, 32, 32, and the projection), a sphere
    # sample is a random direction: entrywise within twice one evaluation's rounding, or far off.
    same = float32_tolerance(2 * (network_operations((OBS_DIM, 32, 32)) + 2 * d + 8), np.sqrt(d))['atol']
    from_states = np.all(np.isclose(latents, embeddings, rtol=0, atol=same), axis=-1)
    assert abs(from_states.mean() - 0.5) < 0.04
    # Uniform on the sphere of radius sqrt(d): zero mean and E[z z^T] = I.
    sphere = latents[~from_states]
    assert np.max(np.abs(sphere.mean(0))) < 0.15
    np.testing.assert_allclose(sphere.T @ sphere / len(sphere), np.eye(d), atol=0.2)


@pytest.mark.parametrize('ratio', [0.0, 1.0])
def test_latent_ratio_extremes(ratio, agent, data):
    agent = agent.replace(config=flax.core.FrozenDict({**agent.config, 'z_state_ratio': ratio}))
    states = data.observations[:200]
    latents = agent.sample_latents(jax.random.PRNGKey(0), states, agent.network.params)
    d = agent.config['latent_dim']
    same = float32_tolerance(2 * (network_operations((OBS_DIM, 32, 32)) + 2 * d + 8), np.sqrt(d))['atol']  # as above
    matches = np.all(np.isclose(latents, agent.network(states, name='backward', params=agent.network.params), rtol=0,
                                atol=same), axis=-1)
    assert matches.mean() == ratio


def test_latents_are_stop_gradient(agent):
    states = jax.random.normal(jax.random.PRNGKey(1), (16, OBS_DIM))
    grads = jax.jit(jax.grad(lambda p: jnp.sum(agent.sample_latents(jax.random.PRNGKey(0), states, p))))(agent.network.params)
    assert tree_abs_sum(grads) == 0.0


# ---- gradient routing and targets -------------------------------------------------------------


def test_actor_loss_trains_only_the_actor_and_critic_loss_only_f_and_b(agent, batch):
    params = agent.network.params
    latents = agent.sample_latents(jax.random.PRNGKey(0), batch['value_goals'], params)
    actor_grads = jax.jit(jax.grad(lambda p: agent.actor_loss(batch, p, latents, jax.random.PRNGKey(1))[0]))(params)
    critic_grads = jax.jit(jax.grad(lambda p: agent.critic_loss(batch, p, latents, jax.random.PRNGKey(1))[0]))(params)
    for name in ('forward', 'backward'):
        assert tree_abs_sum(actor_grads[f'modules_{name}']) == 0.0, name
    assert tree_abs_sum(actor_grads['modules_actor']) > 0.0
    assert tree_abs_sum(critic_grads['modules_actor']) == 0.0
    assert tree_abs_sum(critic_grads['modules_forward']) > 0.0
    assert tree_abs_sum(critic_grads['modules_backward']) > 0.0
    _, info = jax.jit(lambda p: agent.actor_loss(batch, p, latents, jax.random.PRNGKey(1)))(params)
    assert float(info['actor/q_loss']) == -float(info['actor/q'])  # -mean(Q) / 1.0: exact
    normalized = agent.replace(config=flax.core.FrozenDict({**agent.config, 'normalize_q': True}))
    _, info = jax.jit(lambda p: normalized.actor_loss(batch, p, latents, jax.random.PRNGKey(1)))(params)
    assert abs(float(info['actor/q_loss'])) <= 1.0 + 64 * FLOAT32_U  # -mean(Q) / mean|Q|: <= 1 up to 64 roundings


def test_ema_targets_follow_tau(agent, batch):
    tau = agent.config['tau']
    params = agent.network.params
    assert sorted(agent.targets) == ['backward', 'forward']
    for online in ('forward', 'backward'):
        jax.tree_util.tree_map(np.testing.assert_array_equal, params[f'modules_{online}'], agent.targets[online])
    # Each update moves Fbar, Bbar towards the weights its loss read (before the step): the first leaves them at the
    # initial weights, the second takes tau of the first update's.
    first = agent.update(batch)[0]
    second = first.update(batch)[0]
    for online in ('forward', 'backward'):
        assert_ema_of(first.targets[online], params[f'modules_{online}'], agent.targets[online], tau)
        assert_ema_of(second.targets[online], first.network.params[f'modules_{online}'], first.targets[online], tau)


def test_validation_draws_its_noise_from_its_own_stream(agent, data):
    """Validation (utils.training.validation_metrics, as main.py calls it at step t with the validation streams' keys)
    computes FB's loss with the noise key it is given: the latents z and the noise come from the validation/noise
    stream. No key FB's loss draws from in validation (the key and its three splits) equals one an update draws from
    (the update stream's states, each update's noise key and its splits), over the first 200 steps."""
    batch_key, noise_key = (jax.random.fold_in(stream_key(0, name), 20) for name in ('validation', 'validation/noise'))
    # Two programs compiled apart round differently: in float64 by less than FLOAT64_DRIFT of the loss (tests/helpers.py,
    # RECORD_TOLERANCE), while another key (other latents z) changes it by over 1e-3 of itself.
    with jax.enable_x64(True):
        agent64, data64 = as_float64(agent), as_float64(data)
        info = validation_metrics(agent64, data64, batch_key, noise_key)
        batch = sample_batch(batch_key, data64, dataclasses.replace(sampler_of(agent.config), p_aug=0.0))
        loss, _ = jax.jit(lambda p: agent64.total_loss(batch, p, noise_key))(agent64.network.params)
        np.testing.assert_allclose(float(info['total_loss']), float(loss), rtol=FLOAT64_DRIFT)
        other, _ = jax.jit(lambda p: agent64.total_loss(batch, p, agent64.rng))(agent64.network.params)
    assert abs(float(other) - float(loss)) > 1e-3 * abs(float(loss))

    def drawn(key):  # a key FB's loss receives, and the three it splits it into (latents, target and actor noise)
        return [key, *jax.random.split(key, 3)]

    update_keys_seen, rng = set(), stream_key(0, 'update')
    for _ in range(200):
        next_rng, step_key = update_keys(rng)
        update_keys_seen.update(tuple(np.asarray(k).tolist()) for k in [rng, *drawn(step_key)])
        rng = next_rng
    validation_keys_seen = {tuple(np.asarray(k).tolist()) for t in range(0, 200, 10)
                            for k in drawn(jax.random.fold_in(stream_key(0, 'validation/noise'), t))}
    assert len(update_keys_seen) == 200 * 5 and len(validation_keys_seen) == 20 * 4
    assert not update_keys_seen & validation_keys_seen
    np.testing.assert_array_equal(agent.rng, stream_key(0, 'update'))  # the agent's rng is the update stream's


# ---- training and acting ----------------------------------------------------------------------


def test_training_reduces_critic_loss_and_ranks_next_states_first(data):
    config = small(get_config())
    agent = make_agent(config)
    agent, infos = train(agent, data, jax.random.PRNGKey(0), 0, 300)
    infos = jax.tree_util.tree_map(np.asarray, infos)
    for key, values in infos.items():
        assert np.all(np.isfinite(values)), key
    first, last = infos['critic/loss'][:30].mean(), infos['critic/loss'][-30:].mean()
    assert last < 0.5 * first, (first, last)
    # The successor measure is larger at the actual next state than at other states.
    assert infos['critic/m_diag_mean'][-30:].mean() > infos['critic/m_offdiag_mean'][-30:].mean()


def test_goal_reaching_on_a_chain_improves_with_training():
    """The whole algorithm -- successor measure, actor, z = B(g) -- learns to head towards the goal."""
    num_states = 10
    config = small(get_config())
    config.discount = 0.9
    data = chain_of_directions(num_states, num_episodes=200, length=40)
    states = jnp.eye(num_states)

    def fraction_heading_to_goal(agent):
        correct = []
        for goal in range(num_states):
            actions = np.asarray(agent.sample_actions(states, jnp.repeat(states[goal:goal + 1], num_states, 0), temperature=0.0))
            correct += [(actions[s, 0] > 0) == (goal > s) for s in range(num_states) if s != goal]
        return np.mean(correct)

    agent = get_agent_class('fb').create(0, np.asarray(states[:1]), np.zeros((1, 1), np.float32), config)
    before = fraction_heading_to_goal(agent)
    agent, _ = train(agent, data, jax.random.PRNGKey(0), 0, 2000)
    after = fraction_heading_to_goal(agent)
    assert after > 0.75 and after > before + 0.2, (before, after)


def test_sample_actions_uses_z_equal_to_b_of_goal(agent):
    observations = jax.random.normal(jax.random.PRNGKey(0), (5, OBS_DIM))
    goals = jax.random.normal(jax.random.PRNGKey(1), (5, OBS_DIM))
    actions = np.asarray(agent.sample_actions(observations, goals, seed=jax.random.PRNGKey(2), temperature=0.0))
    latents = agent.network(goals, name='backward', params=agent.network.params)
    means, _ = agent.network(jnp.concatenate([observations, latents], axis=-1), name='actor', params=agent.network.params)
    # B then the actor (fan-ins 4 + 8, 64, 64), evaluated here and inside sample_actions: twice their rounding; tanh is
    # 1-Lipschitz and adds a few.
    d = agent.config['latent_dim']
    operations = network_operations((OBS_DIM, 32, 32)) + 2 * d + 8 + network_operations((OBS_DIM + d, 64, 64))
    np.testing.assert_allclose(actions, np.tanh(np.asarray(means)), **float32_tolerance(2 * operations + 4, 8))
    noisy = np.asarray(agent.sample_actions(observations, goals, seed=jax.random.PRNGKey(2), temperature=1.0))
    assert noisy.shape == (5, ACTION_DIM) and np.all(np.abs(noisy) <= 1.0) and not np.allclose(noisy, actions)


def test_short_pointmaze_evaluation_runs():
    config = small(get_config())
    envs = make_eval_envs('pointmaze-medium-v0', 2)
    observation_space, action_space = env_spaces(envs)
    ex_obs = np.zeros((1, observation_space.shape[0]), np.float32)
    ex_act = np.zeros((1, action_space.shape[0]), np.float32)
    agent = get_agent_class('fb').create(0, ex_obs, ex_act, config)
    episodes = evaluate(
        lambda o, g: np.asarray(agent.sample_actions(o, g, temperature=0.0)), envs, task_ids=(1,), episodes_per_task=2, max_steps=20
    )
    assert [(record.task, record.episode) for record in episodes] == [(1, 0), (1, 1)]
    metrics = evaluation_metrics(episodes)
    assert metrics['evaluation/overall_success'] == np.mean([record.success for record in episodes])
    assert metrics['evaluation/overall_length'] == 20


# ---- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize('key,value,match', [
    ('batch_size', 1, 'batch_size'),
    ('encoder_hidden_dims', (64,), 'encoder_hidden_dims'),
    ('z_state_ratio', 1.5, 'z_state_ratio'),
    ('num_forward', 0, 'num_forward'),
])
def test_bad_config_gives_clear_error(key, value, match):
    config = small(get_config())
    config[key] = value
    with pytest.raises(ConfigError, match=match):
        validate_config(config, FBAgent)

