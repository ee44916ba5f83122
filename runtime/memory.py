"""Whether a run fits this machine's memory, checked before any long work: one evaluation's episodes (host memory)
and the dataset's observations (host and accelerator memory). Each check raises a named error whose paragraph says
what fits. An address-space limit (`ulimit -v`) is not checked: what a run maps depends on the machine's thread count
and the compiler, so no advance figure is right everywhere."""

import os
import zipfile
from typing import Optional

from utils.datasets import observation_bytes
from utils.errors import ConfigError, DatasetError
from utils.evaluation.episodes import MAX_ROWS_PER_BATCH

# Memory of one episode being stepped: 180-230 KB for a point, ant or humanoid maze (MuJoCo 4.0, measured), rounded up.
EPISODE_BYTES = 256 << 10
# What an evaluation keeps per episode until it ends, besides its final observation: its `Episode` record (a named
# tuple of Python numbers and a view of the final observation, about 350 bytes measured with tracemalloc) and the
# evaluation's per-row arrays and seeds (about 80 bytes), rounded up.
RESULT_BYTES_PER_EPISODE = 512


def host_available_bytes() -> Optional[int]:
    """The host memory available to a new process (MemAvailable), or None where /proc/meminfo does not say."""
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def evaluation_bytes(num_rows: int, observation_bytes: int) -> int:
    """Host memory an evaluation of `num_rows` episodes needs: the episodes stepping together (at most
    MAX_ROWS_PER_BATCH of them) and every episode's results until the evaluation ends."""
    return min(num_rows, MAX_ROWS_PER_BATCH) * EPISODE_BYTES + num_rows * (observation_bytes + RESULT_BYTES_PER_EPISODE)


def check_evaluation_fits(num_seeds: int, num_tasks: int, episodes_per_task: int, observation_bytes: int,
                          available_bytes: Optional[int]):
    """ConfigError before any training if an evaluation of these sizes would not fit in `available_bytes` of host
    memory (None: unknown, not checked), naming the largest --eval_episodes that fits."""
    rows = num_seeds * num_tasks * episodes_per_task
    needed = evaluation_bytes(rows, observation_bytes)
    budget = None if available_bytes is None else 0.8 * available_bytes
    if budget is None or needed <= budget:
        return
    per_episode = num_seeds * num_tasks * (observation_bytes + RESULT_BYTES_PER_EPISODE)
    largest = int((budget - MAX_ROWS_PER_BATCH * EPISODE_BYTES) // per_episode)
    raise ConfigError(
        f'--eval_episodes={episodes_per_task} does not fit in host memory: an evaluation of {rows:,} episodes '
        f'({num_seeds} seed(s) x {num_tasks} task(s)) needs about {needed / 1e9:.1f} GB, and {available_bytes / 1e9:.1f} '
        f'GB are available (80% may be used). Pass --eval_episodes={max(largest, 1)} or fewer '
        f'(or fewer --eval_tasks / --num_seeds), or use a machine with more memory. Nothing was written.'
    )


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
            needed += observation_bytes(path)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError):
            continue  # unreadable: load_dataset reports it with the fix
    on_cpu = device.platform == 'cpu'
    host_bytes = host_available_bytes() if host_bytes is None else host_bytes
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
            f'{"; ".join(problems)}. A 1M-row 64x64x3 visual dataset and its val split are 13.5 GB of frames, kept on '
            f'the accelerator (a GPU with 24 GB or more) and loaded through host RAM (about 16 GB; about 27 GB when '
            f'training on the CPU, which holds both copies). Use a machine with more memory, '
            f'or generate fewer episodes (scripts/generate_dataset.py --num_episodes=N) for a smaller dataset.'
        )
    return needed
