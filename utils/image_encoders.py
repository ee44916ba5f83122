"""The image encoders of pixel observations (`--agent.encoder`), and the check that an agent's encoder fits its
observations. State-based agents never run anything here.

An image encoder runs first inside an agent's encoder (`utils.networks.EnsembleEncoder`, one CNN shared by the
ensemble's members): images [..., H, W, C] in, features [..., F] out. docs/visual.md describes the pixel pipeline.
"""

import functools
from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp

from utils.errors import ConfigError
from utils.networks import MLP


class ResidualStack(nn.Module):
    """One IMPALA stage: a 3x3 conv, a 3x3 max-pool with stride 2, then `num_blocks` residual
    blocks x + conv(relu(conv(relu(x)))) (Espeholt et al. 2018, as in OGBench's encoder)."""

    num_features: int
    num_blocks: int

    @nn.compact
    def __call__(self, x):
        conv = lambda: nn.Conv(self.num_features, (3, 3), strides=1, padding='SAME', kernel_init=nn.initializers.xavier_uniform())
        x = conv()(x)
        x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding='SAME')
        for _ in range(self.num_blocks):
            x = x + conv()(nn.relu(conv()(nn.relu(x))))
        return x


class ImpalaEncoder(nn.Module):
    """IMPALA CNN: images [..., H, W, C] (uint8 0..255 or floats in that range) -> features [..., mlp_hidden_dims[-1]].

    The uint8 -> float conversion happens here, inside the jitted computation, so datasets stay uint8
    on device (4x less memory than float32 frames). Stages of widths `stack_sizes`, a final ReLU,
    flatten, and an MLP with activated output.
    """

    stack_sizes: Sequence[int] = (16, 32, 32)
    num_blocks: int = 2
    mlp_hidden_dims: Sequence[int] = (512,)
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        batch_shape = x.shape[:-3]
        x = x.astype(jnp.float32).reshape((-1, *x.shape[-3:])) / 255.0
        for width in self.stack_sizes:
            x = ResidualStack(width, self.num_blocks)(x)
        x = nn.relu(x)
        if self.layer_norm:
            x = nn.LayerNorm()(x)
        x = x.reshape((*batch_shape, -1))
        return MLP(self.mlp_hidden_dims, activate_final=True, layer_norm=self.layer_norm)(x)


# Image encoders by name (`--agent.encoder`). impala_small is OGBench's: one residual block per stage.
VISUAL_ENCODERS = {
    'impala': ImpalaEncoder,
    'impala_small': functools.partial(ImpalaEncoder, num_blocks=1),
    'impala_debug': functools.partial(ImpalaEncoder, stack_sizes=(4, 4), num_blocks=1),  # OGBench's, for tests
}


def visual_encoder(name: str) -> nn.Module:
    return VISUAL_ENCODERS[name]()


# The paper's encoder output size for pixel observations (its hyperparameter table: 64 for visual).
VISUAL_LATENT_DIM = 64


def is_image_batch(observations) -> bool:
    """Observations [B, H, W, C] are images; [B, D] are state vectors."""
    return observations.ndim >= 4


def check_encoder_fits_observations(config, ex_observations):
    """ConfigError unless the config's observation encoder fits the observations: an image encoder (`encoder` in
    VISUAL_ENCODERS) for images [B, H, W, C], 'none' for state vectors [B, D]; a config without an `encoder` field
    reads state vectors. Which names exist is a config rule (agents.base.ENCODER_FIELDS); this is the one check
    that needs the data, run by `agents.base.Agent.create` for every agent."""
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
            f'The observations are images (shape {shape}) but encoder={name!r} expects state vectors: pass '
            f'--agent.encoder=impala_small (or a visual preset, e.g. --agent=configs/presets.py:byol_gamma_a_visual).'
        )
    if not images and name in VISUAL_ENCODERS:
        raise ConfigError(
            f'encoder={name!r} is an image encoder but the observations are state vectors (shape {shape}): use a '
            f'visual-* dataset, or leave --agent.encoder at its default.'
        )
