"""Tests of scripts/finite_mdp.py: BYOL-gamma in a finite MDP (paper appendices "Finite MDP" and
"Mixture Datasets").

Bounds were picked from measurements of the --fast setting (seed 0 is what runs here; seeds 0-5
were measured to check the margins), quoted next to each bound.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import finite_mdp as F
from tests.helpers import float32_tolerance


@pytest.fixture(scope='module')
def cfg():
    return F.fast_config()


@pytest.fixture(scope='module')
def gamma_run(cfg):
    return F.run_spectral(cfg, cfg.gamma)


@pytest.fixture(scope='module')
def byol_run(cfg):
    return F.run_spectral(cfg, 0.0)


@pytest.fixture(scope='module')
def mixture(cfg):
    return F.run_mixture(cfg, cfg.gamma)


# ----------------------------------------------------------------------------------------------
# Building blocks. The matrices are float64 NumPy over at most 30 states: a row sum, a product or a series of them
# rounds within 300 u = 3e-14 of its magnitude (u = 2^-53), far below NumPy's default rtol 1e-7 and the atol 1e-12 of
# the near-zero entries, and a wrong matrix (an unnormalised row, a missing power) moves them by far more.
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('kind,n', [('ring', 30), ('grid', 30), ('ring', 7)])
def test_mdp_is_symmetric_stochastic_with_eigenvalues_in_unit_interval(kind, n):
    P = F.make_mdp(kind, n)
    np.testing.assert_allclose(P, P.T)
    np.testing.assert_allclose(P.sum(1), 1.0)
    assert (P >= 0).all()
    vals = np.linalg.eigvalsh(P)
    assert vals.min() > -1e-10 and abs(vals.max() - 1.0) < 1e-10


def test_normalized_sr_is_geometric_mixture_of_powers():
    P = F.make_mdp('ring', 12)
    gamma = 0.8
    series = sum((1 - gamma) * gamma ** t * np.linalg.matrix_power(P, t + 1) for t in range(300))
    M = F.normalized_sr(P, gamma)
    np.testing.assert_allclose(M, series, atol=1e-12)
    np.testing.assert_allclose(M, M.T, atol=1e-12)
    np.testing.assert_allclose(M.sum(1), 1.0)
    np.testing.assert_allclose(F.normalized_sr(P, 0.0), P)
    # Shared eigenvectors, eigenvalues mapped by (1 - g) l / (1 - g l): the top-d spaces coincide.
    vals_p, U_p, _ = F.top_eigen(P, 5)
    vals_m, U_m, _ = F.top_eigen(M, 5)
    np.testing.assert_allclose(vals_m, (1 - gamma) * vals_p / (1 - gamma * vals_p), atol=1e-12)
    assert F.subspace_metrics(U_p, U_m)[1] < 1e-8


def test_loss_gradients_match_matrix_form_and_closed_form_psi_is_optimal():
    n, d = 10, 3
    P = F.make_mdp('ring', n)
    M = jnp.asarray(F.normalized_sr(P, 0.9), jnp.float32)
    phi = F.orthogonal_init(jax.random.PRNGKey(0), n, d) + 0.1 * jax.random.normal(jax.random.PRNGKey(1), (n, d))
    psi = jax.random.normal(jax.random.PRNGKey(2), (d, d))
    target = jax.lax.stop_gradient(phi)
    g_exp = jax.grad(F.byol_gamma_loss, argnums=(0, 1))(phi, psi, target, M)
    # (1/n) ||Phi Psi - M sg(Phi)||_F^2: the same gradients when the rows of M sum to one (they differ by a term in
    # sg(Phi) only).
    g_mat = jax.grad(lambda phi, psi: jnp.sum((phi @ psi - M @ target) ** 2) / n, argnums=(0, 1))(phi, psi)
    # Two float32 computations of one gradient, each under 50 rounded operations (10-term and 30-term sums, the
    # square's derivative, a 3-term product) on values below 10 in magnitude (|psi| < 4, |phi|, |M| <= 1).
    tolerance = float32_tolerance(100, 10)
    for a, b in zip(g_exp, g_mat):
        np.testing.assert_allclose(a, b, **tolerance)
    # Phi gradient is (2/n) (Phi Psi - M Phi) Psi^T: the ODE of the paper up to the factor n/2.
    np.testing.assert_allclose(g_exp[0], (2 / n) * (phi @ psi - M @ phi) @ psi.T, **tolerance)
    psi_star = F.closed_form_psi(phi, M)
    g_psi = jax.grad(F.byol_gamma_loss, argnums=1)(phi, psi_star, target, M)
    # Zero at the optimum, up to the same rounding (Phi^T Phi, solved for psi*, is within 0.1 of the identity).
    assert float(jnp.abs(g_psi).max()) < tolerance['atol']


def test_training_monotonically_decreases_the_surrogate(cfg):
    """Khetarpal et al.: along the ODE, ||M~ - Phi Psi* Phi^T||_F is non-increasing (measured: largest
    increase between checkpoints 3e-8, i.e. float noise); it ends at the rank-d optimum."""
    P = F.make_mdp(cfg.mdp, cfg.n)
    M = F.normalized_sr(P, cfg.gamma)
    phi0 = F.orthogonal_init(jax.random.PRNGKey(0), cfg.n, cfg.d)
    _, _, _, phis = F.train_byol_gamma(jax.random.PRNGKey(1), jnp.asarray(M, jnp.float32), phi0,
                                       steps=cfg.steps, lr=cfg.lr)
    phis = np.asarray(phis, np.float64)[::10]
    surrogate = np.array([np.linalg.norm(M - p @ np.linalg.solve(p.T @ p, p.T @ M @ p) @ p.T) for p in phis])
    assert np.diff(surrogate).max() < 1e-5
    optimum = np.linalg.norm(M - F.rank_d_truncation(M, cfg.d))
    assert surrogate[0] > 2 * optimum                     # measured 2.07 vs 0.948
    assert surrogate[-1] < optimum * 1.01                 # measured 0.9483 vs 0.9481


# ----------------------------------------------------------------------------------------------
# Theorem 1: BYOL-gamma learns the rank-d spectral decomposition of M~, BYOL that of P.
# ----------------------------------------------------------------------------------------------

def test_byol_gamma_lands_on_rank_d_truncation_of_sr(gamma_run):
    init, final = gamma_run['init'], gamma_run['final']
    assert init['err_M_d'] > 0.9                          # measured 1.005 (random orthogonal Phi)
    # Measured 0.0094 (seeds 0-5: 0.0084-0.0094); the residual is the O(lr) Euler drift of Phi^T Phi.
    assert final['err_M_d'] < 0.03
    # Distance to P's truncation stays at ||P_d - M~_d|| / ||P_d|| = 0.18 (measured 0.178).
    assert final['err_P_d'] > 0.15
    assert final['err_P_d'] > 5 * final['err_M_d']
    assert final['angle'] < 1.0                           # measured 0.000 degrees
    assert final['err_sf'] < 0.01                         # successor features Phi Psi = M~ Phi; measured 0.0000
    assert final['orth'] < 0.05                           # measured 0.0196


def test_byol_lands_on_rank_d_truncation_of_p(byol_run):
    final = byol_run['final']
    assert final['err_P_d'] < 0.03                        # measured 0.0095 (seeds 0-5: 0.0091-0.0119)
    assert final['err_M_d'] > 0.15                        # measured 0.219
    assert final['err_M_d'] > 5 * final['err_P_d']
    assert final['angle'] < 2.0                           # measured 0.133 degrees (seeds 0-5: <= 0.755)


def test_both_learn_the_same_top_eigenspace(gamma_run, byol_run):
    """For symmetric P the top-d eigenvectors of P and M~ coincide, so both spans agree."""
    assert F.subspace_metrics(gamma_run['phi'], np.linalg.qr(byol_run['phi'])[0])[0] < 2.0


# ----------------------------------------------------------------------------------------------
# Mixture datasets: BYOL-gamma targets the average of SRs, TD-SR the SR of the mixture policy.
# ----------------------------------------------------------------------------------------------

def test_mixture_matrices_are_stochastic_and_differ(cfg):
    Ps, masks, n = F.segment_policies(cfg.mix_policies, cfg.mix_seg_len, cfg.mix_overlap, cfg.mix_lazy)
    for P in Ps:
        np.testing.assert_allclose(P, P.T)
        np.testing.assert_allclose(P.sum(1), 1.0)
    W = F.mixture_weights(masks, np.full(cfg.mix_policies, 1 / cfg.mix_policies))
    np.testing.assert_allclose(W.sum(0), 1.0)
    M_avg, M_mix, P_mix = F.mixture_targets(Ps, W, cfg.gamma)
    np.testing.assert_allclose(M_avg.sum(1), 1.0)
    np.testing.assert_allclose(M_mix.sum(1), 1.0)
    np.testing.assert_allclose(M_mix, (1 - cfg.gamma) * P_mix + cfg.gamma * P_mix @ M_mix, atol=1e-12)
    assert F.relative_error(M_avg, M_mix) > 0.15          # measured 0.210


def test_byol_gamma_target_is_average_of_policy_srs(mixture):
    assert mixture['byol_vs_avg'] < 0.05                  # measured 0.019 (seeds 0-5: 0.019-0.026)
    assert mixture['byol_vs_mix'] > 0.15                  # measured 0.212
    assert mixture['byol_vs_mix'] > 5 * mixture['byol_vs_avg']
    # No single trajectory leaves its policy's segment, so BYOL-gamma never links state 0 to the far
    # segments; the mixture SR does (measured 0.0545).
    assert mixture['reach_byol'] == 0.0 and mixture['reach_avg'] == 0.0


def test_td_sr_converges_to_sr_of_mixture_policy(mixture):
    assert mixture['td_vs_fixed_point'] < 1e-8            # measured 1e-14 (300 iterations, rate gamma)
    assert mixture['td_vs_mix'] < 0.04                    # measured 0.0088 (seeds 0-5: 0.0088-0.016)
    assert mixture['td_vs_avg'] > 0.15                    # measured 0.193
    assert mixture['td_vs_avg'] > 5 * mixture['td_vs_mix']
    assert mixture['reach_td'] > 0.03                     # measured 0.055 (exact 0.0545)


def test_script_runs_in_fast_mode(capsys):
    F.main(['--fast'])
    out = capsys.readouterr().out
    for needle in ('BYOL-g  g=0.9  trained', 'BYOL    g=0    trained', 'BYOL-gamma MC target', 'TD-SR'):
        assert needle in out
