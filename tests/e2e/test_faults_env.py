"""Faults from the run's surroundings, injected into real main.py processes: the wall clock stepping, a closed
terminal, a command line, run files and a numeric mode that are not what the run was started with, names the file
system cannot hold (docs/guarantees.md, "Faults tried")."""

import json
import os
import signal
import subprocess
import sys

import pytest

from runtime import checkpoints
from runtime.loggers import read_csv_rows
from runtime.subprocesses import set_up_then_exec
from tests.helpers import (BUDGET, ENDLESS, ENV, FAKE_JOB, MAIN, MAIN_PROCESS, ROOT, error_paragraph, fake_slurm,
                           finish, job_record, main_command, run, start, wait_until)


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
    returncode, _, err = run([sys.executable, '-c', CLOCK_STEP, *command[len(MAIN_PROCESS):]])
    assert returncode == 0 and 'time_limit' not in err, err[-3000:]
    assert (tmp_path / 'default' / 'r' / 'DONE').exists()


def test_sighup_checkpoints_and_exits_129(tmp_path, pointmaze_data_dir):
    """A closed terminal (SIGHUP) stops a run as a preemption does: checkpoint of the step reached, one line, 129."""
    run_dir = tmp_path / 'default' / 'r'
    process = start(main_command(pointmaze_data_dir, tmp_path, *ENDLESS, '--run_name=r'))
    wait_until(lambda: (run_dir / 'train.csv').exists() and len(read_csv_rows(str(run_dir / 'train.csv'))[1]) >= 1, process)
    process.send_signal(signal.SIGHUP)
    returncode, _, err = finish(process)
    assert returncode == 129 and 'Traceback' not in err, err[-3000:]
    step = checkpoints.checkpoint_step(str(run_dir / checkpoints.CHECKPOINT_NAME))
    assert step >= 20 and f'SIGHUP received: checkpoints saved at step {step}; rerun with --resume.' in err


def test_every_attempt_records_its_code_and_the_tables_flag_a_run_whose_code_changed(tmp_path, pointmaze_data_dir):
    """A --resume after a code change was recorded nowhere. Every attempt (the first one too) records its code in the
    run's attempt log, resumes.json: the checkout's git commit and whether it had uncommitted changes. A run whose
    attempts ran different code (here: the first attempt's record as another commit would have written it) is
    marked § in the tables and listed with each attempt's code."""
    commit = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(['git', 'status', '--porcelain'], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip())
    run_dir = tmp_path / 'default' / 'r'
    for steps in ('--train_steps=20', '--train_steps=40'):
        code, _, err = run(main_command(pointmaze_data_dir, tmp_path, *BUDGET, steps, '--run_name=r', '--resume'))
        assert code == 0, err[-3000:]
    attempts = json.loads((run_dir / 'resumes.json').read_text())
    assert [(a['from_step'], a['code']) for a in attempts] == [(0, dict(commit=commit, dirty=dirty)),
                                                              (20, dict(commit=commit, dirty=dirty))]
    attempts[0]['code'] = dict(commit='0123456789abcdef' * 2 + '01234567', dirty=False)
    (run_dir / 'resumes.json').write_text(json.dumps(attempts))
    table = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'results.py'), f'--runs={tmp_path}'], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert next(line for line in table.stdout.splitlines() if line.startswith('| pointmaze-medium-stitch')).endswith(' § |')
    assert (f'{run_dir} (seed 0): 0123456789ab, {commit[:12]}' + ' (uncommitted changes)' * dirty) in table.stdout


def test_agent_given_twice_names_both(tmp_path, pointmaze_data_dir):
    """--agent given twice is refused naming both, also when one of them stands in a --flagfile (the later one won
    silently, or absl said "defined twice")."""
    command = main_command(pointmaze_data_dir, tmp_path, '--agent.batch_size=16', '--agent=configs/presets.py:gcbc_phi')
    paragraph = error_paragraph(*run(command)[::2])
    assert paragraph.startswith('--agent is given 2 times (agents/gcbc.py, then configs/presets.py:gcbc_phi)'), paragraph
    flagfile = tmp_path / 'run.flags'
    flagfile.write_text('--agent=configs/presets.py:gcbc_phi\n--agent.batch_size=16\n')
    paragraph = error_paragraph(*run(main_command(pointmaze_data_dir, tmp_path, f'--flagfile={flagfile}'))[::2])
    assert paragraph.startswith('--agent is given 2 times (agents/gcbc.py, then configs/presets.py:gcbc_phi)'), paragraph
    assert not (tmp_path / 'default').exists()
    assert not os.path.exists(tmp_path / 'default')


