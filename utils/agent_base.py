"""What every behavior-cloning agent shares: its fields, the jitted update and action sampling.

An agent file subclasses `BCAgent` and defines `create`, `policy_inputs` and, for GCBC + alpha *
L_aux agents, `representation_loss` (and `update_targets` if it keeps EMA target networks), plus a
module-level `get_config()`.
"""

from typing import Any

import flax
import jax
import jax.numpy as jnp

from utils.flax_utils import TrainState, nonpytree_field
from utils.losses import bc_loss
from utils.distributions import sample_gaussian


class BCAgent(flax.struct.PyTreeNode):
    rng: Any
    network: TrainState
    config: Any = nonpytree_field()

    def policy_inputs(self, observations, goals, params=None):
        raise NotImplementedError

    def representation_loss(self, batch, params):
        """The auxiliary loss L_aux and its metrics; None for plain behavior cloning."""
        return None

    def total_loss(self, batch, grad_params, rng=None):
        """L_BC + alpha * L_aux. L_aux never reads the actor head, so it cannot update it."""
        loss, info = self.actor_loss(batch, grad_params)
        aux = self.representation_loss(batch, grad_params)
        if aux is not None:
            aux_loss, aux_info = aux
            info.update({f'representation/{k}': v for k, v in aux_info.items()})
            info['representation/loss'] = aux_loss
            loss = loss + self.config['alpha'] * aux_loss
        info['total_loss'] = loss
        return loss, info

    def representations(self, observations, actions, goals):
        """(prediction for s, representation of g), ensemble means, as the paper's analyses compare
        them (docs/method.md, section 5): psi(phi(s), a) or psi(s, a) against phi(g). Agents with a
        representation override this."""
        raise NotImplementedError(f'{type(self).__name__} has no learned representation to analyse.')

    def update_targets(self, network):
        """Hook for EMA target networks, applied after each gradient step (identity by default)."""
        return network

    def actor_loss(self, batch, params):
        """L_BC on (s_t, a_t, actor goal). Gradients reach the actor head and the encoders it reads."""
        inputs = self.policy_inputs(batch['observations'], batch['actor_goals'], params)
        means, log_stds = self.network(inputs, name='actor', params=params)
        loss = bc_loss(means, log_stds, batch['actions'])
        return loss, {'actor/bc_loss': loss, 'actor/mse': jnp.mean((means - batch['actions']) ** 2)}

    @jax.jit
    def update(self, batch):
        new_rng, rng = jax.random.split(self.rng)
        network, info = self.network.apply_loss_fn(lambda params: self.total_loss(batch, params, rng))
        return self.replace(network=self.update_targets(network), rng=new_rng), info

    @jax.jit
    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        means, log_stds = self.network(self.policy_inputs(observations, goals), name='actor')
        seed = self.rng if seed is None else seed
        return jnp.clip(sample_gaussian(seed, means, log_stds, temperature), -1.0, 1.0)

    @classmethod
    def from_modules(cls, seed, modules, example_args, config, optimizer, targets=None):
        """Initialise a ModuleDict of `modules` on `example_args` and wrap it in a train state.
        `targets` maps each target network's module name to its online module's; targets start as
        exact copies of their online networks."""
        from utils.networks import ModuleDict

        rng, init_rng = jax.random.split(jax.random.PRNGKey(seed))
        model = ModuleDict(modules)
        params = model.init(init_rng, example_args)['params']
        for target, online in (targets or {}).items():
            params = copy_to_target(params, online, target)
        network = TrainState.create(model, params, optimizer)
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config.to_dict()))


def copy_to_target(params, online: str, target: str):
    """Initialise target network `target` as an exact copy of `online` (ModuleDict param names)."""
    # A real copy: sharing buffers with the online network would break buffer donation.
    return {**params, f'modules_{target}': jax.tree_util.tree_map(jnp.copy, params[f'modules_{online}'])}


def ema_target_update(network: TrainState, online: str, target: str, tau: float) -> TrainState:
    """phi_target <- tau * phi_online + (1 - tau) * phi_target (the paper's convention for tau)."""
    from utils.flax_utils import ema_update

    params = dict(network.params)
    params[f'modules_{target}'] = ema_update(params[f'modules_{online}'], params[f'modules_{target}'], tau)
    return network.replace(params=params)
