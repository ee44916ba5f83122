"""The optimizer over one vector: a run's opt-in layout (main.py --optimizer_layout=one_vector), applied where the run is
assembled, never by an agent.

Agents are built with optax's optimizer, which updates each parameter array on its own. On an accelerator, an update
of an agent with many small parameter arrays (layer norms, ensemble members, predictors) launches an optimizer kernel
per array; `OneVector(adam)` runs Adam on all of them concatenated: one elementwise computation
(benchmarks/hlo_kernels.py counts the kernels of an update in either layout). `with_optimizer` converts an agent
between the two; checkpoints hold the per-array layout.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


class OneVector(NamedTuple):
    """`inner` (an elementwise optimizer: Adam, SGD, ...) run on all parameters concatenated into one vector [P]:
    one elementwise computation instead of one per leaf, on a state of flat vectors (Adam's mu and nu are [P] each).
    The same maths as `inner`; XLA may round the long vector differently in the last bit
    (tests/agents/test_update_equivalence.py). Checkpoints hold the per-leaf state either way (`with_optimizer`).
    A transform that reads the tree's structure (masks, per-layer labels) must not be wrapped."""

    inner: optax.GradientTransformation

    def init(self, params):
        return self.inner.init(ravel_leaves(params))

    def update(self, grads, state, params=None):
        flat_updates, state = self.inner.update(ravel_leaves(grads), state, None if params is None else ravel_leaves(params))
        return unravel_like(flat_updates, grads), state


def is_train_state(x) -> bool:
    """An agents.base.TrainState: one network's model, parameters, optimizer and its state."""
    return hasattr(x, 'tx') and hasattr(x, 'opt_state')


def train_states(agent):
    """The train states in `agent`'s tree, in tree order."""
    return [x for x in jax.tree_util.tree_leaves(agent, is_leaf=is_train_state) if is_train_state(x)]


def map_train_states(fn, agent):
    """`agent` with each of its train states replaced by `fn(state)`."""
    return jax.tree_util.tree_map(lambda x: fn(x) if is_train_state(x) else x, agent, is_leaf=is_train_state)


def uses_one_vector(agent) -> bool:
    return any(isinstance(state.tx, OneVector) for state in train_states(agent))


def with_optimizer(agent, one_vector: bool):
    """`agent` with every network's optimizer over one vector (True) or per leaf (False), its state converted: the
    same numbers in the other layout. Checkpoints hold the per-leaf layout, so they load into either."""
    def relayout(state):
        if isinstance(state.tx, OneVector) == one_vector:
            return state
        inner = state.tx.inner if isinstance(state.tx, OneVector) else state.tx
        size = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(state.params))
        leaves, treedef = jax.tree_util.tree_flatten(jax.eval_shape(inner.init, jax.ShapeDtypeStruct((size,), jnp.float32)))
        is_vector = [leaf.shape == (size,) for leaf in leaves]  # the parameter-shaped parts of the state
        pieces = treedef.flatten_up_to(state.opt_state)
        if one_vector:
            converted = [ravel_leaves(x) if vector else x for x, vector in zip(pieces, is_vector)]
        else:
            converted = [unravel_like(x, state.params) if vector else x for x, vector in zip(pieces, is_vector)]
        return state.replace(tx=OneVector(inner) if one_vector else inner,
                             opt_state=jax.tree_util.tree_unflatten(treedef, converted))

    return map_train_states(relayout, agent)


def ravel_leaves(tree):
    """The leaves of `tree` concatenated in tree order into one vector [P]."""
    return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(tree)])


def unravel_like(flat, like):
    """Inverse of `ravel_leaves`: `flat` [P] cut into a tree of `like`'s structure and shapes."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    ends = np.cumsum([np.size(x) for x in leaves])
    return jax.tree_util.tree_unflatten(treedef, [flat[end - np.size(x):end].reshape(np.shape(x)) for x, end in zip(leaves, ends)])
