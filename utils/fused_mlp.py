"""Ensembles of small MLPs, forward and backward, as one fused kernel per (ensemble member, row tile): an optional GPU
path for utils.networks' encoder and predictor ensembles (phi, psi_f, psi_b; TRA's and TD-SR's encoders), which a run
takes only when asked (main.py --network_kernel=fused) and only for the networks it computes exactly.

Why: the representation networks are 64 wide. Run as XLA kernels, every Dense, GELU and LayerNorm pass reads and
writes a [rows, 64] float32 activation in device memory, forward and backward, and the arithmetic per byte is too
small to hide that. Here one Pallas program holds a tile of rows and one member's weights and runs the whole MLP on
chip: the forward reads inputs and weights and writes only the outputs; the backward (a custom VJP) recomputes the
activations inside the same program instead of storing them, and writes the input gradient and that tile's weight
gradients, which are summed over tiles afterwards (a fixed order, so the sum is deterministic).

The function the kernel computes is `utils.networks.Encoder` / `Predictor` as written today, on each member: for each
hidden layer h <- LayerNorm(gelu(h W + b)) (LayerNorm optional; flax's epsilon 1e-6 and tanh-approximate GELU), then
h W_out + b_out. A network changed in any other way (another activation, more layers, other widths) is not that
function, so `check_networks` compares the kernel with the network's own flax module, on the run's own batch, before
the run uses it, and keeps XLA for every network where they differ. On a CPU, Pallas interprets the kernel: same
values, slowly (the tests' way to check it).
"""

import functools
import math
from typing import Callable, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax.experimental import pallas as pl

from utils.networks import EnsembleEncoder, EnsemblePredictor, ModuleDict
from utils.optimizers import map_train_states, train_states

LAYER_NORM_EPSILON = 1e-6  # flax.linen.LayerNorm's default
MIN_DIM = 16  # the smallest matrix side a GPU kernel's dot takes; narrower inputs and outputs are zero-padded
ROW_TILE = 128  # rows per program
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # a Python float: a weakly typed literal inside the kernels
FLOAT32_UNIT_ROUNDOFF = 2.0**-24
ENSEMBLES = (EnsembleEncoder, EnsemblePredictor)


def supports(hidden_dims, dtype=jnp.float32) -> bool:
    """Whether the kernel computes this MLP: float32, and hidden sizes powers of two of at least 16 (a LayerNorm's
    row must be one block, unpadded). Other networks keep the XLA path."""
    return jnp.dtype(dtype) == jnp.float32 and all(
        size >= MIN_DIM and size & (size - 1) == 0 for size in hidden_dims)


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
    """One member's MLP on a block of rows: the forward kernel's body.
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


def member_kernel(x, member_params, layer_norm: bool, shared_input: bool):
    """The `kernel` of `EnsembleEncoder` / `EnsemblePredictor`: the members' MLPs of `member_params` (flax's own
    tree, so checkpoints serve both paths), fused."""
    num_hidden = sum(name.startswith('Dense_') for name in member_params['MLP_0'])
    return ensemble_mlp(x, mlp_layers(member_params, num_hidden, layer_norm), layer_norm, shared_input)


# ------------------------------------------------------------------ which networks a run may fuse


def structure_problem(module, member_params) -> Optional[str]:
    """Why the kernel cannot compute ensemble `module` with these members' parameters (sizes, dtype, the layers of its
    parameter tree), or None."""
    if not supports(module.hidden_dims, jax.tree_util.tree_leaves(member_params)[0].dtype):
        return (f'its hidden sizes {tuple(module.hidden_dims)} (float32) are not all powers of two from {MIN_DIM}, '
                f'which the kernel needs')
    num_hidden = len(module.hidden_dims)
    expected = {f'Dense_{i}' for i in range(num_hidden)} | ({f'LayerNorm_{i}' for i in range(num_hidden)}
                                                            if module.layer_norm else set())
    if set(member_params) != {'MLP_0', 'Dense_0'} or set(member_params['MLP_0']) != expected:
        return ('its parameters are not the layers the kernel re-implements (an MLP of Dense and LayerNorm layers, '
                'then one Dense)')
    return None


def tolerance(member_params) -> float:
    """The largest difference, relative to an array's largest magnitude, allowed between the kernel and flax's layers.
    Both paths multiply the same float32 numbers and differ only in the order of the additions: two orders of a sum
    of K products differ by at most 2 K u of its magnitude (u = 2^-24, float32's unit roundoff), and L layers add up
    their differences, 2 L K u in all. Gradients run the chain twice and sums may cancel, hence 4x that: 8 L K u,
    1.2e-4 for four layers of fan-in 64 (a wrong activation differs by about 0.1-1)."""
    mlp = member_params['MLP_0']
    kernels = [mlp[name]['kernel'] for name in mlp if name.startswith('Dense_')] + [member_params['Dense_0']['kernel']]
    return 8 * len(kernels) * max(kernel.shape[-2] for kernel in kernels) * FLOAT32_UNIT_ROUNDOFF


def _members_name(module) -> str:
    """The name of the ensemblized members (nn.vmap of Encoder / Predictor) among `module`'s parameters."""
    return next(name for name in module.variables['params'] if name.startswith('Vmap'))


def _relative_difference(got, want) -> float:
    return max(float(jnp.max(jnp.abs(g - w))) / (float(jnp.max(jnp.abs(w))) + 1e-30)
               for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True))


