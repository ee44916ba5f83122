"""BYOL-gamma: GCBC + alpha * a self-predictive loss toward geometrically-future representations.

    L = L_BC(pi(a | phi(s), phi(g))) + alpha * L_aux
    L_aux = f(psi_f(phi(s_t), a_t), sg phibar(s_{t+k})) + f(psi_b(phi(s_{t+k})), sg phibar(s_t)),
    k ~ Geometric(1 - gamma)                             (paper, eq. byolgbi)

f(prediction, target) throughout (docs/method.md, section 4; `byol_gamma_loss` says why the backward term differs
from the paper's argument order). phi is an ensemble of 2 encoders, each with its own psi_f / psi_b, trained
independently by L_aux; the actor sees the ensemble mean. L_aux never reaches the actor head; L_BC flows into phi.
phibar is phi with stop-gradient (tau = 1) or an EMA copy (tau < 1).

Every ablation is a config: BYOL (gamma=0, no psi_b, no action, f_l2), -a, f_l2, -psi_b, gamma=0; `nstep > 0`
replaces the geometric term by n-step BYOL, recurrent prediction with the actions:
sum_j f(psi_f^j(phi(s_t), a_t..a_{t+j-1}), sg phibar(s_{t+j})).
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents.base import TARGET_RULES, BCAgent, bc_actor, encoder_fields, mean_concat, state_encoder
from utils.config_checks import layer_sizes, non_negative, one_of, switch
from utils.networks import EnsemblePredictor
from utils.training import goal_mixture

# ---------------------------------------------------------------------------------------------
# The self-predictive losses (docs/method.md, section 4), pure functions. Convention: `a` / `pred` is the
# prediction, `b` / `target` the target. Leading axes are batch axes, the feature axis is last.
# ---------------------------------------------------------------------------------------------

PREDICTION_KINDS = ('ce', 'l2')

# Added under the square root so a zero vector normalises to zero instead of 0/0 = NaN.
L2_NORM_EPS = 1e-12


def f_ce(pred, target, eps=0.0):
    """f_CE(a, b) = -softmax(b) . log softmax(a), per sample (paper eq. byolgbi, DINO-style; the paper prints it
    without the minus sign, we minimise a cross-entropy). No stop-gradient here: callers decide what is a target.
    `eps > 0` is the authors' implementation, -softmax(b) . log(softmax(a) + eps): the same for moderate logits, but
    bounded by -log(eps) per sample, with vanishing gradients, where softmax(a) underflows as the representation
    scale grows. eps = 0 is the printed form, computed with log_softmax."""
    if eps == 0.0:
        log_probs = jax.nn.log_softmax(pred, axis=-1)
    else:
        log_probs = jnp.log(jax.nn.softmax(pred, axis=-1) + eps)
    return -jnp.sum(jax.nn.softmax(target, axis=-1) * log_probs, axis=-1)


def _normalize(x):
    """x / sqrt(|x|^2 + eps): x / |x| away from zero, and 0 (not NaN) at x = 0."""
    return x / jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True) + L2_NORM_EPS)


def f_l2(pred, target):
    """f_l2(a, b) = || a/|a| - b/|b| ||^2, per sample (paper eq. byolgbi, BYOL's normalised L2), in [0, 4] and
    symmetric. With `L2_NORM_EPS` a zero vector is the zero direction: f_l2(0, b) = 1, with finite gradients."""
    return jnp.sum(jnp.square(_normalize(pred) - _normalize(target)), axis=-1)


def _discrepancy(kind, ce_eps=0.0):
    if kind == 'ce':
        return lambda pred, target: f_ce(pred, target, eps=ce_eps)
    if kind == 'l2':
        return f_l2
    raise ValueError(f'Unknown prediction loss kind {kind!r}: valid kinds are {PREDICTION_KINDS}.')


def prediction_loss(pred, target, kind, ce_eps=0.0):
    """E[f(a, sg b)] with f = f_CE (kind='ce', its eps `ce_eps`) or f_l2 (kind='l2') (paper eqs. byol, byolgbi),
    averaged over all leading axes (batch, and an ensemble axis if present)."""
    f = _discrepancy(kind, ce_eps)
    return jnp.mean(f(pred, jax.lax.stop_gradient(target)))


def byol_gamma_loss(forward_pred, future_target, backward_pred=None, current_target=None, kind='ce', ce_eps=0.0):
    """BYOL-gamma's L_aux (paper eq. byolgbi), s_+ = s_{t+k} with k ~ Geom(1 - gamma):
        L = E[ f(psi_f(phi(s_t), a_t), sg phibar(s_+)) + f(psi_b(phi(s_+)), sg phibar(s_t)) ].
    The targets phibar(s_+), phibar(s_t) are stop-gradiented here. `backward_pred` None is the -psi_b ablation
    (forward term only); otherwise `current_target` is required. Returns (loss, {'forward_loss', 'backward_loss'}).

    The backward term puts the prediction first. The paper's f(phibar(s_t), psi_b(...)) would, with f_CE, put the
    target on the log-softmax side: minimising -sum_k p_k(psi_b) log q_k(target), linear in p, drives psi_b to a
    one-hot on argmax q, not to q. Prediction first is docs/method.md's convention and the paper's prose ("psi_b
    predicts a past representation"); f_l2 is symmetric, so there only the stop-gradient placement matters.
    """
    forward = prediction_loss(forward_pred, future_target, kind, ce_eps)
    if backward_pred is None:
        backward = jnp.zeros_like(forward)
    else:
        if current_target is None:
            raise ValueError('byol_gamma_loss: backward_pred needs current_target (phibar(s_t)).')
        backward = prediction_loss(backward_pred, current_target, kind, ce_eps)
    return forward + backward, {'forward_loss': forward, 'backward_loss': backward}


def nstep_prediction_loss(predictions, targets, mask, kind, ce_eps=0.0):
    """n-step BYOL (paper appendix "N-step BYOL"): L = sum_{j=1..n} f(psi_f^j(phi(s_t), a_t..a_{t+j-1}), sg
    phibar(s_{t+j})), each step averaged over the samples where s_{t+j} exists: sum_j (sum_b m_bj f_bj) /
    max(sum_b m_bj, 1). `predictions`, `targets` [..., n, d] (index j on axis -2 is step j+1); `mask` [..., n].
    Returns (loss, info): info['step_losses'] [n] and scalar 'step{j}_loss'; an all-masked step contributes 0."""
    n = predictions.shape[-2]
    f = _discrepancy(kind, ce_eps)(predictions, jax.lax.stop_gradient(targets))
    f = f.reshape(-1, n)
    m = jnp.asarray(mask).reshape(-1, n).astype(f.dtype)
    # `where`, not just m * f: padded steps past the episode end may hold non-finite values.
    weighted = jnp.where(m != 0, m * f, 0.0)
    step_losses = jnp.sum(weighted, axis=0) / jnp.maximum(jnp.sum(m, axis=0), 1.0)
    info = {'step_losses': step_losses}
    for j in range(n):
        info[f'step{j + 1}_loss'] = step_losses[j]
    return jnp.sum(step_losses), info


def GEOMETRIC(config) -> bool:
    """The geometric objective (nstep = 0), not n-step BYOL."""
    return config['nstep'] == 0


class BYOLGammaAgent(BCAgent):
    CONFIG_RULES = {
        **TARGET_RULES,
        'loss_type': one_of(*PREDICTION_KINDS),
        'ce_eps': non_negative(1e-6).only_when(lambda config: config['loss_type'] == 'ce', "loss_type='ce' (f_CE)"),
        'action_conditioned': switch(True),
        'backward_predictor': switch(True).only_when(GEOMETRIC, 'nstep=0 (n-step BYOL predicts forward only)'),
        'predictor_hidden_dims': layer_sizes((64, 64, 64)),
    }
    BATCH = BCAgent.BATCH.with_(goals=[('value', 'representation targets s_{t+k}')], reads=['nstep'],
                                used_when=[('value', GEOMETRIC, 'nstep=0 (n-step BYOL predicts s_{t+1..t+n} instead)')])

    def encodes(self):
        """phi(s_t), phi(actor goal) and (geometric BYOL-gamma) phi(s_{t+k})."""
        return ('observations', 'actor_goals') + (('value_goals',) if GEOMETRIC(self.config) else ())

    def actor_input(self, batch, z):
        return mean_concat(z['observations'], z['actor_goals'])

    def target_encode(self, x, params, online=None):
        """phibar(x): the online encoder without gradient (tau = 1; `online`, phi(x) if already computed, is reused)
        or its EMA target (tau < 1)."""
        if self.config['tau'] == 1.0:
            online = self.network(x, name='encoder', params=params) if online is None else online
            return jax.lax.stop_gradient(online)
        return self.target(x, name='encoder')

    def forward(self, z, actions, params):
        return self.network(z, actions if self.config['action_conditioned'] else None, name='forward_predictor', params=params)

    def representation_loss(self, batch, z, params):
        z_t = z['observations']  # [M, B, d]
        if self.config['nstep'] > 0:
            return self.nstep_loss(batch, z_t, params)
        z_future = z['value_goals']
        backward_pred = None
        if self.config['backward_predictor']:
            backward_pred = self.network(z_future, name='backward_predictor', params=params)
        return byol_gamma_loss(
            self.forward(z_t, batch['actions'], params),
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
            **encoder_fields(),  # phi and the actor head (agents/base.py, ENCODER_FIELDS); psi shares phi's layer norm and ensemble.
            predictor_hidden_dims=(64, 64, 64),  # psi_f / psi_b MLP hidden sizes.
            alpha=1.0,  # Weight of the representation loss (paper sweeps 1, 6, 40, 100).
            loss_type='ce',  # f: 'ce' (softmax cross-entropy, f_CE) or 'l2' (normalized L2, f_l2).
            ce_eps=1e-6,  # f_CE uses log(softmax + ce_eps) as the authors' code does; 0 = the printed log-softmax.
            action_conditioned=True,  # psi_f(phi(s_t), a_t) (BYOL-gamma^a) instead of psi_f(phi(s_t)).
            backward_predictor=True,  # Add the backward term f(psi_b(phi(s_{t+k})), sg phibar(s_t)).
            tau=1.0,  # Target encoder: 1 = stop-gradient online encoder; < 1 = EMA rate (0.99 visual).
            nstep=0,  # > 0: n-step BYOL (recurrent prediction of s_{t+1..t+n}) instead of geometric.
            discount=0.99,  # gamma: representation targets s_{t+k}, k ~ Geometric(1 - gamma).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future (OGBench GCBC).
            **goal_mixture('value', geom_sample=True),  # Representation targets s_{t+k}, k ~ Geometric(1 - gamma).
        )
    )
