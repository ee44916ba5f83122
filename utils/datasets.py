"""Finding, generating, loading and validating OGBench-format datasets.

Files are OGBench's own `.npz` layout (docs/method.md, section 2), so downloaded OGBench files and files
written by `datagen` are interchangeable.
"""

import logging
import os
import socket
import zipfile
from typing import Dict, Tuple

import gymnasium
import numpy as np

from utils.errors import ConfigError, DatasetError

DATASET_TYPES = ('navigate', 'stitch', 'explore', 'play', 'noisy')
REQUIRED_KEYS = ('observations', 'actions', 'terminals')


def goal_conditioned_env_ids():
    """OGBench's goal-conditioned environment ids (`pointmaze-medium-v0`, ...)."""
    import ogbench  # noqa: F401  (registers the environments)

    return sorted(
        env_id
        for env_id, spec in gymnasium.envs.registry.items()
        if 'singletask' not in env_id and str(spec.entry_point).startswith('ogbench')
    )


def env_id_for(dataset_name: str) -> str:
    """`pointmaze-medium-stitch-v0` -> `pointmaze-medium-v0`, checking that both parts are valid."""
    parts = dataset_name.split('-')
    valid_ids = goal_conditioned_env_ids()
    if len(parts) >= 3 and parts[-2] in DATASET_TYPES:
        env_id = '-'.join(parts[:-2] + parts[-1:])
        if env_id in valid_ids:
            return env_id
    raise ConfigError(
        f'Unknown environment {dataset_name!r}. An --env_name is an OGBench dataset name '
        f'"<env>-<type>-v0" with <type> in {{{", ".join(DATASET_TYPES)}}} and <env>-v0 one of: '
        f'{", ".join(valid_ids)}. Example: pointmaze-medium-stitch-v0.'
    )


def dataset_paths(dataset_name: str, dataset_dir: str) -> Tuple[str, str]:
    base = os.path.join(os.path.expanduser(dataset_dir), dataset_name)
    return f'{base}.npz', f'{base}-val.npz'


def _try_download(dataset_name: str, dataset_dir: str) -> str:
    """OGBench's own download; returns '' on success, else why it failed (never raises)."""
    import ogbench

    previous_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(30)
    try:
        ogbench.download_datasets([dataset_name], dataset_dir=dataset_dir)
        return ''
    except Exception as e:  # any network/server failure means: fall back to generation
        for path in dataset_paths(dataset_name, dataset_dir):
            if os.path.exists(path + '.tmp'):
                os.remove(path + '.tmp')
        return f'{type(e).__name__}: {e}'
    finally:
        socket.setdefaulttimeout(previous_timeout)


def ensure_dataset(dataset_name: str, dataset_dir: str, download: bool = True, generator=None,
                   log=logging.info) -> Tuple[str, str]:
    """Paths of the train and validation files, obtaining them if needed.

    Order: existing files (downloaded from OGBench or generated earlier) -> OGBench's download ->
    `generator` (an object with `can_generate(name)` and `write_dataset(name, dataset_dir)`, e.g. the
    `datagen` package; the caller chooses, so this core module never imports the generators) when it
    knows this dataset -> a DatasetError saying how to get it.
    """
    env_id_for(dataset_name)
    train_path, val_path = dataset_paths(dataset_name, dataset_dir)
    if os.path.exists(train_path) and os.path.exists(val_path):
        return train_path, val_path
    os.makedirs(os.path.expanduser(dataset_dir), exist_ok=True)
    failure = 'skipped: --nodownload'
    if download:
        log(f'{train_path} not found: trying OGBench download.')
        failure = _try_download(dataset_name, dataset_dir)
        if not failure:
            return train_path, val_path
    if generator is not None and generator.can_generate(dataset_name):
        log(f'OGBench download unavailable ({failure}); generating {dataset_name} offline into '
            f'{os.path.dirname(train_path)} as OGBench collected it (pointmaze: scripted oracle, about 1-3 min; '
            f'antmaze: the committed ant expert, about 10+ min; scene: OGBench\'s scripted oracles; visual-*: the state '
            f'data rendered, ~27 frames/s on a CPU with MUJOCO_GL=egl, i.e. hours -- see the estimate below). This is done once.')
        generator.write_dataset(dataset_name, dataset_dir)
        return train_path, val_path
    raise DatasetError(
        f'Dataset file {train_path} (and {os.path.basename(val_path)}) not found, the OGBench download failed '
        f'({failure}), and this project cannot generate {dataset_name} offline. Download both files from '
        f'OGBench on a machine with internet (python -c "import ogbench; ogbench.download_datasets([\'{dataset_name}\'])") '
        f'and copy them into {os.path.dirname(train_path)}, or pass --dataset_dir pointing at them.'
    )


