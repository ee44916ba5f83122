"""The test suite cleans up after itself: a run leaves nothing in the machine's temporary directory."""

import os
import subprocess
import sys

from tests.helpers import ROOT


def test_a_session_with_workers_removes_its_compilation_cache(tmp_path):
    """The session's XLA cache directory is made by the process that starts pytest, shared by its workers, and
    removed at the end (before: every process that read conftest.py made one, and none was removed: ~8 MB a run)."""
    env = {k: v for k, v in os.environ.items() if k not in ('JAX_COMPILATION_CACHE_DIR', 'PYTEST_XDIST_WORKER')}
    (tmp_path / 'tmp').mkdir()
    env['TMPDIR'] = str(tmp_path / 'tmp')
    result = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-n', '2', '-p', 'no:cacheprovider',
                             f'--basetemp={tmp_path / "basetemp"}', 'tests/unit/test_packaging.py::test_pyproject_pins_exactly_the_requirements'],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and '1 passed' in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert os.listdir(tmp_path / 'tmp') == [], os.listdir(tmp_path / 'tmp')
