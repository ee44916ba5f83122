"""Soft actor-critic for training the low-level locomotion expert (OGBench's `main_sac.py`).

Hyperparameters default to OGBench's SAC config (`impls/agents/sac.py`): actor and twin critics
MLP(256, 256) with GELU, tanh-squashed Gaussian actor with state-dependent log-std clipped to
[-5, 2] and a small final layer, Adam lr 1e-4 on one parameter tree, batch 256, discount 0.99,
target EMA tau 0.005, the minimum of the two critics, and an entropy temperature tuned towards a
target entropy of -0.5 * action_dim.

The agent is a pytree; `update_many` runs a stack of batches through `lax.scan` in one jitted call.
"""

import json
import math
from typing import Any, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from agents.base import TrainState, ema_update, frozen, nonpytree_field
from utils.networks import MLP, ModuleDict, default_init, ensemblize, gaussian_log_prob

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def get_config():
    return ml_collections.ConfigDict(
        dict(
            lr=1e-4,  # Adam learning rate of actor, critics and temperature (OGBench's expert: 1e-4).
            batch_size=256,  # Replay batch size.
            actor_hidden_dims=(256, 256),  # Tanh-Gaussian actor MLP hidden sizes.
            critic_hidden_dims=(256, 256),  # Each twin critic's MLP hidden sizes.
            discount=0.99,  # gamma of the soft Bellman target.
            tau=0.005,  # EMA rate of the target critics.
            target_entropy_multiplier=0.5,  # Target entropy = -this * action_dim (-4 for the 8-D ant).
            actor_final_init_scale=1e-2,  # Init scale of the actor's last layer (near-zero initial actions).
        )
    )


class TanhGaussianActor(nn.Module):
    """Returns the pre-tanh Gaussian (means, log_stds); actions are tanh of a sample."""

    hidden_dims: Sequence[int]
    action_dim: int
    final_init_scale: float = 1e-2

    @nn.compact
    def __call__(self, observations):
        x = MLP(self.hidden_dims, activate_final=True)(observations)
        means = nn.Dense(self.action_dim, kernel_init=default_init(self.final_init_scale))(x)
        log_stds = nn.Dense(self.action_dim, kernel_init=default_init(self.final_init_scale))(x)
        return means, jnp.clip(log_stds, LOG_STD_MIN, LOG_STD_MAX)


class Critic(nn.Module):
    """Q(s, a): an MLP on concat(s, a) with a scalar output."""

    hidden_dims: Sequence[int]

    @nn.compact
    def __call__(self, observations, actions):
        x = jnp.concatenate([observations, actions], axis=-1)
        return MLP((*self.hidden_dims, 1))(x)[..., 0]


class TwinCritic(nn.Module):
    """Two independent critics; output [2, ...]."""

    hidden_dims: Sequence[int]

    @nn.compact
    def __call__(self, observations, actions):
        return ensemblize(Critic, 2)(self.hidden_dims)(observations, actions)


class LogTemperature(nn.Module):
    """log(alpha), one scalar parameter initialised at 0 (alpha = 1)."""

    @nn.compact
    def __call__(self):
        return self.param('log_temperature', nn.initializers.zeros, ())


def tanh_gaussian_sample(rng, means, log_stds):
    """(actions, log_probs) of tanh(u), u ~ N(means, exp(log_stds)^2), with the change of variables."""
    pre_tanh = means + jnp.exp(log_stds) * jax.random.normal(rng, means.shape)
    # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|.
    log_det = jnp.sum(2.0 * (math.log(2.0) - pre_tanh - jax.nn.softplus(-2.0 * pre_tanh)), axis=-1)
    return jnp.tanh(pre_tanh), gaussian_log_prob(means, log_stds, pre_tanh) - log_det


def make_networks(config, action_dim):
    return {
        'actor': TanhGaussianActor(tuple(config.actor_hidden_dims), action_dim, config.actor_final_init_scale),
        'critic': TwinCritic(tuple(config.critic_hidden_dims)),
        'log_temperature': LogTemperature(),
    }


