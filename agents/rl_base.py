"""What the offline goal-conditioned RL baselines (agents/gcivl.py, gciql.py, qrl.py, crl.py, hiql.py)
share on top of `agents.base.Agent`: a Gaussian actor on concat(s, g), the sum of named loss terms
into one objective, and the rules on the fields the family shares (`alpha`, `expectile`).

An agent file defines `build` and `loss_terms(batch, params, rng) -> {name: (loss, info)}`; its target
networks (if any) are named in `build`'s `from_modules(..., targets=...)`. Its actor losses are the free
functions of utils/rl_losses.py (`awr_actor_loss`, `ddpg_bc_actor_loss`). The jitted `update` comes
from `Agent`.
"""

import jax
import jax.numpy as jnp

from agents.base import Agent, LossFn
from utils.config_checks import Rule, is_finite_number, layer_sizes, non_negative, switch
from utils.networks import sample_gaussian
from utils.training import BatchSpec


class GoalConditionedRLAgent(Agent):
    CONFIG_RULES = {
        'alpha': non_negative(10.0),  # AWR temperature or DDPG+BC coefficient (gcivl, gciql, qrl, crl)
        'expectile': Rule(lambda v: is_finite_number(v) and 0.0 < v < 1.0,
                          'must lie in (0, 1) (0.5 = mean regression)', 0.9),  # gcivl, gciql, hiql
        'actor_hidden_dims': layer_sizes((512, 512, 512)),
        'value_hidden_dims': layer_sizes((512, 512, 512)),
        'const_std': switch(True),
        'layer_norm': switch(True),
    }
    BATCH = BatchSpec(goals=(('actor', 'goals of the actor loss'), ('value', 'goals of the value loss')))
    # The batch of the agents whose value loss reads the goal reward, whose sign `gc_negative` sets (GCIVL, GCIQL).
    REWARDED_BATCH = BATCH.with_(goals=[('value', 'goals of the value loss, with their reward')], reads=['gc_negative'])

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
