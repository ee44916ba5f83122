"""GCIQL: goal-conditioned implicit Q-learning (OGBench's GCIQL; Park et al. 2024, arXiv:2410.20092;
IQL: Kostrikov et al. 2021).

Per gradient step, on one batch and one parameter tree:

* value: `utils.rl_losses.iql_value_loss`, expectile regression of V(s, g) towards
  min_e Qbar_e(s, a, g) (the EMA target critic, rate `tau`).
* critic: `utils.rl_losses.iql_critic_loss`, Q_e(s, a, g) regressed on r + gamma * m * V(s', g),
  e = 1, 2 (rewards and masks from the sampler's value goals).
* actor (`actor_loss`): 'ddpgbc' (OGBench's default) maximises min_e Q_e(s, mu(s, g), g), normalised
  by its mean magnitude, plus alpha times the BC log-likelihood; 'awr' weights the BC log-likelihood
  by min(exp(alpha * (min_e Q_e(s, a, g) - V(s, g))), 100). The critic is read without gradient.
"""

import jax.numpy as jnp
import ml_collections
import optax

from agents.base import TARGET_RULES, frozen
from agents.rl_base import GoalConditionedRLAgent
from utils.config_checks import one_of
from utils.networks import GaussianActor
from utils.rl_losses import awr_actor_loss, ddpg_bc_actor_loss, iql_critic_loss, iql_value_loss
from utils.training import goal_mixture
from utils.value_networks import ValueEnsemble


class GCIQLAgent(GoalConditionedRLAgent):
    CONFIG_RULES = {'actor_loss': one_of('ddpgbc', 'awr'), **TARGET_RULES}
    BATCH = GoalConditionedRLAgent.REWARDED_BATCH

    def value_loss(self, batch, params):
        v = self.network(batch['observations'], batch['value_goals'], name='value', params=params)[0]
        target_q = self.target(batch['observations'], batch['value_goals'], batch['actions'], name='critic')
        loss = iql_value_loss(v, target_q, self.config['expectile'])
        return loss, {'v_mean': jnp.mean(v), 'v_min': jnp.min(v), 'v_max': jnp.max(v)}

    def critic_loss(self, batch, params):
        next_v = self.network(batch['next_observations'], batch['value_goals'], name='value', params=frozen(params))[0]
        q = self.network(batch['observations'], batch['value_goals'], batch['actions'], name='critic', params=params)
        loss = iql_critic_loss(q, next_v, batch['rewards'], batch['masks'], self.config['discount'])
        return loss, {'q_mean': jnp.mean(q), 'q_min': jnp.min(q), 'q_max': jnp.max(q)}

    def actor_loss(self, batch, params):
        observations, goals = batch['observations'], batch['actor_goals']
        if self.config['actor_loss'] == 'ddpgbc':
            means, log_stds = self.actor_distribution(observations, goals, params)
            q_fn = lambda actions: jnp.min(self.network(observations, goals, actions, name='critic', params=frozen(params)), axis=0)
            return ddpg_bc_actor_loss(means, log_stds, batch['actions'], q_fn, self.config['alpha'])
        v = self.network(observations, goals, name='value', params=frozen(params))[0]
        q = jnp.min(self.network(observations, goals, batch['actions'], name='critic', params=frozen(params)), axis=0)
        means, log_stds = self.actor_distribution(observations, goals, params)
        return awr_actor_loss(means, log_stds, batch['actions'], q - v, self.config['alpha'])

    def loss_terms(self, batch, params, rng):
        return {
            'value': self.value_loss(batch, params),
            'critic': self.critic_loss(batch, params),
            'actor': self.actor_loss(batch, params),
        }

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        critic = ValueEnsemble(config.value_hidden_dims, num_members=2, layer_norm=config.layer_norm)
        modules = {
            'value': ValueEnsemble(config.value_hidden_dims, num_members=1, layer_norm=config.layer_norm),
            'critic': critic,
            'actor': GaussianActor(config.actor_hidden_dims, ex_actions.shape[-1], const_std=config.const_std),
        }
        ex_goals = ex_observations
        example_args = {
            'value': (ex_observations, ex_goals),
            'critic': (ex_observations, ex_goals, ex_actions),
            'actor': (jnp.concatenate([ex_observations, ex_goals], axis=-1),),
        }
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr), targets=('critic',))


AGENTS = {'gciql': GCIQLAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='gciql',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size.
            actor_hidden_dims=(512, 512, 512),  # Actor MLP hidden sizes (input concat(s, g)).
            value_hidden_dims=(512, 512, 512),  # V and Q MLP hidden sizes (V: one member, Q: two).
            layer_norm=True,  # Layer norm in the V and Q MLPs.
            const_std=True,  # Actor log-std fixed at 0 (OGBench: True); False learns a state-independent log-std.
            discount=0.99,  # gamma of the critic target and of geometric goal offsets.
            tau=0.005,  # EMA rate of the target critic: target <- tau * online + (1 - tau) * target.
            expectile=0.9,  # Expectile tau of the value regression.
            actor_loss='ddpgbc',  # 'ddpgbc' (DDPG + alpha * BC) or 'awr' (temperature alpha).
            alpha=0.3,  # BC coefficient (ddpgbc) or AWR temperature (awr); OGBench: pointmaze 0.003, antmaze 0.3.
            gc_negative=True,  # Rewards -1 until the goal (True) or 1 at the goal (False).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future.
            **goal_mixture('value', p_curgoal=0.2, p_trajgoal=0.5, p_randomgoal=0.3, geom_sample=True),  # Value goals: OGBench's (a current-state goal: reward 0).
        )
    )
