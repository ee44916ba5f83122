"""Pure losses of the offline goal-conditioned RL baselines (GCIVL, GCIQL, QRL, CRL, HIQL).

Kept in one file, those one agent uses included, unlike the representation methods' losses (which live in their
agent files): they port one reference, OGBench's agents, and tests/unit/test_rl_losses.py checks them together
against its equations.

Each function's docstring gives the equation it implements, in the notation of the OGBench paper
(Park et al. 2024, "OGBench: Benchmarking Offline Goal-Conditioned RL", arXiv:2410.20092, appendix on
the reference agents). Conventions: values and Q-values are arrays whose leading axes are batch (or
ensemble) axes; rewards r and masks m come from the sampler (`utils.training.sample_batch`): m = 0
exactly when the value goal is the current state, and r = -m (`gc_negative`) or 1 - m.
"""

import jax
import jax.numpy as jnp

from utils.networks import gaussian_log_prob

# exp(alpha * A) is clipped at this value in every AWR loss (as in OGBench), so that one transition
# with a large advantage cannot dominate a batch.
AWR_MAX_WEIGHT = 100.0


def expectile_loss(adv, diff, expectile):
    """Asymmetric squared loss, elementwise: |tau - 1(adv < 0)| * diff^2.

    With adv = diff this is IQL's expectile regression L_2^tau(u) = |tau - 1(u < 0)| u^2. GCIVL and
    HIQL pass a different `adv` (computed with the target network) to choose the weight.
    """
    weight = jnp.where(adv >= 0, expectile, 1.0 - expectile)
    return weight * jnp.square(diff)


def implicit_v_loss(values, target_values, next_target_values, rewards, masks, discount, expectile):
    """GCIVL / HIQL value loss (implicit V-learning with a double-V ensemble and a target network):

        q_e  = r + gamma * m * Vbar_e(s', g)                      (one target per member e)
        A    = r + gamma * m * min_e Vbar_e(s', g) - mean_e Vbar_e(s, g)
        L_V  = sum_e E[ |tau - 1(A < 0)| (q_e - V_e(s, g))^2 ]

    `values` [E, B] are the online V_e(s, g); `target_values`, `next_target_values` [E, B] the target
    network's Vbar_e(s, g), Vbar_e(s', g) (no gradient flows into them). Returns (loss, advantages A).
    """
    target_values = jax.lax.stop_gradient(target_values)
    next_target_values = jax.lax.stop_gradient(next_target_values)
    bootstrap = discount * masks
    adv = rewards + bootstrap * jnp.min(next_target_values, axis=0) - jnp.mean(target_values, axis=0)
    q = rewards + bootstrap * next_target_values
    per_member = jnp.mean(expectile_loss(adv, q - values, expectile), axis=-1)
    return jnp.sum(per_member), adv


def iql_value_loss(v, target_q, expectile):
    """GCIQL value loss: L_V = E[ L_2^tau(min_e Qbar_e(s, a, g) - V(s, g)) ].

    `v` [B] is V(s, g); `target_q` [E, B] the target critic Qbar_e(s, a, g) (no gradient)."""
    q = jax.lax.stop_gradient(jnp.min(target_q, axis=0))
    return jnp.mean(expectile_loss(q - v, q - v, expectile))


def iql_critic_loss(q, next_v, rewards, masks, discount):
    """GCIQL critic loss: L_Q = sum_e E[(r + gamma * m * V(s', g) - Q_e(s, a, g))^2].

    `q` [E, B] is the online critic, `next_v` [B] is V(s', g) (no gradient)."""
    target = rewards + discount * masks * jax.lax.stop_gradient(next_v)
    return jnp.sum(jnp.mean(jnp.square(q - target), axis=-1))


def awr_weights(advantages, temperature):
    """AWR weights w = min(exp(alpha * A), 100), stop-gradient (they weigh the log-likelihood only)."""
    return jax.lax.stop_gradient(jnp.minimum(jnp.exp(temperature * advantages), AWR_MAX_WEIGHT))


def awr_loss(log_probs, weights):
    """Advantage-weighted regression: L_pi = -E[w * log pi(a | s, g)]."""
    return -jnp.mean(jax.lax.stop_gradient(weights) * log_probs)


def ddpg_bc_loss(q, log_probs, bc_coef):
    """DDPG+BC actor loss with a scale-free Q term:

        L_pi = -E[Q(s, pi(s, g), g)] / sg(E|Q| + 1e-6) - alpha * E[log pi(a | s, g)]

    `q` is the critic at the actor's action (gradients reach the actor through it); `log_probs` the
    dataset actions' log-likelihoods. Returns (loss, q term, bc term)."""
    q_term = -jnp.mean(q) / jax.lax.stop_gradient(jnp.mean(jnp.abs(q)) + 1e-6)
    bc_term = -bc_coef * jnp.mean(log_probs)
    return q_term + bc_term, q_term, bc_term


