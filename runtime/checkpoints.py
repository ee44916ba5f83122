"""Atomic checkpoints: the whole agent pytree (params, optimizer state, RNG) plus loop state."""

import os
from typing import Any, Dict, Tuple

import flax.serialization
import jax
import numpy as np

from runtime.atomic_io import atomic_write_bytes
from runtime.run_dir import CHECKPOINT_NAME
from utils.errors import ConfigError


def save_checkpoint(run_dir: str, agent, step: int, extra: Dict[str, Any] = None) -> str:
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    state = {
        'agent': flax.serialization.to_state_dict(jax.device_get(agent)),
        'step': step,
        'extra': extra or {},
    }
    atomic_write_bytes(path, flax.serialization.msgpack_serialize(state))
    return path


def _read_state(path: str) -> Tuple[Dict[str, Any], str]:
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_NAME)
    with open(path, 'rb') as f:
        data = f.read()
    try:
        state = flax.serialization.msgpack_restore(data)
        state['step'] = int(state['step'])
        if 'agent' not in state:
            raise KeyError('agent')
    except Exception as e:  # msgpack raises several types on damaged input
        raise ConfigError(
            f'Checkpoint {path} is unreadable ({type(e).__name__}: {e}). Delete it to restart the run from '
            f'scratch, or restore it from a backup.'
        ) from e
    return state, path


def checkpoint_step(path: str) -> int:
    """The step a checkpoint was saved at (ConfigError if it is unreadable), without an agent to restore into."""
    return _read_state(path)[0]['step']


def load_checkpoint(path: str, agent_template) -> Tuple[Any, int, Dict[str, Any]]:
    """Restore into `agent_template` (an agent created with the same config and data shapes)."""
    state, path = _read_state(path)
    agent_state, step = state['agent'], state['step']
    template_state = flax.serialization.to_state_dict(agent_template)
    _check_same_structure(template_state, agent_state, path)
    agent = flax.serialization.from_state_dict(agent_template, agent_state)
    return agent, step, state.get('extra', {})


def _check_same_structure(expected, found, path):
    expected_shapes = jax.tree_util.tree_map(np.shape, expected)
    found_shapes = jax.tree_util.tree_map(np.shape, found)
    if jax.tree_util.tree_structure(expected_shapes) != jax.tree_util.tree_structure(found_shapes) or expected_shapes != found_shapes:
        raise ConfigError(
            f'Checkpoint {path} does not match this agent (different agent, config or dataset shapes). '
            f'Resume with the flags and config the run was started with, or start a new --run_name.'
        )
