"""HGCBC, HGCBC-phi and HBYOL-gamma: the hierarchical batch reaches the right losses, the two-stage
schedule switches exactly at stage1_steps and freezes the other level bit for bit, stage-1
checkpoints load into stage 2, every variant learns, and acting chains pi_h into pi_l."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import get_agent_class
from agents.byol_gamma import BYOLGammaAgent
from agents.gcbc import GCBCAgent
from agents.hierarchical import HighLevelPolicy, with_fields
from configs.presets import get_config as preset_config
from runtime.checkpoints import load_checkpoint, save_checkpoint
from tests.helpers import (ACTION_DIM, FLOAT64_DRIFT, OBS_DIM, as_float64, assert_float64_trees_agree, float32_tolerance,
                           make_agent, moved_metrics, network_operations, sampler_of, small, toy_dataset, train_in_float64)
from utils.config_checks import validate_config
from utils.errors import ConfigError
from utils.training import batch_config, sample_batch, stack_trees, train

pytestmark = pytest.mark.xdist_group('test_hierarchical')  # its module fixtures are built once, in one worker

VARIANTS = ['hgcbc', 'hgcbc_phi', 'hbyol_gamma_a']
STAGE1_STEPS = 150  # the staged variants switch half-way through the 300 training steps


def tiny(preset, **fields):
    config = small(preset_config(preset))
    config.high_hidden_dims = (64, 64)
    if config.stage1_steps > 0:
        config.stage1_steps = STAGE1_STEPS
    config.update(fields)
    return config


def host_copy(tree):
    """A numpy copy that survives train_steps donating the agent's buffers."""
    return jax.tree_util.tree_map(np.array, tree)


def assert_trees_equal(a, b):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(host_copy(a)), jax.tree_util.tree_leaves(host_copy(b))
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(x, y)


def trees_differ(a, b):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(host_copy(a)), jax.tree_util.tree_leaves(host_copy(b))
    return any(not np.array_equal(x, y) for x, y in zip(leaves_a, leaves_b))


@pytest.fixture(scope='module')
def data():
    return toy_dataset()


@pytest.fixture(scope='module')
def trained(data, tmp_path_factory):
    """Per variant: 300 steps in two calls of 150, with snapshots at 0, 150 and 300, the metrics, and a
    checkpoint at step 150."""
    runs = {}
    for preset in VARIANTS:
        config = tiny(preset)
        agent = make_agent(config)
        snapshots, infos = [host_copy(agent)], []
        for start in (0, STAGE1_STEPS):
            agent, info = train(agent, data, jax.random.PRNGKey(0), start, STAGE1_STEPS)
            snapshots.append(host_copy(agent))
            infos.append(host_copy(info))
            if start == 0:
                checkpoint = save_checkpoint(str(tmp_path_factory.mktemp(preset)), agent, STAGE1_STEPS)
        infos = {k: np.concatenate([i[k] for i in infos]) for k in infos[0]}
        runs[preset] = dict(config=config, agent=agent, snapshots=snapshots, infos=infos, checkpoint=checkpoint)
    return runs


def perturbed(batch, key):
    return dict(batch, **{key: batch[key] + 1.0})


def first_batch(data, config):
    return jax.jit(sample_batch, static_argnums=2)(jax.random.PRNGKey(0), data, sampler_of(config))


@pytest.mark.parametrize('preset', VARIANTS)
def test_hierarchical_batch_reaches_the_right_losses(preset, trained, data):
    agent = trained[preset]['snapshots'][0]
    batch = first_batch(data, trained[preset]['config'])
    metrics = jax.jit(lambda batch: agent.metrics(batch, jax.random.PRNGKey(3)))
    base = metrics(batch)
    # pi_l learns from low_goals only, pi_h from (high_goals, high_targets) only.
    touches = {'low_goals': 'actor/bc_loss', 'high_goals': 'high_actor/bc_loss', 'high_targets': 'high_actor/bc_loss'}
    for key, loss in touches.items():
        changed = metrics(perturbed(batch, key))
        for other in ('actor/bc_loss', 'high_actor/bc_loss'):
            assert (changed[other] != base[other]) == (other == loss), f'{key} -> {other}'
    assert 'actor_goals' not in batch  # the low level's goals are low_goals: the hierarchy draws no actor mixture

    @jax.jit
    def expected_mse(batch):
        """pi_h's target is the subgoal state (HGCBC) or the low level's ensemble-mean phi of it."""
        if preset == 'hgcbc':
            targets, inputs = batch['high_targets'], jnp.concatenate([batch['observations'], batch['high_goals']], -1)
        else:
            low_params = agent.low.network.params
            targets = agent.low.network(batch['high_targets'], name='encoder', params=low_params).mean(0)
            owner, name = (agent.high.network, 'high_encoder') if preset == 'hgcbc_phi' else (agent.low.network, 'encoder')
            inputs = jnp.concatenate([owner(batch[k], name=name, params=owner.params).mean(0) for k in ('observations', 'high_goals')], -1)
        means, _ = agent.high.network(inputs, name='high_actor', params=agent.high.network.params)
        return jnp.mean((means - targets) ** 2)

    # Two programs evaluate the low level's encoder (fan-ins 4, 32, 32) and pi_h (fan-ins at most 16, 64, 64) on toy
    # states, then a squared error (below 64: its rounding twice) averaged over the batch.
    operations = 2 * (network_operations((OBS_DIM, 32, 32)) + network_operations((16, 64, 64))) + 4 + batch['observations'].shape[0]
    np.testing.assert_allclose(base['high_actor/mse'], expected_mse(batch), **float32_tolerance(2 * operations, 64))


