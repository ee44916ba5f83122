"""Test-session settings and the fixtures several test files share. The suite comes in three tiers:

    tests/unit     pure functions and single components on small arrays: `python -m pytest -q -n 2 tests/unit`
    tests/agents   agents built, trained and evaluated in-process on toy data
    tests/e2e      main.py, the scripts and sweeps run as users run them, in subprocesses on real files

Shared helpers live in tests/helpers.py; no test module imports another."""

import fcntl
import os
import shutil
import signal
import sys
import tempfile
import threading

import pytest

# submitit configures logging when first imported (logging.config.dictConfig), which closes every handler
# installed before: absl's handler then closes the stream it holds, under pytest a capture file pytest
# still uses, and every later test of that process fails ("I/O operation on closed file"). Imported here,
# before anything installs absl's handler, it configures logging once, harmlessly.
import submitit  # noqa: F401

# Tests run on the CPU and must never need the network.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('WANDB_MODE', 'disabled')
os.environ.setdefault('MUJOCO_GL', 'egl')
# One persistent XLA compilation cache for the whole session, inherited by every main.py subprocess: the
# end-to-end tests start main.py with the same configs many times, and compiling is most of their cost. Made by
# the process that starts the session (the workers inherit it) and removed when that process ends; a cache
# directory the caller names is the caller's, and is kept.
SESSION_CACHE_DIR = None
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
    SESSION_CACHE_DIR = os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='byol-gamma-tests-xla-')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')
# XLA's own settings for every test process (fewer optimisations, faster CPU compilation, one instruction set) are
# tests/__init__.py's, set when this package is imported, before this file.

POINTMAZE = 'pointmaze-medium-stitch-v0'


def pytest_configure(config):
    # The persistent cache pays for the main.py subprocesses, which compile the same programs again and again;
    # in a test worker nearly every program is compiled once, so writing it to disk (~4% of a worker's
    # time) would buy nothing.
    if os.environ.get('PYTEST_XDIST_WORKER') or not getattr(config.option, 'numprocesses', None):
        import jax

        jax.config.update('jax_enable_compilation_cache', False)
        # JAX installs its at-fork warning when its backend starts; started here, every test that forks this
        # process meets pyproject.toml's filter, whichever tests ran before it.
        jax.devices()


def pytest_sessionstart(session):
    # A SIGTERM (a CI job's timeout, `kill`) interrupts the session as Ctrl-C does, so its teardown still ends the
    # processes the tests started (a SIGKILL cannot be caught).
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f'{signal.Signals(signum).name}')


@pytest.fixture(autouse=True)
def no_started_process_outlives_its_test():
    """What a test started with tests.helpers.start and left running ends with the test, however it ends."""
    from tests.helpers import STARTED, end_started

    before = len(STARTED)
    yield
    end_started(before)


def pytest_sessionfinish(session):
    # After the last teardown, and after an interrupted one: whatever tests.helpers.start made and is still running.
    from tests.helpers import end_started

    end_started()


def pytest_collection_finish(session):
    # Every test module is imported: what they imported lives as long as the process; the collector then walks
    # only what the tests make (tests/main_process.py).
    from tests.main_process import freeze_imported_objects

    freeze_imported_objects()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # A test worker ends here, after it has sent its results to the main pytest process: it skips the
    # interpreter's shutdown, which frees thousands of compiled programs one by one (about 5 s per worker).
    if os.environ.get('PYTEST_XDIST_WORKER'):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if SESSION_CACHE_DIR:
        shutil.rmtree(SESSION_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope='session')
def pointmaze_data_dir(tmp_path_factory, worker_id):
    """A small pointmaze-medium-stitch dataset (250 + 25 episodes of 201 rows), generated once per test run
    and shared, read-only, by the pytest-xdist workers (the first to need it generates it under a lock)."""
    from datagen.pointmaze import write_dataset

    root = tmp_path_factory.getbasetemp()
    root = root if worker_id == 'master' else root.parent
    path = root / 'pointmaze-data'
    with open(root / 'pointmaze-data.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / f'{POINTMAZE}-val.npz').exists():
            write_dataset(POINTMAZE, str(path), seed=0, num_train_episodes=250, num_val_episodes=25, progress=False)
    return str(path)