class SACAgent(flax.struct.PyTreeNode):
    """Actor, twin critics and temperature in one TrainState; the target critics beside it."""

    rng: Any
    network: TrainState
    target_critic_params: Any
    config: Any = nonpytree_field()

    @classmethod
    def create(cls, seed, observation_dim, action_dim, config=None):
        config = get_config() if config is None else config
        config = ml_collections.FrozenConfigDict(
            dict(config.to_dict(), target_entropy=-config.target_entropy_multiplier * action_dim)
        )
        rng, init_rng = jax.random.split(jax.random.PRNGKey(seed))
        observations = jnp.zeros((1, observation_dim))
        actions = jnp.zeros((1, action_dim))
        model = ModuleDict(make_networks(config, action_dim))
        # Jitted: running init op by op takes seconds on a busy CPU.
        params = jax.jit(model.init)(
            init_rng, {'actor': (observations,), 'critic': (observations, actions), 'log_temperature': ()}
        )['params']
        network = TrainState.create(model, params, optax.adam(config.lr))
        return cls(rng=rng, network=network, target_critic_params=params['modules_critic'], config=config)

    def temperature(self, params):
        return jnp.exp(self.network(name='log_temperature', params=params))

    def critic_loss(self, batch, params, rng):
        """E[(Q_i(s, a) - y)^2], y = r + gamma * mask * (min_i Qbar_i(s', a') - alpha log pi(a'|s'))."""
        next_actions, next_log_probs = tanh_gaussian_sample(rng, *self.network(batch['next_observations'], name='actor', params=frozen(params)))
        target_params = {'modules_critic': self.target_critic_params}
        next_q = jnp.min(self.network(batch['next_observations'], next_actions, name='critic', params=target_params), axis=0)
        soft_next_q = next_q - self.temperature(frozen(params)) * next_log_probs
        target_q = jax.lax.stop_gradient(batch['rewards'] + self.config.discount * batch['masks'] * soft_next_q)
        q = self.network(batch['observations'], batch['actions'], name='critic', params=params)
        loss = jnp.mean((q - target_q) ** 2)
        return loss, {'critic_loss': loss, 'q_mean': q.mean(), 'q_max': q.max(), 'q_min': q.min()}

    def actor_loss(self, batch, params, rng):
        """E[alpha log pi(a|s) - min_i Q_i(s, a)], a ~ pi; the critics are held fixed."""
        actions, log_probs = tanh_gaussian_sample(rng, *self.network(batch['observations'], name='actor', params=params))
        q = jnp.min(self.network(batch['observations'], actions, name='critic', params=frozen(params)), axis=0)
        loss = jnp.mean(self.temperature(frozen(params)) * log_probs - q)
        return loss, log_probs

    def temperature_loss(self, log_probs, params):
        """alpha * (H - H_target), H = -E[log pi]: minimising it lowers alpha while the entropy is
        above the target and raises it while below."""
        entropy = -jnp.mean(jax.lax.stop_gradient(log_probs))
        return self.temperature(params) * (entropy - self.config.target_entropy), entropy

    def total_loss(self, batch, params, rng):
        critic_rng, actor_rng = jax.random.split(rng)
        critic_loss, info = self.critic_loss(batch, params, critic_rng)
        actor_loss, log_probs = self.actor_loss(batch, params, actor_rng)
        temperature_loss, entropy = self.temperature_loss(log_probs, params)
        info.update(
            actor_loss=actor_loss, temperature_loss=temperature_loss, entropy=entropy, temperature=self.temperature(params)
        )
        return critic_loss + actor_loss + temperature_loss, info

    def update(self, batch):
        """One gradient step on every loss, then target <- tau * critic + (1 - tau) * target."""
        rng, loss_rng = jax.random.split(self.rng)
        network, info = self.network.apply_loss_fn(lambda params: self.total_loss(batch, params, loss_rng))
        target = ema_update(network.params['modules_critic'], self.target_critic_params, self.config.tau)
        return self.replace(rng=rng, network=network, target_critic_params=target), info

    @jax.jit
    def update_many(self, batches):
        """`update` over the leading axis of `batches` (a dict of [K, B, ...] arrays); the last step's info."""

        def step(agent, batch):
            return agent.update(batch)

        agent, infos = jax.lax.scan(step, self, batches)
        return agent, jax.tree_util.tree_map(lambda x: x[-1], infos)

    @jax.jit
    def sample_actions(self, observations, rng):
        actions, _ = tanh_gaussian_sample(rng, *self.network(observations, name='actor', params=self.network.params))
        return actions

    @jax.jit
    def deterministic_actions(self, observations):
        means, _ = self.network(observations, name='actor', params=self.network.params)
        return jnp.tanh(means)

    def actor_params(self):
        return self.network.params['modules_actor']


def export_actor(agent, weights_path, record_path, record):
    """Writes the actor parameters (msgpack) and a JSON record holding the architecture, which
    `load_actor` needs, merged with `record`."""
    from runtime.atomic_io import atomic_write_bytes, write_json

    params = jax.device_get(agent.actor_params())
    atomic_write_bytes(weights_path, flax.serialization.msgpack_serialize(flax.serialization.to_state_dict(params)))
    kernel_shapes = [layer['kernel'].shape for layer in params['MLP_0'].values()]
    architecture = dict(
        observation_dim=int(kernel_shapes[0][0]),
        action_dim=int(params['Dense_0']['kernel'].shape[1]),
        hidden_dims=[int(shape[1]) for shape in kernel_shapes],
    )
    write_json(record_path, dict(sorted(dict(record, architecture=architecture).items())))


class DeterministicActor:
    """A loaded expert: `actor(observations)` -> tanh(mean) for a [N, obs_dim] or [obs_dim] array."""

    def __init__(self, params, hidden_dims, action_dim):
        module = TanhGaussianActor(tuple(hidden_dims), action_dim)
        self.params = params
        self.observation_dim = int(params['MLP_0']['Dense_0']['kernel'].shape[0])
        self.action_dim = action_dim
        self._act = jax.jit(lambda p, obs: jnp.tanh(module.apply({'params': p}, obs)[0]))

    def __call__(self, observations):
        return np.asarray(self._act(self.params, jnp.asarray(observations, jnp.float32)))


def load_actor(weights_path, record_path):
    with open(record_path) as f:
        architecture = json.load(f)['architecture']
    with open(weights_path, 'rb') as f:
        params = flax.serialization.msgpack_restore(f.read())
    params = jax.tree_util.tree_map(jnp.asarray, params)
    return DeterministicActor(params, architecture['hidden_dims'], architecture['action_dim'])
