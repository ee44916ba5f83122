"""The fused ensemble-MLP kernel (utils/fused_mlp.py), run on the CPU in Pallas' interpret mode, against the XLA path
of the same flax modules (utils.networks' EnsembleEncoder and EnsemblePredictor with the kernel passed in, and as they
are; both paths read the same parameters):
values, parameter gradients and input gradients, for shared and per-member inputs, with and without LayerNorm, odd
input and output widths (padded), row counts that are not whole tiles and several tiles, and under jax.vmap (the
multi-seed update). Tolerance: float32 rounding of sums reordered, |fused - xla| <= 1e-5 * (1 + max|xla|)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax.linen as nn

from utils import fused_mlp, networks
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
    """(fused, xla): `value_and_grads` of `module` with the kernel passed in, and of the module as it is."""
    results = {}
    for kernel in (fused_mlp.member_kernel, None):
        path = module.clone(kernel=kernel)
        step = lambda p, *x: value_and_grads(path, p, *x)  # noqa: E731
        assert ('pallas_call' in str(jax.make_jaxpr(step)(params, *inputs))) == (kernel is not None)
        results[kernel is None] = jax.jit(step)(params, *inputs)
    return results[False], results[True]


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
    for kernel in (fused_mlp.member_kernel, None):
        path = module.clone(kernel=kernel)
        results[kernel is None] = jax.jit(jax.vmap(lambda p: value_and_grads(path, p, x)))(seeds)
    assert results[False][0].shape == (3, 3, 4, 10, 16)
    assert_trees_close(results[False], results[True])


def test_the_shapes_the_kernel_takes():
    assert fused_mlp.supports((64, 64, 64)) and fused_mlp.supports((16, 512))
    assert not fused_mlp.supports((64, 48)) and not fused_mlp.supports((8, 64))
    assert not fused_mlp.supports((64,), jnp.bfloat16)


def check(module, params, *inputs):
    """`fused_mlp.compare` on `module` bound to `params`, as the run's check calls it on the module it intercepts."""
    return fused_mlp.compare(module.bind({'params': params}), inputs, {})


def test_the_check_passes_the_networks_the_kernel_computes():
    module = EnsemblePredictor((16, 16), 29, num_members=2)
    z, actions = jnp.ones((2, 40, 29)), jax.random.normal(jax.random.PRNGKey(0), (40, 8))
    params = module.init(jax.random.PRNGKey(1), z, actions)['params']
    assert check(module, params, z, actions) is None
    encoder = EnsembleEncoder((16, 16), 16, num_members=2, layer_norm=False)
    x = jax.random.normal(jax.random.PRNGKey(2), (20, 5))
    assert check(encoder, encoder.init(jax.random.PRNGKey(3), x)['params'], x) is None


def test_the_check_keeps_xla_for_a_network_the_kernel_does_not_compute(monkeypatch):
    """Compared with utils.networks' own module: an encoder whose MLP a researcher gave another activation (ReLU; the
    kernel computes GELU) is another function, by far more than the tolerance; hidden sizes the kernel does not take
    are named before anything is computed."""
    class ReluEncoder(networks.Encoder):
        @nn.compact
        def __call__(self, x):
            x = networks.MLP(self.hidden_dims, activate_final=True, layer_norm=self.layer_norm, activation=nn.relu)(x)
            return nn.Dense(self.latent_dim)(x)

    x = jax.random.normal(jax.random.PRNGKey(0), (20, 6))
    monkeypatch.setattr(networks, 'Encoder', ReluEncoder)
    module = EnsembleEncoder((32, 32), 16, num_members=2)
    problem = check(module, module.init(jax.random.PRNGKey(1), x)['params'], x)
    assert problem.startswith("the kernel computes another function than this network's flax module"), problem
    different = float(problem.split('values differ by ')[1].split(' ')[0])
    assert different > 100 * fused_mlp.tolerance(module.init(jax.random.PRNGKey(1), x)['params']['VmapReluEncoder_0'])
    monkeypatch.undo()
    odd = EnsembleEncoder((64, 48), 16, num_members=2)
    assert 'are not all powers of two from 16' in check(odd, odd.init(jax.random.PRNGKey(1), x)['params'], x)


def test_the_tolerance_is_float32_accumulation_over_the_layers():
    """8 L K u: 4 layers of fan-in 64 (three 64-wide hidden layers and the output layer, input 29 wide)."""
    module = EnsembleEncoder((64, 64, 64), 29, num_members=2)
    params = module.init(jax.random.PRNGKey(0), jnp.ones((1, 29)))['params']['VmapEncoder_0']
    assert fused_mlp.tolerance(params) == pytest.approx(8 * 4 * 64 * 2.0**-24)
