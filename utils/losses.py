"""Pure loss functions. Each docstring gives the equation it implements (paper / SPEC section 4)."""

import jax
import jax.numpy as jnp

from utils.networks import gaussian_log_prob


def bc_loss(means, log_stds, actions):
    """L_BC = -E[log pi(a_t | s_t, g)] for a diagonal Gaussian policy."""
    return -jnp.mean(gaussian_log_prob(means, log_stds, actions))


# ---------------------------------------------------------------------------------------------
# Representation losses (SPEC section 4). Convention everywhere: `a` / `pred` is the prediction,
# `b` / `target` the target. Leading axes are batch axes, the feature axis is last.
# ---------------------------------------------------------------------------------------------

PREDICTION_KINDS = ('ce', 'l2')

# Added under the square root so a zero vector normalises to zero instead of 0/0 = NaN.
L2_NORM_EPS = 1e-12


def f_ce(pred, target):
    """f_CE(a, b) = -softmax(b) . log softmax(a), per sample (paper eq. byolgbi, DINO-style).

    The paper prints the loss without the minus sign; SPEC section 4 adds it so that it is a
    cross-entropy to minimise. No stop-gradient here: callers decide what is a target.
    Returns an array with the leading (batch) axes of the inputs.
    """
    return -jnp.sum(jax.nn.softmax(target, axis=-1) * jax.nn.log_softmax(pred, axis=-1), axis=-1)


def _normalize(x):
    """x / sqrt(|x|^2 + eps): x / |x| away from zero, and 0 (not NaN) at x = 0."""
    return x / jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True) + L2_NORM_EPS)


def f_l2(pred, target):
    """f_l2(a, b) = || a/|a| - b/|b| ||^2, per sample (paper eq. byolgbi, BYOL's normalised L2).

    Norms carry eps = 1e-12 under the square root (`L2_NORM_EPS`): a zero vector then counts as
    the zero direction, so f_l2(0, b) = 1 for any non-zero b, with finite gradients. Values lie
    in [0, 4] (0 for equal directions, 4 for opposite ones) and the loss is symmetric in a, b.
    """
    return jnp.sum(jnp.square(_normalize(pred) - _normalize(target)), axis=-1)


def _discrepancy(kind):
    if kind == 'ce':
        return f_ce
    if kind == 'l2':
        return f_l2
    raise ValueError(f'Unknown prediction loss kind {kind!r}: valid kinds are {PREDICTION_KINDS}.')


def prediction_loss(pred, target, kind):
    """E[f(a, sg b)] with f = f_CE (kind='ce') or f_l2 (kind='l2') (paper eqs. byol, byolgbi).

    The mean runs over all leading axes (batch, and an ensemble axis if present). The target is
    stop-gradiented here, so only `pred` (and what produced it) receives gradients.
    """
    f = _discrepancy(kind)
    return jnp.mean(f(pred, jax.lax.stop_gradient(target)))


def byol_gamma_loss(forward_pred, future_target, backward_pred=None, current_target=None, kind='ce'):
    """BYOL-gamma (paper eq. byolgbi):
        L = E[ f(psi_f(phi(s_t), a_t), sg phibar(s_+)) + f(sg phibar(s_t), psi_b(phi(s_+))) ],
    s_+ ~ M~pi(s_t, .), i.e. s_{t+k} with k ~ Geom(1 - gamma).

    Args:
        forward_pred: psi_f(phi(s_t)[, a_t]).
        future_target: phibar(s_+); stop-gradiented here.
        backward_pred: psi_b(phi(s_+)), or None for the `-psi_b` ablation (forward term only).
        current_target: phibar(s_t); stop-gradiented here; required with `backward_pred`.
        kind: 'ce' or 'l2'.

    Backward-term argument order: the paper writes f(phibar(s_t), psi_b(...)), which with its
    f_CE(a, b) = softmax(b) . log softmax(a) would put the target on the log-softmax side and
    the prediction on the softmax side. Minimising -sum_k p_k(psi_b) log q_k(target) over the
    prediction is linear in p, so its optimum is a one-hot on argmax q rather than p = q: it
    does not make psi_b predict phibar(s_t). We therefore follow SPEC section 4 (`a` =
    prediction, `b` = target) and the paper's prose ("psi_b predicts a past representation"):
    backward term = f(psi_b(phi(s_+)), sg phibar(s_t)), a proper DINO-style cross-entropy
    towards a fixed target distribution. For f_l2 the order is immaterial
    (symmetric); only the stop-gradient placement matters.

    Returns:
        (loss, {'forward_loss', 'backward_loss'}); backward_loss is 0 without a backward term.
    """
    forward = prediction_loss(forward_pred, future_target, kind)
    if backward_pred is None:
        backward = jnp.zeros_like(forward)
    else:
        if current_target is None:
            raise ValueError('byol_gamma_loss: backward_pred needs current_target (phibar(s_t)).')
        backward = prediction_loss(backward_pred, current_target, kind)
    return forward + backward, {'forward_loss': forward, 'backward_loss': backward}


