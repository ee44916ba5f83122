"""Every representation loss (BYOL-gamma's and TRA's in their agent files, TD-SR's in utils/losses.py) against an
independent NumPy computation.

References are written with plain NumPy in float64 (explicit loops where the batch structure
matters), never by calling the JAX code. JAX runs in float32 on the same float32 inputs: the tolerances are float32's
rounding bound (tests/helpers.py `float32_tolerance`) for the computations here, counted at TOL.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import byol_gamma, tra
from tests.helpers import OBS_DIM, float32_tolerance, network_operations, numeric_grad
from utils import losses

# Every call goes through jit: one compile per signature instead of one per primitive keeps
# the file fast on a busy CPU, and it checks that the losses trace with a static `kind`.
f_ce = jax.jit(byol_gamma.f_ce)
f_l2 = jax.jit(byol_gamma.f_l2)
prediction_loss = jax.jit(byol_gamma.prediction_loss, static_argnums=2)
byol_gamma_loss = jax.jit(byol_gamma.byol_gamma_loss, static_argnames='kind')
nstep_prediction_loss = jax.jit(byol_gamma.nstep_prediction_loss, static_argnums=3)
symmetric_infonce = jax.jit(tra.symmetric_infonce)
representation_norm_penalty = jax.jit(tra.representation_norm_penalty)
td_sr_loss = jax.jit(losses.td_sr_loss)

# The longest computation compared here takes under 64 rounded operations in sequence (InfoNCE: a 6-term dot product, a
# log-sum-exp over 8, a mean over 8; TD-SR: 5-term dot products squared and averaged over 30 pairs), on values of
# magnitude below 16 (unit-normal inputs of dimension at most 8: logits, log-softmaxes, losses), or below 128 for the
# squared dot products of TD-SR and the orthonormality forms (SQUARES_TOL).
TOL = float32_tolerance(64, 16)
SQUARES_TOL = float32_tolerance(64, 128)
KINDS = ('ce', 'l2')


def rand(seed, *shape, scale=1.0):
    """float32 values, so that the float64 reference sees exactly what JAX sees."""
    return (scale * np.random.default_rng(seed).normal(size=shape)).astype(np.float32)


# ---- NumPy references ------------------------------------------------------------------------


def np_softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def np_ce(a, b):
    """-sum_k softmax(b)_k log softmax(a)_k for one pair of vectors."""
    a, b = np.float64(a), np.float64(b)
    log_sm_a = a - a.max() - np.log(np.sum(np.exp(a - a.max())))
    return -np.sum(np_softmax(b) * log_sm_a)


def np_l2(a, b):
    """|| a/|a| - b/|b| ||^2 for one pair of non-zero vectors."""
    a, b = np.float64(a), np.float64(b)
    return np.sum((a / np.linalg.norm(a) - b / np.linalg.norm(b)) ** 2)


NP_F = {'ce': np_ce, 'l2': np_l2}


def np_ce_grad(pred, target):
    """d/dpred of mean_i f_CE(pred_i, target_i): (softmax(pred_i) - softmax(target_i)) / B."""
    batch = pred.shape[0]
    rows = [np_softmax(np.float64(pred[i])) - np_softmax(np.float64(target[i])) for i in range(batch)]
    return np.stack(rows) / batch


def np_per_sample(kind, pred, target):
    """Apply the per-pair reference over all leading axes with a loop."""
    lead = pred.shape[:-1]
    p, t = pred.reshape(-1, pred.shape[-1]), target.reshape(-1, target.shape[-1])
    return np.array([NP_F[kind](p[i], t[i]) for i in range(p.shape[0])]).reshape(lead)


# ---- f_ce, f_l2 ------------------------------------------------------------------------------


@pytest.mark.parametrize('kind', KINDS)
def test_per_sample_values_match_numpy(kind):
    pred, target = rand(0, 2, 3, 7), rand(1, 2, 3, 7)
    f = {'ce': f_ce, 'l2': f_l2}[kind]
    got = np.asarray(f(pred, target))
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, np_per_sample(kind, pred, target), **TOL)


def test_f_ce_of_identical_inputs_is_entropy():
    a = rand(2, 5, 6)
    got = np.asarray(f_ce(a, a))
    for i in range(a.shape[0]):
        p = np_softmax(np.float64(a[i]))
        np.testing.assert_allclose(got[i], -np.sum(p * np.log(p)), **TOL)


def test_f_l2_same_direction_zero_opposite_four():
    a = rand(3, 4, 5)
    scales = np.array([0.5, 1.0, 3.0, 100.0], dtype=np.float32)[:, None]
    np.testing.assert_allclose(np.asarray(f_l2(a, scales * a)), 0.0, **TOL)
    np.testing.assert_allclose(np.asarray(f_l2(a, -scales * a)), 4.0, **TOL)
    # Symmetric in its arguments.
    b = rand(4, 4, 5)
    np.testing.assert_allclose(np.asarray(f_l2(a, b)), np.asarray(f_l2(b, a)), **TOL)


def test_f_l2_zero_vector_is_finite():
    zero, b = np.zeros((3, 4), np.float32), rand(5, 3, 4)
    value = np.asarray(f_l2(zero, b))
    np.testing.assert_allclose(value, 1.0, **TOL)
    grad = np.asarray(jax.jit(jax.grad(lambda x: jnp.sum(byol_gamma.f_l2(x, b))))(zero))
    assert np.all(np.isfinite(grad))


# ---- prediction_loss -------------------------------------------------------------------------


@pytest.mark.parametrize('kind', KINDS)
def test_prediction_loss_is_mean_over_leading_axes(kind):
    pred, target = rand(6, 2, 5, 4), rand(7, 2, 5, 4)
    got = float(prediction_loss(pred, target, kind))
    np.testing.assert_allclose(got, np_per_sample(kind, pred, target).mean(), **TOL)


@pytest.mark.parametrize('kind', KINDS)
def test_prediction_loss_target_gradient_is_exactly_zero(kind):
    pred, target = rand(8, 6, 5), rand(9, 6, 5)
    grad = np.asarray(jax.jit(jax.grad(byol_gamma.prediction_loss, argnums=1), static_argnums=2)(pred, target, kind))
    assert np.all(grad == 0.0)


def test_prediction_loss_ce_pred_gradient_is_analytic():
    pred, target = rand(10, 6, 5), rand(11, 6, 5)
    grad = np.asarray(jax.jit(jax.grad(byol_gamma.prediction_loss), static_argnums=2)(pred, target, 'ce'))
    expected = np_ce_grad(pred, target)
    np.testing.assert_allclose(grad, expected, **TOL)


def test_prediction_loss_l2_pred_gradient_matches_finite_differences():
    pred, target = rand(12, 4, 5), rand(13, 4, 5)
    grad = np.asarray(jax.jit(jax.grad(byol_gamma.prediction_loss), static_argnums=2)(pred, target, 'l2'))

    def np_loss(p):
        return np.mean([np_l2(p[i], target[i]) for i in range(p.shape[0])])

    np.testing.assert_allclose(grad, numeric_grad(np_loss, pred), **TOL)


def test_unknown_kind_raises_value_error_naming_valid_kinds():
    pred = rand(14, 3, 4)
    with pytest.raises(ValueError, match="'ce'.*'l2'"):
        prediction_loss(pred, pred, 'cosine')
    with pytest.raises(ValueError):
        byol_gamma_loss(pred, pred, kind='mse')
    with pytest.raises(ValueError):
        nstep_prediction_loss(pred[:, None], pred[:, None], np.ones((3, 1)), 'mse')


# ---- byol_gamma_loss -------------------------------------------------------------------------


@pytest.mark.parametrize('kind', KINDS)
def test_byol_gamma_forward_only(kind):
    fwd, fut = rand(15, 6, 5), rand(16, 6, 5)
    loss, info = byol_gamma_loss(fwd, fut, kind=kind)
    expected = np_per_sample(kind, fwd, fut).mean()
    np.testing.assert_allclose(float(loss), expected, **TOL)
    np.testing.assert_allclose(float(info['forward_loss']), expected, **TOL)
    assert float(info['backward_loss']) == 0.0


@pytest.mark.parametrize('kind', KINDS)
def test_byol_gamma_bidirectional(kind):
    fwd, fut, bwd, cur = rand(17, 6, 5), rand(18, 6, 5), rand(19, 6, 5), rand(20, 6, 5)
    loss, info = byol_gamma_loss(fwd, fut, bwd, cur, kind=kind)
    forward = np_per_sample(kind, fwd, fut).mean()
    # Backward term: prediction psi_b on the log-softmax side, target phibar(s_t) on the softmax side.
    backward = np_per_sample(kind, bwd, cur).mean()
    np.testing.assert_allclose(float(info['forward_loss']), forward, **TOL)
    np.testing.assert_allclose(float(info['backward_loss']), backward, **TOL)
    np.testing.assert_allclose(float(loss), forward + backward, **TOL)


def test_byol_gamma_backward_order_and_gradients():
    fwd, fut, bwd, cur = rand(21, 6, 5), rand(22, 6, 5), rand(23, 6, 5), rand(24, 6, 5)
    _, info = byol_gamma_loss(fwd, fut, bwd, cur, kind='ce')
    # CE is not symmetric, so the chosen order is observable.
    swapped = np_per_sample('ce', cur, bwd).mean()
    assert abs(float(info['backward_loss']) - swapped) > 1e-3

    grad_fn = jax.jit(jax.grad(lambda *x: byol_gamma.byol_gamma_loss(*x, kind='ce')[0], argnums=(0, 1, 2, 3)))
    grads = grad_fn(fwd, fut, bwd, cur)
    g_fwd, g_fut, g_bwd, g_cur = (np.asarray(g) for g in grads)
    assert np.all(g_fut == 0.0) and np.all(g_cur == 0.0)
    for pred, target, g in ((fwd, fut, g_fwd), (bwd, cur, g_bwd)):
        np.testing.assert_allclose(g, np_ce_grad(pred, target), **TOL)


def test_byol_gamma_backward_needs_current_target():
    x = rand(25, 3, 4)
    with pytest.raises(ValueError):
        byol_gamma_loss(x, x, backward_pred=x)


# ---- nstep_prediction_loss -------------------------------------------------------------------


def np_nstep(kind, predictions, targets, mask):
    batch, n = mask.shape
    steps = []
    for j in range(n):
        total, count = 0.0, 0.0
        for b in range(batch):
            if mask[b, j]:
                total += NP_F[kind](predictions[b, j], targets[b, j])
                count += 1.0
        steps.append(total / max(count, 1.0))
    return sum(steps), np.array(steps)


@pytest.mark.parametrize('kind', KINDS)
def test_nstep_masked_mean_matches_numpy(kind):
    batch, n, d = 6, 4, 5
    predictions, targets = rand(26, batch, n, d), rand(27, batch, n, d)
    mask = (np.random.default_rng(28).uniform(size=(batch, n)) < 0.6).astype(np.float32)
    mask[:, 0] = 1.0  # step 1 always exists
    mask[:, 3] = 0.0  # step 4 never exists
    mask[2, 1] = 0.0  # a partial step
    loss, info = nstep_prediction_loss(predictions, targets, mask, kind)
    expected_loss, expected_steps = np_nstep(kind, predictions, targets, mask)
    np.testing.assert_allclose(float(loss), expected_loss, **TOL)
    np.testing.assert_allclose(np.asarray(info['step_losses']), expected_steps, **TOL)
    for j in range(n):
        np.testing.assert_allclose(float(info[f'step{j + 1}_loss']), expected_steps[j], **TOL)
    assert float(info['step4_loss']) == 0.0


def test_nstep_all_zero_step_contributes_nothing_even_with_garbage():
    batch, n, d = 5, 3, 4
    predictions, targets = rand(29, batch, n, d), rand(30, batch, n, d)
    mask = np.ones((batch, n), np.float32)
    mask[:, 2] = 0.0
    reference, _ = nstep_prediction_loss(predictions[:, :2], targets[:, :2], mask[:, :2], 'ce')
    predictions[:, 2] = np.nan  # padding past the episode end
    loss, info = nstep_prediction_loss(predictions, targets, mask, 'ce')
    assert float(info['step3_loss']) == 0.0
    np.testing.assert_allclose(float(loss), float(reference), **TOL)


def test_nstep_leading_axes_and_target_gradient():
    ens, batch, n, d = 2, 4, 3, 5
    predictions, targets = rand(31, ens, batch, n, d), rand(32, ens, batch, n, d)
    mask = np.ones((ens, batch, n), np.float32)
    mask[:, 1:, 2] = 0.0
    loss, _ = nstep_prediction_loss(predictions, targets, mask, 'l2')
    flat = lambda x: x.reshape(ens * batch, *x.shape[2:])  # noqa: E731
    expected, _ = np_nstep('l2', flat(predictions), flat(targets), flat(mask))
    np.testing.assert_allclose(float(loss), expected, **TOL)
    grad = np.asarray(jax.jit(jax.grad(lambda t: byol_gamma.nstep_prediction_loss(predictions, t, mask, 'l2')[0]))(targets))
    assert np.all(grad == 0.0)


# ---- symmetric_infonce -----------------------------------------------------------------------


def np_infonce(psi, phi):
    psi, phi = np.float64(psi), np.float64(phi)
    batch = psi.shape[0]
    logits = np.array([[psi[i] @ phi[j] for j in range(batch)] for i in range(batch)])
    row = col = 0.0
    for i in range(batch):
        row -= logits[i, i] - np.log(np.sum(np.exp(logits[i, :])))
        col -= logits[i, i] - np.log(np.sum(np.exp(logits[:, i])))
    accuracy = np.mean([np.argmax(logits[i]) == i for i in range(batch)])
    off = [logits[i, j] for i in range(batch) for j in range(batch) if i != j]
    return row / batch + col / batch, accuracy, np.mean(np.diag(logits)), np.mean(off)


def test_infonce_matches_loop_reference():
    psi, phi = rand(33, 8, 6), rand(34, 8, 6)
    loss, info = symmetric_infonce(psi, phi)
    expected, accuracy, pos, neg = np_infonce(psi, phi)
    np.testing.assert_allclose(float(loss), expected, **TOL)
    np.testing.assert_allclose(float(info['accuracy']), accuracy, **TOL)
    np.testing.assert_allclose(float(info['logits_pos']), pos, **TOL)
    np.testing.assert_allclose(float(info['logits_neg']), neg, **TOL)


def test_infonce_is_uninformative_for_tiny_vectors():
    batch = 16
    loss, _ = symmetric_infonce(rand(35, batch, 8, scale=1e-3), rand(36, batch, 8, scale=1e-3))
    # Inputs below 5e-3 (five standard deviations) make logits below 8 (5e-3)^2 = 2e-4, which move each of the loss's
    # two log-softmax terms from ln B by at most twice that.
    np.testing.assert_allclose(float(loss), 2 * np.log(batch), rtol=0, atol=4 * 8 * 5e-3**2 + TOL['atol'])


def test_infonce_is_small_for_separated_aligned_pairs():
    batch = 8
    psi = phi = 10.0 * np.eye(batch, dtype=np.float32)
    loss, info = symmetric_infonce(psi, phi)
    assert float(loss) < 1e-3
    assert float(info['accuracy']) == 1.0


# ---- representation_norm_penalty -------------------------------------------------------------


def test_norm_penalty_matches_numpy():
    phi, psi = rand(37, 2, 5, 4), rand(38, 2, 5, 6)
    got = float(representation_norm_penalty(phi, psi, coef=0.5))
    expected = 0.0
    for idx in np.ndindex(phi.shape[:-1]):
        expected += np.sum(np.float64(phi[idx]) ** 2) / 4 + np.sum(np.float64(psi[idx]) ** 2) / 6
    np.testing.assert_allclose(got, 0.5 * expected / 10, **TOL)
    np.testing.assert_allclose(float(representation_norm_penalty(phi, psi)), 1e-6 * expected / 10, **float32_tolerance(64, 16e-6))


# ---- td_sr_loss ------------------------------------------------------------------------------


def np_td_sr(psi, phi_next, tpsi, tphi, gamma):
    psi, phi_next, tpsi, tphi = (np.float64(x) for x in (psi, phi_next, tpsi, tphi))
    batch = psi.shape[0]
    squared, pairs = 0.0, 0
    for i in range(batch):
        for j in range(batch):
            if i != j:
                squared += (psi[i] @ phi_next[j] - gamma * tpsi[i] @ tphi[j]) ** 2
                pairs += 1
    diag = np.mean([psi[i] @ phi_next[i] for i in range(batch)])
    offdiag = np.mean([psi[i] @ phi_next[j] for i in range(batch) for j in range(batch) if i != j])
    return squared / pairs, -2 * diag, diag, offdiag


def td_inputs(seed, batch=6, d=5):
    return tuple(rand(seed + k, batch, d) for k in range(4))


def test_td_sr_matches_loop_reference():
    args, gamma = td_inputs(40), 0.9
    loss, info = td_sr_loss(*args, gamma)
    td, positive, diag, offdiag = np_td_sr(*args, gamma)
    np.testing.assert_allclose(float(info['td_loss']), td, **SQUARES_TOL)
    np.testing.assert_allclose(float(info['positive']), positive, **TOL)
    np.testing.assert_allclose(float(info['m_diag_mean']), diag, **TOL)
    np.testing.assert_allclose(float(info['m_offdiag_mean']), offdiag, **TOL)
    np.testing.assert_allclose(float(loss), td + positive, **SQUARES_TOL)


def test_td_sr_gradients():
    psi, phi_next, tpsi, tphi = td_inputs(50)
    gamma, batch = 0.8, psi.shape[0]
    grad_fn = jax.jit(jax.grad(lambda *x: losses.td_sr_loss(*x, gamma)[0], argnums=(0, 1, 2, 3)))
    grads = grad_fn(psi, phi_next, tpsi, tphi)
    assert np.all(np.asarray(grads[2]) == 0.0) and np.all(np.asarray(grads[3]) == 0.0)
    # d/dpsi_i = 2/(B(B-1)) sum_{j != i} (M_ij - T_ij) phi_next_j - 2/B phi_next_i
    p, f, tp, tf = (np.float64(x) for x in (psi, phi_next, tpsi, tphi))
    expected = np.zeros_like(p)
    for i in range(batch):
        for j in range(batch):
            if i != j:
                expected[i] += 2 / (batch * (batch - 1)) * (p[i] @ f[j] - gamma * tp[i] @ tf[j]) * f[j]
        expected[i] -= 2 / batch * f[i]
    np.testing.assert_allclose(np.asarray(grads[0]), expected, **SQUARES_TOL)


def test_td_sr_ignores_diagonal_of_target_matrix():
    # With target_phi_next = I, T = gamma * target_psi_next, so editing the diagonal of
    # target_psi_next edits only the diagonal of T.
    batch, gamma = 5, 0.9
    psi, phi_next = rand(60, batch, batch), rand(61, batch, batch)
    tphi = np.eye(batch, dtype=np.float32)
    tpsi = rand(62, batch, batch)
    tpsi_diag = tpsi + np.diag(rand(63, batch, scale=5.0))
    td = float(td_sr_loss(psi, phi_next, tpsi, tphi, gamma)[1]['td_loss'])
    td_diag = float(td_sr_loss(psi, phi_next, tpsi_diag, tphi, gamma)[1]['td_loss'])
    np.testing.assert_allclose(td_diag, td, **SQUARES_TOL)
    # The edit is large enough to show up if the diagonal were included ...
    m = np.float64(psi) @ np.float64(phi_next).T
    full = lambda tp: np.mean((m - gamma * np.float64(tp)) ** 2)  # noqa: E731
    assert abs(full(tpsi_diag) - full(tpsi)) > 1e-2
    # ... and an off-diagonal edit of the same size does change the squared term.
    tpsi_off = tpsi.copy()
    tpsi_off[0, 1] += 5.0
    td_off = float(td_sr_loss(psi, phi_next, tpsi_off, tphi, gamma)[1]['td_loss'])
    assert abs(td_off - td) > 1e-2


# ---- loss scales: the authors' implementation against the printed equations --------------------


def np_num_grad(fn, x, h=1e-6):
    """Central finite differences of a float64 NumPy function of one array."""
    x = np.float64(x)
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[idx] = h
        grad[idx] = (fn(x + step) - fn(x - step)) / (2 * h)
    return grad


def np_log_softmax(v):
    v = np.float64(v)
    return v - v.max() - np.log(np.sum(np.exp(v - v.max())))


def np_ce_eps(a, b, eps):
    """-sum_k softmax(b)_k log(softmax(a)_k + eps), the authors' f_CE, for one pair."""
    return -np.sum(np_softmax(np.float64(b)) * np.log(np_softmax(np.float64(a)) + eps))


