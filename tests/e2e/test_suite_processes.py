"""No process a test starts outlives the test session: a test's subprocess (tests.helpers.start) that is still running
when its test ends, or when pytest is interrupted by Ctrl-C or SIGTERM, is ended with every process
it started, also one in a session of its own (as a sweep's jobs are)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from runtime.subprocesses import set_up_then_exec
from tests.helpers import start

INTERACTIVE = 'import signal; signal.signal(signal.SIGINT, signal.SIG_DFL)'

# A child that starts a grandchild in a session of its own, prints both pids and waits, as main.py under a sweep does.
CHILD = '''
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)
print(f'{grandchild.pid}', flush=True)
time.sleep(600)
'''

INNER_TEST = f'''
import os, sys, time
from tests.helpers import start

CHILD = {CHILD!r}


def test_leaves_a_process_running():
    child = start([sys.executable, '-c', CHILD])
    grandchild = child.stdout.readline().strip()
    with open(os.environ['PIDS_FILE'] + '.tmp', 'w') as f:
        f.write(f'{{child.pid}} {{grandchild}}')
    os.rename(os.environ['PIDS_FILE'] + '.tmp', os.environ['PIDS_FILE'])
    if os.environ['END'] != 'teardown':
        time.sleep(600)  # until pytest is interrupted
'''


def gone(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] in ('Z', 'X')  # exited, maybe not yet reaped
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isdir('/proc'), reason='reads process states from /proc')
def test_no_started_process_outlives_its_test_or_an_interrupted_session(tmp_path):
    (tmp_path / 'test_inner.py').write_text(INNER_TEST)
    ends = {'teardown': None, 'Ctrl-C': signal.SIGINT, 'SIGTERM': signal.SIGTERM}
    sessions = {}
    for end in ends:
        env = dict(os.environ, END=end, PIDS_FILE=str(tmp_path / f'{len(sessions)}.pids'))
        env.pop('PYTEST_XDIST_WORKER', None)
        inner = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-p', 'tests.conftest',
                 f'--rootdir={tmp_path}', str(tmp_path / 'test_inner.py')]
        # As a terminal starts it: SIGINT handled (a process started in the background inherits it ignored).
        sessions[end] = (start(set_up_then_exec(INTERACTIVE, inner), env=env, stderr=subprocess.STDOUT), env['PIDS_FILE'])
    pids = {}
    for end, (session, pids_file) in sessions.items():
        deadline = time.monotonic() + 120
        while not os.path.exists(pids_file):
            assert session.poll() is None, session.communicate()[0][-3000:]
            assert time.monotonic() < deadline, f'{end}: the inner test never started its process'
            time.sleep(0.05)
        pids[end] = [int(pid) for pid in open(pids_file).read().split()]
        if ends[end] is not None:
            session.send_signal(ends[end])
    for end, (session, _) in sessions.items():
        output = session.communicate(timeout=120)[0]
        assert session.returncode == (0 if end == 'teardown' else 2), output[-3000:]  # 2: interrupted
    for end, (child, grandchild) in pids.items():
        deadline = time.monotonic() + 20
        while not (gone(child) and gone(grandchild)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child) and gone(grandchild), f'{end}: a started process outlived the session'
