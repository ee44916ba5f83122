"""TD-SR: GCBC + alpha * a temporal-difference successor-representation loss.

    L_aux = E_{s_t, s'}[(psi(s_t)^T phi(s') - gamma psibar(s_{t+1})^T phibar(s'))^2]
            - 2 E[psi(s_t)^T phi(s_{t+1})]                      (paper, eq. tdsr)

with EMA targets (psibar, phibar; tau = 0.005) and s' the other samples' next states. psi is a
separate encoder ensemble of raw states; TD-SR^a (`action_conditioned`) uses psi(s_t, a_t) and
psibar(s_{t+1}, a_{t+1}) with the dataset's next action (the SR of the behavior policy). The policy is
pi(phi(s), phi(g)) in both variants. Each ensemble member has its own loss; L_aux is their mean.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from utils.agent_base import BCAgent, copy_to_target, ema_target_update
from utils.encoders import phi_policy_inputs, psi_inputs, resolve_latent_dim
from utils.losses import td_sr_loss
from utils.networks import EnsembleEncoder, GaussianActor


class TDSRAgent(BCAgent):
    def policy_inputs(self, observations, goals, params=None):
        return phi_policy_inputs(self.network, observations, goals, params)

    def psi_inputs(self, observations, actions):
        return psi_inputs(observations, actions, self.config['action_conditioned'])

    def representation_loss(self, batch, params):
        psi = self.network(self.psi_inputs(batch['observations'], batch['actions']), name='psi_encoder', params=params)
        phi_next = self.network(batch['next_observations'], name='encoder', params=params)
        next_psi_inputs = self.psi_inputs(batch['next_observations'], batch['next_actions'])
        target_psi_next = self.network(next_psi_inputs, name='target_psi_encoder', params=params)
        target_phi_next = self.network(batch['next_observations'], name='target_encoder', params=params)
        loss, info = jax.vmap(td_sr_loss, in_axes=(0, 0, 0, 0, None))(
            psi, phi_next, target_psi_next, target_phi_next, self.config['discount']
        )
        return jnp.mean(loss), {k: jnp.mean(v) for k, v in info.items()}

    def update_targets(self, network):
        network = ema_target_update(network, 'encoder', 'target_encoder', self.config['tau'])
        return ema_target_update(network, 'psi_encoder', 'target_psi_encoder', self.config['tau'])

    def representations(self, observations, actions, goals):
        psi = self.network(self.psi_inputs(observations, actions), name='psi_encoder')
        return psi.mean(0), self.network(goals, name='encoder').mean(0)

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        obs_dim, action_dim = ex_observations.shape[-1], ex_actions.shape[-1]
        d = resolve_latent_dim(config.latent_dim, obs_dim)
        encoder = EnsembleEncoder(config.encoder_hidden_dims, d, config.num_ensemble, config.encoder_layer_norm)
        ex_psi_input = psi_inputs(ex_observations, ex_actions, config.action_conditioned)
        modules = {
            'encoder': encoder,
            'psi_encoder': encoder.clone(),
            'target_encoder': encoder.clone(),
            'target_psi_encoder': encoder.clone(),
            'actor': GaussianActor(config.actor_hidden_dims, action_dim, layer_norm=config.actor_layer_norm),
        }
        example_args = {
            'encoder': (ex_observations,),
            'psi_encoder': (ex_psi_input,),
            'target_encoder': (ex_observations,),
            'target_psi_encoder': (ex_psi_input,),
            'actor': (jnp.zeros((1, 2 * d)),),
        }
        agent = cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr))
        params = copy_to_target(agent.network.params, 'encoder', 'target_encoder')
        params = copy_to_target(params, 'psi_encoder', 'target_psi_encoder')
        return agent.replace(network=agent.network.replace(params=params))


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='tdsr',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size (B^2 TD pairs per member).
            actor_hidden_dims=(512, 512, 512),  # Actor head MLP hidden sizes.
            actor_layer_norm=False,  # Layer norm in the actor MLP.
            encoder_hidden_dims=(64, 64, 64),  # phi and psi MLP hidden sizes.
            encoder_layer_norm=True,  # Layer norm in phi's and psi's hidden layers.
            latent_dim=0,  # phi / psi output size; 0 = |s| (64 when |s| < 8, e.g. pointmaze).
            num_ensemble=2,  # Ensemble members of phi and psi; the actor sees the mean of phi.
            alpha=0.01,  # Weight of the representation loss (paper sweeps 0.001, 0.005, 0.01, 0.05).
            tau=0.005,  # EMA rate of the target encoders: target <- tau * online + (1 - tau) * target.
            action_conditioned=True,  # TD-SR^a: psi(s_t, a_t) (the paper's main-table variant).
            discount=0.99,  # gamma of the TD target.
            actor_p_curgoal=0.0,  # Actor goals: probability of the current state.
            actor_p_trajgoal=1.0,  # Actor goals: probability of a future state of the same trajectory.
            actor_p_randomgoal=0.0,  # Actor goals: probability of a random dataset state.
            actor_geom_sample=False,  # Actor goals: uniform over the trajectory's future (OGBench GCBC).
            value_p_curgoal=0.0,  # Unused by TD-SR (it bootstraps from s_{t+1}); kept for the sampler.
            value_p_trajgoal=1.0,  # Unused by TD-SR.
            value_p_randomgoal=0.0,  # Unused by TD-SR.
            value_geom_sample=True,  # Unused by TD-SR.
        )
    )