def test_f_ce_eps_matches_numpy_values_and_gradients():
    pred, target, eps = rand(70, 4, 5, scale=3.0), rand(71, 4, 5), 1e-6
    got = np.asarray(jax.jit(lambda p, t: byol_gamma.f_ce(p, t, eps=eps))(pred, target))
    np.testing.assert_allclose(got, [np_ce_eps(pred[i], target[i], eps) for i in range(4)], **TOL)
    grad = jax.jit(jax.grad(lambda p: byol_gamma.prediction_loss(p, target, 'ce', eps)))(pred)
    expected = np_num_grad(lambda p: np.mean([np_ce_eps(p[i], target[i], eps) for i in range(4)]), pred)
    np.testing.assert_allclose(np.asarray(grad), expected, **TOL)


def np_softmax_rows(x):
    return np.stack([np_softmax(np.float64(row)) for row in x])


def test_f_ce_eps_agrees_with_printed_form_only_for_small_logits():
    target = rand(72, 3, 6)
    small, large = rand(73, 3, 6), rand(73, 3, 6, scale=60.0)
    printed = lambda p: np.asarray(f_ce(p, target))  # noqa: E731
    authors = lambda p: np.asarray(jax.jit(lambda a: byol_gamma.f_ce(a, target, eps=1e-6))(p))  # noqa: E731
    # Exactly, the two differ by sum_k softmax(target)_k log(1 + eps / softmax(p)_k) <= eps sum_k softmax(target)_k /
    # softmax(p)_k; float32 rounding adds TOL.
    gap = 1e-6 * np.max(np.sum(np_softmax_rows(target) / np_softmax_rows(small), axis=-1))
    np.testing.assert_allclose(authors(small), printed(small), rtol=0, atol=gap + TOL['atol'])
    # Underflowing softmax entries cost at most -log(1e-6) ~ 13.8 with eps, unboundedly more without.
    assert np.all(authors(large) <= -np.log(1e-6) + 1e-3)
    assert np.max(printed(large) - authors(large)) > 10.0


