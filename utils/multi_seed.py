"""N seeds trained as one program: their agents stacked along a leading seed axis and `utils.training.train_steps`
vmapped over it (main.py's `--num_seeds`). Every seed's numbers are those of a single-seed run with that seed.
"""

import functools

import jax
import jax.numpy as jnp

from utils.sampler import DeviceDataset
from utils.training import scan_updates, train_steps


def stack_trees(trees):
    """Stack pytrees of one structure (e.g. one agent per seed) along a new leading axis.

    Static fields (optimizer, apply function) are taken from the first tree: each agent's `create`
    builds equal but distinct objects, which would make the tree structures compare unequal.
    """
    treedef = jax.tree_util.tree_structure(trees[0])
    leaves = [jax.tree_util.tree_leaves(tree) for tree in trees]
    return jax.tree_util.tree_unflatten(treedef, [jnp.stack(group) for group in zip(*leaves)])


@functools.partial(jax.jit, static_argnames=('num_steps',), donate_argnames=('agents',))
def train_steps_multi(agents, data: DeviceDataset, data_keys, start_step, num_steps: int):
    """`train_steps` for N independent seeds at once: `agents` and `data_keys` carry a leading seed
    axis (see `stack_trees`); the dataset is shared. Metrics come back as [N, num_steps]."""
    run = lambda agent, key: scan_updates(agent, data, key, start_step, num_steps)  # noqa: E731
    return jax.vmap(run)(agents, data_keys)


def train_seeds(agents, data: DeviceDataset, data_keys, start_step, num_steps: int):
    """`train_steps_multi` for N > 1 seeds, `train_steps` for one (whose agent is not stacked); the metrics stay on
    the device, [N, num_steps] either way."""
    if len(data_keys) > 1:
        agents, infos = train_steps_multi(agents, data, data_keys, start_step, num_steps)
    else:
        agents, infos = train_steps(agents, data, data_keys[0], start_step, num_steps)
        infos = jax.tree_util.tree_map(lambda x: x[None], infos)
    return agents, infos
