"""GCBC and GCBC-phi: goal-conditioned behavioral cloning.

GCBC feeds concat(s, g) to the actor MLP (OGBench's shared state-goal input). GCBC-phi
(`encoder='phi'`) first encodes s and g separately with the ensemble encoder phi and feeds
concat(mean_m phi_m(s), mean_m phi_m(g)): the architecture of the representation agents, without
any auxiliary loss (paper appendix "GCBC Encoder Ablation").
"""

import jax.numpy as jnp
import ml_collections
import optax

from utils.agent_base import BCAgent
from utils.encoders import phi_policy_inputs, resolve_latent_dim
from utils.networks import EnsembleEncoder, GaussianActor


class GCBCAgent(BCAgent):
    def policy_inputs(self, observations, goals, params=None):
        if self.config['encoder'] == 'phi':
            return phi_policy_inputs(self.network, observations, goals, params)
        return jnp.concatenate([observations, goals], axis=-1)

    def representations(self, observations, actions, goals):
        if self.config['encoder'] != 'phi':
            return super().representations(observations, actions, goals)
        # GCBC-phi has no predictor: compare phi(s) with phi(g).
        return self.network(observations, name='encoder').mean(0), self.network(goals, name='encoder').mean(0)

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        obs_dim, action_dim = ex_observations.shape[-1], ex_actions.shape[-1]
        modules = {'actor': GaussianActor(config.actor_hidden_dims, action_dim, layer_norm=config.actor_layer_norm)}
        if config.encoder == 'phi':
            latent_dim = resolve_latent_dim(config.latent_dim, obs_dim)
            modules['encoder'] = EnsembleEncoder(
                config.encoder_hidden_dims, latent_dim, config.num_ensemble, config.encoder_layer_norm
            )
            example_args = {'encoder': (ex_observations,), 'actor': (jnp.zeros((1, 2 * latent_dim)),)}
        elif config.encoder == 'none':
            example_args = {'actor': (jnp.concatenate([ex_observations, ex_observations], axis=-1),)}
        else:
            raise ValueError(f'Unknown encoder {config.encoder!r}: use "none" (GCBC) or "phi" (GCBC-phi).')
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr))


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='gcbc',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size.
            actor_hidden_dims=(512, 512, 512),  # Actor head MLP hidden sizes.
            actor_layer_norm=False,  # Layer norm in the actor MLP (OGBench GCBC: off).
            encoder='none',  # 'none': actor on concat(s, g) (GCBC); 'phi': ensemble encoder (GCBC-phi).
            encoder_hidden_dims=(64, 64, 64),  # phi MLP hidden sizes (GCBC-phi only).
            encoder_layer_norm=True,  # Layer norm in phi's hidden layers (GCBC-phi only).
            latent_dim=0,  # phi output size; 0 = |s| (64 when |s| < 8, e.g. pointmaze).
            num_ensemble=2,  # Encoder ensemble members; the actor sees their mean.
            discount=0.99,  # gamma of geometric goal offsets (GCBC's goals are uniform: unused).
            actor_p_curgoal=0.0,  # Actor goals: probability of the current state.
            actor_p_trajgoal=1.0,  # Actor goals: probability of a future state of the same trajectory.
            actor_p_randomgoal=0.0,  # Actor goals: probability of a random dataset state.
            actor_geom_sample=False,  # Actor goals: geometric (True) or uniform (False) trajectory offsets.
            value_p_curgoal=0.0,  # Representation goals (unused by GCBC): current state.
            value_p_trajgoal=1.0,  # Representation goals (unused by GCBC): same-trajectory future.
            value_p_randomgoal=0.0,  # Representation goals (unused by GCBC): random state.
            value_geom_sample=True,  # Representation goals (unused by GCBC): geometric offsets.
        )
    )
