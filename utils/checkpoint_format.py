"""What a checkpoint holds, in memory: an agent as a state dict and back. The files (atomic writes, named errors,
versions, resume checks) are the run machinery's (runtime/checkpoints.py); an agent that restores a trained network
while it is created (a hierarchy's `stage1_checkpoint`) reads through this module.

JAX and flax are imported inside the functions: reading a run directory's layout (runtime/run_dir.py, results
tables) needs only the file name.
"""

import os
from typing import Any, Dict

# A run directory's checkpoint file.
CHECKPOINT_NAME = 'checkpoint.msgpack'


def agent_state_dict(agent) -> Dict[str, Any]:
    """The agent's arrays, on the host."""
    import flax.serialization
    import jax

    return flax.serialization.to_state_dict(jax.device_get(agent))


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

    expected = jax.tree_util.tree_map(np.shape, flax.serialization.to_state_dict(template))
    found = jax.tree_util.tree_map(np.shape, agent_state)
    return jax.tree_util.tree_structure(expected) == jax.tree_util.tree_structure(found) and expected == found


def restore_agent(agent_state: Dict[str, Any], template):
    """`template` (an agent created with the same config and data shapes) holding `agent_state`'s arrays; ValueError
    if the two do not match."""
    if not same_structure(agent_state, template):
        raise ValueError('the checkpoint does not hold this agent: another agent, config or data shapes')
    import flax.serialization

    return flax.serialization.from_state_dict(template, agent_state)
