"""What an OGBench dataset is: its name and environment, its tasks, and its `.npz` file read and validated.

Files are OGBench's own `.npz` layout (docs/method.md, section 2), so downloaded OGBench files and files written by
`datagen` are interchangeable. Finding, downloading or generating the files is runtime/dataset_files.py's.
"""

import difflib
import errno
import zipfile
from typing import Dict, List, Tuple

import numpy as np

from utils.errors import ConfigError, DatasetError

REQUIRED_KEYS = ('observations', 'actions', 'terminals')

# The datasets OGBench publishes, <family>-<variant>-<type>-v0 (scene: scene-<type>-v0), 85 in all: the ogbench
# package holds no list (ogbench.download_datasets fetches whatever name it is given), so this is its README's and
# hyperparameters.sh's. Some environments it registers have no dataset (cube-octuple, humanoidmaze-teleport).
# Each family: its variants, and its dataset types (a type with variants of its own: only those variants).
OGBENCH_FAMILIES = {
    'pointmaze': (('medium', 'large', 'giant', 'teleport'), {'navigate': None, 'stitch': None}),
    'antmaze': (('medium', 'large', 'giant', 'teleport'),
                {'navigate': None, 'stitch': None, 'explore': ('medium', 'large', 'teleport')}),
    'humanoidmaze': (('medium', 'large', 'giant'), {'navigate': None, 'stitch': None}),
    'antsoccer': (('arena', 'medium'), {'navigate': None, 'stitch': None}),
    'cube': (('single', 'double', 'triple', 'quadruple'), {'play': None, 'noisy': None}),
    'scene': ((None,), {'play': None, 'noisy': None}),
    'puzzle': (('3x3', '4x4', '4x5', '4x6'), {'play': None, 'noisy': None}),
    'powderworld': (('easy', 'medium', 'hard'), {'play': None}),
}
VISUAL_FAMILIES = ('antmaze', 'humanoidmaze', 'cube', 'scene', 'puzzle')  # each has visual-<its datasets>


def ogbench_datasets() -> Dict[str, str]:
    """{dataset name: its environment id} of every dataset OGBench publishes."""
    datasets = {}
    for family, (variants, types) in OGBENCH_FAMILIES.items():
        for kind, only in types.items():
            for variant in only or variants:
                env = '-'.join(part for part in (family, variant) if part)
                for prefix in ('', 'visual-') if family in VISUAL_FAMILIES else ('',):
                    datasets[f'{prefix}{env}-{kind}-v0'] = f'{prefix}{env}-v0'
    return datasets


def dataset_families() -> str:
    """The published names, written compactly (for messages)."""
    parts = []
    for family, (variants, types) in OGBENCH_FAMILIES.items():
        groups: Dict[Tuple, List[str]] = {}
        for kind, only in types.items():
            groups.setdefault(tuple(only or variants), []).append(kind)
        for variants_of, kinds in groups.items():
            middle = '' if variants_of == (None,) else '{' + ','.join(variants_of) + '}-'
            kinds_text = kinds[0] if len(kinds) == 1 else '{' + ','.join(kinds) + '}'
            parts.append(f'{family}-{middle}{kinds_text}-v0')
    return f'{"; ".join(parts)}; and visual-<dataset> for the {", ".join(VISUAL_FAMILIES)} ones'


def goal_conditioned_env_ids():
    """OGBench's goal-conditioned environment ids (`pointmaze-medium-v0`, ...)."""
    import gymnasium
    import ogbench  # noqa: F401  (registers the environments)

    return sorted(
        env_id
        for env_id, spec in gymnasium.envs.registry.items()
        if 'singletask' not in env_id and str(spec.entry_point).startswith('ogbench')
    )