def load_dataset(path: str, observation_space, action_space) -> Dict[str, np.ndarray]:
    """Read an OGBench `.npz` and validate it against the environment's spaces.

    Returns the raw rows: observations, actions, terminals (bool, True on each episode's last row).
    Raises DatasetError naming the file and the problem, with the fix (delete and re-obtain).
    """
    fix = f'Delete {path} (and its -val/train sibling) and rerun to download or regenerate it.'
    try:
        with np.load(path) as file:
            missing = [k for k in REQUIRED_KEYS if k not in file]
            if missing:
                raise DatasetError(f'Dataset {path} lacks keys {missing} (has {sorted(file.keys())}). {fix}')
            data = {k: file[k][...] for k in REQUIRED_KEYS}
    except DatasetError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
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
    if not problems:
        if np.issubdtype(obs.dtype, np.floating) and not np.all(np.isfinite(obs)):
            problems.append(f'{np.sum(~np.isfinite(obs))} non-finite observation values')
        if not np.all(np.isfinite(actions)):
            problems.append(f'{np.sum(~np.isfinite(actions))} non-finite action values')
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


def array_shapes(path: str) -> Dict[str, Tuple[Tuple[int, ...], np.dtype]]:
    """{key: (shape, dtype)} of the arrays in an `.npz`, read from the headers only (no data is loaded)."""
    shapes = {}
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith('.npy'):
                with archive.open(name) as member:
                    version = np.lib.format.read_magic(member)
                    # Public readers only: numpy 2.4's np.lib.format no longer exposes _read_array_header.
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                    shape, _, dtype = read_header(member)
                shapes[name[: -len('.npy')]] = (shape, dtype)
    return shapes


def _host_available_bytes():
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_dataset_fits(paths, device=None, host_bytes=None, device_bytes=None):
    """DatasetError before loading if the observations of `paths` cannot fit, with what fits where.

    Observations are loaded into host memory once, then copied to the accelerator, where they stay
    (uint8 for images: 1M x 64 x 64 x 3 = 12.3 GB). On a CPU backend the device copy is host memory
    too, so the host needs room for both. `host_bytes` / `device_bytes` override the measured free
    memory (for tests)."""
    import jax

    device = device or jax.devices()[0]
    needed = 0
    for path in paths:
        try:
            shape, dtype = array_shapes(path).get('observations', ((0,), np.dtype(np.uint8)))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError):
            continue  # unreadable: load_dataset reports it with the fix
        needed += int(np.prod(shape)) * np.dtype(dtype).itemsize
    on_cpu = device.platform == 'cpu'
    host_bytes = _host_available_bytes() if host_bytes is None else host_bytes
    if device_bytes is None and not on_cpu:
        stats = device.memory_stats() or {}
        device_bytes = stats.get('bytes_limit', 0) - stats.get('bytes_in_use', 0) if 'bytes_limit' in stats else None
    problems = []
    host_needed = 2 * needed if on_cpu else needed
    if host_bytes is not None and host_needed > host_bytes:
        problems.append(f'host memory: {host_needed / 1e9:.1f} GB needed ({"dataset and its CPU-device copy" if on_cpu else "the loaded dataset"}), {host_bytes / 1e9:.1f} GB available')
    if not on_cpu and device_bytes is not None and needed > 0.8 * device_bytes:
        problems.append(f'{device.device_kind} memory: {needed / 1e9:.1f} GB of observations stay on it, {device_bytes / 1e9:.1f} GB free (training needs ~20% of it besides)')
    if problems:
        raise DatasetError(
            f'The observations of {", ".join(os.path.basename(p) for p in paths)} ({needed / 1e9:.1f} GB) do not fit: '
            f'{"; ".join(problems)}. A 1M-row 64x64x3 visual dataset needs ~12.3 GB on the accelerator (fits a '
            f'24 GB+ GPU) and ~13 GB of host RAM (~25 GB when training on CPU). Use a machine with more memory, '
            f'or generate fewer episodes (scripts/generate_dataset.py --num_episodes=N) for a smaller dataset.'
        )
    return needed
