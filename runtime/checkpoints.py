"""Atomic checkpoints: the whole agent pytree (params, optimizer state, RNG), its step, and the project version that
wrote it. The optimizer state is stored per parameter leaf whatever layout the agent trains with
(utils/optimizers.with_optimizer), so a checkpoint restores on any backend, and checkpoints of earlier versions (the
same layout) still load."""

import os
from typing import Any, Dict, Tuple

import flax.serialization
import jax
import numpy as np

from runtime.atomic_io import atomic_write_bytes
from runtime.provenance import project_version
from runtime.run_dir import CHECKPOINT_NAME, DAMAGED_SUFFIX
from utils.errors import ConfigError, ResumeMismatchError, RunDirError
from utils.optimizers import uses_one_vector, with_optimizer
from utils.random_streams import NAMED_STREAMS_SINCE


def save_checkpoint(run_dir: str, agent, step: int, extra: Dict[str, Any] = None) -> str:
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    state = {
        'agent': flax.serialization.to_state_dict(jax.device_get(with_optimizer(agent, one_vector=False))),
        'step': step,
        'extra': extra or {},
        'version': project_version(),
    }
    atomic_write_bytes(path, flax.serialization.msgpack_serialize(state))
    return path


def _read_state(path: str) -> Tuple[Dict[str, Any], str]:
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_NAME)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as e:
        raise RunDirError(f'Cannot read checkpoint {path}: {e.strerror or e}. Nothing was written. Make it readable '
                          f'for this user (chmod u+r {path}, as its owner), then rerun.') from None
    try:
        state = flax.serialization.msgpack_restore(data)
        state['step'] = int(state['step'])
        if 'agent' not in state:
            raise KeyError('agent')
    except Exception as e:  # msgpack raises several types on damaged input
        raise RunDirError(
            f'Checkpoint {path} is damaged ({type(e).__name__}: {e}), so nothing can continue from it. Restore it from '
            f'a backup, or move its run directory away (mv {folder} {folder}{DAMAGED_SUFFIX}) and run the same command '
            f'without --resume to start the run over.'
        ) from e
    return state, path


def checkpoint_step(path: str) -> int:
    """The step a checkpoint was saved at (ConfigError if it is unreadable), without an agent to restore into."""
    return checkpoint_header(path)[0]


def checkpoint_header(path: str) -> Tuple[int, Any]:
    """(step, the project version that wrote it or None) of a checkpoint, without an agent to restore into."""
    state = _read_state(path)[0]
    return state['step'], state.get('version')


def check_resumable(path: str, version):
    """A ResumeMismatchError if the checkpoint at `path`, written by `version`, predates named random streams
    (utils/random_streams.py): continuing it would draw other random numbers than the run it belongs to."""
    if not version or _version_tuple(version) < _version_tuple(NAMED_STREAMS_SINCE):
        written_by = f'version {version}' if version else 'a version before 0.4.0'
        folder = os.path.dirname(os.path.abspath(path))
        raise ResumeMismatchError(
            f'Checkpoint {path} was written by {written_by} of this project, which derived its random streams '
            f'(initialisation, sampling, update noise, validation, evaluation) by position; since version '
            f'{NAMED_STREAMS_SINCE} they are derived by name, so --resume cannot continue that run with the random '
            f'numbers it started with. Finish it with the version that started it (git checkout of that version), or '
            f'move the directory away (mv {folder} {folder}.old) and start the run over with this version.'
        )


def _version_tuple(version: str):
    try:
        return tuple(int(part) for part in str(version).split('.')[:3])
    except ValueError:
        return (0,)  # an unparsable version ('unknown') is treated as old


def load_checkpoint(path: str, agent_template) -> Tuple[Any, int, Dict[str, Any]]:
    """Restore into `agent_template` (an agent created with the same config and data shapes)."""
    state, path = _read_state(path)
    agent_state, step = state['agent'], state['step']
    template = with_optimizer(agent_template, one_vector=False)
    _check_same_structure(flax.serialization.to_state_dict(template), agent_state, path, state.get('version'))
    agent = flax.serialization.from_state_dict(template, agent_state)
    return with_optimizer(agent, uses_one_vector(agent_template)), step, state.get('extra', {})


def _check_same_structure(expected, found, path, version):
    expected_shapes = jax.tree_util.tree_map(np.shape, expected)
    found_shapes = jax.tree_util.tree_map(np.shape, found)
    if jax.tree_util.tree_structure(expected_shapes) != jax.tree_util.tree_structure(found_shapes) or expected_shapes != found_shapes:
        written_by = f'version {version}' if version else 'a version before 0.4.0'
        raise ConfigError(
            f'Checkpoint {path} (written by {written_by} of this project; this is {project_version()}) does not match '
            f'this agent: a different agent, config, dataset shapes or agent layout. Resume with the flags, config and '
            f'project version the run was started with, or start a new --run_name.'
        )
