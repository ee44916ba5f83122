"""QRL: quasimetric RL (Wang et al. 2023), as OGBench's QRL (Park et al. 2024, arXiv:2410.20092).

The value is -d(s, g), d an interval quasimetric embedding (IQE) of learned latents z(s)
(`utils.value_networks.QuasimetricValue`). Per gradient step, on one batch and one parameter tree:

* value: `utils.rl_losses.qrl_value_loss` -- push d(s, g) up for random goals g (the sampler's value
  goals, all random) subject to d(s, s') <= 1 for transitions, by dual ascent on a Lagrange
  multiplier lambda = exp(w) (`utils.value_networks.PositiveScalar`) with margin `eps`.
* dynamics (DDPG+BC actor only): a latent model zhat' = z + f(z, a), fit by
  `utils.rl_losses.latent_dynamics_loss` (d in both directions between z(s') and zhat'); it trains
  f and the encoder.
* actor (`actor_loss`): 'ddpgbc' (OGBench's default) maximises Q = -d(zhat'(s, mu(s, g)), z(g)) through
  the latent model, normalised, plus alpha times the BC log-likelihood; 'awr' weights the BC
  log-likelihood by min(exp(alpha * (d(s, g) - d(s', g))), 100). Value and model are read without
  gradient.

No discount: d counts steps; `discount` only shapes geometric goal offsets.
"""

import jax.numpy as jnp
import ml_collections
import optax

from agents.base import frozen
from agents.rl_base import GoalConditionedRLAgent
from utils.config_checks import Rule, at_least, one_of, positive
from utils.networks import MLP, GaussianActor
from utils.rl_losses import awr_actor_loss, ddpg_bc_actor_loss, latent_dynamics_loss, qrl_value_loss
from utils.training import goal_mixture
from utils.value_networks import PositiveScalar, QuasimetricValue


class QRLAgent(GoalConditionedRLAgent):
    CONFIG_RULES = {
        'expectile': None,  # no expectile regression
        'discount': None,  # no discount: read only where geometric goal offsets are drawn
        'actor_loss': one_of('ddpgbc', 'awr'),
        'component_dim': at_least(1, 8),
        'eps': positive(0.05),
        'latent_dim': at_least(1, 512),
        # The latent is split into IQE components of component_dim coordinates.
        ('latent_dim', 'component_dim'): Rule(lambda latent, component: latent % component == 0,
                                              'must split into whole IQE components (latent_dim a multiple of component_dim)',
                                              '--agent.latent_dim=512 --agent.component_dim=8'),
    }
    BATCH = GoalConditionedRLAgent.BATCH.with_(goals=[('value', 'the goals whose distances the value loss pushes apart')])

    def distance(self, x, y, params, encoded=False):
        return self.network(x, y, encoded=encoded, name='value', params=params)

    def encode(self, x, params):
        return self.network(x, name='value', params=params)

    def predict_next_latent(self, latents, actions, params):
        return latents + self.network(jnp.concatenate([latents, actions], axis=-1), name='dynamics', params=params)

    def value_loss(self, batch, params):
        d_random = self.distance(batch['observations'], batch['value_goals'], params)
        d_next = self.distance(batch['observations'], batch['next_observations'], params)
        lam = self.network(name='lam', params=params)
        loss, info = qrl_value_loss(d_random, d_next, lam, self.config['eps'])
        info.update({'d_random_mean': jnp.mean(d_random), 'd_next_mean': jnp.mean(d_next), 'lam': lam})
        return loss, info

    def dynamics_loss(self, batch, params):
        latents = self.encode(batch['observations'], params)
        next_latents = self.encode(batch['next_observations'], params)
        predicted = self.predict_next_latent(latents, batch['actions'], params)
        d_forward = self.distance(next_latents, predicted, params, encoded=True)
        d_backward = self.distance(predicted, next_latents, params, encoded=True)
        return latent_dynamics_loss(d_forward, d_backward), {}

    def actor_loss(self, batch, params):
        observations, goals = batch['observations'], batch['actor_goals']
        if self.config['actor_loss'] == 'ddpgbc':
            latents, goal_latents = self.encode(observations, frozen(params)), self.encode(goals, frozen(params))
            means, log_stds = self.actor_distribution(observations, goals, params)

            def q_fn(actions):
                next_latents = self.predict_next_latent(latents, actions, frozen(params))
                return -self.distance(next_latents, goal_latents, frozen(params), encoded=True)

            return ddpg_bc_actor_loss(means, log_stds, batch['actions'], q_fn, self.config['alpha'])
        value_params = frozen(params)
        advantages = self.distance(observations, goals, value_params) - self.distance(batch['next_observations'], goals, value_params)
        means, log_stds = self.actor_distribution(observations, goals, params)
        return awr_actor_loss(means, log_stds, batch['actions'], advantages, self.config['alpha'])

    def loss_terms(self, batch, params, rng):
        terms = {'value': self.value_loss(batch, params)}
        if self.config['actor_loss'] == 'ddpgbc':
            terms['dynamics'] = self.dynamics_loss(batch, params)
        terms['actor'] = self.actor_loss(batch, params)
        return terms

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        modules = {
            'value': QuasimetricValue(config.value_hidden_dims, config.latent_dim, config.component_dim, config.layer_norm),
            'lam': PositiveScalar(1.0),
            'actor': GaussianActor(config.actor_hidden_dims, ex_actions.shape[-1], const_std=config.const_std),
        }
        example_args = {
            'value': (ex_observations, ex_observations),
            'lam': (),
            'actor': (jnp.concatenate([ex_observations, ex_observations], axis=-1),),
        }
        if config.actor_loss == 'ddpgbc':
            modules['dynamics'] = MLP((*config.value_hidden_dims, config.latent_dim), layer_norm=config.layer_norm)
            example_args['dynamics'] = (jnp.zeros((1, config.latent_dim + ex_actions.shape[-1])),)
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr))


AGENTS = {'qrl': QRLAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='qrl',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size.
            actor_hidden_dims=(512, 512, 512),  # Actor MLP hidden sizes (input concat(s, g)).
            value_hidden_dims=(512, 512, 512),  # Latent encoder z(s) and dynamics MLP hidden sizes.
            latent_dim=512,  # Size of z(s) (a multiple of component_dim).
            component_dim=8,  # IQE coordinates per component (latent_dim / component_dim components).
            layer_norm=True,  # Layer norm in the encoder and dynamics MLPs.
            const_std=True,  # Actor log-std fixed at 0 (OGBench: True); False learns a state-independent log-std.
            discount=0.99,  # Only for geometric goal offsets (QRL has no discount).
            eps=0.05,  # Margin of the one-step constraint E[relu(d(s, s') - 1)^2] <= eps.
            actor_loss='ddpgbc',  # 'ddpgbc' (through the latent dynamics model) or 'awr'.
            alpha=0.003,  # BC coefficient (ddpgbc) or AWR temperature (awr); OGBench: pointmaze 3e-4, antmaze 3e-3.
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future.
            **goal_mixture('value', p_trajgoal=0.0, p_randomgoal=1.0, geom_sample=True),  # Value goals (the pushed-apart pairs): random dataset states.
        )
    )
