"""The optimizer over one vector (utils/optimizers.OneVector, which a run asks for with main.py
--optimizer_layout=one_vector: Adam over all parameters as one flat vector) computes what
the per-leaf formulation (optax's own, every run's default on every backend) computes: every metric of 10 updates within the regression test's tolerance (rtol 1e-6, atol 1e-7), parameters,
optimizer moments and EMA targets to 1e-6, on presets with EMA targets and ensembles (not bit for bit: XLA rounds the
same elementwise Adam differently for one long vector); and a checkpoint holds the per-leaf layout, so checkpoints
restore into either layout. Compiled, the one-vector update launches fewer kernels than the per-leaf one."""

import json
import os

import flax.serialization
import jax
import numpy as np
import pytest

from benchmarks import hlo_kernels
from configs.presets import get_config as preset_config
from runtime.checkpoints import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from tests.helpers import READING_PATH, ROOT, make_agent, small, toy_dataset
from utils.optimizers import OneVector, ravel_leaves, unravel_like, with_optimizer
from utils.training import stack_trees, train

STEPS = 10


def per_leaf(agent):
    """`agent` with its optimizer per leaf (every network of it: the hierarchical agents nest one)."""
    return with_optimizer(agent, one_vector=False)


def config_of(preset, **overrides):
    config = small(preset_config(preset))
    for key, value in overrides.items():
        config[key] = value
    return config


def flat_agent(config, seed):
    return with_optimizer(make_agent(config, seed), one_vector=True)


def assert_same_agents(fused, reference, exact=False):
    """Same parameters, targets, RNG and optimizer state (compared in the per-leaf layout): each array to 1e-6 of its
    largest entry (ulp-level differences carried through 10 Adam steps), or bit for bit."""
    # Leaves by path (the static fields, e.g. two equal optimizers built by two `create` calls, do not compare equal).
    stacked = np.ndim(fused.network.step) > 0  # a stack of seeds: convert each seed's state
    fused = jax.vmap(per_leaf)(fused) if stacked else per_leaf(fused)
    fused_paths, fused_leaves = zip(*jax.tree_util.tree_leaves_with_path(fused))
    reference_paths, reference_leaves = zip(*jax.tree_util.tree_leaves_with_path(reference))
    assert fused_paths == reference_paths
    for a, b in zip(fused_leaves, reference_leaves):
        if exact or not np.issubdtype(np.asarray(a).dtype, np.floating):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        else:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6 * float(np.max(np.abs(b))))


@pytest.mark.parametrize('preset, overrides', [('byol_gamma_a', {'tau': 0.99}), ('tdsr_a', {})])
def test_fused_update_equals_the_per_leaf_update(preset, overrides):
    config = config_of(preset, **overrides)
    assert config.tau < 1.0 and config.num_ensemble > 1  # EMA targets and an ensemble: what the fused step must get right
    agent = flat_agent(config, seed=0)
    assert isinstance(agent.network.tx, OneVector) and agent.targets
    data, key = toy_dataset(), jax.random.PRNGKey(0)
    fused, fused_info = train(agent, data, key, 0, STEPS)
    reference, reference_info = train(per_leaf(make_agent(config, seed=0)), data, key, 0, STEPS)
    assert sorted(fused_info) == sorted(reference_info)
    for name in fused_info:
        np.testing.assert_allclose(fused_info[name], reference_info[name], rtol=1e-6, atol=1e-7, err_msg=name)
    assert_same_agents(fused, reference)


def test_fused_update_of_stacked_seeds_equals_the_per_leaf_update():
    config = config_of('tdsr_a')
    seeds, data = [1, 2], toy_dataset()
    keys = np.stack([jax.random.PRNGKey(s) for s in seeds])
    fused, fused_info = train(stack_trees([flat_agent(config, s) for s in seeds]), data, keys, 0, 3)
    reference, reference_info = train(stack_trees([per_leaf(make_agent(config, s)) for s in seeds]), data, keys, 0,
                                                  3)
    np.testing.assert_allclose(fused_info['total_loss'], reference_info['total_loss'], rtol=1e-6, atol=1e-7)
    assert_same_agents(fused, reference)