def test_byol_gamma_loss_passes_ce_eps_to_both_terms():
    fp, ft, bp, ct = rand(74, 3, 5, scale=40.0), rand(75, 3, 5), rand(76, 3, 5, scale=40.0), rand(77, 3, 5)
    loss, info = jax.jit(lambda *x: byol_gamma.byol_gamma_loss(*x, kind='ce', ce_eps=1e-6))(fp, ft, bp, ct)
    forward = np.mean([np_ce_eps(fp[i], ft[i], 1e-6) for i in range(3)])
    backward = np.mean([np_ce_eps(bp[i], ct[i], 1e-6) for i in range(3)])
    # Logits of magnitude up to 40 x 4: their log-softmaxes round within 64 operations of that magnitude.
    np.testing.assert_allclose([float(info['forward_loss']), float(info['backward_loss'])], [forward, backward],
                               **float32_tolerance(64, 256))


def np_infonce_authors(psi, phi):
    """The authors' TRA loss on an ensemble [E, B, d]: logits psi_i . phi_j / sqrt(d), then the row-
    and column-wise diagonal -log-softmax terms averaged over all E x B x B logit entries."""
    psi, phi = np.float64(psi), np.float64(phi)
    members, batch, d = psi.shape
    total = 0.0
    for e in range(members):
        logits = np.array([[psi[e, i] @ phi[e, j] / np.sqrt(d) for j in range(batch)] for i in range(batch)])
        for i in range(batch):
            total -= np_log_softmax(logits[i, :])[i] + np_log_softmax(logits[:, i])[i]
    return total / (members * batch * batch)