# Agent config files that cannot give a config: (file content or None for a directory, the --agent suffix, what the
# paragraph says).
BAD_AGENT_FILES = {
    'directory': (None, '', 'is a directory, not a config file'),
    'syntax': ('def get_config(:\n', '', 'has a syntax error (line 1: '),
    'raises': ('x = 1\nraise RuntimeError("no GPU here")\n', '', 'raised RuntimeError at line 2 while it was read: no GPU here'),
    'no_get_config': ('x = 1\n', '', 'defines no get_config() function'),
    'returns_dict': ('def get_config():\n    return {"agent_name": "gcbc"}\n', '', 'returned dict; --agent needs an '
                     'ml_collections.ConfigDict'),
    'returns_none': ('def get_config():\n    return None\n', '', 'returned NoneType; --agent needs an '
                     'ml_collections.ConfigDict'),
    'argument': ('from agents.gcbc import get_config\n', ':big', 'takes no argument, but ":big" passes one. Drop ":big"'),
}


def test_a_run_group_or_name_the_tables_would_skip_is_refused(tmp_path, pointmaze_data_dir):
    """A run group ending in .old was accepted, and the tables then skipped its runs as set aside. Refused, nothing
    written."""
    for flag in ('--run_group=mine.old', '--run_name=r.damaged'):
        paragraph = error_paragraph(*run(main_command(pointmaze_data_dir, tmp_path, flag))[::2])
        assert 'which marks a folder set aside (the results tables skip it). Nothing was written' in paragraph, paragraph
    assert not os.listdir(tmp_path)


def test_agent_config_files_that_cannot_give_a_config_are_named(tmp_path, pointmaze_data_dir):
    """--agent naming a directory, a file with a syntax error or one that raises while it runs, one without
    get_config, a get_config returning a dict or None, and `:arg` for a get_config that takes none: each is one
    paragraph naming the file and what to fix (not a traceback), before anything is written."""
    processes = {}
    for case, (content, suffix, _) in BAD_AGENT_FILES.items():
        path = tmp_path / 'configs' / (case if content is None else f'{case}.py')
        path.parent.mkdir(exist_ok=True)
        path.mkdir() if content is None else path.write_text(content)
        command = [f'--agent={path}{suffix}' if arg.startswith('--agent=') else arg
                   for arg in main_command(pointmaze_data_dir, tmp_path / 'runs', *BUDGET)]
        processes[case] = (start(command), path)
    for case, (process, path) in processes.items():
        paragraph = error_paragraph(*finish(process, timeout=120)[::2])
        assert str(path) in paragraph and BAD_AGENT_FILES[case][2] in paragraph, (case, paragraph)
    assert not os.path.exists(tmp_path / 'runs')


def test_an_empty_folder_flag_is_refused_not_read_as_the_working_directory(tmp_path, pointmaze_data_dir):
    """--save_dir= (main.py or a sweep) and --dataset_dir= joined '' to every path: the run, or the data, went into the
    working directory without a word. Each is refused before anything is written."""
    work = tmp_path / 'work'
    work.mkdir()
    empty = {'save_dir': main_command(pointmaze_data_dir, '', *BUDGET),
             'dataset_dir': main_command('', tmp_path / 'runs', *BUDGET, '--generate_dataset')}
    processes = {name: start(command, cwd=work) for name, command in empty.items()}
    sweep = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=s', '--method=gcbc',
                            f'--envs={ENV}', '--save_dir=', '--dry_run'], cwd=work, capture_output=True, text=True,
                           timeout=300)
    assert sweep.returncode == 1 and 'Error: --save_dir is empty, so the runs would be written into the working ' \
                                     f'directory ({work})' in sweep.stderr, sweep.stderr
    for name, process in processes.items():
        paragraph = error_paragraph(*finish(process, timeout=120)[::2])
        assert paragraph.startswith(f'--{name} is empty, so the ') and f'into the working directory ({work})' in paragraph
        assert 'Nothing was written' in paragraph and f'--{name}=' in paragraph, paragraph
    assert os.listdir(work) == [] and not os.path.exists(tmp_path / 'runs')


