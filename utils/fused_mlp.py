"""Ensembles of small MLPs, forward and backward, as one fused kernel per (ensemble member, row tile): the GPU path of
utils.networks' encoder and predictor ensembles (phi, psi_f, psi_b; TRA's and TD-SR's encoders).

Why: the representation networks are 64 wide. Run as XLA kernels, every Dense, GELU and LayerNorm pass reads and
writes a [rows, 64] float32 activation in device memory, forward and backward, and the arithmetic per byte is too
small to hide that. Here one Pallas program holds a tile of rows and one member's weights and runs the whole MLP on
chip: the forward reads inputs and weights and writes only the outputs; the backward (a custom VJP) recomputes the
activations inside the same program instead of storing them, and writes the input gradient and that tile's weight
gradients, which are summed over tiles afterwards (a fixed order, so the sum is deterministic).

The function computed is exactly `utils.networks.Encoder` / `Predictor` on each member: for each hidden layer
h <- LayerNorm(gelu(h W + b)) (LayerNorm optional; flax's epsilon 1e-6 and tanh-approximate GELU), then h W_out + b_out.

`FUSED_MLP` in the environment selects the path when a network is traced: `auto` (the default) uses the kernel on a
GPU once a self-check on small shapes matches the XLA computation, and XLA elsewhere; `on` forces it (on a CPU it runs
in Pallas' interpret mode: the tests' way to check it, slow); `off` keeps XLA everywhere.
"""

import concurrent.futures
import contextlib
import functools
import logging
import math
import os
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from utils.errors import ConfigError

LAYER_NORM_EPSILON = 1e-6  # flax.linen.LayerNorm's default
MODES = ('auto', 'on', 'off')
MIN_DIM = 16  # the smallest matrix side a GPU kernel's dot takes; narrower inputs and outputs are zero-padded
ROW_TILE = 128  # rows per program
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # a Python float: a weakly typed literal inside the kernels

_forced_mode: Optional[str] = None


def requested_mode() -> str:
    """The path asked for: `fused_mode(...)`'s if inside one, else $FUSED_MLP (default auto)."""
    mode = _forced_mode or os.environ.get('FUSED_MLP', 'auto')
    if mode not in MODES:
        raise ConfigError(f'FUSED_MLP={mode!r} is not one of {", ".join(MODES)}: unset it (auto: the fused kernel on a '
                          f'GPU, XLA elsewhere), or set on / off.')
    return mode


@contextlib.contextmanager
def fused_mode(mode: str):
    """Networks traced inside use `mode` (auto / on / off), whatever $FUSED_MLP says: for tests and benchmarks. The
    mode is read when a function is traced, and jax.jit's caches do not know it, so where entering or leaving changes
    the path a 64-wide network takes, JAX's caches are cleared: a function jitted at module level
    (utils.training.train_steps) is then traced again, with the path in force."""
    global _forced_mode
    if mode not in MODES:
        raise ValueError(f'fused_mode({mode!r}): expected one of {MODES}.')
    before = use_fused((64,))
    previous, _forced_mode = _forced_mode, mode
    if use_fused((64,)) != before:
        jax.clear_caches()
    try:
        yield
    finally:
        inside = use_fused((64,))
        _forced_mode = previous
        if use_fused((64,)) != inside:
            jax.clear_caches()


def supports(hidden_dims: Sequence[int], dtype=jnp.float32) -> bool:
    """Whether the kernel computes this MLP: float32, and hidden sizes powers of two of at least 16 (a LayerNorm's
    row must be one block, unpadded). Other networks keep the XLA path."""
    return jnp.dtype(dtype) == jnp.float32 and all(
        size >= MIN_DIM and size & (size - 1) == 0 for size in hidden_dims)


def use_fused(hidden_dims: Sequence[int], dtype=jnp.float32, mode: Optional[str] = None) -> bool:
    """Whether a network with these hidden sizes, traced now, takes the fused path (under `mode`, default the
    requested one)."""
    mode = mode or requested_mode()
    if mode == 'off' or not supports(hidden_dims, dtype):
        return False
    if mode == 'on':
        return True
    return jax.default_backend() == 'gpu' and _gpu_self_check_passes()


def interpret_mode() -> bool:
    """Pallas runs compiled kernels on a GPU only; elsewhere it interprets them (same values, slowly)."""
    return jax.default_backend() != 'gpu'


