"""Every agent and preset: training reduces its loss, actions are well-formed, gradients are routed
as the paper says (the auxiliary loss never reaches the actor head; targets are stop-gradient or EMA)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import main
from agents import get_agent_class
from agents.base import encode_together
from agents.hierarchical import phi_policy_inputs
from agents.two_encoders import two_encoder_modules
from configs.presets import METHODS, PRESETS, get_config as preset_config
from tests.helpers import (ACTION_DIM, FLOAT64_DRIFT, OBS_DIM, as_float64, assert_ema_of, assert_recorded_metrics, aux_loss_of,
                           bc_loss_of, covering_presets, distinct_presets, float32_tolerance, make_agent, network_operations,
                           sampler_of, small, toy_dataset, train_in_float64)
from utils.training import batch_config, sample_batch


@pytest.fixture(scope='module')
def data():
    return toy_dataset()


# Hierarchical presets are trained, stage by stage, in test_hierarchical.py; the offline RL baselines
# (whose actors trade BC against a value) in test_rl_agents.py; the pixel presets on rendered frames in
# test_visual.py. FB is RL too, but its critic and actor are checked here.
TRAINED_PRESETS = [p for p in distinct_presets() if PRESETS[p].family != 'visual'
                   and (METHODS[PRESETS[p].method].kind in ('bc', 'representation') or PRESETS[p].agent == 'fb')]


@jax.jit
def fixed_batch_losses(agent, data):
    """The agent's losses, without an update, on one batch of 512 rows drawn with a fixed key, their noise (FB's) also
    drawn with a fixed key: the same batch for every agent, so that two agents' losses differ only by their weights."""
    batch = sample_batch(jax.random.PRNGKey(7), data, dataclasses.replace(batch_config(agent), batch_size=512))
    return agent.metrics(batch, jax.random.PRNGKey(8))


@pytest.mark.parametrize('preset', TRAINED_PRESETS)
def test_preset_trains_with_finite_decreasing_loss(preset, data):
    """200 updates in float64 (tests/helpers.py `train_in_float64`: the same numbers on every machine): the first
    equal the record, every metric stays finite, and the losses fall on a fixed batch. Weighed on one batch, before and
    after, the losses differ only through training: with lr = 0 they are equal, and the test fails."""
    config = small(preset_config(preset))
    agent = make_agent(config)
    with jax.enable_x64(True):
        data = as_float64(data)
        before = fixed_batch_losses(as_float64(agent), data)
        agent, infos = train_in_float64(agent, data, 200)
        after = fixed_batch_losses(agent, data)
        assert_recorded_metrics(preset, infos)  # its first updates compute what they always did (tests/helpers.py)
        for key, values in infos.items():
            assert np.all(np.isfinite(values)), key
        # FB's actor is trained by RL, its BC term only regularises it (and is traded against Q): its critic falls instead.
        falling = ['total_loss', 'critic/loss'] if config.agent_name == 'fb' else ['total_loss', 'actor/bc_loss']
        for key in falling + (['representation/loss'] if 'representation/loss' in infos else []):
            # Rounding on another machine moves a float64 loss by far less than FLOAT64_DRIFT of it (RECORD_TOLERANCE);
            # training moves these by over 1e-3 of their value.
            first, last = float(before[key]), float(after[key])
            assert first - last > FLOAT64_DRIFT * abs(first), f'{preset}: {key} did not fall ({first:.6f} -> {last:.6f})'

        observations = np.random.default_rng(1).normal(size=(5, OBS_DIM))
        goals = np.random.default_rng(2).normal(size=(5, OBS_DIM))
        for temperature in (0.0, 1.0):
            actions = np.asarray(agent.sample_actions(observations, goals, seed=jax.random.PRNGKey(3), temperature=temperature))
            assert actions.shape == (5, ACTION_DIM)
            assert np.all(np.abs(actions) <= 1.0)
        deterministic = [np.asarray(agent.sample_actions(observations, goals, seed=jax.random.PRNGKey(s), temperature=0.0)) for s in (4, 5)]
        np.testing.assert_array_equal(*deterministic)


# An encoder of the small presets (fan-ins 4, 32, 32, outputs below 4 in magnitude at initialisation) evaluated on other
# rows or in another program rounds its sums in another order: both evaluations count, and the ensemble mean two more.
ENCODED_TWICE = float32_tolerance(2 * network_operations((OBS_DIM, 32, 32)) + 2, 4)

REPRESENTATION_PRESETS = covering_presets([p for p in PRESETS if PRESETS[p].family != 'visual'
                                           and METHODS[PRESETS[p].method].kind == 'representation'])


