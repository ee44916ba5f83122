"""Finite-MDP check of BYOL-gamma (paper appendices "Finite MDP" and "Mixture Datasets").

Part 1 (theorem 1, "spectral decomposition of the successor representation").
  A tabular MDP with symmetric transitions P (a lazy random walk on a ring or a grid, eigenvalues in
  [0, 1]), uniform state distribution and an orthonormal initial encoder Phi (n x d). The BYOL-gamma
  objective in expectation is

      L(Phi, Psi) = E_{s ~ U(S), s+ ~ M~(s, .)} || Psi^T Phi^T e_s - sg(Phi)^T e_{s+} ||^2
                  = (1/n) || Phi Psi - M~ sg(Phi) ||_F^2 + const(sg(Phi)),

  with the normalised SR counted from s_{t+1}: M~ = (1 - gamma) P (I - gamma P)^{-1}, i.e. the law of
  s_{t+k} with k ~ Geom(1 - gamma) on {1, 2, ...}; gamma = 0 gives M~ = P (plain BYOL). As in the
  paper's analysis (Tang et al., 2023), the predictor is the least-squares optimum for the current
  Phi before every Phi step (or, with --psi_mode gd, is trained by gradient descent at a faster
  rate), and Phi follows Euler steps of the ODE  dPhi/dt = -(n/2) grad_Phi L = -(Phi Psi - M~ Phi) Psi^T.
  The run reports how close Phi Psi Phi^T is to the rank-d truncations of M~ and of P, and the
  principal angles between span(Phi) and the top-d eigenvectors.

  For symmetric P, P and M~ share eigenvectors, and lambda -> (1 - gamma) lambda / (1 - gamma lambda)
  is increasing, so their top-d eigenspaces coincide (top by eigenvalue magnitude, which is what the
  BYOL ODE maximises: it increases ||Phi^T M~ Phi||_F^2; with eigenvalues in [0, 1] magnitude and
  value orders agree). What separates the two trainings is the predictor: Phi Psi Phi^T carries the
  eigenvalues of the target, so gamma > 0 lands on the truncation of M~ and gamma = 0 on that of P.

Part 2 ("Mixture Datasets").
  Policies beta_j move on overlapping segments of a path (symmetric walks P_j with reflecting ends,
  identity off their segment), each generating trajectories from its stationary (uniform-on-segment)
  distribution, with data fractions pi_j. With W_j = diag(p(beta_j | s)):
    * BYOL-gamma regresses on s+ = s_{t+k} taken from the trajectory of s_t, so its target is
      M^ = sum_j W_j M~_j, an average of the policies' SRs (estimated here by Monte-Carlo sampling of
      geometric offsets inside the simulated trajectories);
    * TD-SR bootstraps across trajectories, so its fixed point is the SR of the mixture policy,
      M~_mix = M~(sum_j W_j P_j) (run here as batch tabular TD over all dataset transitions).

Run:  python scripts/finite_mdp.py            (default, < 1 min on 2 CPU cores)
      python scripts/finite_mdp.py --fast     (the setting used by tests/unit/test_finite_mdp.py)
"""

import argparse
import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

# --------------------------------------------------------------------------------------------------
# MDPs and linear algebra helpers.
# --------------------------------------------------------------------------------------------------

def ring_adjacency(n):
    a = np.zeros((n, n))
    idx = np.arange(n)
    a[idx, (idx + 1) % n] = 1.0
    a[(idx + 1) % n, idx] = 1.0
    return a


def path_adjacency(n):
    a = np.zeros((n, n))
    idx = np.arange(n - 1)
    a[idx, idx + 1] = 1.0
    a[idx + 1, idx] = 1.0
    return a


def grid_adjacency(rows, cols):
    n = rows * cols
    a = np.zeros((n, n))
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            if c + 1 < cols:
                a[i, i + 1] = a[i + 1, i] = 1.0
            if r + 1 < rows:
                a[i, i + cols] = a[i + cols, i] = 1.0
    return a


def lazy_walk(adjacency):
    """Symmetric, doubly-stochastic walk P = I - L / (2 deg_max) on an undirected graph.

    The Laplacian's eigenvalues lie in [0, 2 deg_max], so P's lie in [0, 1]; on a regular graph this is
    the lazy random walk (I + D^{-1} A) / 2."""
    deg = adjacency.sum(1)
    laplacian = np.diag(deg) - adjacency
    return np.eye(len(adjacency)) - laplacian / (2.0 * deg.max())


