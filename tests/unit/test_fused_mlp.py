"""The fused ensemble-MLP kernel (utils/fused_mlp.py), run on the CPU in Pallas' interpret mode, against the XLA path
of the same flax modules (utils.networks' EnsembleEncoder and EnsemblePredictor, whose parameters both paths read):
values, parameter gradients and input gradients, for shared and per-member inputs, with and without LayerNorm, odd
input and output widths (padded), row counts that are not whole tiles and several tiles, and under jax.vmap (the
multi-seed update). Tolerance: float32 rounding of sums reordered, |fused - xla| <= 1e-5 * (1 + max|xla|)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from utils import fused_mlp
from utils.errors import ConfigError
from utils.networks import EnsembleEncoder, EnsemblePredictor


def assert_trees_close(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        assert g.shape == w.shape
        bound = 1e-5 * (1.0 + float(jnp.max(jnp.abs(w))))
        assert float(jnp.max(jnp.abs(g - w))) <= bound, (g.shape, float(jnp.max(jnp.abs(g - w))), bound)


def value_and_grads(module, params, *inputs):
    """A scalar of the outputs (weighted, so every output element matters) and its gradients with respect to the
    parameters and the floating inputs."""
    def loss(params, *inputs):
        out = module.apply({'params': params}, *inputs)
        weights = jnp.cos(jnp.arange(out.size, dtype=jnp.float32)).reshape(out.shape)
        return jnp.sum(jnp.tanh(out) * weights), out
    (value, out), grads = jax.value_and_grad(loss, argnums=tuple(range(1 + len(inputs))), has_aux=True)(params, *inputs)
    return out, value, grads


def both_paths(module, params, *inputs):
    results = {}
    for mode in ('off', 'on'):
        with fused_mlp.fused_mode(mode):
            step = lambda p, *x: value_and_grads(module, p, *x)
            assert ('pallas_call' in str(jax.make_jaxpr(step)(params, *inputs))) == (mode == 'on')
            results[mode] = jax.jit(step)(params, *inputs)
    return results['on'], results['off']


@pytest.mark.parametrize('rows, width, latent, layer_norm', [(300, 29, 29, True), (8, 5, 3, False)])
def test_encoder_ensemble_matches_xla(rows, width, latent, layer_norm):
    module = EnsembleEncoder((64, 32), latent, num_members=2, layer_norm=layer_norm)
    x = jax.random.normal(jax.random.PRNGKey(0), (rows, width))
    params = module.init(jax.random.PRNGKey(1), x)['params']
    params = jax.tree_util.tree_map(lambda p: p + 0.1 * jax.random.normal(jax.random.PRNGKey(2), p.shape), params)
    fused, xla = both_paths(module, params, x)
    assert fused[0].shape == (2, rows, latent)
    assert_trees_close(fused, xla)


def test_predictor_ensemble_with_actions_matches_xla():
    module = EnsemblePredictor((64, 64, 64), 29, num_members=2)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    z, actions = jax.random.normal(keys[0], (2, 150, 29)), jax.random.normal(keys[1], (150, 8))
    params = module.init(keys[2], z, actions)['params']
    fused, xla = both_paths(module, params, z, actions)
    assert_trees_close(fused, xla)


def test_leading_dims_and_vmapped_seeds_match_xla():
    """Inputs with two leading axes, and parameters of 3 seeds under jax.vmap (the pallas_call gains a grid axis)."""
    module = EnsembleEncoder((32, 32), 16, num_members=3)
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 10, 7))
    seeds = jax.vmap(lambda k: module.init(k, x)['params'])(jax.random.split(jax.random.PRNGKey(1), 3))
    results = {}
    for mode in ('off', 'on'):
        with fused_mlp.fused_mode(mode):
            results[mode] = jax.jit(jax.vmap(lambda p: value_and_grads(module, p, x)))(seeds)
    assert results['on'][0].shape == (3, 3, 4, 10, 16)
    assert_trees_close(results['on'], results['off'])


def test_the_modes_and_the_shapes_that_keep_xla(monkeypatch):
    assert fused_mlp.supports((64, 64, 64)) and fused_mlp.supports((16, 512))
    assert not fused_mlp.supports((64, 48)) and not fused_mlp.supports((8, 64))
    assert not fused_mlp.supports((64,), jnp.bfloat16)
    monkeypatch.delenv('FUSED_MLP', raising=False)
    assert fused_mlp.requested_mode() == 'auto' and not fused_mlp.use_fused((64, 64))  # auto: a GPU only
    with fused_mlp.fused_mode('on'):
        assert fused_mlp.use_fused((64, 64)) and not fused_mlp.use_fused((64, 48))
    monkeypatch.setenv('FUSED_MLP', 'on')
    assert fused_mlp.use_fused((64, 64))
    with fused_mlp.fused_mode('off'):
        assert not fused_mlp.use_fused((64, 64))
    monkeypatch.setenv('FUSED_MLP', 'yes')
    with pytest.raises(ConfigError, match=r"FUSED_MLP='yes' is not one of auto, on, off"):
        fused_mlp.requested_mode()


def test_a_network_xla_cannot_fuse_is_computed_by_xla_when_fusion_is_on():
    """Hidden sizes the kernel does not take (48) give the XLA path's numbers bit for bit, and no Pallas call."""
    module = EnsembleEncoder((48, 64), 8, num_members=2)
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 6))
    params = module.init(jax.random.PRNGKey(1), x)['params']
    with fused_mlp.fused_mode('on'):
        on = module.apply({'params': params}, x)
        assert 'pallas_call' not in str(jax.make_jaxpr(lambda p: module.apply({'params': p}, x))(params))
    with fused_mlp.fused_mode('off'):
        np.testing.assert_array_equal(on, module.apply({'params': params}, x))


def test_the_self_check_runs_while_an_update_is_traced_and_fails_safe(monkeypatch, caplog):
    """`auto` on a GPU first asks the self-check while the update is being traced: it must compute its arrays, not add
    them to that trace (before: a ConcretizationTypeError, so the kernel was never used). A kernel that computes the
    wrong values fails it, with a warning naming FUSED_MLP, and the caller keeps XLA."""
    verdicts = []

    @jax.jit
    def traced(x):
        verdicts.append(fused_mlp.self_check())
        return x + 1

    traced(jnp.ones(2))
    assert verdicts == [True]
    wrong = fused_mlp.ensemble_mlp
    monkeypatch.setattr(fused_mlp, 'ensemble_mlp', lambda *args, **kwargs: 1.1 * wrong(*args, **kwargs))
    assert fused_mlp.self_check() is False
    assert 'failed its self-check' in caplog.text and 'FUSED_MLP=off' in caplog.text
