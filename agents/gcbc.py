"""GCBC and GCBC-phi: goal-conditioned behavioral cloning.

GCBC feeds concat(s, g) to the actor MLP (OGBench's shared state-goal input). GCBC-phi
(`use_phi=True`) first encodes s and g separately with the ensemble encoder phi and feeds
concat(mean_m phi_m(s), mean_m phi_m(g)): the architecture of the representation agents, without
any auxiliary loss (paper appendix "GCBC Encoder Ablation").

Pixel observations (`encoder='impala_small'`, as for every agent): GCBC is OGBench's visual GCBC, one
CNN on the channel-wise stack concat(s, g) (64x64x6) followed by the actor (the paper's GCBC
baseline); GCBC-phi has the CNN as the first stage of phi, as in the representation agents.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents.base import ENCODER_RULES, PHI_FIELDS, BCAgent, bc_actor, encoder_fields, mean_concat, state_encoder
from utils.config_checks import switch
from utils.image_encoders import visual_encoder
from utils.training import goal_mixture


class GCBCAgent(BCAgent):
    CONFIG_RULES = {
        'use_phi': switch(False),
        'alpha': None,  # no auxiliary loss to weigh
        # phi's fields: only GCBC-phi has phi, so plain GCBC reads none of them.
        **{field: ENCODER_RULES[field].only_when(lambda config: config['use_phi'], 'use_phi=True (GCBC-φ)')
           for field in PHI_FIELDS},
    }

    def encodes(self):
        return ('observations', 'actor_goals') if self.config['use_phi'] else ()

    def encode(self, batch, params):
        if not self.config['use_phi'] and self.config['encoder'] != 'none':  # one CNN on the channel-wise stack (s, g)
            stacked = jnp.concatenate([batch['observations'], batch['actor_goals']], axis=-1)
            return {'state_goal': self.network(stacked, name='encoder', params=params)}
        return super().encode(batch, params)

    def actor_input(self, batch, z):
        if self.config['use_phi']:
            return mean_concat(z['observations'], z['actor_goals'])
        if 'state_goal' in z:
            return z['state_goal']
        return jnp.concatenate([batch['observations'], batch['actor_goals']], axis=-1)

    def representations(self, observations, actions, goals):
        if not self.config['use_phi']:
            return super().representations(observations, actions, goals)
        # GCBC-phi has no predictor: compare phi(s) with phi(g).
        params = self.network.params
        return self.network(observations, name='encoder', params=params).mean(0), self.network(goals, name='encoder', params=params).mean(0)

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        modules = {'actor': bc_actor(config, ex_actions.shape[-1])}
        ex_inputs = jnp.concatenate([ex_observations, ex_observations], axis=-1)
        if config.use_phi:
            modules['encoder'], latent_dim = state_encoder(config, ex_observations)
            example_args = {'encoder': (ex_observations,), 'actor': (jnp.zeros((1, 2 * latent_dim)),)}
        elif config.encoder != 'none':
            modules['encoder'] = visual_encoder(config.encoder)
            features = jax.eval_shape(modules['encoder'].init_with_output, jax.random.PRNGKey(0), ex_inputs)[0]
            example_args = {'encoder': (ex_inputs,), 'actor': (jnp.zeros(features.shape),)}
        else:
            example_args = {'actor': (ex_inputs,)}
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr))


AGENTS = {'gcbc': GCBCAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='gcbc',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size.
            frame_stack=1,  # Observations are the channel-wise stack of the last this many frames (pixels; 1 = none).
            p_aug=0.0,  # Probability of random-crop augmentation of a batch (pixels; OGBench visual: 0.5).
            **encoder_fields(),  # The actor head, and phi for use_phi (agents/base.py, ENCODER_FIELDS).
            use_phi=False,  # GCBC-phi: the actor reads concat(phi(s), phi(g)) of the ensemble encoder phi instead of concat(s, g).
            discount=0.99,  # gamma of geometric actor-goal offsets (read only with actor_geom_sample=True).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future (OGBench GCBC).
        )
    )