@pytest.mark.parametrize('preset,low_class,use_phi', [('hgcbc', GCBCAgent, False), ('hgcbc_phi', GCBCAgent, True),
                                                      ('hbyol_gamma_a', BYOLGammaAgent, None)])
def test_each_variant_composes_a_high_level_policy_with_a_flat_low_level(preset, low_class, use_phi, trained):
    agent = trained[preset]['agent']
    # Two real levels, no placeholder: the low level is the flat agent itself, the high level a policy with its own state.
    assert type(agent.low) is low_class and isinstance(agent.high, HighLevelPolicy)
    if use_phi is not None:
        assert agent.low.config['use_phi'] == use_phi
    assert 'modules_high_actor' in agent.high.network.params
    assert all(leaf is not None for leaf in jax.tree_util.tree_leaves(agent, is_leaf=lambda x: x is None))


def test_a_joint_update_is_each_levels_own_update(data):
    """Training both levels together (stage1_steps = 0) is the low level's `update` on the low-level batch
    and the high level's `update` reading the low level as it was before the step. In float64, where programs
    compiled apart differ by less than FLOAT64_DRIFT of a value (tests/helpers.py, RECORD_TOLERANCE)."""
    float32_agent = make_agent(tiny('hbyol_gamma_a', stage1_steps=0))
    float32_batch = first_batch(data, float32_agent.config)
    with jax.enable_x64(True):
        agent, batch = as_float64(float32_agent), as_float64(float32_batch)
        low_batch = dict(batch, actor_goals=batch['low_goals'])
        expected_low, low_info = jax.jit(lambda a: a.low.update(low_batch))(agent)
        expected_high, high_info = jax.jit(lambda a: a.high.update(batch, a.low))(agent)
        metrics = jax.jit(agent.metrics)(batch, jax.random.PRNGKey(3))
        new_agent, info = agent.update(batch)
        assert_trees_equal(new_agent.low, expected_low)
        assert_trees_equal(new_agent.high, expected_high)
        for key, value in high_info.items():
            np.testing.assert_allclose(info[f'high_actor/{key}'], value, rtol=FLOAT64_DRIFT)
        np.testing.assert_allclose(info['total_loss'], low_info['total_loss'] + high_info['bc_loss'], rtol=FLOAT64_DRIFT)
        # Validation metrics: both levels' losses before the step, under the same names, without gradient norms.
        assert sorted(metrics) == sorted(k for k in info if not k.endswith('grad_norm'))
        np.testing.assert_allclose(metrics['total_loss'], info['total_loss'], rtol=FLOAT64_DRIFT)


@jax.jit
def fixed_batch_losses(agent, data):
    """Both levels' losses, without an update, on one batch of 512 rows drawn with a fixed key: two snapshots' losses
    differ only by their weights."""
    batch = sample_batch(jax.random.PRNGKey(7), data, dataclasses.replace(batch_config(agent), batch_size=512))
    return agent.metrics(batch, jax.random.PRNGKey(8))