# ------------------------------------------------------------------ the computation, in plain JAX


def _dot(a, b, contract_a=1, contract_b=0):
    return jax.lax.dot_general(a, b, (((contract_a,), (contract_b,)), ((), ())), preferred_element_type=jnp.float32)


def gelu(a):
    """The tanh approximation (flax.linen.gelu's default), written out so that the kernels and their derivative
    below use one definition."""
    return 0.5 * a * (1.0 + jnp.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a**3)))


def gelu_derivative(a):
    t = jnp.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a**3))
    return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * a * a)


def normalize(u):
    """(u - mean) / std over the last axis, and 1 / std."""
    centred = u - jnp.mean(u, axis=-1, keepdims=True)
    inv_std = jax.lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + LAYER_NORM_EPSILON)
    return centred * inv_std, inv_std


def member_mlp(x, layers, layer_norm: bool):
    """One member's MLP on a block of rows: the forward kernel's body, and in plain JAX the self-check's yardstick.
    `layers`: per hidden layer (W, b, scale, offset) (no scale / offset without LayerNorm), then (W_out, b_out); biases
    [1, size]."""
    h = x
    for layer in layers[:-1]:
        u = gelu(_dot(h, layer[0]) + layer[1])
        h = normalize(u)[0] * layer[2] + layer[3] if layer_norm else u
    return _dot(h, layers[-1][0]) + layers[-1][1]


# ------------------------------------------------------------------ the kernels


def _group(refs, num_hidden: int, layer_norm: bool):
    """The flat weight refs back into layers: (W, b[, scale, offset]) per hidden layer, then (W_out, b_out)."""
    per = 4 if layer_norm else 2
    layers = [refs[i * per:(i + 1) * per] for i in range(num_hidden)]
    return layers + [refs[num_hidden * per:num_hidden * per + 2]]


def _forward_kernel(num_hidden, layer_norm, x_ref, *refs):
    *weight_refs, out_ref = refs
    layers = [[ref[...] for ref in layer] for layer in _group(weight_refs, num_hidden, layer_norm)]
    out_ref[...] = member_mlp(x_ref[...], layers, layer_norm)


def _backward_kernel(num_hidden, layer_norm, x_ref, *refs):
    num_weights = len(refs) // 2 - 1  # inputs: weights, dy; outputs: dx, one gradient per weight
    weight_refs, dy_ref = refs[:num_weights], refs[num_weights]
    dx_ref, grad_refs = refs[num_weights + 1], refs[num_weights + 2:]
    layers = _group(weight_refs, num_hidden, layer_norm)
    grads = _group(grad_refs, num_hidden, layer_norm)

    # Recompute the forward pass, keeping what the backward needs.
    inputs, pre_activations, normalized, inv_stds = [], [], [], []
    h = x_ref[...]
    for layer in layers[:-1]:
        inputs.append(h)
        a = _dot(h, layer[0][...]) + layer[1][...]
        pre_activations.append(a)
        u = gelu(a)
        if layer_norm:
            x_hat, inv_std = normalize(u)
            normalized.append(x_hat)
            inv_stds.append(inv_std)
            h = x_hat * layer[2][...] + layer[3][...]
        else:
            h = u

    dy = dy_ref[...]
    grads[-1][0][...] = _dot(h, dy, 0, 0)
    grads[-1][1][...] = jnp.sum(dy, axis=0, keepdims=True)
    dh = _dot(dy, layers[-1][0][...], 1, 1)
    for i in reversed(range(num_hidden)):
        layer, grad = layers[i], grads[i]
        if layer_norm:
            x_hat = normalized[i]
            grad[2][...] = jnp.sum(dh * x_hat, axis=0, keepdims=True)
            grad[3][...] = jnp.sum(dh, axis=0, keepdims=True)
            dx_hat = dh * layer[2][...]
            du = inv_stds[i] * (dx_hat - jnp.mean(dx_hat, axis=-1, keepdims=True)
                                - x_hat * jnp.mean(dx_hat * x_hat, axis=-1, keepdims=True))
        else:
            du = dh
        da = du * gelu_derivative(pre_activations[i])
        grad[0][...] = _dot(inputs[i], da, 0, 0)
        grad[1][...] = jnp.sum(da, axis=0, keepdims=True)
        dh = _dot(da, layer[0][...], 1, 1)
    dx_ref[...] = dh


