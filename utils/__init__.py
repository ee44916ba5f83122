"""The project's core library.

Importing it from a script of one checkout while Python finds this package in another checkout
(`python scripts/x.py` in checkout B puts B/scripts, not B, on sys.path, so `import utils` falls
through to the `pip install -e` of checkout A) stops with an error naming both checkouts: one
checkout's script must not silently run another's library.
"""

import os as _os
import sys as _sys

_CHECKOUT_MARKERS = ('pyproject.toml', 'main.py', _os.path.join('utils', '__init__.py'))
# Where a checkout's own entry points live (a virtual environment inside a checkout is not one of them).
_ENTRY_POINTS = ('main.py', 'scripts', 'experiments', 'datagen', 'utils', 'agents', 'configs')


def checkout_root(path):
    """The checkout (a folder holding pyproject.toml, main.py and utils/) that contains `path`, or None."""
    directory = _os.path.dirname(_os.path.abspath(path))
    while True:
        if all(_os.path.exists(_os.path.join(directory, marker)) for marker in _CHECKOUT_MARKERS):
            return directory
        parent = _os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _check_same_checkout():
    script = getattr(_sys.modules.get('__main__'), '__file__', None)
    script_root = checkout_root(script) if script else None
    library_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    if script_root is None or _os.path.realpath(script_root) == _os.path.realpath(library_root):
        return
    relative = _os.path.relpath(_os.path.abspath(script), script_root)
    if relative.split(_os.sep)[0] not in _ENTRY_POINTS:
        return  # e.g. pytest's __main__ in a virtual environment that lives inside a checkout
    module = _os.path.splitext(relative)[0].replace(_os.sep, '.')
    raise SystemExit(
        f'Error: {script} belongs to the checkout {script_root}, but Python imported this project\'s code from '
        f'{library_root} (the checkout installed with `pip install -e`, or one on PYTHONPATH). Running one '
        f'checkout\'s script on another\'s library mixes two versions, so it stopped. Run it on its own checkout: '
        f'`cd {script_root} && python -m {module}`, or `PYTHONPATH={script_root} python {script}`, or make that '
        f'checkout the installed one (`pip install -e {script_root}`).'
    )


_check_same_checkout()
