"""HIQL: hierarchical implicit Q-learning (Park et al. 2023), as OGBench's HIQL (Park et al. 2024,
arXiv:2410.20092).

One goal-conditioned value V(s, g) = V_e(s, phi([s, g])), e = 1, 2, whose goal input is a learned
subgoal representation phi([s, g]) of length sqrt(rep_dim) (`utils.value_networks.GoalRepresentation`),
and two AWR actors that read it. Per gradient step, on one batch and one parameter tree:

* value: `utils.rl_losses.implicit_v_loss` (as GCIVL), training V and phi; the EMA target Vbar
  (rate `tau`) keeps its own MLPs and reads the online phi without gradient.
* low actor pi_l(a | s, phi([s, w])): AWR towards the subgoal w = s_{t+k}, k = `subgoal_steps` (the
  sampler's `low_goals`), advantage V(s', w) - V(s, w). phi is stop-gradient unless
  `low_actor_rep_grad`.
* high actor pi_h(z | s, g): AWR regression of z onto phi([s, s_{t+k}]) (the sampler's
  `high_targets`, stop-gradient) for high-level goals g (`high_goals`), advantage
  V(s_{t+k}, g) - V(s, g).

Acting: z ~ pi_h(s, g), rescaled to length sqrt(rep_dim), then a ~ pi_l(s, z), every step.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents.base import TARGET_RULES, frozen
from agents.rl_base import GoalConditionedRLAgent
from utils.config_checks import at_least, non_negative, switch
from utils.networks import GaussianActor, length_normalize, sample_gaussian
from utils.rl_losses import awr_actor_loss, implicit_v_loss
from utils.training import BatchSpec, goal_mixture
from utils.value_networks import GoalRepresentation, ValueEnsemble


class HIQLAgent(GoalConditionedRLAgent):
    CONFIG_RULES = {'rep_dim': at_least(1, 10), 'low_alpha': non_negative(3.0), 'high_alpha': non_negative(3.0),
                    'low_actor_rep_grad': switch(False), 'alpha': None, **TARGET_RULES}  # two temperatures instead of alpha
    BATCH = BatchSpec(goals=(('value', 'goals of the value loss, with their reward'), ('high', 'goals of the high-level actor')),
                      reads=('gc_negative', 'subgoal_steps'))

    def goal_representation(self, observations, goals, params):
        return self.network(jnp.concatenate([observations, goals], axis=-1), name='goal_rep', params=params)

    def values(self, observations, goals, params):
        """V_e(s, phi([s, g])), [2, B]; gradients reach both V and phi through `params`."""
        reps = self.goal_representation(observations, goals, params)
        return self.network(observations, reps, name='value', params=params)

    def target_values(self, observations, goals, params):
        """Vbar_e(s, phi([s, g])): the EMA target value on the online phi, read without gradient."""
        return self.target(observations, self.goal_representation(observations, goals, frozen(params)), name='value')

    def mean_value(self, observations, goals, params):
        """The ensemble-mean value, read without gradient (the actors' advantages)."""
        return jnp.mean(self.values(observations, goals, frozen(params)), axis=0)

    def value_loss(self, batch, params):
        values = self.values(batch['observations'], batch['value_goals'], params)
        target_values = self.target_values(batch['observations'], batch['value_goals'], params)
        next_target_values = self.target_values(batch['next_observations'], batch['value_goals'], params)
        loss, _ = implicit_v_loss(values, target_values, next_target_values, batch['rewards'], batch['masks'],
                                  self.config['discount'], self.config['expectile'])
        v = jnp.mean(values, axis=0)
        return loss, {'v_mean': jnp.mean(v), 'v_min': jnp.min(v), 'v_max': jnp.max(v)}

    def low_actor_loss(self, batch, params):
        subgoals = batch['low_goals']
        advantages = (self.mean_value(batch['next_observations'], subgoals, params)
                      - self.mean_value(batch['observations'], subgoals, params))
        reps = self.goal_representation(batch['observations'], subgoals, params)
        if not self.config['low_actor_rep_grad']:
            reps = jax.lax.stop_gradient(reps)
        means, log_stds = self.actor_distribution(batch['observations'], reps, params, name='low_actor')
        return awr_actor_loss(means, log_stds, batch['actions'], advantages, self.config['low_alpha'])

    def high_actor_loss(self, batch, params):
        goals, targets = batch['high_goals'], batch['high_targets']
        advantages = self.mean_value(targets, goals, params) - self.mean_value(batch['observations'], goals, params)
        target_reps = self.goal_representation(batch['observations'], targets, frozen(params))
        means, log_stds = self.actor_distribution(batch['observations'], goals, params, name='high_actor')
        return awr_actor_loss(means, log_stds, target_reps, advantages, self.config['high_alpha'])

    def loss_terms(self, batch, params, rng):
        return {
            'value': self.value_loss(batch, params),
            'low_actor': self.low_actor_loss(batch, params),
            'high_actor': self.high_actor_loss(batch, params),
        }

    @jax.jit
    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        """Subgoal representation z ~ pi_h(s, g) (std scaled by `temperature`), rescaled to length
        sqrt(rep_dim), then a ~ pi_l(s, z), clipped to [-1, 1]; temperature 0 uses both means."""
        seed = self.rng if seed is None else seed
        high_seed, low_seed = jax.random.split(seed)
        params = self.network.params
        means, log_stds = self.actor_distribution(observations, goals, params, name='high_actor')
        subgoals = length_normalize(sample_gaussian(high_seed, means, log_stds, temperature))
        means, log_stds = self.actor_distribution(observations, subgoals, params, name='low_actor')
        return jnp.clip(sample_gaussian(low_seed, means, log_stds, temperature), -1.0, 1.0)

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        value = ValueEnsemble(config.value_hidden_dims, num_members=2, layer_norm=config.layer_norm)
        modules = {
            'goal_rep': GoalRepresentation(config.value_hidden_dims, config.rep_dim, config.layer_norm),
            'value': value,
            'low_actor': GaussianActor(config.actor_hidden_dims, ex_actions.shape[-1], const_std=config.const_std),
            'high_actor': GaussianActor(config.actor_hidden_dims, config.rep_dim, const_std=config.const_std),
        }
        ex_goals = ex_observations
        ex_reps = jnp.zeros((ex_observations.shape[0], config.rep_dim))
        example_args = {
            'goal_rep': (jnp.concatenate([ex_observations, ex_goals], axis=-1),),
            'value': (ex_observations, ex_reps),
            'low_actor': (jnp.concatenate([ex_observations, ex_reps], axis=-1),),
            'high_actor': (jnp.concatenate([ex_observations, ex_goals], axis=-1),),
        }
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr), targets=('value',))