# main.py, printing at its end the most address space the process mapped (VmPeak, the figure `ulimit -v` limits).
PEAK_ADDRESS_SPACE = '''
import atexit, sys
from absl import app
import main
atexit.register(lambda: print(next(l for l in open('/proc/self/status') if l.startswith('VmPeak:')), file=sys.stderr))
sys.argv = ['main.py', *sys.argv[1:]]
app.run(main.main, flags_parser=main.keep_argv)
'''


def test_an_address_space_limit_the_run_fits_in_is_not_refused(tmp_path, pointmaze_data_dir):
    """A check before loading the data refused an address-space limit (ulimit -v) below what the process mapped plus
    1 GiB, and its advised value was refused again when followed (the process maps more once it has room): 2 GB was
    refused where the run finishes. No limit is refused in advance: a run under a limit a little above its own peak
    (measured here, unlimited) finishes."""
    arguments = main_command(pointmaze_data_dir, tmp_path / 'free', *BUDGET)[len(MAIN_PROCESS):]
    code, _, err = run([sys.executable, '-c', PEAK_ADDRESS_SPACE, *arguments])
    assert code == 0, err[-3000:]
    limit = int(int(err.rpartition('VmPeak:')[2].split()[0]) * 1024 * 1.1)
    set_limit = f'import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))'
    code, _, err = run(set_up_then_exec(set_limit, main_command(pointmaze_data_dir, tmp_path / 'limited', *BUDGET)))
    assert code == 0 and (tmp_path / 'limited' / 'default').exists(), err[-3000:]


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


def test_run_files_that_are_not_what_main_py_wrote_are_named_and_nothing_is_written(tmp_path, pointmaze_data_dir):
    """--resume of copies of one finished run, one with a record that does not parse, one with a value recorded as
    another JSON type (as a version that recorded the flag otherwise would have), or resumed in another numeric mode,
    or recorded with a speed path this version no longer has (--network_kernel=fused, --optimizer_layout=one_vector):
    each is refused with a paragraph naming the file (or the difference) and its way out, and the directory is left
    byte for byte as it was. A run recorded with those flags at the values this version computes resumes."""
    import shutil

    reference = tmp_path / 'reference'
    returncode, _, err = run(main_command(pointmaze_data_dir, reference, *BUDGET, '--run_name=r'))
    assert returncode == 0, err[-3000:]
    cases = {
        'resumes_text': ('resumes.json', 'not json', 'resumes.json is damaged (JSONDecodeError'),
        'seed_text': ('flags.json', None, '--seed: "0" (str) -> 0 (int)'),
        'x64': (None, None, 'trained in float32, in float64'),
        'kernel': ('flags.json', None, 'trained with --network_kernel=fused, which this version no longer has (the '
                                       'git tag speed-paths'),
        'layout': ('flags.json', None, 'trained with --optimizer_layout=one_vector, which this version no longer has'),
    }
    # What flags.json held besides (a value recorded as another type; the flags of an earlier version's speed paths).
    recorded = {'seed_text': dict(seed='0'), 'kernel': dict(network_kernel='fused', optimizer_layout='per_leaf'),
                'layout': dict(network_kernel='xla', optimizer_layout='one_vector'),
                'retired_defaults': dict(network_kernel='xla', optimizer_layout='per_leaf')}
    processes = {}
    for case, (name, content, _) in [*cases.items(), ('retired_defaults', ('flags.json', None, None))]:
        save_dir = tmp_path / case
        shutil.copytree(reference, save_dir)
        run_dir = save_dir / 'default' / 'r'
        if case in recorded:
            flags = json.loads((run_dir / 'flags.json').read_text())
            (run_dir / 'flags.json').write_text(json.dumps(dict(flags, **recorded[case])))
        elif name is not None:
            (run_dir / name).write_text(content)
        before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
        env = dict(os.environ, JAX_ENABLE_X64='1') if case == 'x64' else None
        command = main_command(pointmaze_data_dir, save_dir, *BUDGET[1:], '--train_steps=60', '--run_name=r', '--resume')
        processes[case] = (start(command, env=env), run_dir, before)
    process, run_dir, _ = processes.pop('retired_defaults')
    returncode, _, err = finish(process, timeout=120)
    assert returncode == 0 and (run_dir / 'DONE').exists(), err[-3000:]
    for case, (process, run_dir, before) in processes.items():
        paragraph = error_paragraph(*finish(process, timeout=120)[::2])
        assert cases[case][2] in paragraph, (case, paragraph)
        assert any(fix in paragraph for fix in ('mv ', 'Differences', 'JAX_ENABLE_X64', 'another --run_name')), \
            (case, paragraph)
        after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
        assert after == before, case


