"""What a checkpoint holds, in memory: an agent as a state dict and back. The files (atomic writes, named errors,
versions, resume checks) are the run machinery's (runtime/checkpoints.py); an agent that restores a trained network
while it is created (a hierarchy's `stage1_checkpoint`) reads through this module.

The optimizer state is kept per parameter leaf whatever layout the agent trains with (utils/optimizers.with_optimizer),
so a checkpoint restores on any backend, and checkpoints of earlier versions (the same layout) still load.

JAX and flax are imported inside the functions: reading a run directory's layout (runtime/run_dir.py, results
tables) needs only the file name.
"""

import os
from typing import Any, Dict

# A run directory's checkpoint file.
CHECKPOINT_NAME = 'checkpoint.msgpack'


def agent_state_dict(agent) -> Dict[str, Any]:
    """The agent's arrays, on the host, with the optimizer state per parameter leaf."""
    import flax.serialization
    import jax

    from utils.optimizers import with_optimizer

    return flax.serialization.to_state_dict(jax.device_get(with_optimizer(agent, one_vector=False)))


def checkpoint_file(path: str) -> str:
    """`path`, or the checkpoint inside it when it is a run directory."""
    return os.path.join(path, CHECKPOINT_NAME) if os.path.isdir(path) else path


def read_state(path: str) -> Dict[str, Any]:
    """The msgpack content of a checkpoint file ({'agent', 'step', 'extra', 'version'}); OSError if it cannot be read,
    another exception if it is not msgpack."""
    with open(path, 'rb') as f:
        return state_from_bytes(f.read())


def state_from_bytes(data: bytes) -> Dict[str, Any]:
    """A checkpoint's content from its bytes (an exception if they are not msgpack)."""
    import flax.serialization

    return flax.serialization.msgpack_restore(data)


def same_structure(agent_state: Dict[str, Any], template) -> bool:
    """Whether `agent_state` holds the arrays (structure and shapes) of `template`, an agent of the same config."""
    import flax.serialization
    import jax
    import numpy as np

    from utils.optimizers import with_optimizer

    expected = jax.tree_util.tree_map(np.shape, flax.serialization.to_state_dict(with_optimizer(template, one_vector=False)))
    found = jax.tree_util.tree_map(np.shape, agent_state)
    return jax.tree_util.tree_structure(expected) == jax.tree_util.tree_structure(found) and expected == found


def restore_agent(agent_state: Dict[str, Any], template):
    """`template` (an agent created with the same config and data shapes) holding `agent_state`'s arrays, in the
    optimizer layout the template trains with; ValueError if the two do not match."""
    if not same_structure(agent_state, template):
        raise ValueError('the checkpoint does not hold this agent: another agent, config, data shapes or layout')
    import flax.serialization

    from utils.optimizers import uses_one_vector, with_optimizer

    agent = flax.serialization.from_state_dict(with_optimizer(template, one_vector=False), agent_state)
    return with_optimizer(agent, uses_one_vector(template))
