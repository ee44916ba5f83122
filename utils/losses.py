"""Pure loss functions. Each docstring gives the equation it implements (paper; docs/method.md, section 4)."""

import jax
import jax.numpy as jnp
import numpy as np

from utils.networks import gaussian_log_prob


def bc_loss(means, log_stds, actions):
    """L_BC = -E[log pi(a_t | s_t, g)] for a diagonal Gaussian policy."""
    return -jnp.mean(gaussian_log_prob(means, log_stds, actions))


# ---------------------------------------------------------------------------------------------
# Representation losses (docs/method.md, section 4). Convention everywhere: `a` / `pred` is the prediction,
# `b` / `target` the target. Leading axes are batch axes, the feature axis is last.
# ---------------------------------------------------------------------------------------------

PREDICTION_KINDS = ('ce', 'l2')

# Added under the square root so a zero vector normalises to zero instead of 0/0 = NaN.
L2_NORM_EPS = 1e-12


def f_ce(pred, target, eps=0.0):
    """f_CE(a, b) = -softmax(b) . log softmax(a), per sample (paper eq. byolgbi, DINO-style).

    The paper prints the loss without the minus sign; we add it so that it is a
    cross-entropy to minimise. No stop-gradient here: callers decide what is a target.
    `eps > 0` gives the authors' implementation, -softmax(b) . log(softmax(a) + eps): the same for
    moderate logits, but bounded by -log(eps) per sample (and with vanishing gradients) where
    softmax(a) underflows, i.e. once the representation scale has grown. eps = 0 is the printed form,
    computed with log_softmax.
    Returns an array with the leading (batch) axes of the inputs.
    """
    if eps == 0.0:
        log_probs = jax.nn.log_softmax(pred, axis=-1)
    else:
        log_probs = jnp.log(jax.nn.softmax(pred, axis=-1) + eps)
    return -jnp.sum(jax.nn.softmax(target, axis=-1) * log_probs, axis=-1)


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


def _discrepancy(kind, ce_eps=0.0):
    if kind == 'ce':
        return lambda pred, target: f_ce(pred, target, eps=ce_eps)
    if kind == 'l2':
        return f_l2
    raise ValueError(f'Unknown prediction loss kind {kind!r}: valid kinds are {PREDICTION_KINDS}.')


def prediction_loss(pred, target, kind, ce_eps=0.0):
    """E[f(a, sg b)] with f = f_CE (kind='ce') or f_l2 (kind='l2') (paper eqs. byol, byolgbi).

    The mean runs over all leading axes (batch, and an ensemble axis if present). The target is
    stop-gradiented here, so only `pred` (and what produced it) receives gradients. `ce_eps` is
    f_CE's eps (0 = printed form; see `f_ce`); f_l2 ignores it.
    """
    f = _discrepancy(kind, ce_eps)
    return jnp.mean(f(pred, jax.lax.stop_gradient(target)))