def grid_shape(n):
    rows = max(r for r in range(1, int(math.isqrt(n)) + 1) if n % r == 0)
    return rows, n // rows


def make_mdp(kind, n):
    if kind == 'ring':
        return lazy_walk(ring_adjacency(n))
    if kind == 'grid':
        return lazy_walk(grid_adjacency(*grid_shape(n)))
    raise ValueError(f'unknown mdp {kind!r}')


def normalized_sr(P, gamma):
    """M~ = (1 - gamma) sum_{t>=0} gamma^t P^{t+1} = (1 - gamma) P (I - gamma P)^{-1}.

    P and (I - gamma P)^{-1} commute, so this is also (1 - gamma) (I - gamma P)^{-1} P."""
    n = P.shape[0]
    return (1.0 - gamma) * np.linalg.solve(np.eye(n) - gamma * P, P)


def top_eigen(A, d):
    """Top-d eigenpairs of a symmetric matrix, ordered by eigenvalue magnitude."""
    vals, vecs = np.linalg.eigh(0.5 * (A + A.T))
    order = np.argsort(-np.abs(vals), kind='stable')
    return vals[order[:d]], vecs[:, order[:d]], vals[order]


def rank_d_truncation(A, d):
    vals, vecs, _ = top_eigen(A, d)
    return (vecs * vals) @ vecs.T


def relative_error(A, ref):
    return float(np.linalg.norm(A - ref) / np.linalg.norm(ref))


def subspace_metrics(Phi, U):
    """Principal angles between span(Phi) and span(U) (U orthonormal), and the projection distance
    ||Pi_Phi - Pi_U||_F = sqrt(2 sum sin^2 theta_i)."""
    Q, _ = np.linalg.qr(Phi)
    cos = np.clip(np.linalg.svd(Q.T @ U, compute_uv=False), 0.0, 1.0)
    angles = np.degrees(np.arccos(cos))
    proj_dist = float(np.linalg.norm(Q @ Q.T - U @ U.T))
    return float(angles.max()), proj_dist


# --------------------------------------------------------------------------------------------------
# BYOL-gamma with a linear encoder and predictor.
# --------------------------------------------------------------------------------------------------

def orthogonal_init(key, n, d):
    q, r = jnp.linalg.qr(jax.random.normal(key, (n, d)))
    return q * jnp.sign(jnp.diag(r))


def byol_gamma_loss(phi, psi, target_phi, M):
    """E_{s ~ U(S), s+ ~ M(s, .)} || Psi^T Phi^T e_s - target_Phi^T e_{s+} ||^2, summed exactly.

    target_phi is the stop-gradient copy of phi (the caller passes jax.lax.stop_gradient(phi))."""
    pred = phi @ psi                                              # row s: Psi^T Phi^T e_s
    sq = jnp.sum((pred[:, None, :] - target_phi[None, :, :]) ** 2, axis=-1)   # (s, s+)
    return jnp.mean(jnp.sum(M * sq, axis=1))


def least_squares_psi(features, targets):
    """argmin_Psi ||features Psi - targets||_F^2 (small ridge for numerical safety)."""
    d = features.shape[1]
    gram = features.T @ features + 1e-6 * jnp.eye(d, dtype=features.dtype)
    return jnp.linalg.solve(gram, features.T @ targets)


def closed_form_psi(phi, M):
    """Psi* = argmin_Psi L(Phi, Psi) = (Phi^T Phi)^{-1} Phi^T M Phi."""
    return least_squares_psi(phi, M @ phi)


