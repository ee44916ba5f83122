"""The interval quasimetric embedding (IQE) behind QRL's value (`utils.networks.QuasimetricValue`):
a distance that is zero on the diagonal and obeys the triangle inequality but need not be symmetric."""

import jax
import jax.numpy as jnp


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
