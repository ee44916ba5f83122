"""TRA (temporal representation alignment): GCBC + alpha * symmetric InfoNCE.

    L_aux = symmetric InfoNCE over the batch with f = psi(s_i)^T phi(s+_j), s+ = s_{t+k},
            k ~ Geometric(1 - gamma)                 (paper, eq. infoNCESym)
            + 1e-6 * E[|phi(s+)|^2 / d + |psi(s)|^2 / d]

Loss scale (`loss_scale`, see `symmetric_infonce` below):
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

from agents.base import BCAgent, encoder_fields, mean_concat
from agents.two_encoders import psi_inputs, two_encoder_modules
from utils.config_checks import non_negative, one_of, switch
from utils.losses import LOSS_SCALES, check_choice
from utils.training import goal_mixture

# ---------------------------------------------------------------------------------------------
# TRA's auxiliary loss (paper eq. infoNCESym and appendix "TRA"), pure functions.
# ---------------------------------------------------------------------------------------------


def symmetric_infonce(psi, phi, scale='paper'):
    """Symmetric InfoNCE used by TRA (paper eq. infoNCESym), with logits_ij = f(psi_i, phi_j):
        scale='paper':   f = psi_i . phi_j and
                         L = -1/B sum_i log softmax_j(logits)_ii - 1/B sum_i log softmax_j(logits^T)_ii,
        scale='authors': f = psi_i . phi_j / sqrt(d) and L / B, i.e. the sum of the two diagonal
                         log-softmax terms averaged over all B x B logits (self-pred-bc's TRA).
    The row-wise term asks which s_+ goes with s_i, the column-wise one which s goes with s_+,i. At
    initialisation (logits ~ 0) L = 2 ln B ('paper') or 2 ln(B) / B ('authors'), so one alpha weighs
    the 'paper' loss B times more.

    Args:
        psi, phi: [B, d] with (psi_i, phi_i) a positive pair; vmap over any ensemble axis.
        scale: 'paper' or 'authors'.

    Returns:
        (loss, {'accuracy': fraction of rows whose argmax is the diagonal,
                'logits_pos': mean diagonal logit, 'logits_neg': mean off-diagonal logit}),
        logits as scaled by `scale`.
    """
    check_choice(scale)
    logits = psi @ phi.T
    batch = logits.shape[0]
    if scale == 'authors':
        logits = logits / jnp.sqrt(psi.shape[-1])
    eye = jnp.eye(batch, dtype=bool)
    row_loss = -jnp.mean(jnp.diagonal(jax.nn.log_softmax(logits, axis=1)))
    col_loss = -jnp.mean(jnp.diagonal(jax.nn.log_softmax(logits, axis=0)))
    loss = row_loss + col_loss
    if scale == 'authors':
        loss = loss / batch
    info = {
        'accuracy': jnp.mean(jnp.argmax(logits, axis=1) == jnp.arange(batch)),
        'logits_pos': jnp.mean(jnp.diagonal(logits)),
        # Guarded for B = 1, where there are no negatives.
        'logits_neg': jnp.sum(jnp.where(eye, 0.0, logits)) / max(batch * (batch - 1), 1),
    }
    return loss, info


def representation_norm_penalty(phi, psi, coef=1e-6):
    """TRA's norm penalty (paper appendix "TRA"): lambda E_s[ |phi(s)|^2 / d + |psi(s)|^2 / d ].

    d is each array's own feature size, so phi and psi may differ in width; lambda = coef.
    The expectation is the mean over all leading axes, so this equals lambda (mean(phi^2) + mean(psi^2))
    over all entries, the authors' form: the paper and the authors agree on this term.
    """
    phi_term = jnp.sum(jnp.square(phi), axis=-1) / phi.shape[-1]
    psi_term = jnp.sum(jnp.square(psi), axis=-1) / psi.shape[-1]
    return coef * jnp.mean(phi_term + psi_term)


class TRAAgent(BCAgent):
    CONFIG_RULES = {'loss_scale': one_of(*LOSS_SCALES), 'norm_penalty': non_negative(1e-6), 'action_conditioned': switch(False)}
    BATCH = BCAgent.BATCH.with_(goals=[('value', 'positives of the contrastive loss, s_{t+k}')])

    def encodes(self):
        """phi of the actor goals, the positives s_+ and (TRA^a) s_t."""
        return ('actor_goals', 'value_goals') + (('observations',) if self.config['action_conditioned'] else ())

    def encode(self, batch, params):
        """phi's encodings, and psi(s_t[, a_t]) (at acting time only where the policy reads it: original TRA's
        pi(psi(s), phi(g)))."""
        action_conditioned = self.config['action_conditioned']
        z = super().encode(batch, params)
        if 'actions' in batch or not action_conditioned:
            inputs = psi_inputs(batch['observations'], batch.get('actions'), action_conditioned)
            z['psi'] = self.network(*inputs, name='psi_encoder', params=params)
        return z

    def actor_input(self, batch, z):
        state = z['observations'] if self.config['action_conditioned'] else z['psi']
        return mean_concat(state, z['actor_goals'])

    def representation_loss(self, batch, z, params):
        psi, phi = z['psi'], z['value_goals']  # [M, B, d] each
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
            **encoder_fields(),  # phi, psi and the actor head (agents/base.py, ENCODER_FIELDS).
            alpha=10.0,  # Weight of the representation loss (paper sweeps 10, 40, 60, 100).
            norm_penalty=1e-6,  # lambda of the representation-norm penalty.
            loss_scale='authors',  # 'authors': logits / sqrt(d), InfoNCE / B (the alpha grid's scale); 'paper': as printed.
            action_conditioned=False,  # TRA^a: psi(s, a) and pi(phi(s), phi(g)).
            discount=0.99,  # gamma: positives s_{t+k}, k ~ Geometric(1 - gamma).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future (OGBench GCBC).
            **goal_mixture('value', geom_sample=True),  # Positives s_{t+k}, k ~ Geometric(1 - gamma).
        )
    )
