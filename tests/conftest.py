"""Test-session settings and the fixtures several test files share."""

import os
import tempfile

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
# end-to-end tests start main.py with the same configs many times, and compiling is most of their cost.
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', tempfile.mkdtemp(prefix='byol-gamma-tests-xla-'))
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')

POINTMAZE = 'pointmaze-medium-stitch-v0'


@pytest.fixture(scope='session')
def pointmaze_data_dir(tmp_path_factory):
    """A small pointmaze-medium-stitch dataset (500 + 50 episodes of 201 rows), generated once per session."""
    from datagen.pointmaze import write_dataset

    path = tmp_path_factory.mktemp('pointmaze-data')
    write_dataset(POINTMAZE, str(path), seed=0, num_train_episodes=500, num_val_episodes=50, progress=False)
    return str(path)