AGENTS = {'hiql': HIQLAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='hiql',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size.
            actor_hidden_dims=(512, 512, 512),  # Low- and high-level actor MLP hidden sizes.
            value_hidden_dims=(512, 512, 512),  # Value and subgoal representation MLP hidden sizes.
            layer_norm=True,  # Layer norm in the value and representation MLPs.
            const_std=True,  # Actor log-stds fixed at 0 (OGBench: True); False learns state-independent log-stds.
            discount=0.99,  # gamma of the value target and of geometric goal offsets.
            tau=0.005,  # EMA rate of the target value: target <- tau * online + (1 - tau) * target.
            expectile=0.7,  # Expectile tau of the value regression.
            low_alpha=3.0,  # Low-level AWR temperature.
            high_alpha=3.0,  # High-level AWR temperature.
            subgoal_steps=25,  # k: the low level's subgoal is s_{t+k}, the high level's target phi([s_t, s_{t+k}]).
            rep_dim=10,  # Size of the subgoal representation phi([s, g]).
            low_actor_rep_grad=False,  # Let the low actor's loss train phi (OGBench: True for pixels only).
            gc_negative=True,  # Rewards -1 until the goal (True) or 1 at the goal (False).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('high'),  # High-level goals: uniform over the trajectory's future (OGBench's actor_* goals).
            **goal_mixture('value', p_curgoal=0.2, p_trajgoal=0.5, p_randomgoal=0.3, geom_sample=True),  # Value goals: OGBench's (a current-state goal: reward 0).
        )
    )
