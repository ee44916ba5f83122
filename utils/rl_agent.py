"""What the offline goal-conditioned RL baselines (agents/gcivl.py, gciql.py, qrl.py, crl.py, hiql.py)
share on top of `utils.agent_base.BCAgent`: a Gaussian actor on concat(s, g), its AWR and DDPG+BC
losses, and the sum of named loss terms into `total_loss`.

An agent file defines `create`, `loss_terms(batch, params, rng) -> {name: (loss, info)}` and, if it
keeps target networks, `update_targets`; the jitted `update` and `sample_actions` come from BCAgent.
"""

import jax.numpy as jnp

from utils.agent_base import BCAgent
from utils.distributions import gaussian_log_prob
from utils.rl_losses import awr_loss, awr_weights, ddpg_bc_loss


class GoalConditionedRLAgent(BCAgent):
    def policy_inputs(self, observations, goals, params=None):
        return jnp.concatenate([observations, goals], axis=-1)

    def loss_terms(self, batch, params, rng):
        raise NotImplementedError

    def total_loss(self, batch, grad_params, rng=None):
        """Sum of the agent's loss terms. Each term's gradients reach only the networks it trains (the
        others are read with the stored, non-differentiated parameters). Without `rng` (validation)
        the agent's own key is used."""
        rng = self.rng if rng is None else rng
        total, info = 0.0, {}
        for name, (loss, term_info) in self.loss_terms(batch, grad_params, rng).items():
            info.update({f'{name}/{k}': v for k, v in term_info.items()})
            info[f'{name}/loss'] = loss
            total = total + loss
        info['total_loss'] = total
        return total, info

    def actor_distribution(self, observations, goals, params, name='actor'):
        """(means, log_stds) of the actor `name` on concat(s, g)."""
        return self.network(jnp.concatenate([observations, goals], axis=-1), name=name, params=params)

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
        """DDPG+BC on the actor's mean action clip(mu(s, g), -1, 1): `q_fn(actions)` is the critic at the
        batch's (s, actor goal), read with stop-gradient parameters, so only the actor learns here."""
        means, log_stds = self.actor_distribution(batch['observations'], batch['actor_goals'], params)
        q = q_fn(jnp.clip(means, -1.0, 1.0))
        log_probs = gaussian_log_prob(means, log_stds, batch['actions'])
        loss, q_term, bc_term = ddpg_bc_loss(q, log_probs, bc_coef)
        return loss, {
            'q_loss': q_term,
            'bc_term': bc_term,
            'q_mean': jnp.mean(q),
            'bc_loss': -jnp.mean(log_probs),
            'mse': jnp.mean(jnp.square(means - batch['actions'])),
        }