@pytest.mark.parametrize('preset', VARIANTS)
def test_every_variant_trains_with_finite_decreasing_loss(preset, trained, data):
    """Every metric stays finite, and each level's losses fall on a fixed batch over the stage that trains it (the low
    level's in stage 1, the high level's in stage 2; both over the joint run): by 1e-3 of their value at least, which
    lr = 0 (no change at all) or a barely learning level fails. The falls measured are 5.8e-3 and more; rounding on
    another machine moves these float32 runs' losses far less (their records agreed to 1e-6 across instruction sets)."""
    run = trained[preset]
    for key, values in run['infos'].items():
        assert np.all(np.isfinite(values)), key
    losses = [fixed_batch_losses(jax.tree_util.tree_map(jnp.asarray, snapshot), data) for snapshot in run['snapshots']]
    staged = run['config'].stage1_steps > 0
    low_stage, high_stage = ((0, 1), (1, 2)) if staged else ((0, 2), (0, 2))
    falling = {'actor/bc_loss': low_stage, 'high_actor/bc_loss': high_stage}
    if preset == 'hbyol_gamma_a':
        falling['representation/loss'] = low_stage
    if not staged:
        falling['total_loss'] = (0, 2)  # both levels' objective throughout
    for key, (start, end) in falling.items():
        first, last = float(losses[start][key]), float(losses[end][key])
        assert first - last > 1e-3 * abs(first), f'{preset}: {key} did not fall ({first:.6f} -> {last:.6f})'


@pytest.mark.parametrize('preset', ['hgcbc_phi', 'hbyol_gamma_a'])
def test_two_stages_switch_exactly_and_freeze_the_other_level(preset, trained):
    run = trained[preset]
    initial, after_stage1, final = run['snapshots']
    np.testing.assert_array_equal(run['infos']['stage'], [1.0] * STAGE1_STEPS + [2.0] * STAGE1_STEPS)
    assert int(after_stage1.low.network.step) == int(final.low.network.step) == STAGE1_STEPS
    assert int(after_stage1.high.network.step) == 0 and int(final.high.network.step) == STAGE1_STEPS

    # Stage 1 trains only the low level: the high level (params and Adam state) is untouched.
    assert trees_differ(initial.low.network.params, after_stage1.low.network.params)
    assert_trees_equal(initial.high, after_stage1.high)
    # Stage 2 trains only the high level: encoder, actor, predictors and their optimizer state stay bit-identical.
    assert_trees_equal(after_stage1.low, final.low)
    for module in final.high.network.params:
        assert trees_differ(after_stage1.high.network.params[module], final.high.network.params[module]), module
    infos = run['infos']
    assert np.all(infos['grad_norm'][STAGE1_STEPS:] == 0.0) and np.all(infos['high_actor/grad_norm'][:STAGE1_STEPS] == 0.0)
    # total_loss is the objective of the level being trained; the frozen level's loss is only logged.
    low_objective, magnitude = infos['actor/bc_loss'], np.abs(infos['actor/bc_loss'])
    if 'representation/loss' in infos:  # HBYOL-gamma's low level (HGCBC-phi's config has no alpha)
        low_objective = low_objective + run['config'].alpha * infos['representation/loss']
        magnitude = magnitude + run['config'].alpha * np.abs(infos['representation/loss'])
    # bc + alpha * L_aux in the update and here: a product and a sum each (3 roundings apart, or fewer with an FMA).
    np.testing.assert_allclose(infos['total_loss'][:STAGE1_STEPS], low_objective[:STAGE1_STEPS],
                               **float32_tolerance(3, magnitude[:STAGE1_STEPS].max()))
    np.testing.assert_array_equal(infos['total_loss'][STAGE1_STEPS:], infos['high_actor/bc_loss'][STAGE1_STEPS:])


def test_joint_hgcbc_trains_both_levels_every_step(trained):
    run = trained['hgcbc']
    initial, _, final = run['snapshots']
    assert 'stage' not in run['infos']
    assert int(final.low.network.step) == int(final.high.network.step) == 2 * STAGE1_STEPS
    assert trees_differ(initial.low.network.params, final.low.network.params)
    assert trees_differ(initial.high.network.params, final.high.network.params)


def test_resuming_mid_run_replays_the_uninterrupted_run(trained, data):
    run = trained['hbyol_gamma_a']
    # The final agent as template: same static parts, so the compiled train_steps is reused.
    agent, step, _ = load_checkpoint(run['checkpoint'], run['agent'])
    assert step == STAGE1_STEPS
    agent, _ = train(agent, data, jax.random.PRNGKey(0), step, STAGE1_STEPS)
    assert_trees_equal(agent, run['snapshots'][-1])