# ------------------------------------------------------------------ the calls


def _row_spec(shared_input: bool, rows: int, width: int):
    if shared_input:
        return pl.BlockSpec((rows, width), lambda m, t: (t, 0))
    return pl.BlockSpec((pl.squeezed, rows, width), lambda m, t: (m, t, 0))


def _member_spec(shape):
    """One member's whole weight (its leading axis squeezed away)."""
    return pl.BlockSpec((pl.squeezed, *shape[1:]), lambda m, t: (m,) + (0,) * (len(shape) - 1))


def _forward(static, x, weights):
    num_hidden, layer_norm, shared_input, row_tile = static
    num_members, rows, out_width = weights[0].shape[0], x.shape[-2], weights[-1].shape[-1]
    return pl.pallas_call(
        functools.partial(_forward_kernel, num_hidden, layer_norm),
        out_shape=jax.ShapeDtypeStruct((num_members, rows, out_width), jnp.float32),
        grid=(num_members, rows // row_tile),
        in_specs=[_row_spec(shared_input, row_tile, x.shape[-1])] + [_member_spec(w.shape) for w in weights],
        out_specs=_row_spec(False, row_tile, out_width),
        interpret=interpret_mode(),
        name='fused_ensemble_mlp_forward',
    )(x, *weights)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(static, x, weights):
    return _forward(static, x, weights)


def _fused_forward(static, x, weights):
    return _forward(static, x, weights), (x, weights)


def _fused_backward(static, residuals, dy):
    num_hidden, layer_norm, shared_input, row_tile = static
    x, weights = residuals
    num_members, rows = weights[0].shape[0], x.shape[-2]
    num_tiles = rows // row_tile
    tile_grad_spec = lambda shape: pl.BlockSpec((pl.squeezed, pl.squeezed, *shape[1:]),
                                                lambda m, t: (m, t) + (0,) * (len(shape) - 1))
    outputs = pl.pallas_call(
        functools.partial(_backward_kernel, num_hidden, layer_norm),
        out_shape=[jax.ShapeDtypeStruct((num_members, rows, x.shape[-1]), jnp.float32)]
        + [jax.ShapeDtypeStruct((num_members, num_tiles, *w.shape[1:]), jnp.float32) for w in weights],
        grid=(num_members, num_tiles),
        in_specs=[_row_spec(shared_input, row_tile, x.shape[-1])] + [_member_spec(w.shape) for w in weights]
        + [_row_spec(False, row_tile, dy.shape[-1])],
        out_specs=[_row_spec(False, row_tile, x.shape[-1])] + [tile_grad_spec(w.shape) for w in weights],
        interpret=interpret_mode(),
        name='fused_ensemble_mlp_backward',
    )(x, *weights, dy)
    dx, tile_grads = outputs[0], outputs[1:]
    if shared_input:  # every member read the same x
        dx = jnp.sum(dx, axis=0)
    return dx, tuple(jnp.sum(g, axis=1) for g in tile_grads)


_fused.defvjp(_fused_forward, _fused_backward)


def _padded_width(width: int) -> int:
    return max(MIN_DIM, 1 << (width - 1).bit_length())


def ensemble_mlp(x, layers, layer_norm: bool, shared_input: bool):
    """All members' MLPs on `x`, fused. `x`: [..., d] read by every member (`shared_input`), or [M, ..., d], member m
    reading x[m]. `layers`: per hidden layer (W [M, i, o], b [M, o], scale [M, o], offset [M, o]) (no scale, offset
    without LayerNorm), then (W_out, b_out). Returns [M, ..., d_out]. Rows are padded to whole tiles and the input
    and output widths to a power of two (zeros, which change no value or gradient); hidden sizes must satisfy
    `supports`."""
    num_members = layers[0][0].shape[0]
    lead = x.shape[:-1] if shared_input else x.shape[1:-1]
    rows = int(np.prod(lead, dtype=np.int64))
    x = x.reshape(((num_members,) if not shared_input else ()) + (rows, x.shape[-1])).astype(jnp.float32)
    row_tile = min(ROW_TILE, _padded_width(rows))
    padded_rows = -(-rows // row_tile) * row_tile
    in_width, out_width = x.shape[-1], layers[-1][0].shape[-1]
    pad_in, pad_out = _padded_width(in_width) - in_width, _padded_width(out_width) - out_width
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, padded_rows - rows), (0, pad_in)])

    weights = []
    for i, layer in enumerate(layers):
        kernel, bias, *norm = layer
        if i == 0:
            kernel = jnp.pad(kernel, ((0, 0), (0, pad_in), (0, 0)))
        if i == len(layers) - 1:
            kernel = jnp.pad(kernel, ((0, 0), (0, 0), (0, pad_out)))
            bias = jnp.pad(bias, ((0, 0), (0, pad_out)))
        weights += [kernel, bias[:, None, :]] + [p[:, None, :] for p in norm]
    static = (len(layers) - 1, layer_norm, shared_input, row_tile)
    out = _fused(static, x, tuple(weights))
    return out[:, :rows, :out_width].reshape((num_members, *lead, out_width))


