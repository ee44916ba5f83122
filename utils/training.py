"""The fused training step: sample on device, update, repeat `num_steps` times in one `lax.scan`.

The sampling key of step `t` is `fold_in(data_key, t)`, so a run's batches depend only on the seed
and the step number: fusing K updates per call, or resuming from a checkpoint at any step, replays
exactly the same batches.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from utils.sampler import DeviceDataset, SamplerConfig, sample_batch


def _scan_updates(agent, data, data_key, start_step, sampler_config, num_steps):
    """The updates, and each metric per step. Inside the scan the metrics travel as one [num_metrics] vector per
    step: one write per step instead of one per metric (on a GPU, a kernel each); they are split by name after."""
    names = []

    def one_step(agent, step):
        batch = sample_batch(jax.random.fold_in(data_key, step), data, sampler_config)
        agent, info = agent.update(batch)
        names[:] = sorted(info)
        return agent, jnp.stack([jnp.asarray(info[name], jnp.float32) for name in names])

    agent, metrics = jax.lax.scan(one_step, agent, start_step + jnp.arange(num_steps))
    return agent, {name: metrics[:, i] for i, name in enumerate(names)}


@functools.partial(jax.jit, static_argnames=('sampler_config', 'num_steps'), donate_argnames=('agent',))
def train_steps(agent, data: DeviceDataset, data_key, start_step, sampler_config: SamplerConfig, num_steps: int):
    """Run `num_steps` updates from global step `start_step`. Returns the new agent and the per-step
    metrics stacked on axis 0 (so a NaN can be traced to the exact step)."""
    return _scan_updates(agent, data, data_key, start_step, sampler_config, num_steps)


@functools.partial(jax.jit, static_argnames=('sampler_config', 'num_steps'), donate_argnames=('agents',))
def train_steps_multi(agents, data: DeviceDataset, data_keys, start_step, sampler_config: SamplerConfig, num_steps: int):
    """`train_steps` for N independent seeds at once: `agents` and `data_keys` carry a leading seed
    axis (see `stack_trees`); the dataset is shared. Metrics come back as [N, num_steps]."""
    run = lambda agent, key: _scan_updates(agent, data, key, start_step, sampler_config, num_steps)
    return jax.vmap(run)(agents, data_keys)


def train_seeds(agents, data: DeviceDataset, data_keys, start_step, sampler_config: SamplerConfig, num_steps: int):
    """`train_steps_multi` for N > 1 seeds, `train_steps` for one (whose agent is not stacked); the metrics come back
    on the host as [N, num_steps] either way (one transfer per call)."""
    if len(data_keys) > 1:
        agents, infos = train_steps_multi(agents, data, data_keys, start_step, sampler_config, num_steps)
    else:
        agents, infos = train_steps(agents, data, data_keys[0], start_step, sampler_config, num_steps)
        infos = jax.tree_util.tree_map(lambda x: x[None], infos)
    return agents, jax.device_get(infos)


def first_nonfinite(infos):
    """(index, metric) of the first step with a non-finite metric in stacked per-step `infos`, or None."""
    bad = [(int(np.flatnonzero(~np.isfinite(v))[0]), key) for key, v in infos.items() if not np.all(np.isfinite(v))]
    return min(bad, default=None)


# Compiler options for programs that run once: no XLA optimisations (the same numbers, compiled in a fraction of the time).
FAST_COMPILE = {'xla_backend_optimization_level': 0, 'xla_llvm_disable_expensive_passes': True}


def compiled_create(agent_class, example_observations, example_actions, config):
    """`seed -> agent_class.create(seed, example_observations, example_actions, config)`, the whole initialisation
    compiled as one program without optimisations (the seed an argument: every seed reuses it). The same
    parameters, bit for bit, as creating eagerly, where every initialiser op is compiled, fully optimised, as an
    executable of its own: that costs seconds for a program run once (docs/performance.md, "Start-up"). Files a
    `create` reads (a hierarchical agent's stage1_checkpoint) are read while tracing: constants of the program."""
    create = jax.jit(lambda seed, observations, actions: agent_class.create(seed, observations, actions, config))
    compiled = create.lower(np.int32(0), example_observations, example_actions).compile(FAST_COMPILE)
    return lambda seed: compiled(np.int32(seed), example_observations, example_actions)


def stack_trees(trees):
    """Stack pytrees of one structure (e.g. one agent per seed) along a new leading axis.

    Static fields (optimizer, apply function) are taken from the first tree: each agent's `create`
    builds equal but distinct objects, which would make the tree structures compare unequal.
    """
    treedef = jax.tree_util.tree_structure(trees[0])
    leaves = [jax.tree_util.tree_leaves(tree) for tree in trees]
    return jax.tree_util.tree_unflatten(treedef, [jnp.stack(group) for group in zip(*leaves)])


@functools.partial(jax.jit, static_argnames=('sampler_config',))
def validation_metrics(agent, data: DeviceDataset, key, sampler_config: SamplerConfig):
    """The agent's losses on one batch of held-out data (no update, no augmentation, as OGBench)."""
    sampler_config = dataclasses.replace(sampler_config, p_aug=0.0)
    return agent.metrics(sample_batch(key, data, sampler_config))
