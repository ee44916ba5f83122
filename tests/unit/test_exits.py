"""main.py runs with Python's own garbage collector, and the absl scripts exit with status 0 when asked for help."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT

# main.py run as a script, its collector's state reported by an exit handler.
COLLECTOR_PROBE = '''
import atexit, gc, runpy, sys
DEFAULT_THRESHOLD = gc.get_threshold()[0]  # this Python's own, read before main.py runs
atexit.register(lambda: print("collector", gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()[0] == DEFAULT_THRESHOLD))
sys.argv = ["main.py", "--help"]
runpy.run_path("main.py", run_name="__main__")
'''


def test_main_py_runs_with_pythons_own_collector():
    """main.py leaves the garbage collector as Python sets it (on, nothing frozen, the default thresholds): a collector
    left off would never free a cycle in a month-long run, and over README's command 1 tuning it saves under 5% of the
    wall time (docs/performance.md, "Start-up")."""
    result = subprocess.run([sys.executable, '-c', COLLECTOR_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    enabled, frozen, default_threshold = result.stdout.strip().splitlines()[-1].split()[1:]
    assert enabled == 'True' and int(frozen) == 0 and default_threshold == 'True', result.stdout  # Python's defaults


ABSL_SCRIPT = '''
import sys
from absl import app, flags
from runtime.exits import parse_absl_flags
flags.DEFINE_integer("count", 1, "How many times to say it.")
def main(argv):
    print("main ran with", flags.FLAGS.count, argv[1:])
    return int(sys.argv[-1]) if sys.argv[-1].isdigit() else None
app.run(main, flags_parser=parse_absl_flags)
'''


@pytest.mark.parametrize('args, status, printed', [
    (['--help'], 0, 'How many times to say it.'), (['-h'], 0, 'How many times to say it.'),
    (['--helpfull'], 0, 'How many times to say it.'), (['--count=3', '--help'], 0, 'How many times to say it.'),
    (['--count=3'], 0, 'main ran with 3 []'), (['--count=3', '--', '-h', '7'], 7, "main ran with 3 ['-h', '7']"),
    (['--bogus'], 1, "Unknown command line flag 'bogus'"), (['--count=x', '--help'], 1, "flag --count=x"),
])
def test_absl_scripts_exit_0_when_asked_for_help_and_1_on_a_bad_flag(args, status, printed):
    """absl's help flags exit 1, which `&&`, `set -e` and schedulers read as a failure: the scripts' parser makes
    -h / --help / --helpfull exit 0 with the usage on stdout, as main.py does; a flag error still exits 1 (even beside
    --help), and after `--` a -h is an argument, not a request for help."""
    result = subprocess.run([sys.executable, '-c', ABSL_SCRIPT, *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == status, result.stderr[-2000:]
    assert printed in (result.stdout if status == 0 else result.stdout + result.stderr), result