@pytest.mark.parametrize('preset', REPRESENTATION_PRESETS)
def test_auxiliary_loss_never_reaches_the_actor_head(preset, data):
    config = small(preset_config(preset))
    agent = make_agent(config)
    batch = sample_batch(jax.random.PRNGKey(0), data, sampler_of(config))
    # Jitted: one compilation instead of one per primitive of the eager computation.
    aux_grads = jax.jit(jax.grad(lambda p: aux_loss_of(agent, batch, p)))(agent.network.params)
    actor_norm = sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree_util.tree_leaves(aux_grads['modules_actor']))
    assert actor_norm == 0.0
    encoder_norm = sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree_util.tree_leaves(aux_grads['modules_encoder']))
    assert encoder_norm > 0.0
    # ... while the BC loss does train the encoder that feeds the actor.
    bc_grads = jax.jit(jax.grad(lambda p: bc_loss_of(agent, batch, p)))(agent.network.params)
    bc_encoder = 'modules_psi_encoder' if preset == 'tra' else 'modules_encoder'
    assert sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree_util.tree_leaves(bc_grads[bc_encoder])) > 0.0


def test_tau_one_target_is_the_stop_gradient_online_encoder(data):
    config = small(preset_config('byol_gamma_a'))
    agent = make_agent(config)
    assert agent.targets == {}
    batch = sample_batch(jax.random.PRNGKey(0), data, sampler_of(config))
    frozen = jax.tree_util.tree_map(jnp.copy, agent.network.params)

    class FrozenTarget(type(agent)):
        def target_encode(self, x, params, online=None):
            return self.network(x, name='encoder', params=frozen)

    reference = FrozenTarget(rng=agent.rng, network=agent.network, targets=agent.targets, config=agent.config)
    # Op by op, both run the same operations on the same values (stop_gradient is the identity forwards): bit for bit.
    grads = jax.grad(lambda p: aux_loss_of(agent, batch, p))(agent.network.params)
    expected = jax.grad(lambda p: aux_loss_of(reference, batch, p))(agent.network.params)
    jax.tree_util.tree_map(np.testing.assert_array_equal, grads, expected)


@pytest.mark.parametrize('preset,tau,online_modules', [
    ('byol_gamma_a', 0.9, ['encoder']),
    ('tdsr_a', 0.005, ['encoder', 'psi_encoder']),
])
def test_ema_targets_follow_tau(preset, tau, online_modules, data):
    config = small(preset_config(preset))
    config.tau = tau
    agent = make_agent(config)
    # Targets live outside the optimised tree, so no gradient or optimizer state can reach them ...
    assert sorted(agent.targets) == sorted(online_modules)
    assert not any(name.startswith('modules_target') for name in agent.network.params)
    for online in online_modules:
        # ... and start as exact copies of the online networks, in buffers of their own (updates donate them).
        jax.tree_util.tree_map(np.testing.assert_array_equal, agent.network.params[f'modules_{online}'], agent.targets[online])
        assert all(a is not b for a, b in zip(jax.tree_util.tree_leaves(agent.network.params[f'modules_{online}']),
                                              jax.tree_util.tree_leaves(agent.targets[online])))
    # Each update moves the targets towards the online weights its loss read (before the step), as OGBench: the first
    # leaves them at the initial weights, the second takes tau of the first update's weights.
    batches = [sample_batch(jax.random.PRNGKey(k), data, sampler_of(config)) for k in (0, 1)]
    initial = {name: jax.tree_util.tree_map(np.asarray, agent.targets[name]) for name in online_modules}
    first, _ = agent.update(batches[0])
    second, _ = first.update(batches[1])
    for online in online_modules:
        assert_ema_of(first.targets[online], initial[online], initial[online], tau)
        assert not all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(first.network.params[f'modules_{online}']),
                                                            jax.tree_util.tree_leaves(initial[online])))
        assert_ema_of(second.targets[online], first.network.params[f'modules_{online}'], first.targets[online], tau)


def test_byol_preset_is_one_step_forward_only(data):
    config = preset_config('byol')
    assert (config.discount, config.backward_predictor, config.action_conditioned, config.loss_type) == (0.0, False, False, 'l2')
    agent = make_agent(small(config))
    assert 'modules_backward_predictor' not in agent.network.params
    batch = sample_batch(jax.random.PRNGKey(0), data, sampler_of(config))
    # The next state, except for an episode's last row with a successor: its one-step target is itself (OGBench's
    # goals, and the authors' one-step BYOL).
    value_goals, next_observations, observations = (np.asarray(batch[k]) for k in ('value_goals', 'next_observations', 'observations'))
    is_next = np.all(value_goals == next_observations, axis=-1)
    is_self = np.all(value_goals == observations, axis=-1)
    assert np.all(is_next | is_self) and is_next.mean() > 0.9


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError, match='byol_gamma_a'):
        preset_config('nope')


