"""One gradient step, the optimizer layouts, and the fused training loop that main.py runs.

    TrainState                  a network's parameters and optimizer state; `apply_loss_fn` is one gradient step
    OneVector, with_optimizer   the optimizer over all parameters as one vector, which a run may ask for
                                (main.py --optimizer_layout=one_vector); per leaf, optax's own, by default
    train_steps(agent, data, data_key, start_step, num_steps)
                                sample a batch on device, update, `num_steps` times in one jitted lax.scan
    train_steps_multi, train_seeds
                                the same for N seeds as one vmapped program (main.py's `--num_seeds`)

The sampler's settings are a function of the agent's config (`batch_config`), which the agent carries, so an update
needs nothing but the agent and the data. The sampling key of step t is fold_in(data_key, t): a run's batches depend
only on its seed and the step number, so fusing K updates per call, or resuming at any step, replays the same batches.
Every seed's numbers under `train_steps_multi` are those of a single-seed run with that seed.
"""

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from utils.sampler import DeviceDataset, SamplerConfig, sample_batch


def nonpytree_field(**kwargs):
    """A dataclass field that is static (not a leaf): configs, apply functions, optimizers."""
    return flax.struct.field(pytree_node=False, **kwargs)


class TrainState(flax.struct.PyTreeNode):
    """Parameters, optimizer and optimizer state of one ModuleDict network."""

    step: jax.Array
    model: Any = nonpytree_field()  # the ModuleDict (utils/networks.py) whose parameters these are
    tx: Any = nonpytree_field()
    params: Any = None
    opt_state: Any = None

    @classmethod
    def create(cls, model, params, tx):
        return cls(step=jnp.array(0, jnp.int32), model=model, tx=tx, params=params, opt_state=tx.init(params))

    def __call__(self, *args, name: str, params, **kwargs):
        """Run sub-module `name` with `params`: the parameters being differentiated, `frozen(...)`
        ones, or `self.params` when acting. There is no default, so every call says which."""
        return self.model.apply({'params': params}, *args, name=name, **kwargs)

    def apply_gradients(self, grads):
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        return self.replace(step=self.step + 1, params=optax.apply_updates(self.params, updates), opt_state=opt_state)

    def apply_loss_fn(self, loss_fn):
        """One gradient step on `loss_fn(params) -> (loss, info)`; `info` gains the gradient norm."""
        grads, info = jax.grad(loss_fn, has_aux=True)(self.params)
        info['grad_norm'] = gradient_norm(grads, self.tx)
        return self.apply_gradients(grads), info


def gradient_norm(grads, tx):
    """The global gradient norm: over a OneVector optimizer's concatenated gradients (one reduction; XLA shares the
    concatenation with the optimizer's), else leaf by leaf."""
    if isinstance(tx, OneVector):
        return jnp.sqrt(jnp.sum(jnp.square(ravel_leaves(grads))))
    return optax.tree.norm(grads)


# ---------------------------------------------------------------------------------------------
# The optimizer layouts. Agents are built with optax's optimizer, which updates each parameter leaf on its own. On an
# accelerator, an update of an agent with many small parameter leaves (layer norms, ensemble members, predictors)
# launches an optimizer kernel per leaf; `OneVector(adam)` runs Adam on all of them concatenated: one elementwise
# computation, and one reduction for the gradient norm (benchmarks/hlo_kernels.py counts the kernels; an H100's
# BYOL-gamma^a update: 201 instead of 242). It is a run's explicit choice (main.py --optimizer_layout), recorded in
# its flags.json; `with_optimizer` converts an agent between the two (checkpoints hold the per-leaf layout).
# ---------------------------------------------------------------------------------------------


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


def _is_train_state(x) -> bool:
    return hasattr(x, 'tx') and hasattr(x, 'opt_state')  # a TrainState


def uses_one_vector(agent) -> bool:
    states = [x for x in jax.tree_util.tree_leaves(agent, is_leaf=_is_train_state) if _is_train_state(x)]
    return any(isinstance(state.tx, OneVector) for state in states)


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

    return jax.tree_util.tree_map(lambda x: relayout(x) if _is_train_state(x) else x, agent, is_leaf=_is_train_state)


def ravel_leaves(tree):
    """The leaves of `tree` concatenated in tree order into one vector [P]."""
    return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(tree)])


