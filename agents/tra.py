"""TRA (temporal representation alignment): GCBC + alpha * symmetric InfoNCE.

    L_aux = symmetric InfoNCE over the batch with f = psi(s_i)^T phi(s+_j), s+ = s_{t+k},
            k ~ Geometric(1 - gamma)                 (paper, eq. infoNCESym)
            + 1e-6 * E[|phi(s+)|^2 / d + |psi(s)|^2 / d]

Loss scale (`loss_scale`, see utils.losses.symmetric_infonce):
* 'authors' (default): the authors' public implementation, on which the paper's alpha grid
  (10, 40, 60, 100) was tuned: f = psi^T phi / sqrt(d), and the InfoNCE is averaged over all B x B
  logits, i.e. the printed loss / B. At initialisation L_aux ~ 2 ln(B) / B (0.014 at B = 1024).
* 'paper': the printed equation, f = psi^T phi and per-row means (2 ln B ~ 14 at initialisation), so
  the same alpha weighs the representation loss about B times more.
The norm penalty is the same in both (the authors' mean of phi^2 and psi^2 over all entries).

psi and phi are separate encoder ensembles of raw states. Original TRA: pi(psi(s), phi(g)).
TRA^a (`action_conditioned`): psi(s, a) and pi(phi(s), phi(g)) (psi needs an action, so the
policy reads phi). Each ensemble member has its own contrastive loss; L_aux is their mean.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents.base import BCAgent
from agents.encoders import encode_together, mean_concat, phi_policy_inputs, psi_inputs, two_encoder_modules
from utils.config_checks import non_negative, one_of
from utils.losses import representation_norm_penalty, symmetric_infonce


class TRAAgent(BCAgent):
    CONFIG_RULES = {'loss_scale': one_of('authors', 'paper'), 'norm_penalty': non_negative(1e-6)}

    def policy_inputs(self, observations, goals, params):
        if self.config['action_conditioned']:
            return phi_policy_inputs(self.network, observations, goals, params)
        z_s = self.network(observations, name='psi_encoder', params=params).mean(axis=0)
        z_g = self.network(goals, name='encoder', params=params).mean(axis=0)
        return jnp.concatenate([z_s, z_g], axis=-1)

    def batch_encodings(self, batch, params):
        """psi(s_t[, a_t]) and, in one call, phi of the actor goals, the positives s_+ and (TRA^a) s_t."""
        action_conditioned = self.config['action_conditioned']
        keys = ('actor_goals', 'value_goals') + (('observations',) if action_conditioned else ())
        encodings = encode_together(self.network, params, 'encoder', {k: batch[k] for k in keys})
        inputs = psi_inputs(batch['observations'], batch['actions'], action_conditioned)
        encodings['psi'] = self.network(*inputs, name='psi_encoder', params=params)
        return encodings

    def batch_policy_inputs(self, batch, params, encodings):
        state = encodings['observations'] if self.config['action_conditioned'] else encodings['psi']
        return mean_concat(state, encodings['actor_goals'])

    def representation_loss(self, batch, params, encodings=None):
        encodings = self.batch_encodings(batch, params) if encodings is None else encodings
        psi, phi = encodings['psi'], encodings['value_goals']  # [M, B, d] each
        contrastive, info = jax.vmap(lambda p, f: symmetric_infonce(p, f, self.config['loss_scale']))(psi, phi)
        penalty = representation_norm_penalty(phi, psi, self.config['norm_penalty'])
        info = {k: jnp.mean(v) for k, v in info.items()}
        info.update(contrastive_loss=jnp.mean(contrastive), norm_penalty=penalty)
        return jnp.mean(contrastive) + penalty, info

    def representations(self, observations, actions, goals):
        inputs, params = psi_inputs(observations, actions, self.config['action_conditioned']), self.network.params
        return self.network(*inputs, name='psi_encoder', params=params).mean(0), self.network(goals, name='encoder', params=params).mean(0)

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        modules, example_args = two_encoder_modules(config, ex_observations, ex_actions)
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr))


AGENTS = {'tra': TRAAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='tra',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size (also the number of InfoNCE negatives + 1).
            frame_stack=1,  # Observations are the channel-wise stack of the last this many frames (pixels; 1 = none).
            p_aug=0.0,  # Probability of random-crop augmentation of a batch (pixels; OGBench visual: 0.5).
            actor_hidden_dims=(512, 512, 512),  # Actor head MLP hidden sizes.
            actor_layer_norm=False,  # Layer norm in the actor MLP.
            encoder='none',  # 'none': phi, psi are MLPs on states; 'impala_small': each with OGBench's CNN first (pixels).
            encoder_hidden_dims=(64, 64, 64),  # phi and psi MLP hidden sizes.
            encoder_layer_norm=True,  # Layer norm in phi's and psi's hidden layers.
            latent_dim=0,  # phi / psi output size; 0 = |s| (64 when |s| < 8, e.g. pointmaze).
            num_ensemble=2,  # Ensemble members of phi and psi; the actor sees the mean.
            alpha=10.0,  # Weight of the representation loss (paper sweeps 10, 40, 60, 100).
            norm_penalty=1e-6,  # lambda of the representation-norm penalty.
            loss_scale='authors',  # 'authors': logits / sqrt(d), InfoNCE / B (the alpha grid's scale); 'paper': as printed.
            action_conditioned=False,  # TRA^a: psi(s, a) and pi(phi(s), phi(g)).
            discount=0.99,  # gamma: positives s_{t+k}, k ~ Geometric(1 - gamma).
            actor_p_curgoal=0.0,  # Actor goals: probability of the current state.
            actor_p_trajgoal=1.0,  # Actor goals: probability of a future state of the same trajectory.
            actor_p_randomgoal=0.0,  # Actor goals: probability of a random dataset state.
            actor_geom_sample=False,  # Actor goals: uniform over the trajectory's future (OGBench GCBC).
            value_p_curgoal=0.0,  # Positives: probability of the current state.
            value_p_trajgoal=1.0,  # Positives: probability of a same-trajectory future state.
            value_p_randomgoal=0.0,  # Positives: probability of a random state.
            value_geom_sample=True,  # Positives: geometric offsets with gamma.
        )
    )
