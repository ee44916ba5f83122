"""MuJoCo's rendering backend (MUJOCO_GL), checked before mujoco is imported.

`import mujoco` loads the backend MUJOCO_GL names at once, and a backend whose library is missing (MUJOCO_GL=osmesa
without OSMesa) fails that import with an AttributeError from PyOpenGL: every program that imports mujoco would die,
even `main.py --help` and runs that render nothing. So before mujoco is imported (utils/, datagen/ and runtime/ call
`check_before_import` first), a named backend whose library cannot be found is switched off for this process and its
children, and what failed is remembered; whatever renders (evaluation videos, visual datasets) then says which
backend failed and what to use (`unavailable_message`).
"""

import ctypes.util
import os
import sys
from typing import Optional

# The library each headless backend loads.
BACKEND_LIBRARIES = {'osmesa': 'OSMesa', 'egl': 'EGL'}
# Set for child processes too: the backend asked for and why it could not be used.
UNAVAILABLE_VARIABLE = 'BYOL_GAMMA_MUJOCO_GL_UNAVAILABLE'


def check_before_import():
    """Switch off a MUJOCO_GL backend whose library is missing, before anything imports mujoco."""
    backend = os.environ.get('MUJOCO_GL', '').strip().lower()
    library = BACKEND_LIBRARIES.get(backend)
    if library is None or 'mujoco' in sys.modules or ctypes.util.find_library(library):
        return
    os.environ[UNAVAILABLE_VARIABLE] = f'{backend}: lib{library} was not found on this machine'
    os.environ['MUJOCO_GL'] = 'disabled'


def unavailable_message() -> Optional[str]:
    """Why rendering cannot work in this process (MUJOCO_GL named a backend whose library is missing), with what to
    use instead; None if nothing is known to be wrong."""
    failed = os.environ.get(UNAVAILABLE_VARIABLE)
    if not failed:
        return None
    return (f'MUJOCO_GL={failed}, so MuJoCo cannot render. Use MUJOCO_GL=egl on a machine with a GPU driver (its '
            f'libEGL), or install OSMesa for MUJOCO_GL=osmesa (Debian/Ubuntu: apt-get install libosmesa6).')