def test_checkpoints_keep_the_per_leaf_layout(tmp_path):
    config = config_of('byol_gamma_a', tau=0.99)
    agent, _ = train(flat_agent(config, seed=0), toy_dataset(), jax.random.PRNGKey(0), 0, 2)
    reference = per_leaf(agent)
    save_checkpoint(str(tmp_path), agent, 2)
    with open(tmp_path / CHECKPOINT_NAME, 'rb') as f:
        saved = flax.serialization.msgpack_restore(f.read())['agent']
    # What a checkpoint holds is exactly what the per-leaf formulation writes of the same numbers (so checkpoints
    # from before still load) ...
    written = flax.serialization.to_state_dict(jax.device_get(reference))
    assert jax.tree_util.tree_structure(saved) == jax.tree_util.tree_structure(written)
    assert 'mu' in saved['network']['opt_state']['0'] and isinstance(saved['network']['opt_state']['0']['mu'], dict)
    for a, b in zip(jax.tree_util.tree_leaves(saved), jax.tree_util.tree_leaves(written)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # ... and restores into either layout.
    restored, step, _ = load_checkpoint(str(tmp_path), flat_agent(config, seed=5))
    assert step == 2 and isinstance(restored.network.tx, OneVector)
    assert_same_agents(restored, reference, exact=True)
    restored_per_leaf, _, _ = load_checkpoint(str(tmp_path), make_agent(config, seed=5))
    assert not isinstance(restored_per_leaf.network.tx, OneVector)
    assert_same_agents(restored, restored_per_leaf, exact=True)


def test_agents_are_built_with_the_per_leaf_update_on_every_backend(monkeypatch):
    """The default, whatever the backend (no probe of it): bit-identical to the numbers tests/data/agent_metrics.json
    records."""
    monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
    assert not isinstance(make_agent(config_of('gcbc')).network.tx, OneVector)


def test_ravel_and_unravel_are_inverse():
    tree = {'a': np.arange(6.0).reshape(2, 3), 'b': {'c': np.arange(2.0)}}
    flat = ravel_leaves(tree)
    np.testing.assert_array_equal(flat, [0, 1, 2, 3, 4, 5, 0, 1])
    back = unravel_like(flat, tree)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree)):
        np.testing.assert_array_equal(a, b)


def test_a_checkpoint_of_version_0_3_0_restores_every_array_it_holds():
    """tests/data/byol_gamma_a_checkpoint_v0.3.0.msgpack was written by version 0.3.0 (before the optimizer layout left
    the train state) after 3 updates of a small BYOL-gamma^a with EMA targets. It restores into this version's agent
    (for analyses and evaluation: --resume refuses it, since 0.6.0 computes other goals and targets), each array
    equal to the file's."""
    config = config_of('byol_gamma_a', tau=0.99)
    config.update(dict(batch_size=16, actor_hidden_dims=(32, 32), encoder_hidden_dims=(16, 16),
                       predictor_hidden_dims=(16, 16), latent_dim=8))
    path = os.path.join(ROOT, 'tests', 'data', 'byol_gamma_a_checkpoint_v0.3.0.msgpack')
    agent, step, _ = load_checkpoint(path, make_agent(config, seed=7))
    assert step == 3
    with open(path, 'rb') as f:
        saved = flax.serialization.msgpack_restore(f.read())['agent']
    restored = flax.serialization.to_state_dict(per_leaf(agent))
    saved_leaves, restored_leaves = (jax.tree_util.tree_leaves_with_path(tree) for tree in (saved, restored))
    assert [p for p, _ in saved_leaves] == [p for p, _ in restored_leaves]
    for (where, a), (_, b) in zip(saved_leaves, restored_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(where))