@functools.partial(jax.jit, static_argnames=('steps', 'psi_mode', 'batch_size', 'lr_decay'))
def train_byol_gamma(key, M, phi0, *, steps, lr, psi_mode='closed', psi_lr_ratio=10.0, batch_size=0,
                     lr_decay=False):
    """Train (Phi, Psi) on the BYOL-gamma objective with target matrix M (= M~, or P when gamma = 0).

    batch_size = 0: exact expectation over s ~ U(S), s+ ~ M(s, .).
    batch_size > 0: each step draws s ~ U(S) and s+ ~ M(s, .) (the law of s_{t+k}, k ~ Geom(1-gamma)).
    psi_mode 'closed': Psi is the least-squares optimum before each Phi step (the ODE of the paper).
    psi_mode 'gd': Psi takes its own gradient step with learning rate psi_lr_ratio * lr first.
    Phi step: Phi <- Phi - lr * (n/2) * grad_Phi L, with the target stop-gradient and Psi held fixed
    (an Euler step of the ODE; Phi^T Phi is conserved to first order, the O(lr^2) drift is reported).
    lr_decay: lr decays linearly to 0 (useful with sampled batches).
    Returns the final (Phi, Psi), the loss per step and Phi after every step.
    """
    n, d = phi0.shape
    log_m = jnp.log(jnp.maximum(M, 1e-30))

    def batch_loss(phi, psi, target_phi, s, s_plus):
        pred = phi[s] @ psi
        return jnp.mean(jnp.sum((pred - target_phi[s_plus]) ** 2, axis=-1))

    def step(carry, inputs):
        phi, psi = carry
        step_key, t = inputs
        step_lr = lr * (1.0 - t / steps) if lr_decay else lr
        target = jax.lax.stop_gradient(phi)
        if batch_size:
            k_s, k_plus = jax.random.split(step_key)
            s = jax.random.randint(k_s, (batch_size,), 0, n)
            s_plus = jax.random.categorical(k_plus, log_m[s])
            loss_fn = lambda ph, ps: batch_loss(ph, ps, target, s, s_plus)
            if psi_mode == 'closed':
                psi = least_squares_psi(phi[s], target[s_plus])
        else:
            loss_fn = lambda ph, ps: byol_gamma_loss(ph, ps, target, M)
            if psi_mode == 'closed':
                psi = closed_form_psi(phi, M)
        if psi_mode == 'gd':
            psi = psi - psi_lr_ratio * step_lr * (n / 2.0) * jax.grad(loss_fn, argnums=1)(phi, psi)
        psi = jax.lax.stop_gradient(psi)
        loss, g_phi = jax.value_and_grad(loss_fn)(phi, psi)
        phi = phi - step_lr * (n / 2.0) * g_phi
        return (phi, psi), (loss, phi)

    psi0 = jnp.zeros((d, d), phi0.dtype) if psi_mode == 'gd' else closed_form_psi(phi0, M)
    inputs = (jax.random.split(key, steps), jnp.arange(steps, dtype=phi0.dtype))
    (phi, psi), (losses, phis) = jax.lax.scan(step, (phi0, psi0), inputs)
    if psi_mode == 'closed' and not batch_size:
        psi = closed_form_psi(phi, M)
    return phi, psi, losses, phis


def representation_errors(phi, psi, P, M_ref, M_train, d):
    """Errors of the learned decomposition Phi Psi Phi^T against the rank-d truncations of M~ (M_ref,
    the SR for the reported gamma) and of P, whatever the training target M_train was."""
    phi = np.asarray(phi, np.float64)
    psi = np.asarray(psi, np.float64)
    approx = phi @ psi @ phi.T
    _, U, _ = top_eigen(M_ref, d)
    angle, proj = subspace_metrics(phi, U)
    return {
        'err_M_d': relative_error(approx, rank_d_truncation(M_ref, d)),
        'err_P_d': relative_error(approx, rank_d_truncation(P, d)),
        # successor features of the training target: (1 - gamma) psi^pi = M~ Phi  vs  Phi Psi
        'err_sf': relative_error(phi @ psi, M_train @ phi),
        'angle': angle, 'proj': proj,
        'orth': float(np.linalg.norm(phi.T @ phi - np.eye(d))),
    }


def steps_to_angle(phis, U, threshold_deg=1.0, every=10):
    """First recorded step after which the largest principal angle to span(U) stays below threshold."""
    idx = np.arange(every - 1, len(phis), every)
    angles = np.array([subspace_metrics(np.asarray(phis[i], np.float64), U)[0] for i in idx])
    above = np.flatnonzero(angles >= threshold_deg)
    if len(above) == 0:
        return int(idx[0] + 1)
    return int(idx[above[-1] + 1] + 1) if above[-1] + 1 < len(idx) else -1


