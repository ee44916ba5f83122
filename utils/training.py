"""The fused training step: sample on device, update, repeat `num_steps` times in one `lax.scan`.

The sampling key of step `t` is `fold_in(data_key, t)`, so a run's batches depend only on the seed
and the step number: fusing K updates per call, or resuming from a checkpoint at any step, replays
exactly the same batches.
"""

import functools

import jax
import jax.numpy as jnp

from utils.sampler import DeviceDataset, SamplerConfig, sample_batch


@functools.partial(jax.jit, static_argnames=('sampler_config', 'num_steps'), donate_argnames=('agent',))
def train_steps(agent, data: DeviceDataset, data_key, start_step, sampler_config: SamplerConfig, num_steps: int):
    """Run `num_steps` updates from global step `start_step`. Returns the new agent and the per-step
    metrics stacked on axis 0 (so a NaN can be traced to the exact step)."""

    def one_step(agent, step):
        batch = sample_batch(jax.random.fold_in(data_key, step), data, sampler_config)
        return agent.update(batch)

    steps = start_step + jnp.arange(num_steps)
    return jax.lax.scan(one_step, agent, steps)


@functools.partial(jax.jit, static_argnames=('sampler_config',))
def validation_metrics(agent, data: DeviceDataset, key, sampler_config: SamplerConfig):
    """The agent's losses on one batch of held-out data (no update)."""
    _, info = agent.total_loss(sample_batch(key, data, sampler_config), agent.network.params)
    return info
