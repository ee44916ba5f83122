"""What the offline goal-conditioned RL baselines (agents/gcivl.py, gciql.py, qrl.py, crl.py, hiql.py)
share on top of `utils.agent_base.Agent`: a Gaussian actor on concat(s, g), its AWR and DDPG+BC
losses, and the sum of named loss terms into one objective.

An agent file defines `create` and `loss_terms(batch, params, rng) -> {name: (loss, info)}`; its target
networks (if any) are named in `create`'s `from_modules(..., targets=...)`. The jitted `update` comes
from `Agent`.
"""

import jax
import jax.numpy as jnp

from utils.agent_base import Agent, LossFn
from utils.distributions import gaussian_log_prob, sample_gaussian
from utils.flax_utils import frozen
from utils.rl_losses import awr_loss, awr_weights, ddpg_bc_loss


class GoalConditionedRLAgent(Agent):
    def loss_terms(self, batch, params, rng):
        """{name: (loss, metrics)}: each term passes `params` only to the networks it trains."""
        raise NotImplementedError

    def total_loss(self, batch, params, rng):
        """The sum of the agent's loss terms, with each term's metrics under its name."""
        total, info = 0.0, {}
        for name, (loss, term_info) in self.loss_terms(batch, params, rng).items():
            info.update({f'{name}/{k}': v for k, v in term_info.items()})
            info[f'{name}/loss'] = loss
            total = total + loss
        info['total_loss'] = total
        return total, info

    def loss_fn(self, batch, rng) -> LossFn:
        return lambda params: self.total_loss(batch, params, rng)

    def actor_distribution(self, observations, goals, params, name='actor'):
        """(means, log_stds) of the actor `name` on concat(s, g)."""
        return self.network(jnp.concatenate([observations, goals], axis=-1), name=name, params=params)

    @jax.jit
    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        means, log_stds = self.actor_distribution(observations, goals, self.network.params)
        seed = self.rng if seed is None else seed
        return jnp.clip(sample_gaussian(seed, means, log_stds, temperature), -1.0, 1.0)

    @staticmethod
    def awr_actor_loss(means, log_stds, targets, advantages, temperature):
        """AWR on a Gaussian actor's (means, log_stds) for regression targets (actions or subgoals)."""
        log_probs = gaussian_log_prob(means, log_stds, targets)
        weights = awr_weights(advantages, temperature)
        return awr_loss(log_probs, weights), {
            'adv': jnp.mean(advantages),
            'weight_mean': jnp.mean(weights),
            'bc_loss': -jnp.mean(log_probs),
            'mse': jnp.mean(jnp.square(means - targets)),
        }

    def ddpg_bc_actor_loss(self, batch, params, q_fn, bc_coef):
        """DDPG+BC on the actor's mean action clip(mu(s, g), -1, 1): `q_fn(actions, critic_params)` is the
        critic at the batch's (s, actor goal), given frozen parameters here, so only the actor learns."""
        means, log_stds = self.actor_distribution(batch['observations'], batch['actor_goals'], params)
        q = q_fn(jnp.clip(means, -1.0, 1.0), frozen(params))
        log_probs = gaussian_log_prob(means, log_stds, batch['actions'])
        loss, q_term, bc_term = ddpg_bc_loss(q, log_probs, bc_coef)
        return loss, {
            'q_loss': q_term,
            'bc_term': bc_term,
            'q_mean': jnp.mean(q),
            'bc_loss': -jnp.mean(log_probs),
            'mse': jnp.mean(jnp.square(means - batch['actions'])),
        }
