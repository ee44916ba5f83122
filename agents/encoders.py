"""How agents build their state encoders phi / psi and turn (state, goal) into the actor's input, shared so
every agent encodes alike; the rules on the fields that choose them (ENCODER_RULES), and the one check
that the chosen encoder fits the observations."""

import jax.numpy as jnp
import numpy as np

from utils.config_checks import at_least, non_negative, one_of, probability
from utils.errors import ConfigError
from utils.networks import VISUAL_ENCODERS, EnsembleEncoder, GaussianActor

# Rules on the fields of the agents that read observations through an encoder (BCAgent's family, FB and
# the hierarchical agents include them): the image encoder (or 'none' for state vectors), phi's size and
# ensemble, and the pixel pipeline's frame stacking and crop augmentation (read by the sampler).
ENCODER_RULES = {
    'encoder': one_of('none', *VISUAL_ENCODERS),
    'latent_dim': non_negative(0),
    'num_ensemble': at_least(1, 2),
    'frame_stack': at_least(1, 1),
    'p_aug': probability(0.5),
}


def resolve_latent_dim(latent_dim: int, obs_dim: int) -> int:
    """`latent_dim = 0` means the paper's default, the observation size |s|. Below 8 dimensions
    (pointmaze's xy) that latent is degenerate, so 64 is used instead (docs/method.md, section 4)."""
    if latent_dim > 0:
        return latent_dim
    return obs_dim if obs_dim >= 8 else 64


def phi_policy_inputs(network, observations, goals, params, encoder_name='encoder'):
    """concat(z(s), z(g)) where z is the ensemble-mean representation (phi_1 + phi_2) / 2."""
    encoded = encode_together(network, params, encoder_name, {'s': observations, 'g': goals})
    return mean_concat(encoded['s'], encoded['g'])


def mean_concat(z_s, z_g):
    """concat(mean_m z_s, mean_m z_g) of ensemble outputs [M, B, d]: the actor's input."""
    return jnp.concatenate([z_s.mean(axis=0), z_g.mean(axis=0)], axis=-1)


def encode_together(network, params, name, arrays):
    """{key: network(array, name=name)} for a dict of arrays, computed as ONE call on their
    concatenation along the batch axis. Row for row the same function (every layer acts on rows
    independently); on an accelerator, one set of kernels instead of one per array. Outputs are
    [M, B_k, d] ensemble outputs, split back along axis 1."""
    keys = list(arrays)
    encoded = network(jnp.concatenate([arrays[k] for k in keys], axis=0), name=name, params=params)
    ends = np.cumsum([arrays[k].shape[0] for k in keys])
    return dict(zip(keys, jnp.split(encoded, ends[:-1], axis=1)))


def psi_inputs(observations, actions, action_conditioned: bool):
    """The arguments of a state encoder psi (an `EnsembleEncoder`): (s,), or (s, a) for the
    action-conditioned (^a) variants, where the encoder concatenates a to s (or to its image features)."""
    return (observations, actions) if action_conditioned else (observations,)


# The paper's encoder output size for pixel observations (its hyperparameter table: 64 for visual).
VISUAL_LATENT_DIM = 64


def is_image_batch(observations) -> bool:
    """Observations [B, H, W, C] are images; [B, D] are state vectors."""
    return observations.ndim >= 4


def check_encoder_fits_observations(config, ex_observations):
    """ConfigError unless the config's observation encoder fits the observations: an image encoder
    (`encoder` in VISUAL_ENCODERS) for images [B, H, W, C], 'none' for state vectors [B, D]; a config
    without an `encoder` field reads state vectors. Which names exist is a config rule (ENCODER_RULES);
    this is the one check that needs the data, run by `agents.base.Agent.create` for every agent."""
    name = config['encoder'] if 'encoder' in config else None
    images = is_image_batch(ex_observations)
    shape = tuple(ex_observations.shape[1:])
    if images and name is None:
        raise ConfigError(
            f'The observations are images (shape {shape}) but agent {config["agent_name"]!r} reads state vectors only '
            f'(it has no --agent.encoder): use a state-based dataset, or an agent with an image encoder (e.g. '
            f'--agent=configs/presets.py:byol_gamma_a_visual).'
        )
    if images and name not in VISUAL_ENCODERS:
        raise ConfigError(
            f'The observations are images (shape {shape}) but encoder={name!r} expects '
            f'state vectors: pass --agent.encoder=impala_small (or a visual preset, e.g. '
            f'--agent=configs/presets.py:byol_gamma_a_visual).'
        )
    if not images and name in VISUAL_ENCODERS:
        raise ConfigError(
            f'encoder={name!r} is an image encoder but the observations are state vectors (shape '
            f'{shape}): use a visual-* dataset, or leave --agent.encoder at its default.'
        )


def latent_dim_for(config, ex_observations) -> int:
    """phi's output size: config.latent_dim, or when 0 the paper's default (|s| for states, 64 for images)."""
    if is_image_batch(ex_observations):
        return config.latent_dim if config.latent_dim > 0 else VISUAL_LATENT_DIM
    return resolve_latent_dim(config.latent_dim, ex_observations.shape[-1])


def state_encoder(config, ex_observations):
    """(phi, latent size) for an agent config: the ensemble MLP encoder (encoder_hidden_dims,
    encoder_layer_norm, num_ensemble), behind the image encoder config.encoder when the observations
    are images. Every agent builds its phi / psi encoders here."""
    d = latent_dim_for(config, ex_observations)
    encoder = EnsembleEncoder(config.encoder_hidden_dims, d, config.num_ensemble, config.encoder_layer_norm,
                              visual_encoder=config.encoder)
    return encoder, d


def bc_actor(config, action_dim: int):
    """The Gaussian actor head of the behavior-cloning agents (actor_hidden_dims, actor_layer_norm)."""
    return GaussianActor(config.actor_hidden_dims, action_dim, layer_norm=config.actor_layer_norm)


def two_encoder_modules(config, ex_observations, ex_actions):
    """(modules, example_args) of an agent with two encoder ensembles of states and an actor on two of
    their representations (TRA, TD-SR): phi ('encoder'), psi ('psi_encoder', a copy of phi's
    architecture that also reads a_t when config.action_conditioned) and the actor ('actor') on
    concat(z_s, z_g), 2 * d inputs."""
    encoder, d = state_encoder(config, ex_observations)
    modules = {'encoder': encoder, 'psi_encoder': encoder.clone(), 'actor': bc_actor(config, ex_actions.shape[-1])}
    example_args = {
        'encoder': (ex_observations,),
        'psi_encoder': psi_inputs(ex_observations, ex_actions, config.action_conditioned),
        'actor': (jnp.zeros((1, 2 * d)),),
    }
    return modules, example_args