def test_infonce_authors_scale_matches_loop_reference_values_and_gradients():
    psi, phi = rand(80, 2, 5, 3, scale=2.0), rand(81, 2, 5, 3, scale=2.0)
    fn = jax.jit(lambda p, f: jnp.mean(jax.vmap(lambda a, b: tra.symmetric_infonce(a, b, 'authors')[0])(p, f)))
    np.testing.assert_allclose(float(fn(psi, phi)), np_infonce_authors(psi, phi), **TOL)
    grad_psi, grad_phi = jax.grad(fn, argnums=(0, 1))(psi, phi)
    np.testing.assert_allclose(np.asarray(grad_psi), np_num_grad(lambda p: np_infonce_authors(p, phi), psi), **TOL)
    np.testing.assert_allclose(np.asarray(grad_phi), np_num_grad(lambda f: np_infonce_authors(psi, f), phi), **TOL)


@pytest.mark.parametrize('batch', [4, 64])
def test_infonce_scales_differ_by_batch_size_at_initialisation(batch):
    """Near-zero logits: 'paper' gives 2 ln B, 'authors' 2 ln(B) / B, so the ratio is B."""
    psi, phi = rand(82, batch, 8, scale=1e-3), rand(83, batch, 8, scale=1e-3)
    paper = float(jax.jit(lambda a, b: tra.symmetric_infonce(a, b, 'paper')[0])(psi, phi))
    authors = float(jax.jit(lambda a, b: tra.symmetric_infonce(a, b, 'authors')[0])(psi, phi))
    # Inputs below 5e-3 (five standard deviations) make logits below 8 (5e-3)^2 = 2e-4, which move each log-softmax
    # term from ln B by at most twice that ('authors': divided by B).
    near_zero = 4 * 8 * 5e-3**2
    np.testing.assert_allclose(paper, 2 * np.log(batch), rtol=0, atol=near_zero + TOL['atol'])
    np.testing.assert_allclose(authors, 2 * np.log(batch) / batch, rtol=0, atol=near_zero / batch + TOL['atol'])


