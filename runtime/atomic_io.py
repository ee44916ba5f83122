"""The one way this project writes a file: atomically.

Everything a run leaves behind (checkpoints, CSV logs, JSON records, datasets, figures) goes through
`atomic_open`: the bytes go to a temporary sibling file, are flushed and fsynced, and the temporary
file is renamed over the target. A reader (or a run killed mid-write and resumed) therefore sees
either the old file or the new one, never a partial one. With `exclusive=True` the finished file is
published with a hard link instead of a rename, which fails if the target exists: a file that must
never be replaced (a dataset) cannot be, even by a concurrent writer. A failed write (disk full, file
size limit, permissions) raises the OSError with the target's path in `filename`.
"""

import contextlib
import errno
import json
import os
import re
import tempfile

TEMP_SUFFIX = '.tmp'


def temp_name_pattern(basename: str = None) -> 're.Pattern':
    """The names `atomic_open` gives the temporary files of a target named `basename` (of any target when
    None): `<basename>.<8 random characters of tempfile's alphabet>.tmp`. One found while nobody is writing
    the target is stale (its writer was killed before it could remove it)."""
    return re.compile((re.escape(basename) if basename else '.+') + r'\.[a-z0-9_]{8}' + re.escape(TEMP_SUFFIX))


def with_path(error: OSError, path: str) -> OSError:
    """`error` naming `path` (a failed write() says neither which file nor which folder)."""
    if error.errno is None or error.filename is not None:
        return error
    return OSError(error.errno, error.strerror, path)  # OSError(errno, ...) picks the matching subclass


@contextlib.contextmanager
def atomic_open(path: str, mode: str = 'wb', exclusive: bool = False, **kwargs):
    """`open(path, mode)` whose result appears at `path` only when the block ends without an error.

    The temporary file lives in the target's folder (a rename across file systems is not atomic) and
    is removed if the block raises. Files get mode 0644: datasets and results are meant to be shared.
    `exclusive`: FileExistsError instead of replacing an existing `path` (checked when publishing).
    """
    if mode not in ('w', 'wb'):
        raise ValueError(f'atomic_open writes whole files: mode must be "w" or "wb", got {mode!r}.')
    directory = os.path.dirname(os.path.abspath(path))
    tmp_path = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + '.', suffix=TEMP_SUFFIX)
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o644)
        if exclusive:
            _publish_exclusive(tmp_path, path)
        else:
            os.replace(tmp_path, path)
    except BaseException as e:
        if tmp_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_path)
        if isinstance(e, OSError) and not isinstance(e, FileExistsError):
            raise with_path(e, path) from e
        raise


def _publish_exclusive(tmp_path: str, path: str):
    """Move the finished temp file to `path`, raising FileExistsError if `path` exists. A hard link
    does it atomically; where the file system has none, an existence check then a rename (a file
    created by another process between the two would be replaced)."""
    try:
        os.link(tmp_path, path)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS):
            raise
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from None
        os.replace(tmp_path, path)
        return
    os.unlink(tmp_path)


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


def figure_format(path: str) -> str:
    """The format matplotlib writes `path` in: its extension (png without one). ValueError naming the formats matplotlib
    writes when it writes no such files (a figure script checks its --out with it before any work)."""
    from matplotlib.backend_bases import FigureCanvasBase

    fmt = os.path.splitext(path)[1].lstrip('.').lower() or 'png'
    formats = FigureCanvasBase.get_supported_filetypes()
    if fmt not in formats:
        raise ValueError(f'{path}: matplotlib writes no .{fmt} files. Name an image file: .png or .pdf (or '
                         f'{", ".join("." + f for f in sorted(formats) if f not in ("png", "pdf"))}).')
    return fmt


def save_figure(figure, path: str, dpi: int = 120):
    """matplotlib `figure.savefig`, atomically; the format follows the file extension (`figure_format`)."""
    fmt = figure_format(path)
    with atomic_open(path, 'wb') as f:
        figure.savefig(f, dpi=dpi, format=fmt)