def env_id_for(dataset_name: str) -> str:
    """`pointmaze-medium-stitch-v0` -> `pointmaze-medium-v0`, for a dataset OGBench publishes (ConfigError with
    the closest names otherwise: OGBench has no other to download, and this project generates only some of those)."""
    published = ogbench_datasets()
    env_id = published.get(dataset_name)
    if env_id is not None and env_id in goal_conditioned_env_ids():
        return env_id
    if env_id is not None:  # an ogbench package that predates the environment
        import ogbench

        raise ConfigError(f'{dataset_name} is an OGBench dataset, but the installed ogbench '
                          f'({getattr(ogbench, "__version__", "unknown version")}) has no environment {env_id}: '
                          f'install the ogbench version pinned in requirements.txt.')
    parts = dataset_name.split('-')
    env_guess = '-'.join(parts[:-2] + parts[-1:]) if len(parts) >= 3 else None
    same_env = [name for name, env in published.items() if env == env_guess]
    close = same_env or difflib.get_close_matches(dataset_name, list(published), n=3, cutoff=0.8)
    suggestion = f' Did you mean {" or ".join(close)}?' if close else ''
    if env_guess in goal_conditioned_env_ids():
        none = '' if same_env else ' (OGBench publishes no dataset of it)'
        what = f'Unknown dataset {dataset_name!r}: OGBench\'s environment {env_guess} has no {parts[-2]} dataset{none}.'
    else:
        what = f'Unknown environment {dataset_name!r}: OGBench publishes no dataset of that name.'
    raise ConfigError(
        f'{what}{suggestion} An --env_name is an OGBench dataset name; OGBench publishes {dataset_families()} (e.g. '
        f'pointmaze-medium-stitch-v0).'
    )


def num_tasks(dataset_name: str) -> int:
    """How many evaluation tasks the dataset's environment defines (`len(env.unwrapped.task_infos)`),
    read from one env of the state version (a visual env would need a renderer; its tasks are the same)."""
    import gymnasium

    env_id = env_id_for(dataset_name)
    if env_id.startswith('visual-'):
        env_id = env_id[len('visual-'):]
    env = gymnasium.make(env_id)
    try:
        return len(env.unwrapped.task_infos)
    finally:
        env.close()


def read_error(path: str, error: OSError) -> DatasetError:
    """The named error for a dataset file that exists but cannot be read (`error` from opening or reading it).

    main.py turns a bare EACCES/EPERM OSError into "Cannot write ...", the wrong cause for a file it only reads,
    so every read of a dataset file goes through this (the lowest level: `open` itself failed)."""
    reason = error.strerror or type(error).__name__
    if error.errno in (errno.EACCES, errno.EPERM):
        fix = (f'Make it readable for this user (chmod a+r {path}, as its owner or with sudo), or pass --dataset_dir '
               f'pointing at a copy you can read')
    else:
        fix = ('Check the disk or file system holding it, or move it away to download or regenerate it, or pass '
               'another --dataset_dir')
    return DatasetError(f'Cannot read dataset file {path}: {reason} (errno {errno.errorcode.get(error.errno, error.errno)}). '
                        f'Nothing was written. {fix}.')


