"""Small flax helpers shared by every agent: a train state and one gradient step."""

from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import optax


def nonpytree_field():
    """A dataclass field that is static (not a leaf): configs, apply functions, optimizers."""
    return flax.struct.field(pytree_node=False)


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
        info['grad_norm'] = optax.tree.norm(grads)
        return self.apply_gradients(grads), info


def frozen(params):
    """`params` read without gradient: a loss may evaluate these networks but cannot train them."""
    return jax.lax.stop_gradient(params)


def ema_update(online, target, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)
