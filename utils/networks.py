"""The networks of the behavior-cloning and representation agents: MLPs, encoder and predictor ensembles, the
Gaussian actor head (with its log-density and sampling), and `ModuleDict`, in which an agent composes them: one
parameter tree and one optimizer for the whole agent. Value networks are in utils/value_networks.py, the image
encoders of pixel observations in utils/image_encoders.py.
"""

from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def default_init(scale: float = 1.0):
    """Variance-scaling init with fan_avg/uniform (the initialisation OGBench's agents use)."""
    return nn.initializers.variance_scaling(scale, 'fan_avg', 'uniform')


class MLP(nn.Module):
    """Dense layers with GELU activations and optional layer norm after every activation."""

    hidden_dims: Sequence[int]
    activate_final: bool = False
    layer_norm: bool = False
    activation: Callable = nn.gelu
    kernel_init: Any = default_init()
    dtype: Any = None  # the layers' computation dtype; None: that of the (float32) parameters

    @nn.compact
    def __call__(self, x):
        for i, size in enumerate(self.hidden_dims):
            x = nn.Dense(size, kernel_init=self.kernel_init, dtype=self.dtype)(x)
            if i + 1 < len(self.hidden_dims) or self.activate_final:
                x = self.activation(x)
                if self.layer_norm:
                    x = nn.LayerNorm(dtype=self.dtype)(x)
        return x


def ensemblize(module_cls, num_members: int):
    """Lift `module_cls` to `num_members` independent copies evaluated in one vmapped call: parameters get a leading
    axis of size `num_members`, inputs are broadcast, outputs stacked on axis 0; each member gets its own gradients."""
    return nn.vmap(module_cls, variable_axes={'params': 0}, split_rngs={'params': True}, in_axes=None, out_axes=0,
                   axis_size=num_members)


class Encoder(nn.Module):
    """phi: MLP(hidden_dims) followed by a linear projection to `latent_dim`."""

    hidden_dims: Sequence[int]
    latent_dim: int
    layer_norm: bool = True
    activation: Callable = nn.gelu

    @nn.compact
    def __call__(self, x):
        x = MLP(self.hidden_dims, activate_final=True, layer_norm=self.layer_norm, activation=self.activation)(x)
        return nn.Dense(self.latent_dim, kernel_init=default_init())(x)


class EnsembleEncoder(nn.Module):
    """An ensemble of `num_members` encoders; returns all members' outputs, shape [M, ..., latent].

    `image_encoder` (pixels: a module class of utils.image_encoders.VISUAL_ENCODERS) puts one image encoder in
    front of the members, shared by them: x is then images. `actions`, if given, are concatenated to the (image
    features or raw) input of the members: the action-conditioned psi(s, a).
    """

    hidden_dims: Sequence[int]
    latent_dim: int
    num_members: int = 2
    layer_norm: bool = True
    image_encoder: Optional[Callable[[], nn.Module]] = None
    activation: Callable = nn.gelu  # of the members' hidden layers

    @nn.compact
    def __call__(self, x, actions=None):
        if self.image_encoder is not None:
            x = self.image_encoder()(x)
        if actions is not None:
            x = jnp.concatenate([x, actions], axis=-1)
        return ensemblize(Encoder, self.num_members)(self.hidden_dims, self.latent_dim, self.layer_norm, self.activation)(x)


class Predictor(nn.Module):
    """psi: MLP on a latent (optionally concatenated with an action) to a latent of size `out_dim`."""

    hidden_dims: Sequence[int]
    out_dim: int
    layer_norm: bool = True

    @nn.compact
    def __call__(self, z, actions=None):
        if actions is not None:
            z = jnp.concatenate([z, actions], axis=-1)
        z = MLP(self.hidden_dims, activate_final=True, layer_norm=self.layer_norm)(z)
        return nn.Dense(self.out_dim, kernel_init=default_init())(z)


class EnsemblePredictor(nn.Module):
    """One predictor per encoder ensemble member. Input latents have shape [M, B, d]: member m only
    sees (and only trains on) its own encoder's latents."""

    hidden_dims: Sequence[int]
    out_dim: int
    num_members: int = 2
    layer_norm: bool = True

    @nn.compact
    def __call__(self, z, actions=None):
        members = nn.vmap(Predictor, variable_axes={'params': 0}, split_rngs={'params': True}, in_axes=(0, None),
                          out_axes=0, axis_size=self.num_members)(self.hidden_dims, self.out_dim, self.layer_norm)
        return members(z, actions)


class GaussianActor(nn.Module):
    """Actor head -> (means, log_stds): MLP trunk and a linear mean, initialised small (scale 1e-2) so that the
    initial policy is close to zero-mean, as in OGBench; a state-independent log-std (zero when `const_std`)."""

    hidden_dims: Sequence[int]
    action_dim: int
    const_std: bool = True
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        x = MLP(self.hidden_dims, activate_final=True, layer_norm=self.layer_norm)(x)
        means = nn.Dense(self.action_dim, kernel_init=default_init(1e-2))(x)
        if self.const_std:
            log_stds = jnp.zeros_like(means)
        else:
            log_stds = jnp.broadcast_to(self.param('log_stds', nn.initializers.zeros, (self.action_dim,)), means.shape)
        return means, log_stds


def gaussian_log_prob(means, log_stds, actions):
    """log N(actions; means, diag(exp(log_stds))^2), summed over the action dimension."""
    z = (actions - means) * jnp.exp(-log_stds)
    return jnp.sum(-0.5 * z**2 - log_stds - 0.5 * jnp.log(2.0 * jnp.pi), axis=-1)


def sample_gaussian(rng, means, log_stds, temperature: float = 1.0):
    """Sample with the std scaled by `temperature`; temperature 0 gives the mean exactly."""
    noise = jax.random.normal(rng, means.shape)
    return means + temperature * jnp.exp(log_stds) * noise


class ModuleDict(nn.Module):
    """Named sub-modules under one parameter tree. `apply(params, *args, name='encoder')` runs one; called without a
    name (only at init), it runs each on its own example arguments, given as {name: args_tuple}."""

    modules: dict

    @nn.compact
    def __call__(self, *args, name: Optional[str] = None, **kwargs):
        if name is None:
            example_args = args[0]
            if set(example_args) != set(self.modules):
                raise ValueError(f'Init needs example arguments for exactly {sorted(self.modules)}.')
            return {key: self.modules[key](*example_args[key]) for key in self.modules}
        return self.modules[name](*args, **kwargs)


def length_normalize(x):
    """x rescaled to length sqrt(d) along the last axis (HIQL's subgoal normalisation)."""
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True) * jnp.sqrt(x.shape[-1])
