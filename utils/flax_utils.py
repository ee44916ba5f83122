"""Small flax helpers shared by every agent: a train state and one gradient step.

On an accelerator one gradient step runs the optimizer over all parameters at once: the optimizer state lives as
flat vectors (one entry per parameter, the leaves concatenated in tree order: Adam's mu and nu are two [P] vectors,
not two trees of one array per layer), so Adam is one elementwise computation over P numbers instead of one kernel
per parameter leaf, and the gradient norm is one reduction. An update of an agent with many small leaves
(LayerNorms, ensemble members, predictors) then launches far fewer kernels (benchmarks/hlo_kernels.py counts them;
docs/performance.md). The maths is the same; the rounding is not always: XLA compiles the same elementwise Adam
differently for one long vector than for many small arrays (fusion, FMA contraction, `x / c` turned into
`x * (1 / c)`), so parameters can differ in the last bit from the per-leaf update's after a step, and the
`grad_norm` metric is a sum of squares taken in another order (tests/test_update_equivalence.py: within 1e-6 after
10 updates). On the CPU, where a kernel costs little, the per-leaf update is kept by default, so CPU results stay
bit-identical to the numbers recorded before (tests/test_regression.py). `layout` (below) or
`TrainState.create(..., flat=...)` chooses explicitly. Checkpoints always hold the per-leaf layout (`_state_dict`),
so they restore into either layout, from either backend, and from before this change.
"""

import contextlib
from typing import Any, Callable, Optional

import flax
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax


def nonpytree_field(**kwargs):
    """A dataclass field that is static (not a leaf): configs, apply functions, optimizers."""
    return flax.struct.field(pytree_node=False, **kwargs)


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def ravel_leaves(tree, batch_dims: int = 0):
    """The leaves of `tree` concatenated in tree order into one vector [*batch, P] (the first `batch_dims` axes of
    every leaf kept: a stack of seeds)."""
    leaves = jax.tree_util.tree_leaves(tree)
    xp = np if all(isinstance(x, np.ndarray) for x in leaves) else jnp
    return xp.concatenate([xp.reshape(x, (*x.shape[:batch_dims], -1)) for x in leaves], axis=-1)


def unravel_like(flat, like):
    """Inverse of `ravel_leaves`: `flat` [*batch, P] cut into a tree of `like`'s structure and shapes (`like`'s
    leaves may carry the same leading batch axes as `flat`)."""
    batch_dims = flat.ndim - 1
    leaves, treedef = jax.tree_util.tree_flatten(like)
    out, offset = [], 0
    for leaf in leaves:
        size = _size(leaf.shape[batch_dims:])
        out.append(flat[..., offset:offset + size].reshape(leaf.shape))
        offset += size
    if offset != flat.shape[-1]:
        raise ValueError(f'a flat vector of {flat.shape[-1]} entries does not match parameters of {offset}')
    return jax.tree_util.tree_unflatten(treedef, out)


# The optimizer-state layout of new train states: 'auto' (flat on accelerators, per-leaf on the CPU), 'flat' or 'leaf'.
DEFAULT_LAYOUT = 'auto'


@contextlib.contextmanager
def layout(name: str):
    """Train states created inside use optimizer-state layout `name` ('auto', 'flat' or 'leaf')."""
    global DEFAULT_LAYOUT
    if name not in ('auto', 'flat', 'leaf'):
        raise ValueError(f"layout must be 'auto', 'flat' or 'leaf', not {name!r}")
    before, DEFAULT_LAYOUT = DEFAULT_LAYOUT, name
    try:
        yield
    finally:
        DEFAULT_LAYOUT = before


def default_flat() -> bool:
    if DEFAULT_LAYOUT == 'auto':
        return jax.default_backend() != 'cpu'
    return DEFAULT_LAYOUT == 'flat'