def test_one_byol_gamma_update_is_read_in_five_files_from_main_pys_loop():
    """A BYOL-gamma^a gradient step as main.py's loop makes it (utils.training.train, one chunk of one step), traced:
    the repository files whose code runs. With main.py, whose loop calls it, 5 files and under 1,500 lines: main.py,
    utils/training.py (sample a batch on the device, update, scanned), agents/base.py (Agent.update, TrainState, the
    EMA, BCAgent.total_loss and the encoder call), agents/byol_gamma.py (L_aux) and utils/networks.py. No climb back
    up: while the update runs in agents/, no code in utils/training.py runs. The opt-in --optimizer_layout=one_vector
    adds the file of its Adam over one vector, utils/optimizers.py; --network_kernel=fused would add the kernel's
    (utils/fused_mlp.py), passed in by main.py rather than read on the path."""
    import sys

    from utils.training import train

    config = config_of('byol_gamma_a')
    data = toy_dataset()

    def files_of_one_step(agent):
        seen, stack, climbs = set(), [], []

        def record(frame, event, arg):
            path = frame.f_code.co_filename
            if not path.startswith(ROOT + os.sep) or os.sep + '.venv' + os.sep in path:
                return
            name = os.path.relpath(path, ROOT)
            if name.startswith('tests' + os.sep):  # this test's own lambdas
                return
            if event == 'call':
                if name == 'utils/training.py' and any(f.startswith('agents' + os.sep) for f in stack):
                    climbs.append(frame.f_code.co_name)
                seen.add(name)
                stack.append(name)
            elif event == 'return' and stack:
                stack.pop()

        sys.setprofile(record)
        try:
            jax.eval_shape(lambda agent: train(agent, data, jax.random.PRNGKey(1), 0, 1), agent)
        finally:
            sys.setprofile(None)
        return seen | {'main.py'}, climbs  # main.py's loop makes the call

    default, climbs = files_of_one_step(jax.eval_shape(lambda: make_agent(config, 0)))
    assert sorted(default) == READING_PATH and not climbs, (sorted(default), climbs)
    lines = sum(len(open(os.path.join(ROOT, name)).read().splitlines()) for name in READING_PATH)
    assert lines < 1500, lines
    one_vector, climbs = files_of_one_step(jax.eval_shape(lambda: with_optimizer(make_agent(config, 0), one_vector=True)))
    assert sorted(one_vector - default) == ['utils/optimizers.py'] and not climbs


def test_byol_gamma_counts_more_kernels_than_gcbc_and_the_flat_optimizer_fewer():
    """benchmarks/hlo_kernels.py on main.py's training step: BYOL-gamma^a (encoder ensemble, predictors, LayerNorms)
    launches more kernels than GCBC, and the one-vector optimizer fewer than the per-leaf one."""
    small = dict(batch_size=64, actor_hidden_dims=(32, 32), encoder_hidden_dims=(16, 16), latent_dim=8)
    counts = {}
    for preset, overrides in (('gcbc', {k: small[k] for k in ('batch_size', 'actor_hidden_dims')}),
                              ('byol_gamma_a', dict(small, predictor_hidden_dims=(16, 16)))):
        for optimizer in ('per_leaf', 'one_vector'):
            stats, _ = hlo_kernels.train_step_stats(preset, 1, batch_size=64, obs_dim=4, action_dim=2, steps_per_call=3,
                                                    overrides=overrides, rng='unrolled', optimizer_layout=optimizer)
            assert stats.trip_count == 3 and stats.flops > 0
            counts[preset, optimizer] = stats.per_update
    for optimizer in ('per_leaf', 'one_vector'):
        assert counts['byol_gamma_a', optimizer].kernels > 2 * counts['gcbc', optimizer].kernels
        assert counts['byol_gamma_a', optimizer].by_source['LayerNorm'] > 0 == counts['gcbc', optimizer].by_source['LayerNorm']
    # BYOL-gamma^a's ~50 parameter leaves: Adam per leaf, against one flat update.
    assert counts['byol_gamma_a', 'one_vector'].kernels < counts['byol_gamma_a', 'per_leaf'].kernels - 50
    assert counts['byol_gamma_a', 'one_vector'].by_source['optimizer (Adam)'] < counts['byol_gamma_a', 'per_leaf'].by_source['optimizer (Adam)']