def unravel_like(flat, like):
    """Inverse of `ravel_leaves`: `flat` [P] cut into a tree of `like`'s structure and shapes."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    ends = np.cumsum([np.size(x) for x in leaves])
    return jax.tree_util.tree_unflatten(treedef, [flat[end - np.size(x):end].reshape(np.shape(x)) for x, end in zip(leaves, ends)])


def frozen(params):
    """`params` read without gradient: a loss may evaluate these networks but cannot train them."""
    return jax.lax.stop_gradient(params)


def update_keys(rng):
    """(the agent's next rng, this update's noise key): one step of the agent's `update` stream (utils/random_streams.py)."""
    next_rng, noise_key = jax.random.split(rng)
    return next_rng, noise_key


def ema_update(online, target, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


# ---------------------------------------------------------------------------------------------
# The fused loop.
# ---------------------------------------------------------------------------------------------


def batch_config(agent) -> SamplerConfig:
    """What the sampler draws for `agent`: what its class declares (`BATCH`), set by its config."""
    return SamplerConfig.for_agent(type(agent), agent.config)


def scan_updates(agent, data, data_key, start_step, num_steps):
    """The updates, and each metric per step. Inside the scan the metrics travel as one [num_metrics] vector per
    step: one write per step instead of one per metric (on a GPU, a kernel each); they are split by name after."""
    names, sampler = [], batch_config(agent)

    def one_step(agent, step):
        batch = sample_batch(jax.random.fold_in(data_key, step), data, sampler)
        agent, info = agent.update(batch)
        names[:] = sorted(info)
        return agent, jnp.stack([jnp.asarray(info[name], jnp.float32) for name in names])

    agent, metrics = jax.lax.scan(one_step, agent, start_step + jnp.arange(num_steps))
    return agent, {name: metrics[:, i] for i, name in enumerate(names)}


@functools.partial(jax.jit, static_argnames=('num_steps',), donate_argnames=('agent',))
def train_steps(agent, data: DeviceDataset, data_key, start_step, num_steps: int):
    """Run `num_steps` updates from global step `start_step`. Returns the new agent and the per-step
    metrics stacked on axis 0 (so a NaN can be traced to the exact step)."""
    return scan_updates(agent, data, data_key, start_step, num_steps)


# ---------------------------------------------------------------------------------------------
# N seeds as one program: their agents stacked along a leading seed axis, `train_steps` vmapped over it.
# ---------------------------------------------------------------------------------------------


def stack_trees(trees):
    """Stack pytrees of one structure (e.g. one agent per seed) along a new leading axis.

    Static fields (optimizer, apply function) are taken from the first tree: each agent's `create`
    builds equal but distinct objects, which would make the tree structures compare unequal.
    """
    treedef = jax.tree_util.tree_structure(trees[0])
    leaves = [jax.tree_util.tree_leaves(tree) for tree in trees]
    return jax.tree_util.tree_unflatten(treedef, [jnp.stack(group) for group in zip(*leaves)])


@functools.partial(jax.jit, static_argnames=('num_steps',), donate_argnames=('agents',))
def train_steps_multi(agents, data: DeviceDataset, data_keys, start_step, num_steps: int):
    """`train_steps` for N independent seeds at once: `agents` and `data_keys` carry a leading seed
    axis (see `stack_trees`); the dataset is shared. Metrics come back as [N, num_steps]."""
    run = lambda agent, key: scan_updates(agent, data, key, start_step, num_steps)  # noqa: E731
    return jax.vmap(run)(agents, data_keys)


def train_seeds(agents, data: DeviceDataset, data_keys, start_step, num_steps: int):
    """`train_steps_multi` for N > 1 seeds, `train_steps` for one (whose agent is not stacked); the metrics stay on
    the device, [N, num_steps] either way."""
    if len(data_keys) > 1:
        agents, infos = train_steps_multi(agents, data, data_keys, start_step, num_steps)
    else:
        agents, infos = train_steps(agents, data, data_keys[0], start_step, num_steps)
        infos = jax.tree_util.tree_map(lambda x: x[None], infos)
    return agents, infos


@jax.jit
def validation_metrics(agent, data: DeviceDataset, batch_key, noise_key):
    """The agent's losses on one batch of held-out data drawn with `batch_key` (no update, no augmentation, as
    OGBench), their noise drawn with `noise_key`: both from the validation streams, never an update's keys."""
    return agent.metrics(sample_batch(batch_key, data, dataclasses.replace(batch_config(agent), p_aug=0.0)), noise_key)


def first_nonfinite(infos):
    """(index, metric) of the first step with a non-finite metric in stacked per-step `infos`, or None."""
    bad = [(int(np.flatnonzero(~np.isfinite(v))[0]), key) for key, v in infos.items() if not np.all(np.isfinite(v))]
    return min(bad, default=None)
