"""The diagonal Gaussian of every actor head: its log-density and its (temperature-scaled) samples."""

import jax
import jax.numpy as jnp


def gaussian_log_prob(means, log_stds, actions):
    """log N(actions; means, diag(exp(log_stds))^2), summed over the action dimension."""
    z = (actions - means) * jnp.exp(-log_stds)
    return jnp.sum(-0.5 * z**2 - log_stds - 0.5 * jnp.log(2.0 * jnp.pi), axis=-1)


def sample_gaussian(rng, means, log_stds, temperature: float = 1.0):
    """Sample with the std scaled by `temperature`; temperature 0 gives the mean exactly."""
    noise = jax.random.normal(rng, means.shape)
    return means + temperature * jnp.exp(log_stds) * noise
