"""How agents turn (state, goal) into the actor's input, shared so every agent encodes alike."""

import jax.numpy as jnp


def resolve_latent_dim(latent_dim: int, obs_dim: int) -> int:
    """`latent_dim = 0` means the paper's default, the observation size |s|. Below 8 dimensions
    (pointmaze's xy) that latent is degenerate, so 64 is used instead (SPEC section 4)."""
    if latent_dim > 0:
        return latent_dim
    return obs_dim if obs_dim >= 8 else 64


def phi_policy_inputs(network, observations, goals, params=None, encoder_name='encoder'):
    """concat(z(s), z(g)) where z is the ensemble-mean representation (phi_1 + phi_2) / 2."""
    z_s = network(observations, name=encoder_name, params=params).mean(axis=0)
    z_g = network(goals, name=encoder_name, params=params).mean(axis=0)
    return jnp.concatenate([z_s, z_g], axis=-1)


def psi_inputs(observations, actions, action_conditioned: bool):
    """The input of a state encoder psi: s, or concat(s, a) for the action-conditioned (^a) variants."""
    return jnp.concatenate([observations, actions], axis=-1) if action_conditioned else observations