def test_norm_penalty_is_the_authors_mean_over_all_entries():
    phi, psi = rand(84, 2, 6, 4), rand(85, 2, 6, 4)
    expected = 1e-6 * (np.mean(np.float64(phi) ** 2) + np.mean(np.float64(psi) ** 2))
    np.testing.assert_allclose(float(representation_norm_penalty(phi, psi)), expected, **float32_tolerance(64, 16e-6))


def np_td_sr_members(psi, phi_next, tpsi, tphi, gamma):
    """Per member e of [E, B, d] inputs: (squared term over i != j, mean_i M_ii, mean_i (M - T)_ii)."""
    out = []
    for e in range(psi.shape[0]):
        td, _, diag, _ = np_td_sr(psi[e], phi_next[e], tpsi[e], tphi[e], gamma)
        target_diag = np.mean([gamma * np.float64(tpsi[e, i]) @ np.float64(tphi[e, i]) for i in range(psi.shape[1])])
        out.append((td, diag, diag - target_diag))
    return np.array(out)


def np_td_sr_scaled(scale, gamma):
    def loss(psi, phi_next, tpsi, tphi):
        terms = np_td_sr_members(psi, phi_next, tpsi, tphi, gamma)
        if scale == 'paper':
            return np.mean(terms[:, 0] - 2 * terms[:, 1])
        if scale == 'authors':
            return 0.5 * np.sum(terms[:, 0]) - np.mean(terms[:, 1])
        return 0.5 * np.sum(terms[:, 0]) - np.sum(terms[:, 2])
    return loss