def load_dataset(path: str, observation_space, action_space) -> Dict[str, np.ndarray]:
    """Read an OGBench `.npz` and validate it against the environment's spaces.

    Returns the raw rows: observations, actions, terminals (bool, True on each episode's last row).
    Raises DatasetError naming the file and the problem, with the fix (delete and re-obtain).
    """
    fix = corrupt_fix(path)
    try:
        with np.load(path) as file:  # never unpickles: an array of Python objects is a ValueError
            missing = [k for k in REQUIRED_KEYS if k not in file.files]
            if missing:
                raise DatasetError(f'Dataset {path} lacks keys {missing} (has {sorted(file.files)}). {fix}')
            data = {k: file[k] for k in REQUIRED_KEYS}
    except DatasetError:
        raise
    except OSError as e:
        if e.errno is not None:  # the file could not be opened or read (permissions, a directory, I/O error)
            raise read_error(path, e) from None
        raise DatasetError(f'Dataset {path} is corrupt or truncated ({type(e).__name__}: {e}). {fix}') from e
    except (ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise DatasetError(f'Dataset {path} is corrupt or truncated ({type(e).__name__}: {e}). {fix}') from e

    obs, actions, terminals = data['observations'], data['actions'], data['terminals']
    n = len(terminals)
    problems = []
    if obs.shape != (n, *observation_space.shape):
        problems.append(f'observations have shape {obs.shape}, expected ({n}, {", ".join(map(str, observation_space.shape))})')
    if actions.shape != (n, *action_space.shape):
        problems.append(f'actions have shape {actions.shape}, expected ({n}, {", ".join(map(str, action_space.shape))})')
    if terminals.ndim != 1 or n < 2:
        problems.append(f'terminals must be a vector of length >= 2, got shape {terminals.shape}')
    problems += type_problems(obs, actions, observation_space)
    if not problems:
        with np.errstate(over='ignore'):  # checked as training reads them, in float32, where 1e300 is inf
            obs_bad = np.sum(~np.isfinite(obs.astype(np.float32, copy=False))) if np.issubdtype(obs.dtype, np.floating) else 0
            actions_bad = np.sum(~np.isfinite(actions.astype(np.float32, copy=False)))
        if obs_bad:
            problems.append(f'{obs_bad} observation values that are not finite in float32')
        if actions_bad:
            problems.append(f'{actions_bad} action values that are not finite in float32')
        else:
            problems += action_range_problems(actions, action_space)
        if not np.all((terminals == 0) | (terminals == 1)):
            problems.append('terminals contain values other than 0/1')
        elif not terminals[-1]:
            problems.append('the last row is not terminal (file truncated mid-episode?)')
        else:
            ends = np.flatnonzero(terminals)
            lengths = np.diff(np.concatenate([[-1], ends]))
            if lengths.min() < 2:
                problems.append(f'{int(np.sum(lengths < 2))} episodes have fewer than 2 rows')
    if problems:
        raise DatasetError(f'Dataset {path} is invalid: {"; ".join(problems)}. {fix}')
    return dict(
        observations=obs.astype(np.float32) if np.issubdtype(obs.dtype, np.floating) else obs,
        actions=actions.astype(np.float32),
        terminals=terminals.astype(bool),
    )


def corrupt_fix(path: str) -> str:
    return f'Move {path} (and its -val/train sibling) away and rerun to download or regenerate it.'


def type_problems(observations: np.ndarray, actions: np.ndarray, observation_space) -> List[str]:
    """What is wrong with the arrays' element types: observations of the kind the environment observes (floats for
    state vectors, uint8 for rendered frames; integers or booleans for a state environment are another
    environment's data, or a converted file), actions of real numbers."""
    problems = []
    expected = np.dtype(observation_space.dtype)
    if observations.dtype.kind != expected.kind:
        what = {'f': 'real-valued vectors (floats)', 'u': f'images ({expected.name})'}.get(expected.kind, expected.name)
        problems.append(f'observations are {observations.dtype.name}, where the environment observes {what}')
    if actions.dtype.kind not in 'fiu':
        problems.append(f'actions are {actions.dtype.name}, where the environment takes real-valued vectors')
    return problems


# How far (relative to the bound's size, at least 1) an action may lie outside the action space: float rounding of
# a value on the bound, nothing more (OGBench's collection, and this project's, clip actions to the space).
ACTION_BOUND_TOLERANCE = 1e-5


def action_range_problems(actions: np.ndarray, action_space) -> List[str]:
    """Actions outside the environment's action space (a Box), which no collection of OGBench's kind records: BC
    would learn actions the environment clips, from a file scaled or made for another environment."""
    low, high = getattr(action_space, 'low', None), getattr(action_space, 'high', None)
    if low is None or high is None or actions.dtype.kind not in 'fiu':
        return []
    low, high = np.broadcast_to(low, actions.shape[1:]), np.broadcast_to(high, actions.shape[1:])
    slack_low = ACTION_BOUND_TOLERANCE * np.maximum(1.0, np.abs(low))
    slack_high = ACTION_BOUND_TOLERANCE * np.maximum(1.0, np.abs(high))
    outside = (actions < low - slack_low) | (actions > high + slack_high)
    if not np.any(outside):
        return []
    row = int(np.argmax(np.any(outside.reshape(len(actions), -1), axis=1)))
    bounds = (f'[{float(low.min()):g}, {float(high.max()):g}]' if np.all(low == low.flat[0]) and np.all(high == high.flat[0])
              else 'its per-dimension bounds')
    return [f'{int(outside.sum())} action values lie outside the action space {bounds} (e.g. row {row}: '
            f'{np.array2string(np.asarray(actions[row]), precision=4, threshold=8)}; largest magnitude '
            f'{float(np.abs(actions).max()):.4g}), which OGBench\'s data never leave (actions are clipped to it): '
            f'scaled, or another environment\'s actions']


def observation_bytes(path: str) -> int:
    """Bytes of the observations array of an `.npz`, from its header alone (nothing is loaded). Errors of the zip or
    npy format, or a KeyError without observations, propagate."""
    with zipfile.ZipFile(path) as archive, archive.open('observations.npy') as member:
        version = np.lib.format.read_magic(member)
        # Public readers only: numpy 2.4's np.lib.format no longer exposes _read_array_header.
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(member)
    return int(np.prod(shape, dtype=object)) * dtype.itemsize