def test_vmapped_seeds_switch_stage_like_single_runs(data):
    """Under vmap the stage predicate is batched, so lax.cond runs both branches and selects per seed: seed 0 of two
    vmapped seeds switches where a single run does and trains as it does, in float64 (tests/helpers.py
    `train_in_float64`), where the two programs differ only in rounding."""
    config, stage1, steps = tiny('hbyol_gamma_a', stage1_steps=4), 4, 8
    single, single_info = train_in_float64(make_agent(config, 0), data, steps, jax.random.PRNGKey(0))
    keys = np.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    agents, info = train_in_float64(stack_trees([make_agent(config, seed) for seed in (0, 1)]), data, steps, keys)
    np.testing.assert_array_equal(info['stage'], [[1.0] * stage1 + [2.0] * (steps - stage1)] * 2)
    assert not moved_metrics({key: values[0] for key, values in info.items()}, single_info)
    with jax.enable_x64(True):
        assert_float64_trees_agree(jax.tree_util.tree_map(lambda x: x[0], agents), single)


def test_stage1_checkpoint_of_a_flat_byol_gamma_run_starts_in_stage2(data, tmp_path):
    config = tiny('hbyol_gamma_a')
    flat = BYOLGammaAgent.create(7, np.zeros((1, OBS_DIM), np.float32), np.zeros((1, ACTION_DIM), np.float32), config)
    save_checkpoint(str(tmp_path), flat, 1234)
    agent = make_agent(tiny('hbyol_gamma_a', stage1_checkpoint=str(tmp_path)))
    assert_trees_equal(agent.low, flat)

    batch = first_batch(data, config)
    high_before = host_copy(agent.high.network.params)
    for _ in range(3):
        agent, info = agent.update(batch)
        assert float(info['grad_norm']) == 0.0 and float(info['high_actor/grad_norm']) > 0.0
    assert_trees_equal(agent.low, flat)
    assert trees_differ(high_before, agent.high.network.params)


def test_stage1_checkpoint_of_a_hierarchical_run_loads_its_low_level(trained):
    run = trained['hbyol_gamma_a']
    agent = make_agent(tiny('hbyol_gamma_a', stage1_checkpoint=run['checkpoint']))
    assert_trees_equal(agent.low, run['snapshots'][1].low)


def test_bad_stage1_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match='does not exist'):
        make_agent(tiny('hbyol_gamma_a', stage1_checkpoint=str(tmp_path / 'missing')))
    config = tiny('hbyol_gamma_a')
    ex_observations, ex_actions = np.zeros((1, OBS_DIM), np.float32), np.zeros((1, ACTION_DIM), np.float32)
    gcbc = GCBCAgent.create(0, ex_observations, ex_actions, with_fields(config, use_phi=False))
    save_checkpoint(str(tmp_path), gcbc, 10)
    with pytest.raises(ConfigError, match='holds neither a BYOLGammaAgent'):
        make_agent(tiny('hbyol_gamma_a', stage1_checkpoint=str(tmp_path)))


@pytest.mark.parametrize('field,value', [('subgoal_steps', 0), ('stage1_steps', -1)])
def test_bad_schedule_is_a_clear_error(field, value):
    config = tiny('hgcbc', **{field: value})
    with pytest.raises(ConfigError, match=field):
        validate_config(config, get_agent_class('hgcbc'))


# Acting in two programs (or op by op): pi_h (fan-ins 4, 64, 64 on (s, g); 16 on phi's), phi (fan-ins 2, 32, 32) where
# the variant encodes, and pi_l (fan-ins at most 16, 64, 64), each evaluation's rounding counted twice, on pointmaze
# coordinates up to 20 (so first-layer sums below 32).
_PI_L = network_operations((16, 64, 64))
_PHI_VARIANT = float32_tolerance(2 * (network_operations((16, 64, 64)) + 2 * network_operations((2, 32, 32)) + _PI_L), 32)
ACTING_TWICE = {'hgcbc': float32_tolerance(2 * (network_operations((4, 64, 64)) + _PI_L), 32),
                'hgcbc_phi': _PHI_VARIANT, 'hbyol_gamma_a': _PHI_VARIANT}


@pytest.fixture(scope='module')
def pointmaze():
    """Two pointmaze-medium envs and an untrained agent of each variant with pointmaze's shapes."""
    from utils.evaluation import env_spaces, make_eval_envs

    envs = make_eval_envs('pointmaze-medium-stitch-v0', 2)
    observation_space, action_space = env_spaces(envs)
    ex_observations = np.zeros((1, observation_space.shape[0]), np.float32)
    ex_actions = np.zeros((1, action_space.shape[0]), np.float32)
    agents = {}
    for preset in VARIANTS:
        config = tiny(preset)
        agents[preset] = get_agent_class(config.agent_name).create(0, ex_observations, ex_actions, config)
    return envs, agents