@pytest.mark.parametrize('scale', ['paper', 'authors', 'metamotivo'])
def test_td_sr_scales_match_loop_reference_values_and_gradients(scale):
    members, gamma = 3, 0.9
    psi, phi_next, tpsi, tphi = (rand(90 + k, members, 5, 3) for k in range(4))
    reference = np_td_sr_scaled(scale, gamma)
    fn = jax.jit(lambda *x: losses.td_sr_loss(*x, gamma, scale=scale)[0])
    np.testing.assert_allclose(float(fn(psi, phi_next, tpsi, tphi)), reference(psi, phi_next, tpsi, tphi), **SQUARES_TOL)
    grads = jax.grad(fn, argnums=(0, 1, 2, 3))(psi, phi_next, tpsi, tphi)
    expected_psi = np_num_grad(lambda p: reference(p, phi_next, tpsi, tphi), psi)
    expected_phi = np_num_grad(lambda f: reference(psi, f, tpsi, tphi), phi_next)
    np.testing.assert_allclose(np.asarray(grads[0]), expected_psi, **SQUARES_TOL)
    np.testing.assert_allclose(np.asarray(grads[1]), expected_phi, **SQUARES_TOL)
    assert np.all(np.asarray(grads[2]) == 0.0) and np.all(np.asarray(grads[3]) == 0.0)