def nstep_prediction_loss(predictions, targets, mask, kind):
    """n-step BYOL (paper appendix "N-step BYOL"):
        L = sum_{j=1..n} f(psi_f^j(phi(s_t), a_t, .., a_{t+j-1}), sg phibar(s_{t+j})),
    where each step is averaged only over the samples in which s_{t+j} exists:
        L = sum_j (sum_b m_bj f_bj) / max(sum_b m_bj, 1).

    Args:
        predictions, targets: [..., n, d]; index j along axis -2 is step j+1.
        mask: [..., n], 1 where step j lies inside the sample's episode, 0 otherwise.
        kind: 'ce' or 'l2'.

    Returns:
        (loss, info) with info['step_losses'] of shape [n] and scalar 'step{j}_loss' for
        j = 1..n. A step whose mask is all zero contributes exactly 0.
    """
    n = predictions.shape[-2]
    f = _discrepancy(kind)(predictions, jax.lax.stop_gradient(targets))
    f = f.reshape(-1, n)
    m = jnp.asarray(mask).reshape(-1, n).astype(f.dtype)
    # `where`, not just m * f: padded steps past the episode end may hold non-finite values.
    weighted = jnp.where(m != 0, m * f, 0.0)
    step_losses = jnp.sum(weighted, axis=0) / jnp.maximum(jnp.sum(m, axis=0), 1.0)
    info = {'step_losses': step_losses}
    for j in range(n):
        info[f'step{j + 1}_loss'] = step_losses[j]
    return jnp.sum(step_losses), info


def symmetric_infonce(psi, phi):
    """Symmetric InfoNCE used by TRA (paper eq. infoNCESym), with logits_ij = psi_i . phi_j:
        L = -1/B sum_i log softmax_j(logits)_ii - 1/B sum_i log softmax_j(logits^T)_ii,
    i.e. the row-wise (which s_+ goes with s_i) plus the column-wise (which s goes with s_+,i)
    classification losses, each averaged over the batch.

    Args:
        psi, phi: [B, d] with (psi_i, phi_i) a positive pair; vmap over any ensemble axis.

    Returns:
        (loss, {'accuracy': fraction of rows whose argmax is the diagonal,
                'logits_pos': mean diagonal logit, 'logits_neg': mean off-diagonal logit}).
    """
    logits = psi @ phi.T
    batch = logits.shape[0]
    eye = jnp.eye(batch, dtype=bool)
    row_loss = -jnp.mean(jnp.diagonal(jax.nn.log_softmax(logits, axis=1)))
    col_loss = -jnp.mean(jnp.diagonal(jax.nn.log_softmax(logits, axis=0)))
    info = {
        'accuracy': jnp.mean(jnp.argmax(logits, axis=1) == jnp.arange(batch)),
        'logits_pos': jnp.mean(jnp.diagonal(logits)),
        # Guarded for B = 1, where there are no negatives.
        'logits_neg': jnp.sum(jnp.where(eye, 0.0, logits)) / max(batch * (batch - 1), 1),
    }
    return row_loss + col_loss, info


def representation_norm_penalty(phi, psi, coef=1e-6):
    """TRA's norm penalty (paper appendix "TRA"): lambda E_s[ |phi(s)|^2 / d + |psi(s)|^2 / d ].

    d is each array's own feature size, so phi and psi may differ in width; lambda = coef.
    The expectation is the mean over all leading axes.
    """
    phi_term = jnp.sum(jnp.square(phi), axis=-1) / phi.shape[-1]
    psi_term = jnp.sum(jnp.square(psi), axis=-1) / psi.shape[-1]
    return coef * jnp.mean(phi_term + psi_term)


