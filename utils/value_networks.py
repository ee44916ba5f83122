"""The value networks of the offline goal-conditioned RL baselines (agents/gcivl.py, gciql.py, qrl.py, crl.py,
hiql.py), following OGBench's parameterisations, and QRL's interval quasimetric embedding distance."""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from utils.networks import MLP, ensemblize, length_normalize


class ValueEnsemble(nn.Module):
    """V(s, g) or Q(s, a, g): `num_members` independent MLPs on the concatenation of the inputs, each
    with a scalar output. Returns [num_members, ...batch]."""

    hidden_dims: Sequence[int]
    num_members: int = 2
    layer_norm: bool = True

    @nn.compact
    def __call__(self, *inputs):
        x = jnp.concatenate(inputs, axis=-1)
        members = ensemblize(MLP, self.num_members)((*self.hidden_dims, 1), layer_norm=self.layer_norm)
        return members(x)[..., 0]


class BilinearValue(nn.Module):
    """Contrastive critic f_e(x, g) = phi_e(x) . psi_e(g) / sqrt(d), x = s or concat(s, a), for
    `num_members` (phi, psi) pairs. Returns (f [E, B], phi [E, B, d], psi [E, B, d])."""

    hidden_dims: Sequence[int]
    latent_dim: int
    num_members: int = 2
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x, goals):
        mlp = lambda: ensemblize(MLP, self.num_members)((*self.hidden_dims, self.latent_dim), layer_norm=self.layer_norm)
        phi, psi = mlp()(x), mlp()(goals)
        return jnp.sum(phi * psi, axis=-1) / jnp.sqrt(self.latent_dim), phi, psi


class QuasimetricValue(nn.Module):
    """QRL's distance d(s, g) = IQE(z(s), z(g)) (`iqe_distance`, below), z an MLP to
    `latent_dim` coordinates grouped in components of `component_dim`; the mean/max mix is
    sigmoid(w), w learned (initially 0.5).

    `value(x)` encodes; `value(x, y)` is d(x, y) on observations, `value(zx, zy, encoded=True)` on latents.
    """

    hidden_dims: Sequence[int]
    latent_dim: int
    component_dim: int = 8
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x, y=None, encoded=False):
        mix = jax.nn.sigmoid(self.param('mix_logit', nn.initializers.zeros, ()))
        if not encoded:
            encoder = MLP((*self.hidden_dims, self.latent_dim), layer_norm=self.layer_norm)
            x = encoder(x)
            if y is None:
                return x
            y = encoder(y)
        return iqe_distance(x, y, self.component_dim, mix)


class PositiveScalar(nn.Module):
    """A learned scalar exp(w), initially `init_value` (QRL's Lagrange multiplier lambda)."""

    init_value: float = 1.0

    @nn.compact
    def __call__(self):
        # An explicit dtype: a weakly typed parameter would change type after the first update and
        # force a recompilation of the training step.
        return jnp.exp(self.param('log_value', lambda key: jnp.full((), jnp.log(self.init_value), dtype=jnp.float32)))


class GoalRepresentation(nn.Module):
    """HIQL's subgoal representation phi([s, g]): an MLP to `rep_dim`, rescaled to length sqrt(rep_dim)."""

    hidden_dims: Sequence[int]
    rep_dim: int
    layer_norm: bool = True

    @nn.compact
    def __call__(self, x):
        x = MLP((*self.hidden_dims, self.rep_dim), layer_norm=self.layer_norm)(x)
        return length_normalize(x)


def interval_union_length(starts, ends):
    """Total length of the union of intervals [starts_j, ends_j] along the last axis (empty when
    ends_j <= starts_j).

    Sweep in order of start: with intervals sorted by start and M_{j-1} = max(e_1, .., e_{j-1}), the
    part of [s_j, e_j] not already covered is (max(s_j, M_{j-1}), e_j], so
    |union| = sum_j max(0, e_j - max(s_j, M_{j-1})).
    """
    ends = jnp.maximum(ends, starts)
    order = jnp.argsort(starts, axis=-1)
    starts = jnp.take_along_axis(starts, order, axis=-1)
    ends = jnp.take_along_axis(ends, order, axis=-1)
    covered = jax.lax.cummax(ends, axis=ends.ndim - 1)
    covered_before = jnp.concatenate([jnp.full_like(covered[..., :1], -jnp.inf), covered[..., :-1]], axis=-1)
    return jnp.sum(jnp.maximum(ends - jnp.maximum(starts, covered_before), 0.0), axis=-1)


def iqe_distance(x, y, component_dim, mix):
    """Interval quasimetric embedding (Wang & Isola 2022): latents x, y [..., D] are split into
    D / k components of k = `component_dim` coordinates; component c is the length of the union of the
    intervals [x_ci, max(x_ci, y_ci)], i = 1..k (zero iff y_c <= x_c coordinatewise), and

        d(x, y) = mix * mean_c d_c + (1 - mix) * max_c d_c,   mix in [0, 1].

    d(x, x) = 0 and d satisfies the triangle inequality, but d(x, y) != d(y, x) in general.
    """
    if x.shape[-1] % component_dim:
        raise ValueError(f'IQE latent size {x.shape[-1]} is not a multiple of component_dim={component_dim}.')
    x, y = jnp.broadcast_arrays(x, y)
    shape = (*x.shape[:-1], x.shape[-1] // component_dim, component_dim)
    x, y = x.reshape(shape), y.reshape(shape)
    components = interval_union_length(x, jnp.maximum(x, y))
    return mix * jnp.mean(components, axis=-1) + (1.0 - mix) * jnp.max(components, axis=-1)