def test_td_sr_authors_scale_halves_the_squared_term_relative_to_the_diagonal():
    """One member: 'authors' = 1/2 td - diag = 'paper' / 2, the authors' printed 1/2 (.)^2 - (.)."""
    args = td_inputs(95)
    paper = float(td_sr_loss(*args, 0.9)[0])
    authors = float(jax.jit(lambda *x: losses.td_sr_loss(*x, 0.9, scale='authors')[0])(*args))
    np.testing.assert_allclose(authors, paper / 2, **SQUARES_TOL)


def np_orthonormality(backward, form):
    """Loop reference over members e and pairs (i, j) of C = B B^T."""
    backward = np.float64(backward)
    members, batch, _ = backward.shape
    values = []
    for e in range(members):
        squares = sum((backward[e, i] @ backward[e, j]) ** 2 for i in range(batch) for j in range(batch) if i != j)
        trace = sum(backward[e, i] @ backward[e, i] for i in range(batch))
        if form == 'frobenius':
            values.append(squares / (batch * (batch - 1)) - 2 * trace / batch)
        elif form == 'metamotivo':
            values.append(0.5 * squares / (batch * (batch - 1)) - trace / batch)
        else:
            values.append((squares - 2 * trace) / batch**2)
    return np.mean(values)


@pytest.mark.parametrize('form', losses.ORTHONORMALITY_FORMS)
def test_orthonormality_forms_match_loop_reference_values_and_gradients(form):
    backward = rand(96, 2, 5, 3)
    fn = jax.jit(lambda b: losses.orthonormality_loss(b, form=form)[0])
    np.testing.assert_allclose(float(fn(backward)), np_orthonormality(backward, form), **SQUARES_TOL)
    expected = np_num_grad(lambda b: np_orthonormality(b, form), backward)
    np.testing.assert_allclose(np.asarray(jax.grad(fn)(backward)), expected, **SQUARES_TOL)


def test_unknown_scale_raises_value_error_naming_valid_values():
    with pytest.raises(ValueError, match='authors'):
        tra.symmetric_infonce(rand(97, 4, 3), rand(98, 4, 3), scale='typo')
    with pytest.raises(ValueError, match='metamotivo'):
        losses.orthonormality_loss(rand(99, 4, 3), form='typo')


# ---- the agents' defaults are the authors' scales ------------------------------------------------


def scale_agent(name):
    """A small agent with the module's default scale fields (the batch size only matters to the sampler)."""
    from agents import get_agent_class
    from tests.helpers import ACTION_DIM, OBS_DIM, small

    module = __import__(f'agents.{name}', fromlist=['get_config'])
    config = small(module.get_config(), batch_size=16)
    ex_obs, ex_act = np.zeros((1, OBS_DIM), np.float32), np.zeros((1, ACTION_DIM), np.float32)
    return get_agent_class(name).create(0, ex_obs, ex_act, config)