def awr_actor_loss(means, log_stds, targets, advantages, temperature):
    """AWR on a Gaussian actor N(means, exp(log_stds)^2) for regression `targets` (actions, or HIQL's
    subgoal representations): L_pi = -E[min(exp(alpha * A), 100) * log pi(target | s, g)], with the
    advantages A computed by the caller without gradient. Returns (loss, metrics)."""
    log_probs = gaussian_log_prob(means, log_stds, targets)
    weights = awr_weights(advantages, temperature)
    return awr_loss(log_probs, weights), {
        'adv': jnp.mean(advantages),
        'weight_mean': jnp.mean(weights),
        'bc_loss': -jnp.mean(log_probs),
        'mse': jnp.mean(jnp.square(means - targets)),
    }


def ddpg_bc_actor_loss(means, log_stds, actions, q_fn, bc_coef):
    """DDPG+BC (`ddpg_bc_loss`) on a Gaussian actor whose action is its mean, clip(mu(s, g), -1, 1):
    `q_fn(policy_actions) -> Q [B]` is the critic at the batch's (s, g) and that action. The caller
    gives it frozen critic parameters, so that only the actor learns; `actions` are the dataset's, for
    the BC term. Returns (loss, metrics)."""
    q = q_fn(jnp.clip(means, -1.0, 1.0))
    log_probs = gaussian_log_prob(means, log_stds, actions)
    loss, q_term, bc_term = ddpg_bc_loss(q, log_probs, bc_coef)
    return loss, {
        'q_loss': q_term,
        'bc_term': bc_term,
        'q_mean': jnp.mean(q),
        'bc_loss': -jnp.mean(log_probs),
        'mse': jnp.mean(jnp.square(means - actions)),
    }


# ---------------------------------------------------------------------------------------------
# QRL: a quasimetric d(s, g) (IQE) trained by dual optimisation (Wang et al. 2023, as in OGBench).
# ---------------------------------------------------------------------------------------------


# QRL's loss shaping of the "push apart" term (OGBench's constants): 100 * softplus(5 - d / 100) keeps
# the gradient on d(s, g) for random pairs alive up to distances of several hundred steps.
QRL_NEG_SCALE, QRL_NEG_OFFSET = 100.0, 5.0


def qrl_value_loss(d_random, d_next, lam, eps):
    """QRL's constrained objective in Lagrangian form: maximise the distance to random goals subject to
    one-step distances of at most 1 (on average, within eps):

        L_neg = E[100 * softplus(5 - d(s, g_rand) / 100)]
        L_pos = E[relu(d(s, s') - 1)^2]
        L_d   = L_neg + sg(lambda) * L_pos               (trains d)
        L_lam = lambda * (eps - sg(L_pos))               (trains lambda >= 0: grows while L_pos > eps)

    Returns (L_d + L_lam, info)."""
    neg = jnp.mean(QRL_NEG_SCALE * jax.nn.softplus(QRL_NEG_OFFSET - d_random / QRL_NEG_SCALE))
    pos = jnp.mean(jnp.square(jax.nn.relu(d_next - 1.0)))
    distance_loss = neg + jax.lax.stop_gradient(lam) * pos
    lam_loss = lam * (eps - jax.lax.stop_gradient(pos))
    return distance_loss + lam_loss, {'d_neg_loss': neg, 'd_pos_loss': pos, 'lam_loss': lam_loss}


def latent_dynamics_loss(d_forward, d_backward):
    """QRL's latent dynamics model is fit by the quasimetric in both directions:
    L_dyn = E[(d(z', zhat') + d(zhat', z')) / 2], zhat' = z + f(z, a)."""
    return jnp.mean(d_forward + d_backward) / 2.0


# ---------------------------------------------------------------------------------------------
# CRL: contrastive critic f(s, a, g) = phi(s, a) . psi(g) / sqrt(d) (Eysenbach et al. 2022).
# ---------------------------------------------------------------------------------------------


def contrastive_logits(phi, psi):
    """logits[e, i, j] = phi_e(s_i, a_i) . psi_e(g_j) / sqrt(d) for every pair in the batch."""
    return jnp.einsum('eik,ejk->eij', phi, psi) / jnp.sqrt(phi.shape[-1])


def binary_nce_loss(logits):
    """CRL's binary NCE: each (s_i, a_i) is classified against every goal g_j of the batch, positive
    iff i == j:  L = mean_{e,i,j} BCE(sigmoid(logits[e, i, j]), 1(i == j)),  with
    BCE(sigmoid(x), y) = softplus(x) - y * x."""
    logits = jnp.asarray(logits)
    labels = jnp.eye(logits.shape[-1], dtype=logits.dtype)
    return jnp.mean(jax.nn.softplus(logits) - labels * logits)