def run_spectral(cfg, train_gamma, batch_size=0):
    """Build the MDP, train BYOL-gamma on the SR for train_gamma (train_gamma = 0: BYOL on P), and
    evaluate at initialisation and at the end against M~ for cfg.gamma and against P.

    With batch_size > 0 (sampled pairs) the reported Psi is the least-squares predictor refit in
    expectation for the final Phi, which removes the last batch's noise from Psi."""
    P = make_mdp(cfg.mdp, cfg.n)
    M_ref = normalized_sr(P, cfg.gamma)
    M_train = normalized_sr(P, train_gamma)
    M_train_j = jnp.asarray(M_train, jnp.float32)
    key_init, key_train = jax.random.split(jax.random.PRNGKey(cfg.seed))
    phi0 = orthogonal_init(key_init, cfg.n, cfg.d)
    if batch_size:
        steps, lr, decay = cfg.sampled_steps, cfg.sampled_lr, True
    else:
        steps, lr, decay = cfg.steps, cfg.lr, False
    phi, psi, losses, phis = train_byol_gamma(
        key_train, M_train_j, phi0, steps=steps, lr=lr, psi_mode=cfg.psi_mode,
        psi_lr_ratio=cfg.psi_lr_ratio, batch_size=batch_size, lr_decay=decay)
    if batch_size:
        psi = closed_form_psi(phi, M_train_j)
    phi, psi, phis = jax.block_until_ready((phi, psi, phis))
    _, U, _ = top_eigen(M_ref, cfg.d)
    return {
        'final': representation_errors(phi, psi, P, M_ref, M_train, cfg.d),
        'init': representation_errors(phi0, closed_form_psi(phi0, M_train_j), P, M_ref, M_train, cfg.d),
        'steps_to_1deg': steps_to_angle(np.asarray(phis), U),
        'losses': np.asarray(losses), 'P': P, 'M_ref': M_ref, 'M_train': M_train,
        'phi': np.asarray(phi), 'psi': np.asarray(psi), 'steps': steps, 'lr': lr,
    }


# --------------------------------------------------------------------------------------------------
# Mixture datasets: BYOL-gamma (Monte-Carlo within trajectories) vs TD-SR (bootstrapping).
# --------------------------------------------------------------------------------------------------

def segment_walk(length, lazy=False):
    """Symmetric walk on a path segment with reflecting ends: I - L / deg_max (move to each neighbour
    w.p. 1/2, stay w.p. 1/2 at an end), or the lazy walk I - L / (2 deg_max)."""
    adjacency = path_adjacency(length)
    if lazy:
        return lazy_walk(adjacency)
    deg = adjacency.sum(1)
    return np.eye(length) - (np.diag(deg) - adjacency) / deg.max()


def segment_policies(num_policies, seg_len, overlap, lazy=False):
    """Policy j walks symmetrically on its own segment [j (seg_len - overlap), ... + seg_len) of a path
    and stays put elsewhere (so P_j is symmetric on all states); neighbouring segments share `overlap`
    states, so only the mixture policy can cross the whole path. Returns (P_j stacked, masks, n)."""
    stride = seg_len - overlap
    assert 0 < stride <= seg_len, 'need 0 <= overlap < seg_len'
    n = stride * (num_policies - 1) + seg_len
    Ps, masks = [], []
    for j in range(num_policies):
        start = j * stride
        P = np.eye(n)
        P[start:start + seg_len, start:start + seg_len] = segment_walk(seg_len, lazy)
        mask = np.zeros(n, bool)
        mask[start:start + seg_len] = True
        Ps.append(P)
        masks.append(mask)
    return np.stack(Ps), np.stack(masks), n


def mixture_weights(masks, policy_probs):
    """W_j(s) = p(beta_j | s) when policy j's states are uniform on its segment (its stationary law,
    which the simulated trajectories start from) and a fraction policy_probs[j] of the data is its."""
    density = policy_probs[:, None] * masks / masks.sum(1, keepdims=True)
    return density / density.sum(0, keepdims=True)


def mixture_targets(Ps, W, gamma):
    """Returns (M^ = sum_j W_j M~_j, M~_mix = M~(P_mix), P_mix = sum_j W_j P_j)."""
    P_mix = np.einsum('js,jst->st', W, Ps)
    M_avg = np.einsum('js,jst->st', W, np.stack([normalized_sr(P, gamma) for P in Ps]))
    return M_avg, normalized_sr(P_mix, gamma), P_mix


def simulate_trajectories(rng, Ps, masks, policy_probs, num_traj, length):
    """num_traj trajectories; trajectory i follows policy pol[i] ~ policy_probs from a uniform state of
    that policy's segment."""
    num_policies, n = masks.shape
    counts = np.round(np.asarray(policy_probs) * num_traj).astype(int)
    pol = np.repeat(np.arange(num_policies), counts)
    starts = np.array([rng.choice(np.flatnonzero(masks[j])) for j in pol])
    cum = np.cumsum(Ps, axis=-1)
    cum[..., -1] = 1.0
    trajs = np.empty((len(pol), length), np.int64)
    trajs[:, 0] = starts
    for t in range(1, length):
        u = rng.random(len(pol))
        trajs[:, t] = (cum[pol, trajs[:, t - 1]] <= u[:, None]).sum(1)
    return trajs, pol


