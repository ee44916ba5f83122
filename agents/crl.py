"""CRL: contrastive RL (Eysenbach et al. 2022), as OGBench's CRL (Park et al. 2024, arXiv:2410.20092).

The critic f_e(s, a, g) = phi_e(s, a) . psi_e(g) / sqrt(d), e = 1, 2 (`utils.value_networks.BilinearValue`),
is a binary classifier of whether g is a future state of (s, a): at the optimum, exp f is the
discounted future-state density divided by the goal marginal, i.e. Q up to a goal-dependent factor.
Per gradient step, on one batch and one parameter tree:

* critic: `utils.rl_losses.binary_nce_loss` on all B x B pairs (s_i, a_i, g_j): positive iff i == j,
  g_i a geometric future state of s_i (the sampler's value goals).
* value (AWR actor only): the same loss for phi(s) . psi(g) without the action.
* actor (`actor_loss`): 'ddpgbc' (OGBench's default) maximises min_e f_e(s, mu(s, g), g), normalised,
  plus alpha times the BC log-likelihood; 'awr' weights the BC log-likelihood by
  min(exp(alpha * (min_e f_e(s, a, g) - f_V(s, g))), 100). Critics are read without gradient.
"""

import jax.numpy as jnp
import ml_collections
import optax

from agents.base import frozen
from agents.rl_base import GoalConditionedRLAgent
from utils.config_checks import at_least, one_of
from utils.networks import GaussianActor
from utils.rl_losses import awr_actor_loss, binary_nce_loss, contrastive_logits, ddpg_bc_actor_loss
from utils.training import goal_mixture
from utils.value_networks import BilinearValue


class CRLAgent(GoalConditionedRLAgent):
    CONFIG_RULES = {'actor_loss': one_of('ddpgbc', 'awr'), 'latent_dim': at_least(1, 512), 'batch_size': at_least(2, 1024),
                    'expectile': None,  # no expectile regression
                    'discount': None}  # no discount: read only where geometric goal offsets are drawn
    BATCH = GoalConditionedRLAgent.BATCH.with_(goals=[('value', 'positives of the contrastive critic')])

    def critic(self, observations, goals, actions, params, name='critic'):
        """(f [E, B], phi [E, B, d], psi [E, B, d]) for x = concat(s, a), or s when `actions` is None."""
        x = observations if actions is None else jnp.concatenate([observations, actions], axis=-1)
        return self.network(x, goals, name=name, params=params)

    def contrastive_loss(self, batch, params, name):
        actions = batch['actions'] if name == 'critic' else None
        _, phi, psi = self.critic(batch['observations'], batch['value_goals'], actions, params, name=name)
        logits = contrastive_logits(phi, psi)
        mean_logits = jnp.mean(logits, axis=0)
        positive = jnp.eye(logits.shape[-1], dtype=bool)
        return binary_nce_loss(logits), {
            'logits_pos': jnp.mean(jnp.diagonal(mean_logits)),
            'logits_neg': jnp.sum(jnp.where(positive, 0.0, mean_logits)) / jnp.sum(~positive),
            'categorical_accuracy': jnp.mean(jnp.argmax(mean_logits, axis=1) == jnp.arange(logits.shape[-1])),
        }

    def actor_loss(self, batch, params):
        observations, goals = batch['observations'], batch['actor_goals']
        if self.config['actor_loss'] == 'ddpgbc':
            means, log_stds = self.actor_distribution(observations, goals, params)
            q_fn = lambda actions: jnp.min(self.critic(observations, goals, actions, frozen(params))[0], axis=0)
            return ddpg_bc_actor_loss(means, log_stds, batch['actions'], q_fn, self.config['alpha'])
        q = jnp.min(self.critic(observations, goals, batch['actions'], frozen(params))[0], axis=0)
        v = self.critic(observations, goals, None, frozen(params), name='value')[0][0]
        means, log_stds = self.actor_distribution(observations, goals, params)
        return awr_actor_loss(means, log_stds, batch['actions'], q - v, self.config['alpha'])

    def loss_terms(self, batch, params, rng):
        terms = {'critic': self.contrastive_loss(batch, params, 'critic')}
        if self.config['actor_loss'] == 'awr':
            terms['value'] = self.contrastive_loss(batch, params, 'value')
        terms['actor'] = self.actor_loss(batch, params)
        return terms

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        bilinear = lambda members: BilinearValue(config.value_hidden_dims, config.latent_dim, members, config.layer_norm)
        ex_goals = ex_observations
        modules = {
            'critic': bilinear(2),
            'actor': GaussianActor(config.actor_hidden_dims, ex_actions.shape[-1], const_std=config.const_std),
        }
        example_args = {
            'critic': (jnp.concatenate([ex_observations, ex_actions], axis=-1), ex_goals),
            'actor': (jnp.concatenate([ex_observations, ex_goals], axis=-1),),
        }
        if config.actor_loss == 'awr':
            modules['value'] = bilinear(1)
            example_args['value'] = (ex_observations, ex_goals)
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr))


AGENTS = {'crl': CRLAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='crl',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size (B^2 classifier pairs per critic member).
            actor_hidden_dims=(512, 512, 512),  # Actor MLP hidden sizes (input concat(s, g)).
            value_hidden_dims=(512, 512, 512),  # phi and psi MLP hidden sizes.
            latent_dim=512,  # Size of phi(s, a) and psi(g).
            layer_norm=True,  # Layer norm in the phi and psi MLPs.
            const_std=True,  # Actor log-std fixed at 0 (OGBench: True); False learns a state-independent log-std.
            discount=0.99,  # gamma of the geometric future-state goals the critic classifies.
            actor_loss='ddpgbc',  # 'ddpgbc' (DDPG + alpha * BC) or 'awr' (also learns a contrastive V).
            alpha=0.1,  # BC coefficient (ddpgbc) or AWR temperature (awr); OGBench: pointmaze 0.03, antmaze 0.1.
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future.
            **goal_mixture('value', geom_sample=True),  # Critic goals (positives): s_{t+k}, k ~ Geometric(1 - gamma).
        )
    )
