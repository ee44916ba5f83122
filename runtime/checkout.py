"""A script runs on its own checkout's code.

`python scripts/x.py` puts `<checkout>/scripts` on sys.path, not the checkout itself, so `import utils` resolves to
whichever checkout is installed (`pip install -e`) or on PYTHONPATH, which may be another one. Every script calls
`require_own_checkout(__file__)` before doing any work, and stops with one message naming both checkouts if the code
it imported is not its own. (main.py sits at the checkout's root, which Python puts on sys.path: it always runs its
own code.)
"""

import os
import sys

_CHECKOUT_MARKERS = ('pyproject.toml', 'main.py', os.path.join('runtime', 'checkout.py'))


def checkout_root(path):
    """The checkout (a folder holding pyproject.toml, main.py and runtime/checkout.py) that contains `path`, or None."""
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        if all(os.path.exists(os.path.join(directory, marker)) for marker in _CHECKOUT_MARKERS):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def require_own_checkout(script: str):
    """Exit with status 1 and a message naming both checkouts if `script` (a script's __file__) belongs to another
    checkout than the code Python imported."""
    script_root = checkout_root(script)
    library_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if script_root is None or os.path.realpath(script_root) == os.path.realpath(library_root):
        return
    module = os.path.splitext(os.path.relpath(os.path.abspath(script), script_root))[0].replace(os.sep, '.')
    print(f'Error: {script} belongs to the checkout {script_root}, but Python imported this project\'s code from '
          f'{library_root} (the checkout installed with `pip install -e`, or one on PYTHONPATH). Running one checkout\'s '
          f'script on another\'s library mixes two versions, so it stopped before doing anything. Run it on its own '
          f'checkout: `cd {script_root} && python -m {module}`, or `PYTHONPATH={script_root} python {script}`, or make '
          f'that checkout the installed one (`pip install -e {script_root}`).', file=sys.stderr)
    sys.exit(1)