def geometric_horizon(gamma, tol=1e-7):
    return 1 if gamma == 0 else int(math.ceil(math.log(tol) / math.log(gamma)))


def byol_gamma_mc_target(rng, trajs, gamma, num_samples, n):
    """Empirical BYOL-gamma regression target: rows of E[e_{s_{t+k}} | s_t = s], with (trajectory, t)
    uniform and k ~ Geom(1 - gamma) on {1, 2, ...} inside the same trajectory. t is kept at least a
    horizon H before the end (P(k > H) < 1e-7, those draws are redrawn) so no offset is truncated."""
    num_traj, length = trajs.shape
    horizon = geometric_horizon(gamma)
    assert length > horizon + 1, 'trajectories must be longer than the geometric horizon'
    i = rng.integers(num_traj, size=num_samples)
    t = rng.integers(length - horizon, size=num_samples)
    k = rng.geometric(1.0 - gamma, size=num_samples) if gamma > 0 else np.ones(num_samples, np.int64)
    while (bad := k > horizon).any():
        k[bad] = rng.geometric(1.0 - gamma, size=bad.sum())
    counts = np.zeros((n, n))
    np.add.at(counts, (trajs[i, t], trajs[i, t + k]), 1.0)
    return counts / np.maximum(counts.sum(1, keepdims=True), 1.0)


def td_sr_tabular(trajs, gamma, iters, lr=1.0):
    """Batch tabular TD for the normalised SR on every transition (s_t, s_{t+1}) of the dataset,
    pooled across trajectories and policies:
        M(s, .) <- M(s, .) + lr * mean_{(s, s') in data} [(1 - gamma) e_{s'} + gamma M(s', .) - M(s, .)].
    Returns the TD estimate and the empirical transition matrix P^ of the pooled data."""
    n = int(trajs.max()) + 1
    counts = np.zeros((n, n))
    np.add.at(counts, (trajs[:, :-1].ravel(), trajs[:, 1:].ravel()), 1.0)
    P_hat = counts / np.maximum(counts.sum(1, keepdims=True), 1.0)
    M = np.zeros((n, n))
    for _ in range(iters):
        M = M + lr * ((1.0 - gamma) * P_hat + gamma * P_hat @ M - M)
    return M, P_hat


def run_mixture(cfg, gamma):
    rng = np.random.default_rng(cfg.seed)
    probs = np.full(cfg.mix_policies, 1.0 / cfg.mix_policies)
    Ps, masks, n = segment_policies(cfg.mix_policies, cfg.mix_seg_len, cfg.mix_overlap, cfg.mix_lazy)
    W = mixture_weights(masks, probs)
    M_avg, M_mix, P_mix = mixture_targets(Ps, W, gamma)
    length = cfg.mix_len + geometric_horizon(gamma)
    trajs, _ = simulate_trajectories(rng, Ps, masks, probs, cfg.mix_traj, length)
    M_byol = byol_gamma_mc_target(rng, trajs, gamma, cfg.mix_samples, n)
    M_td, P_hat = td_sr_tabular(trajs, gamma, cfg.td_iters)
    M_td_exact = normalized_sr(P_hat, gamma)
    return {
        'byol_vs_avg': relative_error(M_byol, M_avg), 'byol_vs_mix': relative_error(M_byol, M_mix),
        'td_vs_avg': relative_error(M_td, M_avg), 'td_vs_mix': relative_error(M_td, M_mix),
        'avg_vs_mix': relative_error(M_avg, M_mix),
        'td_vs_fixed_point': relative_error(M_td, M_td_exact),
        'P_hat_vs_P_mix': relative_error(P_hat, P_mix),
        # Probability of crossing the path end to end: mass on the last segment-only states from state 0.
        'reach_byol': float(M_byol[0, ~masks[0]].sum()), 'reach_avg': float(M_avg[0, ~masks[0]].sum()),
        'reach_td': float(M_td[0, ~masks[0]].sum()), 'reach_mix': float(M_mix[0, ~masks[0]].sum()),
        'M_byol': M_byol, 'M_td': M_td, 'M_avg': M_avg, 'M_mix': M_mix,
        'num_transitions': trajs.shape[0] * (trajs.shape[1] - 1),
    }


