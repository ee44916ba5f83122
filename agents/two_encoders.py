"""The networks of the agents with two encoder ensembles of states, phi and psi, and an actor on phi (TRA, TD-SR):
phi reads states (and goals), psi, phi's architecture, reads s_t, or (s_t, a_t) in the action-conditioned (^a)
variants."""

import jax.numpy as jnp

from agents.base import bc_actor, state_encoder


def psi_inputs(observations, actions, action_conditioned: bool):
    """The arguments of psi (an `EnsembleEncoder`): (s,), or (s, a) for the action-conditioned variants, where the
    encoder concatenates a to s (or to its image features)."""
    return (observations, actions) if action_conditioned else (observations,)


def two_encoder_modules(config, ex_observations, ex_actions):
    """(modules, example_args): phi ('encoder'), psi ('psi_encoder', a copy of phi's architecture that also reads
    a_t when config.action_conditioned) and the actor ('actor') on concat(z_s, z_g), 2 * d inputs."""
    encoder, d = state_encoder(config, ex_observations)
    modules = {'encoder': encoder, 'psi_encoder': encoder.clone(), 'actor': bc_actor(config, ex_actions.shape[-1])}
    example_args = {
        'encoder': (ex_observations,),
        'psi_encoder': psi_inputs(ex_observations, ex_actions, config.action_conditioned),
        'actor': (jnp.zeros((1, 2 * d)),),
    }
    return modules, example_args
