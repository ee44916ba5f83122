"""BYOL-gamma: GCBC + alpha * a self-predictive loss toward geometrically-future representations.

    L = L_BC(pi(a | phi(s), phi(g))) + alpha * L_aux
    L_aux = f(psi_f(phi(s_t), a_t), sg phibar(s_{t+k})) + f(psi_b(phi(s_{t+k})), sg phibar(s_t)),
    k ~ Geometric(1 - gamma)                             (paper, eq. byolgbi)

f(prediction, target) throughout (docs/method.md, section 4); the paper writes the backward term with its
arguments swapped, which for f_CE would make the target the log-softmax side (see
utils.losses.byol_gamma_loss).

phi is an ensemble of 2 encoders, each with its own psi_f / psi_b, trained independently by L_aux;
the actor sees the ensemble mean. L_aux never reaches the actor head; L_BC flows into phi.
phibar is phi with stop-gradient (tau = 1) or an EMA copy (tau < 1).

Every ablation is a config: BYOL (gamma=0, no psi_b, no action, f_l2), -a, f_l2, -psi_b, gamma=0;
`nstep > 0` replaces the geometric term by recurrent n-step prediction with the actions
(n-step BYOL): sum_j f(psi_f^j(phi(s_t), a_t..a_{t+j-1}), sg phibar(s_{t+j})).

f_CE's log (`ce_eps`, utils.losses.f_ce): the default 1e-6 is the authors' implementation,
-softmax(b) . log(softmax(a) + 1e-6), the same as the printed log-softmax (ce_eps = 0) for moderate
logits but bounded, with vanishing gradients, where softmax(a) underflows as the representation
scale grows.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents.base import BCAgent
from agents.encoders import bc_actor, encode_together, mean_concat, phi_policy_inputs, state_encoder
from utils.config_checks import non_negative, one_of
from utils.losses import byol_gamma_loss, nstep_prediction_loss
from utils.networks import EnsemblePredictor


class BYOLGammaAgent(BCAgent):
    CONFIG_RULES = {'loss_type': one_of('ce', 'l2'), 'ce_eps': non_negative(1e-6), 'nstep': non_negative(0)}

    def policy_inputs(self, observations, goals, params):
        return phi_policy_inputs(self.network, observations, goals, params)

    def target_encode(self, x, params, online=None):
        """phibar(x): the online encoder without gradient (tau = 1) or its EMA target (tau < 1).
        `online`, phi(x) when already computed, is reused for tau = 1 instead of re-encoding x."""
        if self.config['tau'] == 1.0:
            online = self.network(x, name='encoder', params=params) if online is None else online
            return jax.lax.stop_gradient(online)
        return self.target(x, name='encoder')

    def forward(self, z, actions, params):
        return self.network(z, actions if self.config['action_conditioned'] else None, name='forward_predictor', params=params)

    def batch_encodings(self, batch, params):
        """phi(s_t), phi(actor goal) and (geometric BYOL) phi(s_{t+k}), [M, B, d] each, in one encoder call."""
        keys = ('observations', 'actor_goals') + (() if self.config['nstep'] > 0 else ('value_goals',))
        return encode_together(self.network, params, 'encoder', {k: batch[k] for k in keys})

    def batch_policy_inputs(self, batch, params, encodings):
        return mean_concat(encodings['observations'], encodings['actor_goals'])

    def representation_loss(self, batch, params, encodings=None):
        encodings = self.batch_encodings(batch, params) if encodings is None else encodings
        z_t = encodings['observations']  # [M, B, d]
        if self.config['nstep'] > 0:
            return self.nstep_loss(batch, z_t, params)
        z_future = encodings['value_goals']
        forward_pred = self.forward(z_t, batch['actions'], params)
        backward_pred = None
        if self.config['backward_predictor']:
            backward_pred = self.network(z_future, name='backward_predictor', params=params)
        return byol_gamma_loss(
            forward_pred,
            self.target_encode(batch['value_goals'], params, online=z_future),
            backward_pred,
            self.target_encode(batch['observations'], params, online=z_t),
            kind=self.config['loss_type'],
            ce_eps=self.config['ce_eps'],
        )

    def nstep_loss(self, batch, z_t, params):
        z, predictions = z_t, []
        for j in range(self.config['nstep']):
            z = self.forward(z, batch['nstep_actions'][:, j], params)
            predictions.append(z)
        predictions = jnp.stack(predictions, axis=-2)  # [M, B, n, d]
        targets = self.target_encode(batch['nstep_observations'], params)  # [M, B, n, d]
        mask = jnp.broadcast_to(batch['nstep_mask'], predictions.shape[:-1])
        loss, info = nstep_prediction_loss(predictions, targets, mask, kind=self.config['loss_type'], ce_eps=self.config['ce_eps'])
        info.pop('step_losses')  # logged per step as step{j}_loss; metrics must be scalars
        return loss, info

    def representations(self, observations, actions, goals):
        params = self.network.params
        prediction = self.forward(self.network(observations, name='encoder', params=params), actions, params)
        return prediction.mean(0), self.network(goals, name='encoder', params=params).mean(0)

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        encoder, d = state_encoder(config, ex_observations)
        predictor = EnsemblePredictor(config.predictor_hidden_dims, d, config.num_ensemble, config.encoder_layer_norm)
        ex_z = jnp.zeros((config.num_ensemble, 1, d))
        modules = {
            'encoder': encoder,
            'forward_predictor': predictor,
            'actor': bc_actor(config, ex_actions.shape[-1]),
        }
        example_args = {
            'encoder': (ex_observations,),
            'forward_predictor': (ex_z, ex_actions if config.action_conditioned else None),
            'actor': (jnp.zeros((1, 2 * d)),),
        }
        if config.backward_predictor:
            modules['backward_predictor'] = predictor.clone()
            example_args['backward_predictor'] = (ex_z,)
        targets = ('encoder',) if config.tau != 1.0 else ()
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr), targets=targets)


AGENTS = {'byol_gamma': BYOLGammaAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='byol_gamma',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size (paper: 1024 state, 256 visual).
            frame_stack=1,  # Observations are the channel-wise stack of the last this many frames (pixels; 1 = none).
            p_aug=0.0,  # Probability of random-crop augmentation of a batch (pixels; OGBench visual: 0.5).
            actor_hidden_dims=(512, 512, 512),  # Actor head MLP hidden sizes.
            actor_layer_norm=False,  # Layer norm in the actor MLP.
            encoder='none',  # 'none': phi is an MLP on states; 'impala_small': OGBench's CNN first (pixel observations).
            encoder_hidden_dims=(64, 64, 64),  # phi MLP hidden sizes.
            predictor_hidden_dims=(64, 64, 64),  # psi_f / psi_b MLP hidden sizes.
            encoder_layer_norm=True,  # Layer norm in phi's and psi's hidden layers.
            latent_dim=0,  # phi output size; 0 = |s| (64 when |s| < 8, e.g. pointmaze, and for images).
            num_ensemble=2,  # Encoder (and predictor) ensemble members; the actor sees the mean.
            alpha=1.0,  # Weight of the representation loss (paper sweeps 1, 6, 40, 100).
            loss_type='ce',  # f: 'ce' (softmax cross-entropy, f_CE) or 'l2' (normalized L2, f_l2).
            ce_eps=1e-6,  # f_CE uses log(softmax + ce_eps) as the authors' code does; 0 = the printed log-softmax.
            action_conditioned=True,  # psi_f(phi(s_t), a_t) (BYOL-gamma^a) instead of psi_f(phi(s_t)).
            backward_predictor=True,  # Add the backward term f(psi_b(phi(s_{t+k})), sg phibar(s_t)).
            tau=1.0,  # Target encoder: 1 = stop-gradient online encoder; < 1 = EMA rate (0.99 visual).
            nstep=0,  # > 0: n-step BYOL (recurrent prediction of s_{t+1..t+n}) instead of geometric.
            discount=0.99,  # gamma: representation targets s_{t+k}, k ~ Geometric(1 - gamma).
            actor_p_curgoal=0.0,  # Actor goals: probability of the current state.
            actor_p_trajgoal=1.0,  # Actor goals: probability of a future state of the same trajectory.
            actor_p_randomgoal=0.0,  # Actor goals: probability of a random dataset state.
            actor_geom_sample=False,  # Actor goals: uniform over the trajectory's future (OGBench GCBC).
            value_p_curgoal=0.0,  # Representation targets: probability of the current state.
            value_p_trajgoal=1.0,  # Representation targets: probability of a same-trajectory future.
            value_p_randomgoal=0.0,  # Representation targets: probability of a random state.
            value_geom_sample=True,  # Representation targets: geometric offsets with gamma.
        )
    )