def mlp_layers(params, num_hidden: int, layer_norm: bool, final='Dense_0'):
    """`ensemble_mlp`'s `layers` from the parameters of an ensemblized `utils.networks.Encoder` / `Predictor`
    ({'MLP_0': {'Dense_i', 'LayerNorm_i'}, 'Dense_0'}: the XLA path's own tree, so checkpoints serve both paths)."""
    mlp = params['MLP_0']
    layers = []
    for i in range(num_hidden):
        layer = (mlp[f'Dense_{i}']['kernel'], mlp[f'Dense_{i}']['bias'])
        if layer_norm:
            layer += (mlp[f'LayerNorm_{i}']['scale'], mlp[f'LayerNorm_{i}']['bias'])
        layers.append(layer)
    return layers + [(params[final]['kernel'], params[final]['bias'])]


# ------------------------------------------------------------------ the GPU self-check


def self_check() -> bool:
    """Compile the kernels on small shapes and compare values and gradients with plain JAX; on a mismatch or a
    compile error, log why and return False (`auto` then keeps XLA for this process). It is first asked while an
    update is being traced; JAX's trace is per thread, so it runs in a thread of its own, where it computes instead
    of adding to that trace."""
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(_self_check).result()
    except Exception as error:  # noqa: BLE001 -- any failure means: keep the XLA path, and say why
        logging.warning('The fused ensemble-MLP kernel failed its self-check on this GPU (%s: %s); the representation '
                        'networks use XLA. Set FUSED_MLP=off to skip the check.', type(error).__name__, error)
        return False


_gpu_self_check_passes = functools.lru_cache(maxsize=None)(self_check)  # once per process


def _self_check() -> bool:
    """Values and gradients of a small ensemble, fused against plain JAX; raises on a mismatch."""
    rng = np.random.default_rng(0)
    members, rows, width, hidden = 2, 200, 29, (64, 64)
    sizes = (width, *hidden, 29)
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layer = (rng.normal(size=(members, n_in, n_out)) / np.sqrt(n_in), rng.normal(size=(members, n_out)) * 0.1)
        if i < len(hidden):
            layer += (1 + 0.1 * rng.normal(size=(members, n_out)), 0.1 * rng.normal(size=(members, n_out)))
        layers.append(tuple(jnp.asarray(p, jnp.float32) for p in layer))
    x = jnp.asarray(rng.normal(size=(rows, width)), jnp.float32)

    def loss(fn, x, layers):
        return jnp.sum(jnp.sin(fn(x, layers)))

    fused = lambda x, layers: ensemble_mlp(x, layers, True, True)
    plain = lambda x, layers: jax.vmap(lambda m: member_mlp(
        x, [tuple(p[m][None] if p.ndim == 2 else p[m] for p in layer) for layer in layers], True))(
        jnp.arange(members))
    got = jax.jit(jax.value_and_grad(functools.partial(loss, fused), argnums=(0, 1)))(x, layers)
    want = jax.jit(jax.value_and_grad(functools.partial(loss, plain), argnums=(0, 1)))(x, layers)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        scale = float(jnp.max(jnp.abs(w))) + 1e-6
        if not float(jnp.max(jnp.abs(g - w))) <= 2e-2 * scale:  # TF32 matmuls on the GPU
            raise AssertionError(f'fused and plain differ by {float(jnp.max(jnp.abs(g - w))):.3g} (scale {scale:.3g})')
    return True
