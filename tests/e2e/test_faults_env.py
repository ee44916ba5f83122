"""Faults from the run's surroundings, injected into real main.py processes: the wall clock stepping, a closed
terminal, a command line, run files and a numeric mode that are not what the run was started with, names the file
system cannot hold (docs/guarantees.md, "Faults tried")."""

import json
import os
import signal
import subprocess
import sys

import flax.serialization
import pytest

from runtime import checkpoints
from tests.e2e.test_faults import BUDGET, ENDLESS, MAIN, ROOT, csv_steps, error_paragraph, finish, main_command, run, \
    start, wait_until

pytestmark = pytest.mark.xdist_group('test_faults_env')

# main.py with the wall clock stepped 2 hours ahead as training starts (NTP, a laptop's suspend), as time.time sees it.
CLOCK_STEP = '''
import sys, time
from absl import app
import main
real_time, step = time.time, [0.0]
time.time = lambda: real_time() + step[0]
run = main.TrainingLoop.run
def stepped_run(self):
    step[0] = 7200.0
    return run(self)
main.TrainingLoop.run = stepped_run
sys.argv = ['main.py', *sys.argv[1:]]
app.run(main.main, flags_parser=main.keep_argv)
'''


def test_a_wall_clock_step_does_not_fire_the_time_limit(tmp_path, pointmaze_data_dir):
    command = main_command(pointmaze_data_dir, tmp_path, *BUDGET, '--time_limit=3600', '--run_name=r')
    returncode, _, err = run([sys.executable, '-c', CLOCK_STEP, *command[2:]])
    assert returncode == 0 and 'time_limit' not in err, err[-3000:]
    assert (tmp_path / 'default' / 'r' / 'DONE').exists()


def test_sighup_checkpoints_and_exits_129(tmp_path, pointmaze_data_dir):
    """A closed terminal (SIGHUP) stops a run as a preemption does: checkpoint of the step reached, one line, 129."""
    run_dir = tmp_path / 'default' / 'r'
    process = start(main_command(pointmaze_data_dir, tmp_path, *ENDLESS, '--run_name=r'))
    wait_until(lambda: len(csv_steps(run_dir / 'train.csv')) >= 1, process)
    process.send_signal(signal.SIGHUP)
    returncode, _, err = finish(process)
    assert returncode == 129 and 'Traceback' not in err, err[-3000:]
    step = checkpoints.checkpoint_step(str(run_dir / checkpoints.CHECKPOINT_NAME))
    assert step >= 20 and f'SIGHUP received: checkpoints saved at step {step}; rerun with --resume.' in err


def test_agent_given_twice_names_both(tmp_path, pointmaze_data_dir):
    command = main_command(pointmaze_data_dir, tmp_path, '--agent.batch_size=16', '--agent=configs/presets.py:gcbc_phi')
    paragraph = error_paragraph(*run(command)[::2])
    assert paragraph.startswith('--agent is given 2 times (agents/gcbc.py, then configs/presets.py:gcbc_phi)'), paragraph
    assert not os.path.exists(tmp_path / 'default')


def test_names_the_file_system_cannot_hold_are_refused_before_anything_starts(tmp_path, pointmaze_data_dir):
    """A 300-byte --run_name, and a sweep whose run group is 300 bytes: refused with the limit and the fix, before
    anything is written or launched."""
    long_name = 'n' * 300
    paragraph = error_paragraph(*run(main_command(pointmaze_data_dir, tmp_path, *BUDGET, f'--run_name={long_name}'))[::2])
    assert 'is 300 bytes long' in paragraph and 'at most 255 bytes' in paragraph and '--run_name' in paragraph
    sweep = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), f'--name={long_name}',
                            '--method=gcbc', '--envs=pointmaze-medium-stitch-v0', '--seeds=0-1', f'--save_dir={tmp_path}',
                            '--', f'--dataset_dir={pointmaze_data_dir}', '--nodownload'],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert sweep.returncode != 0 and 'is 300 bytes long' in sweep.stdout + sweep.stderr, sweep.stdout + sweep.stderr
    assert os.listdir(tmp_path) == []
