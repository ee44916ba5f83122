"""The successor-measure losses TD-SR and FB share (a TD loss on psi^T phi, an orthonormality regulariser), pure
functions whose docstrings give the equations they implement (paper; docs/method.md, section 4). A loss of one
representation method lives in that agent's file, beside its objective. The offline RL baselines' losses are the
exception: they are kept together in utils/rl_losses.py, some shared (AWR, expectile value) and some of one agent,
because they port one reference (OGBench's agents) and are tested together against its equations."""

import jax
import jax.numpy as jnp
import numpy as np

# Loss-scale conventions: 'paper' is the equation as printed; 'authors' reproduces the authors' public
# implementation (self-pred-bc), on which the paper's alpha grids were tuned.
LOSS_SCALES = ('authors', 'paper')


def check_choice(scale, valid=LOSS_SCALES, what='loss scale'):
    if scale not in valid:
        raise ValueError(f'Unknown {what} {scale!r}: valid values are {valid}.')


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
    check_choice(scale, TD_SR_SCALES)
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
    check_choice(scale, ('paper', 'metamotivo'))
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
    check_choice(form, ORTHONORMALITY_FORMS, 'orthonormality form')
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