@pytest.mark.parametrize('preset', ['byol_gamma_a', 'hgcbc_phi'])
def test_compiled_create_is_the_eager_create_bit_for_bit(preset):
    """main.py creates agents with one unoptimised program: the same parameters, optimizer state, targets and
    RNG as `create` run op by op, for any seed (checked on every preset when written; here an ensemble with
    EMA targets, and a hierarchical composition)."""
    config = small(preset_config(preset))
    ex_obs, ex_act = np.zeros((1, OBS_DIM), np.float32), np.zeros((1, ACTION_DIM), np.float32)
    create = main.compiled_create(get_agent_class(config.agent_name), ex_obs, ex_act, config)
    for seed in (0, 2**31 - 1):
        compiled, eager = jax.tree_util.tree_leaves_with_path(create(seed)), jax.tree_util.tree_leaves_with_path(make_agent(config, seed))
        assert [path for path, _ in compiled] == [path for path, _ in eager]
        for (path, a), (_, b) in zip(compiled, eager):
            assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b)), (seed, jax.tree_util.keystr(path))


@pytest.mark.parametrize('preset', ['byol_gamma_a', 'tra', 'tdsr_a'])
def test_entries_encoded_together_equal_entries_encoded_one_by_one(preset, data):
    """An update's encoding cache (one encoder call on the concatenated batch entries) is, entry by entry, what
    encoding each entry on its own gives; and the actor's input from it is what acting computes for (s, g)."""
    config = small(preset_config(preset))
    agent = make_agent(config)
    batch = sample_batch(jax.random.PRNGKey(0), data, sampler_of(config))
    params = agent.network.params
    encodings = agent.encode(batch, params)
    for key, encoded in encodings.items():
        if key == 'psi':
            continue
        alone = agent.network(batch[key], name='encoder', params=params)
        assert encoded.shape == alone.shape == (config.num_ensemble, config.batch_size, config.latent_dim)
        np.testing.assert_allclose(encoded, alone, **ENCODED_TWICE)
    expected = (jnp.concatenate([agent.network(batch['observations'], name='psi_encoder', params=params).mean(0),
                                 agent.network(batch['actor_goals'], name='encoder', params=params).mean(0)], -1)
                if preset == 'tra' else phi_policy_inputs(agent.network, batch['observations'], batch['actor_goals'], params))
    np.testing.assert_allclose(agent.actor_input(batch, encodings), expected, **ENCODED_TWICE)
    np.testing.assert_allclose(agent.policy_inputs(batch['observations'], batch['actor_goals'], params), expected,
                               **ENCODED_TWICE)


def test_encoding_arrays_together_equals_encoding_each_alone():
    """Agents encode s, g and the sampled future states in one encoder call on their concatenation
    (agents.base.encode_together); every layer acts row by row, so each array's encoding must
    be what its own call gives, and the actor's input concat(mean phi(s), mean phi(g)) likewise."""
    agent = make_agent(small(preset_config('byol_gamma_a')))
    params = agent.network.params
    rng = np.random.default_rng(0)
    arrays = {key: rng.normal(size=(rows, OBS_DIM)).astype(np.float32) for key, rows in (('s', 5), ('g', 3), ('future', 7))}
    together = encode_together(agent.network, params, 'encoder', arrays)
    assert list(together) == list(arrays)
    for key, array in arrays.items():
        alone = np.asarray(agent.network(array, name='encoder', params=params))
        assert together[key].shape == alone.shape == (2, array.shape[0], 8)  # [ensemble, rows, latent]
        np.testing.assert_allclose(np.asarray(together[key]), alone, **ENCODED_TWICE)
    inputs = phi_policy_inputs(agent.network, arrays['s'], arrays['s'][::-1], params)
    alone_s = np.asarray(agent.network(arrays['s'], name='encoder', params=params)).mean(0)
    alone_g = np.asarray(agent.network(arrays['s'][::-1], name='encoder', params=params)).mean(0)
    np.testing.assert_allclose(np.asarray(inputs), np.concatenate([alone_s, alone_g], -1), **ENCODED_TWICE)


@pytest.mark.parametrize('action_conditioned', [False, True])
def test_two_encoder_modules_are_phi_psi_and_an_actor_on_two_representations(action_conditioned):
    """TRA and TD-SR build their networks with agents.two_encoders.two_encoder_modules: phi and psi are
    ensembles of the same architecture, psi also reads a_t in the ^a variants, and the actor reads 2 * d."""
    config = small(preset_config('tra'))
    config.action_conditioned = action_conditioned
    ex_obs, ex_act = np.zeros((3, OBS_DIM), np.float32), np.zeros((3, ACTION_DIM), np.float32)
    modules, example_args = two_encoder_modules(config, ex_obs, ex_act)
    assert list(modules) == ['encoder', 'psi_encoder', 'actor']
    assert len(example_args['psi_encoder']) == (2 if action_conditioned else 1)
    for name in ('encoder', 'psi_encoder'):
        out = jax.eval_shape(lambda: modules[name].init_with_output(jax.random.PRNGKey(0), *example_args[name])[0])
        assert out.shape == (config.num_ensemble, 3, config.latent_dim)
    assert example_args['actor'][0].shape == (1, 2 * config.latent_dim)
    # The agents are built from exactly these modules.
    for preset in ('tra', 'tdsr_a'):
        agent = make_agent(small(preset_config(preset)))
        assert sorted(agent.network.params) == ['modules_actor', 'modules_encoder', 'modules_psi_encoder']
