"""The one way this project writes a file: atomically.

Everything a run leaves behind (checkpoints, CSV logs, JSON records, datasets, figures) goes through
`atomic_open`: the bytes go to a temporary sibling file, are flushed and fsynced, and the temporary
file is renamed over the target. A reader (or a run killed mid-write and resumed) therefore sees
either the old file or the new one, never a partial one.
"""

import contextlib
import json
import os
import tempfile


@contextlib.contextmanager
def atomic_open(path: str, mode: str = 'wb', **kwargs):
    """`open(path, mode)` whose result appears at `path` only when the block ends without an error.

    The temporary file lives in the target's folder (a rename across file systems is not atomic) and
    is removed if the block raises. Files get mode 0644: datasets and results are meant to be shared.
    """
    if mode not in ('w', 'wb'):
        raise ValueError(f'atomic_open writes whole files: mode must be "w" or "wb", got {mode!r}.')
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + '.', suffix='.tmp')
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_path)
        raise


def atomic_write_bytes(path: str, data: bytes):
    with atomic_open(path, 'wb') as f:
        f.write(data)


def atomic_write_text(path: str, text: str):
    with atomic_open(path, 'w', newline='') as f:
        f.write(text)


def write_json(path: str, obj):
    """Indented JSON; values JSON cannot hold (tuples stay lists, other objects) are written as strings."""
    atomic_write_text(path, json.dumps(obj, indent=2, default=str) + '\n')


def read_json(path: str):
    with open(path) as f:
        return json.load(f)


def save_figure(figure, path: str, dpi: int = 120):
    """matplotlib `figure.savefig`, atomically; the format follows the file extension."""
    fmt = os.path.splitext(path)[1].lstrip('.') or 'png'
    with atomic_open(path, 'wb') as f:
        figure.savefig(f, dpi=dpi, format=fmt)
