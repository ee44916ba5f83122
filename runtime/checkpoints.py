"""Atomic checkpoints: the whole agent pytree (params, optimizer state, RNG; utils/checkpoint_format.py says how it is
stored), its step, what the run carries besides (the unfinished training row), and the project version that wrote it;
the named errors of a checkpoint that cannot be read, does not fit, or cannot be resumed."""

import os
from typing import Any, Dict, Tuple

import flax.serialization

from runtime.atomic_io import atomic_write_bytes
from runtime.errors import ResumeMismatchError, RunDirError
from runtime.provenance import project_version
from runtime.run_dir import CHECKPOINT_NAME, DAMAGED_SUFFIX, OLD_SUFFIX
from utils.checkpoint_format import agent_state_dict, checkpoint_file, restore_agent, same_structure, state_from_bytes
from utils.errors import ConfigError
from utils.random_streams import NAMED_STREAMS_SINCE


def save_checkpoint(run_dir: str, agent, step: int, extra: Dict[str, Any] = None) -> str:
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    state = {
        'agent': agent_state_dict(agent),
        'step': step,
        'extra': extra or {},
        'version': project_version(),
    }
    atomic_write_bytes(path, flax.serialization.msgpack_serialize(state))
    return path


def _read_state(path: str) -> Tuple[Dict[str, Any], str]:
    path = checkpoint_file(path)
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as e:
        raise RunDirError(f'Cannot read checkpoint {path}: {e.strerror or e}. Nothing was written. Make it readable '
                          f'for this user (chmod u+r {path}, as its owner), then rerun.') from None
    try:
        state = state_from_bytes(data)
        state['step'] = int(state['step'])
    except Exception as e:  # msgpack raises several types on damaged input
        raise damaged(path, e) from e
    return state, path


def damaged(path: str, error: Exception) -> RunDirError:
    """The paragraph of a checkpoint that cannot be continued, `error` what reading it raised."""
    folder = os.path.dirname(os.path.abspath(path))
    return RunDirError(
        f'Checkpoint {path} is damaged ({type(error).__name__}: {error}), so nothing can continue from it. Restore it '
        f'from a backup, or move its run directory away (mv {folder} {folder}{DAMAGED_SUFFIX}) and run the same command '
        f'without --resume to start the run over.'
    )


def checkpoint_step(path: str) -> int:
    """The step a checkpoint was saved at (ConfigError if it is unreadable), without an agent to restore into."""
    return checkpoint_header(path)[0]


def checkpoint_header(path: str) -> Tuple[int, Any]:
    """(step, the project version that wrote it or None) of a checkpoint, without an agent to restore into."""
    state = _read_state(path)[0]
    return state['step'], state.get('version')


# The versions that changed what a run computes from its seed, each with what changed: a checkpoint written before one
# of them cannot continue its run with the numbers that run started with.
COMPUTATION_CHANGES = (
    (NAMED_STREAMS_SINCE, 'the random streams (initialisation, sampling, update noise, validation, evaluation) are '
                          'derived by name, no longer by position'),
    ('0.6.0', "goals are drawn as OGBench's GCDataset draws them (never an episode's last row) and EMA targets follow "
              'the weights each step read, no longer the weights after it'),
)


def check_resumable(path: str, version):
    """A ResumeMismatchError if the checkpoint at `path`, written by `version`, predates a change of what a run computes
    (COMPUTATION_CHANGES): continuing it would not compute the run it belongs to."""
    changes = [f'since version {since}, {what}' for since, what in COMPUTATION_CHANGES
               if not version or _version_tuple(version) < _version_tuple(since)]
    if changes:
        written_by = f'version {version}' if version else 'a version before 0.4.0'
        folder = os.path.dirname(os.path.abspath(path))
        raise ResumeMismatchError(
            f'Checkpoint {path} was written by {written_by} of this project, and {"; ".join(changes)}: --resume '
            f'cannot continue that run with the numbers it started with. Finish it with the version that started it '
            f'(git checkout of that version), or move the directory away (mv {folder} {folder}{OLD_SUFFIX}) and start '
            f'the run over with this version.'
        )


def _version_tuple(version: str):
    try:
        return tuple(int(part) for part in str(version).split('.')[:3])
    except ValueError:
        return (0,)  # an unparsable version ('unknown') is treated as old


def load_checkpoint(path: str, agent_template) -> Tuple[Any, int, Dict[str, Any]]:
    """Restore into `agent_template` (an agent created with the same config and data shapes)."""
    state, path = _read_state(path)
    if not same_structure(state['agent'], agent_template):
        version = state.get('version')
        written_by = f'version {version}' if version else 'a version before 0.4.0'
        raise ConfigError(
            f'Checkpoint {path} (written by {written_by} of this project; this is {project_version()}) does not match '
            f'this agent: a different agent, config, dataset shapes or agent layout. Resume with the flags, config and '
            f'project version the run was started with, or start a new --run_name.'
        )
    return restore_agent(state['agent'], agent_template), state['step'], state.get('extra', {})