# --------------------------------------------------------------------------------------------------
# Configuration and report.
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Config:
    mdp: str = 'ring'             # ring | grid (lazy walks, symmetric, eigenvalues in [0, 1])
    n: int = 30
    d: int = 5                    # ring: odd d keeps the +-k eigenvalue pairs together
    gamma: float = 0.9
    steps: int = 5000             # exact-expectation runs: Euler steps of the ODE
    lr: float = 0.05
    psi_mode: str = 'closed'      # closed (least squares each step) | gd (faster-timescale GD)
    psi_lr_ratio: float = 10.0
    sampled: bool = True          # also train gamma > 0 on sampled (s, s+) minibatches
    sampled_batch: int = 512
    sampled_steps: int = 10000
    sampled_lr: float = 0.02      # linearly decayed to 0
    seed: int = 0
    mix_policies: int = 4
    mix_seg_len: int = 6
    mix_overlap: int = 2
    mix_lazy: bool = False
    mix_traj: int = 2000
    mix_len: int = 200            # plus the geometric horizon, so no offset is truncated
    mix_samples: int = 2_000_000
    td_iters: int = 300


def fast_config(**overrides):
    cfg = Config(steps=3000, sampled=False, mix_traj=1000, mix_len=100, mix_samples=1_000_000, td_iters=300)
    return dataclasses.replace(cfg, **overrides)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--fast', action='store_true', help='the smaller setting used by the tests')
    defaults = Config()
    for field in dataclasses.fields(Config):
        value = getattr(defaults, field.name)
        if isinstance(value, bool):
            parser.add_argument(f'--{field.name}', type=lambda x: x.lower() in ('1', 'true', 'yes'), default=None,
                                help=f'(default {value})')
        else:
            parser.add_argument(f'--{field.name}', type=type(value), default=None, help=f'(default {value})')
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config) if getattr(args, f.name) is not None}
    return fast_config(**overrides) if args.fast else dataclasses.replace(Config(), **overrides)


def spectrum_lines(P, gamma, d):
    _, _, vals = top_eigen(P, len(P))
    m_vals = (1 - gamma) * vals / (1 - gamma * vals)
    fmt = lambda v: ', '.join(f'{x:.3f}' for x in v)
    gap_p, gap_m = vals[d - 1] - vals[d], m_vals[d - 1] - m_vals[d]
    lines = [f'  eig(P)  top {d + 1}: {fmt(vals[:d + 1])}   gap at d: {gap_p:.3f}',
             f'  eig(M~) top {d + 1}: {fmt(m_vals[:d + 1])}   gap at d: {gap_m:.3f}   (g={gamma})']
    if abs(gap_p) < 1e-6:
        lines.append('  WARNING: eigenvalue d and d+1 coincide, the top-d eigenspace is not unique; change d.')
    return '\n'.join(lines)


def spectral_table(cfg):
    g = cfg.gamma
    gamma_run = run_spectral(cfg, g)
    byol_run = run_spectral(cfg, 0.0)
    rows = [(f'BYOL-g  g={g}  at init', gamma_run, 'init'),
            (f'BYOL-g  g={g}  trained', gamma_run, 'final'),
            ('BYOL    g=0    at init', byol_run, 'init'),
            ('BYOL    g=0    trained', byol_run, 'final')]
    sampled_run = None
    if cfg.sampled:
        sampled_run = run_spectral(cfg, g, batch_size=cfg.sampled_batch)
        rows.append((f'BYOL-g  g={g}  sampled B={cfg.sampled_batch}', sampled_run, 'final'))
    header = (f'{"run":<32}{"steps":>7}{"to<1deg":>9}{"vs M~_d":>10}{"vs P_d":>9}{"SF err":>9}'
              f'{"max angle":>11}{"proj dist":>11}{"|PhiTPhi-I|":>13}')
    out = [header, '-' * len(header)]
    for name, res, which in rows:
        r = res[which]
        steps = 0 if which == 'init' else res['steps']
        to1 = '' if which == 'init' else str(res['steps_to_1deg'])
        out.append(f'{name:<32}{steps:>7}{to1:>9}{r["err_M_d"]:>10.4f}{r["err_P_d"]:>9.4f}{r["err_sf"]:>9.4f}'
                   f'{r["angle"]:>10.3f}d{r["proj"]:>11.4f}{r["orth"]:>13.4f}')
    return '\n'.join(out), {'gamma': gamma_run, 'byol': byol_run, 'sampled': sampled_run}


