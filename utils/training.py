"""One gradient step, and the fused training loop that main.py runs.

    TrainState                  a network's parameters and optimizer state; `apply_loss_fn` is one gradient step
    train_steps(agent, data, data_key, start_step, num_steps)
                                sample a batch on device, update, `num_steps` times in one jitted lax.scan

The sampler's settings are a function of the agent's config (`batch_config`), which the agent carries, so an update
needs nothing but the agent and the data. The sampling key of step t is fold_in(data_key, t): a run's batches depend
only on its seed and the step number, so fusing K updates per call, or resuming at any step, replays the same batches.
"""

import dataclasses
import functools
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from utils.optimizers import OneVector, ravel_leaves
from utils.sampler import DeviceDataset, SamplerConfig, sample_batch


def nonpytree_field(**kwargs):
    """A dataclass field that is static (not a leaf): configs, apply functions, optimizers."""
    return flax.struct.field(pytree_node=False, **kwargs)


class TrainState(flax.struct.PyTreeNode):
    """Parameters, optimizer and optimizer state of one ModuleDict network."""

    step: jax.Array
    apply_fn: Callable = nonpytree_field()
    tx: Any = nonpytree_field()
    params: Any = None
    opt_state: Any = None

    @classmethod
    def create(cls, model_def, params, tx):
        return cls(step=jnp.array(0, jnp.int32), apply_fn=model_def.apply, tx=tx, params=params, opt_state=tx.init(params))

    def __call__(self, *args, name: str, params, **kwargs):
        """Run sub-module `name` with `params`: the parameters being differentiated, `frozen(...)`
        ones, or `self.params` when acting. There is no default, so every call says which."""
        return self.apply_fn({'params': params}, *args, name=name, **kwargs)

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


def frozen(params):
    """`params` read without gradient: a loss may evaluate these networks but cannot train them."""
    return jax.lax.stop_gradient(params)


def ema_update(online, target, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


# ---------------------------------------------------------------------------------------------
# The fused loop.
# ---------------------------------------------------------------------------------------------


def batch_config(agent) -> SamplerConfig:
    """What the sampler draws for `agent`: read from its config and the goal mixtures its class declares."""
    return SamplerConfig.from_config(agent.config, type(agent).GOAL_MIXTURES)


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


@jax.jit
def validation_metrics(agent, data: DeviceDataset, key):
    """The agent's losses on one batch of held-out data (no update, no augmentation, as OGBench)."""
    return agent.metrics(sample_batch(key, data, dataclasses.replace(batch_config(agent), p_aug=0.0)))


def first_nonfinite(infos):
    """(index, metric) of the first step with a non-finite metric in stacked per-step `infos`, or None."""
    bad = [(int(np.flatnonzero(~np.isfinite(v))[0]), key) for key, v in infos.items() if not np.all(np.isfinite(v))]
    return min(bad, default=None)