class TrainState(flax.struct.PyTreeNode):
    """Parameters, optimizer and optimizer state of one ModuleDict network.

    `flat` (static): the optimizer runs on all parameters as one vector and `opt_state` holds flat vectors (see the
    module docstring; default: `layout`); False: per leaf, as optax does by default. The optimizer must then be
    elementwise (Adam, SGD, ...): a transform that reads the tree's structure (masks, per-layer labels, per-block
    clipping) needs `flat=False`.
    """

    step: jax.Array
    apply_fn: Callable = nonpytree_field()
    tx: Any = nonpytree_field()
    params: Any = None
    opt_state: Any = None
    flat: bool = nonpytree_field(default=False)

    @classmethod
    def create(cls, model_def, params, tx, flat: Optional[bool] = None):
        flat = default_flat() if flat is None else flat
        opt_state = tx.init(ravel_leaves(params) if flat else params)
        return cls(step=jnp.array(0, jnp.int32), apply_fn=model_def.apply, tx=tx, params=params, opt_state=opt_state, flat=flat)

    def __call__(self, *args, name: str, params, **kwargs):
        """Run sub-module `name` with `params`: the parameters being differentiated, `frozen(...)`
        ones, or `self.params` when acting. There is no default, so every call says which."""
        return self.apply_fn({'params': params}, *args, name=name, **kwargs)

    def apply_gradients(self, grads):
        return self._apply_gradients(grads)[0]

    def _apply_gradients(self, grads):
        """(new state, the gradient norm)."""
        if not self.flat:
            updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
            new = self.replace(step=self.step + 1, params=optax.apply_updates(self.params, updates), opt_state=opt_state)
            return new, optax.tree.norm(grads)
        flat_grads = ravel_leaves(grads)
        flat_updates, opt_state = self.tx.update(flat_grads, self.opt_state, ravel_leaves(self.params))
        # optax.apply_updates, leaf by leaf, on the matching piece of the flat update.
        params = jax.tree_util.tree_map(lambda p, u: jnp.asarray(p + u).astype(jnp.asarray(p).dtype),
                                        self.params, unravel_like(flat_updates, self.params))
        return self.replace(step=self.step + 1, params=params, opt_state=opt_state), grad_norm(flat_grads)

    def apply_loss_fn(self, loss_fn):
        """One gradient step on `loss_fn(params) -> (loss, info)`; `info` gains the gradient norm."""
        grads, info = jax.grad(loss_fn, has_aux=True)(self.params)
        new, info['grad_norm'] = self._apply_gradients(grads)
        return new, info

    # -- layouts of the optimizer state ---------------------------------------------------------------------------

    def _flat_layout(self):
        """(treedef, [whether each leaf is a flat parameter vector]) of the flat layout's optimizer state, from the
        optimizer's `init` on one agent's flat parameter vector (shapes only)."""
        batch_dims = np.ndim(self.step)  # 1 for a stack of seeds (utils.training.stack_trees)
        leaves = jax.tree_util.tree_leaves(self.params)
        total = sum(_size(np.shape(x)[batch_dims:]) for x in leaves)
        dtype = leaves[0].dtype if leaves else jnp.float32
        structure = jax.eval_shape(self.tx.init, jax.ShapeDtypeStruct((total,), dtype))
        leaves, treedef = jax.tree_util.tree_flatten(structure)
        return treedef, [leaf.shape == (total,) for leaf in leaves], batch_dims

    def tree_opt_state(self):
        """`opt_state` in the per-leaf layout (each flat [P] vector as a tree shaped like the parameters)."""
        if not self.flat:
            return self.opt_state
        treedef, is_flat, _ = self._flat_layout()
        leaves = treedef.flatten_up_to(self.opt_state)
        return jax.tree_util.tree_unflatten(treedef, [unravel_like(x, self.params) if flat else x for x, flat in zip(leaves, is_flat)])

    def flat_opt_state(self, tree_opt_state):
        """Inverse of `tree_opt_state`: an optimizer state in the per-leaf layout, in this state's layout."""
        if not self.flat:
            return tree_opt_state
        treedef, is_flat, batch_dims = self._flat_layout()
        pieces = treedef.flatten_up_to(tree_opt_state)
        return jax.tree_util.tree_unflatten(treedef, [ravel_leaves(x, batch_dims) if flat else x for x, flat in zip(pieces, is_flat)])

    def with_layout(self, flat: bool):
        """This state with its optimizer state in the flat (True) or per-leaf (False) layout: the same numbers."""
        if flat == self.flat:
            return self
        if flat:
            target = self.replace(flat=True)
            return target.replace(opt_state=target.flat_opt_state(self.opt_state))
        return self.replace(flat=False, opt_state=self.tree_opt_state())


def grad_norm(flat_grads):
    """The global gradient norm from the flat gradient vector: one reduction."""
    return jnp.sqrt(jnp.sum(jnp.square(flat_grads)))


def _state_dict(state: TrainState):
    """Checkpoint layout: the per-leaf optimizer state, whatever the layout in memory."""
    return {
        'step': flax.serialization.to_state_dict(state.step),
        'params': flax.serialization.to_state_dict(state.params),
        'opt_state': flax.serialization.to_state_dict(state.tree_opt_state()),
    }


def _from_state_dict(target: TrainState, state):
    tree_state = flax.serialization.from_state_dict(target.tree_opt_state(), state['opt_state'])
    return target.replace(
        step=flax.serialization.from_state_dict(target.step, state['step']),
        params=flax.serialization.from_state_dict(target.params, state['params']),
        opt_state=target.flat_opt_state(tree_state),
    )


flax.serialization.register_serialization_state(TrainState, _state_dict, _from_state_dict, override=True)


def frozen(params):
    """`params` read without gradient: a loss may evaluate these networks but cannot train them."""
    return jax.lax.stop_gradient(params)


def ema_update(online, target, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)