def mixture_table(mix):
    header = f'{"estimate":<34}{"vs avg_j W_j M~_j":>19}{"vs M~(P_mix)":>14}{"mass 0->beyond seg 1":>22}'
    out = [header, '-' * len(header)]
    out.append(f'{"BYOL-gamma MC target":<34}{mix["byol_vs_avg"]:>19.4f}{mix["byol_vs_mix"]:>14.4f}{mix["reach_byol"]:>22.4f}')
    out.append(f'{"TD-SR (batch tabular TD)":<34}{mix["td_vs_avg"]:>19.4f}{mix["td_vs_mix"]:>14.4f}{mix["reach_td"]:>22.4f}')
    out.append(f'{"exact avg of SRs sum_j W_j M~_j":<34}{0.0:>19.4f}{mix["avg_vs_mix"]:>14.4f}{mix["reach_avg"]:>22.4f}')
    out.append(f'{"exact SR of mixture M~(P_mix)":<34}{relative_error(mix["M_mix"], mix["M_avg"]):>19.4f}'
               f'{0.0:>14.4f}{mix["reach_mix"]:>22.4f}')
    return '\n'.join(out)


def main(argv=None):
    cfg = parse_args(argv)
    start = time.monotonic()
    print(f'config: {cfg}')
    P = make_mdp(cfg.mdp, cfg.n)
    assert np.allclose(P, P.T) and np.allclose(P.sum(1), 1.0)
    print(f'\n[1] BYOL-gamma in a finite MDP: {cfg.mdp} lazy walk (symmetric P), n={cfg.n}, d={cfg.d}, '
          f'uniform p0, orthogonal Phi init, psi={cfg.psi_mode}')
    print(spectrum_lines(P, cfg.gamma, cfg.d))
    table, _ = spectral_table(cfg)
    print(table)
    M_d, P_d = rank_d_truncation(normalized_sr(P, cfg.gamma), cfg.d), rank_d_truncation(P, cfg.d)
    print(f'  vs X_d = ||Phi Psi Phi^T - X_d||_F / ||X_d||_F with X_d the rank-d eigen-truncation of X; M~ = M~ for '
          f'g={cfg.gamma} in every row\n  (reference: ||P_d - M~_d|| / ||M~_d|| = {relative_error(P_d, M_d):.4f}, '
          f'||M~_d - P_d|| / ||P_d|| = {relative_error(M_d, P_d):.4f}).'
          f'\n  SF err = ||Phi Psi - M Phi|| / ||M Phi|| for the run\'s own target M (successor features). '
          f'max angle / proj dist: largest principal\n  angle and ||Pi_Phi - Pi_U||_F between span(Phi) and the '
          f'top-d eigenvectors U of M~ (= those of P). to<1deg: first step after\n  which the angle stays < 1 degree '
          f'(checked every 10 steps). |PhiTPhi-I|: Euler-step drift from the conserved Phi^T Phi = I.')

    mix = run_mixture(cfg, cfg.gamma)
    n_mix = len(mix['M_avg'])
    print(f'\n[2] mixture data: {cfg.mix_policies} policies, each a symmetric walk on its own segment of '
          f'{cfg.mix_seg_len} states of a path of {n_mix}\n  (neighbouring segments overlap by {cfg.mix_overlap}), '
          f'equal data shares, g={cfg.gamma}: {mix["num_transitions"]} transitions, '
          f'{cfg.mix_samples} BYOL-gamma (s_t, s_t+k) pairs')
    print(mixture_table(mix))
    print(f'  errors ||X - Y||_F / ||Y||_F. TD: {cfg.td_iters} synchronous iterations over all dataset transitions; '
          f'distance to its analytic\n  fixed point M~(P^) = {mix["td_vs_fixed_point"]:.1e}, ||P^ - P_mix|| / ||P_mix|| = '
          f'{mix["P_hat_vs_P_mix"]:.4f}. mass 0->beyond seg 1: SR mass from state 0 on states\n  outside policy 1\'s '
          f'segment (reachable only by stitching policies).')
    print(f'\ntotal time {time.monotonic() - start:.1f}s')


if __name__ == '__main__':
    main()
