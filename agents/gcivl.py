"""GCIVL: goal-conditioned implicit V-learning with an AWR actor (OGBench's GCIVL; Park et al. 2024,
arXiv:2410.20092, appendix on the reference agents).

Per gradient step, on one batch and one parameter tree:

* value: `utils.rl_losses.implicit_v_loss` -- expectile regression of V_e(s, g), e = 1, 2, towards
  r + gamma * m * Vbar_e(s', g), with the expectile's side chosen by the target network's advantage
  r + gamma * m * min_e Vbar_e(s', g) - mean_e Vbar_e(s, g). Value goals are a mixture of the current
  state (reward 0, no bootstrap), geometric future states and random states (the sampler's
  `rewards`, `masks`). Vbar is an EMA of V (rate `tau`).
* actor: AWR with the one-step advantage A = V(s', g) - V(s, g) (ensemble mean), weights
  min(exp(alpha * A), 100), on actor goals. V is read without gradient.

No Q function is learned: the advantage of the dataset action is estimated from the value of the next
state, which assumes (near-)deterministic dynamics.
"""

import jax.numpy as jnp
import ml_collections
import optax

from agents.base import TARGET_RULES, frozen
from agents.rl_base import GoalConditionedRLAgent
from utils.networks import GaussianActor
from utils.rl_losses import awr_actor_loss, implicit_v_loss
from utils.training import goal_mixture
from utils.value_networks import ValueEnsemble


class GCIVLAgent(GoalConditionedRLAgent):
    CONFIG_RULES = TARGET_RULES
    BATCH = GoalConditionedRLAgent.REWARDED_BATCH

    def values(self, observations, goals, params):
        """V_e(s, g) for both ensemble members, [2, B]."""
        return self.network(observations, goals, name='value', params=params)

    def value_loss(self, batch, params):
        values = self.values(batch['observations'], batch['value_goals'], params)
        target_values = self.target(batch['observations'], batch['value_goals'], name='value')
        next_target_values = self.target(batch['next_observations'], batch['value_goals'], name='value')
        loss, _ = implicit_v_loss(values, target_values, next_target_values, batch['rewards'], batch['masks'],
                                  self.config['discount'], self.config['expectile'])
        v = jnp.mean(values, axis=0)
        return loss, {'v_mean': jnp.mean(v), 'v_min': jnp.min(v), 'v_max': jnp.max(v)}

    def actor_loss(self, batch, params):
        v = jnp.mean(self.values(batch['observations'], batch['actor_goals'], frozen(params)), axis=0)
        next_v = jnp.mean(self.values(batch['next_observations'], batch['actor_goals'], frozen(params)), axis=0)
        means, log_stds = self.actor_distribution(batch['observations'], batch['actor_goals'], params)
        return awr_actor_loss(means, log_stds, batch['actions'], next_v - v, self.config['alpha'])

    def loss_terms(self, batch, params, rng):
        return {'value': self.value_loss(batch, params), 'actor': self.actor_loss(batch, params)}

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        value = ValueEnsemble(config.value_hidden_dims, num_members=2, layer_norm=config.layer_norm)
        modules = {
            'value': value,
            'actor': GaussianActor(config.actor_hidden_dims, ex_actions.shape[-1], const_std=config.const_std),
        }
        ex_goals = ex_observations
        example_args = {
            'value': (ex_observations, ex_goals),
            'actor': (jnp.concatenate([ex_observations, ex_goals], axis=-1),),
        }
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr), targets=('value',))


AGENTS = {'gcivl': GCIVLAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='gcivl',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size.
            actor_hidden_dims=(512, 512, 512),  # Actor MLP hidden sizes (input concat(s, g)).
            value_hidden_dims=(512, 512, 512),  # Value MLP hidden sizes (input concat(s, g)), two members.
            layer_norm=True,  # Layer norm in the value MLPs.
            const_std=True,  # Actor log-std fixed at 0 (OGBench: True); False learns a state-independent log-std.
            discount=0.99,  # gamma of the value target and of geometric goal offsets.
            tau=0.005,  # EMA rate of the target value: target <- tau * online + (1 - tau) * target.
            expectile=0.9,  # Expectile tau of the value regression (0.5 = mean regression).
            alpha=10.0,  # AWR temperature: weights min(exp(alpha * A), 100).
            gc_negative=True,  # Rewards -1 until the goal (True) or 1 at the goal (False).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future.
            **goal_mixture('value', p_curgoal=0.2, p_trajgoal=0.5, p_randomgoal=0.3, geom_sample=True),  # Value goals: OGBench's (a current-state goal: reward 0).
        )
    )