def random_batch(seed, batch_size):
    """At initialisation the scale of a loss does not depend on temporal structure: random states do."""
    from tests.helpers import ACTION_DIM, OBS_DIM

    states = lambda k: rand(seed + k, batch_size, OBS_DIM)  # noqa: E731
    actions = lambda k: np.tanh(rand(seed + k, batch_size, ACTION_DIM))  # noqa: E731
    return {'observations': states(0), 'next_observations': states(1), 'value_goals': states(2),
            'actor_goals': states(3), 'actions': actions(4), 'next_actions': actions(5)}


def test_tra_default_initial_loss_is_on_the_authors_scale_at_batch_1024():
    """The issue's criterion: ~2 ln(B) / B = 0.0135 at B = 1024 by default, >= 2 ln B = 13.9 as printed."""
    agent = scale_agent('tra')
    assert agent.config['loss_scale'] == 'authors'
    batch = random_batch(100, 1024)
    authors, info = agent.representation_loss(batch, agent.encode(batch, agent.network.params), agent.network.params)
    paper_agent = agent.replace(config={**agent.config, 'loss_scale': 'paper'})
    paper, _ = paper_agent.representation_loss(batch, paper_agent.encode(batch, agent.network.params), agent.network.params)
    assert abs(float(authors) - 2 * np.log(1024) / 1024) < 0.003, float(authors)
    assert float(paper) > 2 * np.log(1024) and float(paper) > 500 * float(authors), float(paper)
    assert float(info['norm_penalty']) < 1e-4


def test_tdsr_default_scale_and_options_in_the_agent():
    agent = scale_agent('tdsr')
    assert (agent.config['loss_scale'], agent.config['normalize_goal'], agent.config['ortho_coef']) == ('authors', False, 0.0)
    batch, params = random_batch(110, 16), agent.network.params
    loss, info = agent.representation_loss(batch, agent.encode(batch, params), params)
    # Two members: 1/2 sum_e td_e - mean_e diag_e = mean_e td_e - mean_e diag_e, either side a few roundings (8 at
    # most) of its terms.
    terms = lambda info: float32_tolerance(8, abs(float(info['td_loss'])) + 2 * abs(float(info['m_diag_mean'])))  # noqa: E731
    np.testing.assert_allclose(float(loss), float(info['td_loss'] - info['m_diag_mean']), **terms(info))
    paper = agent.replace(config={**agent.config, 'loss_scale': 'paper'})
    loss, info = paper.representation_loss(batch, paper.encode(batch, params), params)
    np.testing.assert_allclose(float(loss), float(info['td_loss'] - 2 * info['m_diag_mean']), **terms(info))

    options = agent.replace(config={**agent.config, 'normalize_goal': True, 'ortho_coef': 1.0})
    goals = options.goal_encode(batch['actor_goals'], params)
    d = goals.shape[-1]
    # sqrt(d) g / |g| and NumPy's norm of it: two d-term sums, two square roots and a few products.
    np.testing.assert_allclose(np.linalg.norm(np.asarray(goals), axis=-1), np.sqrt(d), **float32_tolerance(2 * d + 8, np.sqrt(d)))
    inputs = np.asarray(options.policy_inputs(batch['observations'], batch['actor_goals'], params))
    # The encoder (fan-ins 4, 32, 32) and the normalisation in two programs: both evaluations count; the ensemble mean
    # two more. Its outputs are below 4 in magnitude (normalised to norm sqrt(8)).
    encoder = 2 * (network_operations((OBS_DIM, 32, 32)) + 2 * d + 8) + 2
    np.testing.assert_allclose(inputs[:, d:], np.asarray(goals.mean(0)), **float32_tolerance(encoder, 4))
    loss, info = options.representation_loss(batch, options.encode(batch, params), params)
    phi_next = np.asarray(options.goal_encode(batch['next_observations'], params))
    # phi_next from another program: its rounding enters the squared dot products twice, which then round within 64
    # operations of magnitude below 128 (SQUARES_TOL).
    ortho = float32_tolerance(2 * encoder + 64, 128)
    np.testing.assert_allclose(float(info['ortho_loss']), np_orthonormality(phi_next, 'all_entries'), **ortho)
    np.testing.assert_allclose(float(loss), float(info['td_loss'] - info['m_diag_mean'] + info['ortho_loss']),
                               **float32_tolerance(8, abs(float(info['td_loss'])) + abs(float(info['m_diag_mean']))
                                                   + abs(float(info['ortho_loss']))))