def slurm_sweep(tmp_path, data_dir, *options):
    """scripts/sweep.py --backend=slurm --wait of one GCBC run, as a user starts it."""
    return [sys.executable, os.path.join(ROOT, 'scripts', 'sweep.py'), '--name=s', '--method=gcbc', f'--envs={ENV}',
            '--seeds=0', f'--save_dir={tmp_path / "runs"}', '--backend=slurm', '--wait', '--gpus=0',
            '--no-prepare_datasets', *options, '--', f'--dataset_dir={data_dir}', '--nodownload']


def test_a_slurm_controller_that_does_not_answer_is_said_and_waited_for(tmp_path, pointmaze_data_dir):
    """--wait while scontrol fails (the controller busy or restarting): a line names what failed and that the sweep
    still waits, one says when Slurm answers again, and the job's outcome is then read as usual."""
    error = 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)'
    done = tmp_path / 'runs' / 's' / f'gcbc_{ENV}_sd0' / 'DONE'
    env = fake_slurm(tmp_path / 'bin', dict(err=error + '\n', code=1), dict(err=error + '\n', code=1),
                     dict(job_record('COMPLETED'), touch=str(done)))
    os.makedirs(done.parent)
    result = subprocess.run(slurm_sweep(tmp_path, pointmaze_data_dir), cwd=ROOT, capture_output=True, text=True,
                            env=env, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0 and f'[1/1] gcbc_{ENV}_sd0: ok (job {FAKE_JOB})' in out, out[-3000:]
    assert f'Slurm does not answer (scontrol: {error}); still waiting' in out and 'Slurm answers again.' in out
    assert out.count('Slurm does not answer') == 1  # said once, not at every question


def test_a_missing_rendering_backend_stops_only_what_renders(tmp_path, pointmaze_data_dir):
    """MUJOCO_GL=osmesa on a machine without OSMesa: importing mujoco used to fail, so even --help died (and a sweep's
    dry run, which imports the same modules). Now --help works, and a run that renders names the backend that failed
    and what to use."""
    import ctypes.util

    if ctypes.util.find_library('OSMesa'):
        pytest.skip('OSMesa is installed here: MUJOCO_GL=osmesa works')
    env = dict(os.environ, MUJOCO_GL='osmesa')
    returncode, out, err = run([sys.executable, MAIN, '--help'], env=env)
    assert returncode == 0 and '--video_episodes' in out + err, err[-3000:]
    paragraph = error_paragraph(*run(main_command(pointmaze_data_dir, tmp_path, *BUDGET, '--video_episodes=1'),
                                     env=env)[::2])
    assert paragraph.startswith('--video_episodes=1 renders evaluation videos, but MUJOCO_GL=osmesa: libOSMesa was '
                                'not found') and 'MUJOCO_GL=egl' in paragraph, paragraph


def test_jax_platforms_without_that_backend_is_named(tmp_path, pointmaze_data_dir):
    import jax

    if any(d.platform == 'gpu' for d in jax.devices()):
        pytest.skip('this JAX has a GPU backend')
    env = dict(os.environ, JAX_PLATFORMS='cuda')
    paragraph = error_paragraph(*run(main_command(pointmaze_data_dir, tmp_path, *BUDGET), env=env)[::2])
    assert 'JAX_PLATFORMS=cuda' in paragraph and 'has no GPU backend' in paragraph and 'jax[cuda12]' in paragraph
    assert not os.path.exists(tmp_path / 'default')