def compare(module, args, kwargs) -> Optional[str]:
    """None when the kernel computes bound ensemble `module` on these inputs as its flax layers do (values, and the
    gradients with respect to its parameters and floating inputs, within `tolerance`), else why not."""
    params = module.variables['params']
    member_params = params[_members_name(module)]
    problem = structure_problem(module, member_params)
    if problem:
        return problem
    floating = [i for i, a in enumerate(args) if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating)]

    def outputs_and_gradients(kernel):
        unbound = module.clone(parent=None, name=None, kernel=kernel)

        @jax.jit
        def run(params, inputs):
            def apply(params, *floating_inputs):
                full = list(args)
                for i, x in zip(floating, floating_inputs):
                    full[i] = x
                return unbound.apply({'params': params}, *full, **kwargs)

            out, vjp = jax.vjp(apply, params, *inputs)
            return out, vjp(jax.random.normal(jax.random.PRNGKey(0), out.shape, out.dtype))

        return run(params, [args[i] for i in floating])

    try:
        fused = outputs_and_gradients(member_kernel)
    except Exception as error:  # noqa: BLE001 -- a kernel that cannot run here: keep XLA, and say why
        return f'the kernel failed here ({type(error).__name__}: {str(error).splitlines()[0][:200]})'
    reference = outputs_and_gradients(None)
    allowed = tolerance(member_params)
    values, gradients = _relative_difference(fused[0], reference[0]), _relative_difference(fused[1], reference[1])
    if max(values, gradients) > allowed:
        return (f'the kernel computes another function than this network\'s flax module (values differ by '
                f'{values:.2g} and gradients by {gradients:.2g} of their scale, {allowed:.2g} allowed): the module is '
                f'not the MLP the kernel re-implements (another activation, layer or normalisation?)')
    return None


def check_networks(agent, probe: Callable) -> Dict[str, Optional[str]]:
    """{network name: None if the kernel computes it exactly, else why it keeps XLA}, for every ensemble network of
    `agent`'s train states. `probe(agent)` runs the agent's networks once, eagerly, on the run's own batch (its losses
    on a batch): each network is checked on the inputs it receives there, against its own flax module."""
    calls = []

    def record(next_fun, args, kwargs, context):
        module = context.module
        if context.method_name == '__call__' and isinstance(module, ENSEMBLES) and isinstance(module.parent, ModuleDict):
            calls.append((module.name.removeprefix('modules_'), module, args, kwargs))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        probe(agent)
    verdicts = {name: 'the check batch did not exercise it' for name in ensemble_names(agent)}
    for name, module, args, kwargs in calls:
        if name in verdicts and (verdicts[name] is None or verdicts[name].startswith('the check batch')):
            verdicts[name] = compare(module, args, kwargs)
    return verdicts


def ensemble_names(agent):
    """The names of the ensemble networks in `agent`'s train states."""
    return sorted({name for state in train_states(agent) for name, m in state.model.modules.items()
                   if isinstance(m, ENSEMBLES)})


def with_kernel(agent, names):
    """`agent` with its ensemble networks named `names` computed by the fused kernel (the same parameters)."""
    def fuse(state):
        modules = {name: m.clone(kernel=member_kernel) if name in names and isinstance(m, ENSEMBLES) else m
                   for name, m in state.model.modules.items()}
        return state.replace(model=ModuleDict(modules))

    return map_train_states(fuse, agent)