def td_sr_loss(psi, phi_next, target_psi_next, target_phi_next, gamma):
    """TD-SR (paper eq. tdsr), s' ~ p(s) independent of s_t:
        L = E[(psi(s_t)^T phi(s') - gamma psibar(s_{t+1})^T phibar(s'))^2] - 2 E[psi(s_t)^T phi(s_{t+1})].

    Batch form: the batch's next states serve as s'. With M = psi @ phi_next^T and
    T = gamma * sg(target_psi_next @ target_phi_next^T), both [B, B], the squared term is the
    mean of (M_ij - T_ij)^2 over i != j only: s_{t+1,j} is independent of s_{t,i} for j != i,
    whereas the diagonal pair is the transition itself and would bias the bootstrap. The
    positive term is -2 mean_i M_ii. Needs B >= 2.

    Args:
        psi: psi(s_t) [B, d]; phi_next: phi(s_{t+1}) [B, d] (online, receives gradients);
        target_psi_next, target_phi_next: psibar(s_{t+1}), phibar(s_{t+1}) [B, d] (EMA target;
        stop-gradiented here); gamma: discount.

    Returns:
        (loss, {'td_loss': squared term, 'positive': -2 mean_i M_ii,
                'm_diag_mean': mean_i M_ii, 'm_offdiag_mean': mean_{i != j} M_ij}).
    """
    m = psi @ phi_next.T
    target = gamma * jax.lax.stop_gradient(target_psi_next @ target_phi_next.T)
    batch = m.shape[0]
    off_diag = ~jnp.eye(batch, dtype=bool)
    num_off = batch * (batch - 1)
    td_loss = jnp.sum(jnp.where(off_diag, jnp.square(m - target), 0.0)) / num_off
    m_diag_mean = jnp.mean(jnp.diagonal(m))
    positive = -2.0 * m_diag_mean
    info = {
        'td_loss': td_loss,
        'positive': positive,
        'm_diag_mean': m_diag_mean,
        'm_offdiag_mean': jnp.sum(jnp.where(off_diag, m, 0.0)) / num_off,
    }
    return td_loss + positive, info


def forward_backward_loss(forward, backward_next, target_forward_next, target_backward_next, gamma):
    """Forward-backward successor-measure TD loss (paper appendix "Forward-Backward Algorithm";
    Touati & Ollivier 2021), per forward-ensemble member e, with M_e = F_e(s_t, a_t, z) B(s')^T:
        L_e = E[(M_e(s_t, a_t, s') - gamma Mbar(s_{t+1}, pi(s_{t+1}, z), s'))^2] - 2 E[M_e(s_t, a_t, s_{t+1})],
        Mbar = mean_e Fbar_e(s_{t+1}, pi(s_{t+1}, z), z)^T Bbar(s').
    This is `td_sr_loss` with psi = F_e(., ., z) and phi = B; the target is the ensemble mean (Meta
    Motivo's FB with no pessimism on the TD target, `fb_pessimism_penalty = 0`), shared by all members.
    Meta Motivo sums 0.5 * squared term - diagonal over members, i.e. E / 2 times this loss: the
    same loss for their E = 2. Needs B >= 2.

    Args:
        forward: F_e(s_t, a_t, z) [E, B, d] (online, receives gradients).
        backward_next: B(s_{t+1}) [B, d] (online, receives gradients).
        target_forward_next: Fbar_e(s_{t+1}, pi(s_{t+1}, z), z) [E, B, d]; stop-gradiented.
        target_backward_next: Bbar(s_{t+1}) [B, d]; stop-gradiented.
        gamma: discount.

    Returns:
        (mean_e L_e, td_sr_loss's info averaged over members).
    """
    mean_target_forward = jnp.mean(target_forward_next, axis=0)
    loss, info = jax.vmap(td_sr_loss, in_axes=(0, None, None, None, None))(
        forward, backward_next, mean_target_forward, target_backward_next, gamma
    )
    return jnp.mean(loss), {k: jnp.mean(v) for k, v in info.items()}


def orthonormality_loss(backward):
    """FB's orthonormality regulariser, ||E[B(s) B(s)^T] - I||_F^2 up to the constant d:
        L = E_{s != s'}[(B(s)^T B(s'))^2] - 2 E_s[B(s)^T B(s)],
    with s' the batch's other samples (i != j), as the TD loss pairs them. Needs B >= 2.

    Args:
        backward: B(s) [B, d].

    Returns:
        (loss, {'offdiag': first term, 'diag': -2 E|B|^2}).
    """
    cov = backward @ backward.T
    batch = cov.shape[0]
    off_diag = ~jnp.eye(batch, dtype=bool)
    offdiag = jnp.sum(jnp.where(off_diag, jnp.square(cov), 0.0)) / (batch * (batch - 1))
    diag = -2.0 * jnp.mean(jnp.diagonal(cov))
    return offdiag + diag, {'offdiag': offdiag, 'diag': diag}