def byol_gamma_loss(forward_pred, future_target, backward_pred=None, current_target=None, kind='ce', ce_eps=0.0):
    """BYOL-gamma (paper eq. byolgbi, backward term with the prediction first, see below):
        L = E[ f(psi_f(phi(s_t), a_t), sg phibar(s_+)) + f(psi_b(phi(s_+)), sg phibar(s_t)) ],
    s_+ ~ M~pi(s_t, .), i.e. s_{t+k} with k ~ Geom(1 - gamma).

    Args:
        forward_pred: psi_f(phi(s_t)[, a_t]).
        future_target: phibar(s_+); stop-gradiented here.
        backward_pred: psi_b(phi(s_+)), or None for the `-psi_b` ablation (forward term only).
        current_target: phibar(s_t); stop-gradiented here; required with `backward_pred`.
        kind: 'ce' or 'l2'.
        ce_eps: f_CE's eps, 0 for the printed log-softmax (see `f_ce`).

    Backward-term argument order: the paper writes f(phibar(s_t), psi_b(...)), which with its
    f_CE(a, b) = softmax(b) . log softmax(a) would put the target on the log-softmax side and
    the prediction on the softmax side. Minimising -sum_k p_k(psi_b) log q_k(target) over the
    prediction is linear in p, so its optimum is a one-hot on argmax q rather than p = q: it
    does not make psi_b predict phibar(s_t). We therefore follow the convention of docs/method.md (`a` =
    prediction, `b` = target) and the paper's prose ("psi_b predicts a past representation"):
    backward term = f(psi_b(phi(s_+)), sg phibar(s_t)), a proper DINO-style cross-entropy
    towards a fixed target distribution. For f_l2 the order is immaterial
    (symmetric); only the stop-gradient placement matters.

    Returns:
        (loss, {'forward_loss', 'backward_loss'}); backward_loss is 0 without a backward term.
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
    """n-step BYOL (paper appendix "N-step BYOL"):
        L = sum_{j=1..n} f(psi_f^j(phi(s_t), a_t, .., a_{t+j-1}), sg phibar(s_{t+j})),
    where each step is averaged only over the samples in which s_{t+j} exists:
        L = sum_j (sum_b m_bj f_bj) / max(sum_b m_bj, 1).

    Args:
        predictions, targets: [..., n, d]; index j along axis -2 is step j+1.
        mask: [..., n], 1 where step j lies inside the sample's episode, 0 otherwise.
        kind: 'ce' or 'l2'.
        ce_eps: f_CE's eps, 0 for the printed log-softmax (see `f_ce`).

    Returns:
        (loss, info) with info['step_losses'] of shape [n] and scalar 'step{j}_loss' for
        j = 1..n. A step whose mask is all zero contributes exactly 0.
    """
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


# Loss-scale conventions: 'paper' is the equation as printed; 'authors' reproduces the authors' public
# implementation (self-pred-bc), on which the paper's alpha grids were tuned.
LOSS_SCALES = ('authors', 'paper')


def _check_scale(scale, valid=LOSS_SCALES, what='loss scale'):
    if scale not in valid:
        raise ValueError(f'Unknown {what} {scale!r}: valid values are {valid}.')


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
    _check_scale(scale)
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


TD_SR_SCALES = ('authors', 'paper', 'metamotivo')


def td_sr_loss(psi, phi_next, target_psi_next, target_phi_next, gamma, scale='paper'):
    """TD-SR (paper eq. tdsr), s' ~ p(s) independent of s_t, per ensemble member e:
        L_e = E[(psi(s_t)^T phi(s') - gamma psibar(s_{t+1})^T phibar(s'))^2] - 2 E[psi(s_t)^T phi(s_{t+1})].

    Batch form: the batch's next states serve as s'. With M = psi @ phi_next^T and
    T = gamma * sg(target_psi_next @ target_phi_next^T), both [B, B] per member, the squared term
    td_e is the mean of (M_ij - T_ij)^2 over i != j only: s_{t+1,j} is independent of s_{t,i} for
    j != i, whereas the diagonal pair is the transition itself and would bias the bootstrap. The
    diagonal term is diag_e = mean_i M_ii. Over the E members (the leading axes; E = 1 without any):
        scale='paper':      mean_e (td_e - 2 diag_e), the printed equation, averaged over members.
        scale='authors':    1/2 sum_e td_e - mean_e diag_e (self-pred-bc's TD-SR: squared term summed
                            over members, diagonal averaged); for E = 2, mean_e (td_e - diag_e).
        scale='metamotivo': 1/2 sum_e td_e - sum_e mean_i (M - T)_ii, i.e. E/2 x 'paper' plus a
                            constant (Meta Motivo's FB loss, whose diagonal term reads M - T).
    Needs B >= 2.

    Args:
        psi: psi(s_t) [..., B, d]; phi_next: phi(s_{t+1}) [..., B, d] (online, receive gradients);
        target_psi_next, target_phi_next: psibar(s_{t+1}), phibar(s_{t+1}) [..., B, d] (EMA target;
        stop-gradiented here); gamma: discount; scale: one of TD_SR_SCALES. Leading axes broadcast.

    Returns:
        (loss, {'td_loss': mean_e td_e, 'positive': the diagonal term as it enters the loss,
                'm_diag_mean': mean_e diag_e, 'm_offdiag_mean': mean over e and i != j of M_ij}).
    """
    _check_scale(scale, TD_SR_SCALES)
    m = psi @ jnp.swapaxes(phi_next, -1, -2)
    target = gamma * jax.lax.stop_gradient(target_psi_next @ jnp.swapaxes(target_phi_next, -1, -2))
    m, target = jnp.broadcast_arrays(m, target)
    batch = m.shape[-1]
    members = int(np.prod(m.shape[:-2]))
    off_diag = ~jnp.eye(batch, dtype=bool)
    num_off = batch * (batch - 1)
    td = jnp.sum(jnp.where(off_diag, jnp.square(m - target), 0.0), axis=(-2, -1)) / num_off  # [...]
    diag = jnp.mean(jnp.diagonal(m, axis1=-2, axis2=-1), axis=-1)  # [...]
    if scale == 'paper':
        positive = -2.0 * jnp.mean(diag)
        loss = jnp.mean(td) + positive
    elif scale == 'authors':
        positive = -jnp.mean(diag)
        loss = 0.5 * jnp.sum(td) + positive
    else:
        positive = -jnp.sum(jnp.mean(jnp.diagonal(m - target, axis1=-2, axis2=-1), axis=-1))
        loss = 0.5 * jnp.sum(td) + positive
    info = {
        'td_loss': jnp.mean(td),
        'positive': positive,
        'm_diag_mean': jnp.mean(diag),
        'm_offdiag_mean': jnp.sum(jnp.where(off_diag, m, 0.0)) / (num_off * members),
    }
    return loss, info


def forward_backward_loss(forward, backward_next, target_forward_next, target_backward_next, gamma, scale='paper'):
    """Forward-backward successor-measure TD loss (paper appendix "Forward-Backward Algorithm";
    Touati & Ollivier 2021), per forward-ensemble member e, with M_e = F_e(s_t, a_t, z) B(s')^T:
        L_e = E[(M_e(s_t, a_t, s') - gamma Mbar(s_{t+1}, pi(s_{t+1}, z), s'))^2] - 2 E[M_e(s_t, a_t, s_{t+1})],
        Mbar = mean_e Fbar_e(s_{t+1}, pi(s_{t+1}, z), z)^T Bbar(s').
    This is `td_sr_loss` with psi = F_e(., ., z) and phi = B; the target is the ensemble mean (Meta
    Motivo's FB with no pessimism on the TD target, `fb_pessimism_penalty = 0`), shared by all members.
        scale='paper':      mean_e L_e.
        scale='metamotivo': Meta Motivo's sum over members of 0.5 * squared term - mean_i (M_e - T)_ii,
                            i.e. E/2 x mean_e L_e plus a constant (no gradient): the same gradients
                            for their E = 2.
    Needs B >= 2.

    Args:
        forward: F_e(s_t, a_t, z) [E, B, d] (online, receives gradients).
        backward_next: B(s_{t+1}) [B, d] (online, receives gradients).
        target_forward_next: Fbar_e(s_{t+1}, pi(s_{t+1}, z), z) [E, B, d]; stop-gradiented.
        target_backward_next: Bbar(s_{t+1}) [B, d]; stop-gradiented.
        gamma: discount; scale: 'paper' or 'metamotivo'.

    Returns:
        (loss, td_sr_loss's info: member means).
    """
    _check_scale(scale, ('paper', 'metamotivo'))
    mean_target_forward = jnp.mean(target_forward_next, axis=0)
    return td_sr_loss(forward, backward_next, mean_target_forward, target_backward_next, gamma, scale=scale)


ORTHONORMALITY_FORMS = ('frobenius', 'metamotivo', 'all_entries')


def orthonormality_loss(backward, form='frobenius'):
    """Orthonormality regulariser pushing E[B(s) B(s)^T] towards I, with C = B B^T [B, B] over the
    batch and s' the batch's other samples (i != j), as the TD loss pairs them:
        form='frobenius':   E_{i != j}[C_ij^2] - 2 E_i[C_ii], ||E[B B^T] - I||_F^2 up to the constant d.
        form='metamotivo':  1/2 E_{i != j}[C_ij^2] - E_i[C_ii], half of it (Meta Motivo's FB).
        form='all_entries': (1/B^2) (sum_{i != j} C_ij^2 - 2 sum_i C_ii), both sums divided by all B^2
                            entries (self-pred-bc's TD-SR): (B-1)/B x the squared term and 1/B x the
                            diagonal term of 'frobenius'.
    Leading axes of `backward` (ensemble members) are averaged over. Needs B >= 2.

    Args:
        backward: B(s) [..., B, d]; form: one of ORTHONORMALITY_FORMS.

    Returns:
        (loss, {'offdiag': first term, 'diag': second term}), each averaged over leading axes.
    """
    _check_scale(form, ORTHONORMALITY_FORMS, 'orthonormality form')
    cov = backward @ jnp.swapaxes(backward, -1, -2)
    batch = cov.shape[-1]
    off_diag = ~jnp.eye(batch, dtype=bool)
    squares = jnp.sum(jnp.where(off_diag, jnp.square(cov), 0.0), axis=(-2, -1))
    traces = jnp.sum(jnp.diagonal(cov, axis1=-2, axis2=-1), axis=-1)
    if form == 'frobenius':
        offdiag, diag = squares / (batch * (batch - 1)), -2.0 * traces / batch
    elif form == 'metamotivo':
        offdiag, diag = 0.5 * squares / (batch * (batch - 1)), -traces / batch
    else:
        offdiag, diag = squares / batch**2, -2.0 * traces / batch**2
    offdiag, diag = jnp.mean(offdiag), jnp.mean(diag)
    return offdiag + diag, {'offdiag': offdiag, 'diag': diag}