@pytest.mark.parametrize('preset', VARIANTS)
def test_acting_runs_the_low_level_on_the_proposed_subgoal(preset, pointmaze):
    envs, agents = pointmaze
    agent = agents[preset]
    # Two rows, called as the evaluation calls it, so both tests share one compiled sample_actions.
    observation_dim = 2  # pointmaze's xy
    observations, goals = np.random.default_rng(0).uniform(0, 20, size=(2, 2, observation_dim)).astype(np.float32)
    subgoals = agent.propose_subgoals(observations, goals, jax.random.PRNGKey(0), temperature=0.0)
    if preset == 'hgcbc':
        low_inputs = jnp.concatenate([observations, subgoals], -1)
    else:
        low_inputs = jnp.concatenate([agent.low.network(observations, name='encoder', params=agent.low.network.params).mean(0), subgoals], -1)
    expected = jnp.clip(agent.low.network(low_inputs, name='actor', params=agent.low.network.params)[0], -1.0, 1.0)
    np.testing.assert_allclose(agent.sample_actions(observations, goals, temperature=0.0), expected,
                               **ACTING_TWICE[preset])
    noisy = agent.sample_actions(observations, goals, temperature=1.0)
    assert noisy.shape == expected.shape and np.all(np.abs(noisy) <= 1.0)
    assert not np.allclose(noisy, expected)


@pytest.mark.parametrize('preset', VARIANTS)
def test_each_variant_runs_a_pointmaze_evaluation(preset, pointmaze):
    from utils.evaluation import evaluate, evaluation_metrics

    envs, agents = pointmaze
    agent = agents[preset]
    episodes = evaluate(
        lambda observations, goals: np.asarray(agent.sample_actions(observations, goals, temperature=0.0)),
        envs, task_ids=(1,), episodes_per_task=2, seed=0, max_steps=15,
    )
    assert evaluation_metrics(episodes)['evaluation/overall_length'] == 15.0
    # main.py evaluates through the agent's stateful evaluation policy; re-planning every step it must act
    # exactly like sample_actions, episode for episode.
    stateful = evaluate(agent.evaluation_policy(), envs, task_ids=(1,), episodes_per_task=2, seed=0, max_steps=15)
    assert [record.success for record in stateful] == [record.success for record in episodes]
    stateful_success = evaluation_metrics(stateful)['evaluation/overall_success']
    assert stateful_success == np.mean([record.success for record in episodes])


@pytest.mark.parametrize('every', [1, 4])
def test_replanning_every_k_steps_holds_the_subgoal(every, pointmaze):
    from utils.evaluation import evaluate, evaluation_metrics, make_eval_envs

    envs, agents = pointmaze
    agent = agents['hgcbc']
    agent = agent.replace(config=agent.config.copy({'replan_every': every}))
    policy = agent.evaluation_policy()
    observations = np.random.default_rng(0).normal(size=(2, 2)).astype(np.float32)
    goals = np.random.default_rng(1).normal(size=(2, 2)).astype(np.float32)
    # Re-planning every step is exactly sample_actions (the same program); holding subgoals proposes and acts in two.
    np.testing.assert_allclose(policy(observations, goals), agent.sample_actions(observations, goals, temperature=0.0),
                               **(dict(rtol=0, atol=0) if every == 1 else ACTING_TWICE['hgcbc']))
    if every == 1:
        return
    calls = []
    propose = policy.propose
    policy.propose = lambda obs, g: calls.append(len(calls)) or propose(obs, g)
    episodes = evaluate(policy, envs, task_ids=(1, 2), episodes_per_task=2, seed=0, max_steps=10)
    # All four episodes start together: planning at steps 0, 4 and 8 of 10.
    assert len(calls) == 3
    assert evaluation_metrics(episodes)['evaluation/overall_length'] == 10.0
    # Two gym envs run the tasks one batch after the other, and the policy is reset for each.
    calls.clear()
    two_envs = make_eval_envs('pointmaze-medium-stitch-v0', 2, native=False)
    evaluate(policy, two_envs, task_ids=(1, 2), episodes_per_task=2, seed=0, max_steps=10)
    assert len(calls) == 2 * 3
    # Between re-plans the subgoal is held: a new goal alone does not change the action.
    policy.reset()
    first = policy(observations, goals)
    np.testing.assert_array_equal(policy(observations, goals + 5.0), first)
