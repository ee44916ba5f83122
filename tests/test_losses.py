"""Every representation loss in utils/losses.py against an independent NumPy computation.

References are written with plain NumPy in float64 (explicit loops where the batch structure
matters), never by calling the JAX code. JAX runs in float32, hence tolerances of ~1e-5.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from utils import losses

# Every call goes through jit: one compile per signature instead of one per primitive keeps
# the file fast on a busy CPU, and it checks that the losses trace with a static `kind`.
f_ce = jax.jit(losses.f_ce)
f_l2 = jax.jit(losses.f_l2)
prediction_loss = jax.jit(losses.prediction_loss, static_argnums=2)
byol_gamma_loss = jax.jit(losses.byol_gamma_loss, static_argnames='kind')
nstep_prediction_loss = jax.jit(losses.nstep_prediction_loss, static_argnums=3)
symmetric_infonce = jax.jit(losses.symmetric_infonce)
representation_norm_penalty = jax.jit(losses.representation_norm_penalty)
td_sr_loss = jax.jit(losses.td_sr_loss)

TOL = dict(rtol=1e-5, atol=1e-5)
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
    np.testing.assert_allclose(np.asarray(f_l2(a, scales * a)), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(f_l2(a, -scales * a)), 4.0, **TOL)
    # Symmetric in its arguments.
    b = rand(4, 4, 5)
    np.testing.assert_allclose(np.asarray(f_l2(a, b)), np.asarray(f_l2(b, a)), **TOL)


def test_f_l2_zero_vector_is_finite():
    zero, b = np.zeros((3, 4), np.float32), rand(5, 3, 4)
    value = np.asarray(f_l2(zero, b))
    np.testing.assert_allclose(value, 1.0, **TOL)
    grad = np.asarray(jax.jit(jax.grad(lambda x: jnp.sum(losses.f_l2(x, b))))(zero))
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
    grad = np.asarray(jax.jit(jax.grad(losses.prediction_loss, argnums=1), static_argnums=2)(pred, target, kind))
    assert np.all(grad == 0.0)


def test_prediction_loss_ce_pred_gradient_is_analytic():
    pred, target = rand(10, 6, 5), rand(11, 6, 5)
    grad = np.asarray(jax.jit(jax.grad(losses.prediction_loss), static_argnums=2)(pred, target, 'ce'))
    expected = np_ce_grad(pred, target)
    np.testing.assert_allclose(grad, expected, **TOL)


def test_prediction_loss_l2_pred_gradient_matches_finite_differences():
    pred, target = rand(12, 4, 5), rand(13, 4, 5)
    grad = np.asarray(jax.jit(jax.grad(losses.prediction_loss), static_argnums=2)(pred, target, 'l2'))

    def np_loss(p):
        return np.mean([np_l2(p[i], target[i]) for i in range(p.shape[0])])

    h, p64 = 1e-6, np.float64(pred)
    expected = np.zeros_like(p64)
    for idx in np.ndindex(p64.shape):
        up, down = p64.copy(), p64.copy()
        up[idx] += h
        down[idx] -= h
        expected[idx] = (np_loss(up) - np_loss(down)) / (2 * h)
    np.testing.assert_allclose(grad, expected, **TOL)


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

    grad_fn = jax.jit(jax.grad(lambda *x: losses.byol_gamma_loss(*x, kind='ce')[0], argnums=(0, 1, 2, 3)))
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
    grad = np.asarray(jax.jit(jax.grad(lambda t: losses.nstep_prediction_loss(predictions, t, mask, 'l2')[0]))(targets))
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
    np.testing.assert_allclose(float(loss), 2 * np.log(batch), rtol=1e-3)


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
    np.testing.assert_allclose(float(representation_norm_penalty(phi, psi)), 1e-6 * expected / 10, rtol=1e-5)


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
    np.testing.assert_allclose(float(info['td_loss']), td, **TOL)
    np.testing.assert_allclose(float(info['positive']), positive, **TOL)
    np.testing.assert_allclose(float(info['m_diag_mean']), diag, **TOL)
    np.testing.assert_allclose(float(info['m_offdiag_mean']), offdiag, **TOL)
    np.testing.assert_allclose(float(loss), td + positive, **TOL)


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
    np.testing.assert_allclose(np.asarray(grads[0]), expected, **TOL)


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
    np.testing.assert_allclose(td_diag, td, **TOL)
    # The edit is large enough to show up if the diagonal were included ...
    m = np.float64(psi) @ np.float64(phi_next).T
    full = lambda tp: np.mean((m - gamma * np.float64(tp)) ** 2)  # noqa: E731
    assert abs(full(tpsi_diag) - full(tpsi)) > 1e-2
    # ... and an off-diagonal edit of the same size does change the squared term.
    tpsi_off = tpsi.copy()
    tpsi_off[0, 1] += 5.0
    td_off = float(td_sr_loss(psi, phi_next, tpsi_off, tphi, gamma)[1]['td_loss'])
    assert abs(td_off - td) > 1e-2
