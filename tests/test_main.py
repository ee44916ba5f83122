"""main.py as a user runs it: learning, exact kill-and-resume, preemption, and bad-input errors."""

import csv
import os
import signal
import subprocess
import sys
import time

import flax.serialization
import jax
import numpy as np
import pytest

from tests import launcher
from tests.conftest import OPTIMIZED_XLA_ENV
from utils.checkpoints import CHECKPOINT_NAME, checkpoint_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = 'pointmaze-medium-stitch-v0'
SMALL_NETS = ['--agent.actor_hidden_dims=(64,64)', '--agent.batch_size=64']


@pytest.fixture(scope='module')
def dataset_dir(pointmaze_data_dir):
    return pointmaze_data_dir


def main_args(dataset_dir, save_dir, *extra):
    return [sys.executable, os.path.join(ROOT, 'main.py'), f'--env_name={ENV}', f'--dataset_dir={dataset_dir}',
            f'--save_dir={save_dir}', '--wandb_mode=disabled', '--nodownload', *extra]


def run_main(*args, check=True, env=None):
    result = launcher.run(list(args), env=None if env is None else dict(os.environ, **env))
    if check and result.returncode != 0:
        raise AssertionError(f'main.py failed ({result.returncode}):\n{result.stderr[-3000:]}')
    return result


def read_csv(path):
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def without_timing(rows):
    return [{k: v for k, v in r.items() if not k.startswith('time/')} for r in rows]


def test_gcbc_learns_on_generated_pointmaze(dataset_dir, tmp_path):
    # The default networks at a higher learning rate: fewer steps to learn than at the paper's 3e-4.
    run_main(*main_args(dataset_dir, tmp_path, '--agent=agents/gcbc.py', '--agent.batch_size=256', '--agent.lr=1e-3',
                        '--train_steps=500', '--log_interval=100', '--eval_interval=500', '--eval_episodes=8',
                        '--eval_tasks=1,2', '--save_interval=500'),
             env=OPTIMIZED_XLA_ENV)
    run_dir = tmp_path / 'default' / f'gcbc_{ENV}_sd0'
    train = read_csv(run_dir / 'train.csv')
    losses = [float(r['training/actor/bc_loss']) for r in train]
    assert losses[-1] < losses[0] - 0.05, losses
    evaluation = read_csv(run_dir / 'eval.csv')
    # The two short tasks: the untrained policy never reaches them (0 of 16 episodes, seeds 0 and 1); after 500
    # steps GCBC does (success 1.0 for seeds 0-2, 0.94 for seed 3).
    assert float(evaluation[-1]['evaluation/overall_success']) >= 0.5, evaluation[-1]
    assert (run_dir / 'DONE').exists() and (run_dir / 'flags.json').exists() and (run_dir / 'config.json').exists()


# GCBC: which agent is stopped does not matter to what this chain checks (BYOL-gamma^a's targets and
# ensembles are resumed across processes in tests/test_gpu_headline.py), and GCBC compiles in a third of the
# time. Batch 1024 (about 850 steps/s on a 2-core CPU) leaves about a second between the checkpoint a stop
# waits for and the end of the run.
RESUME_FLAGS = ['--agent=agents/gcbc.py', '--agent.actor_hidden_dims=(64,64)', '--agent.batch_size=1024',
                '--train_steps=800', '--log_interval=50', '--save_interval=200', '--eval_interval=400',
                '--eval_episodes=3', '--eval_max_steps=60', '--steps_per_call=50']


def wait_for(predicate, process, timeout=300):
    start = time.time()
    while not predicate():
        assert process.poll() is None, f'main.py exited early: {process.stderr.read()[-3000:]}'
        assert time.time() - start < timeout
        time.sleep(0.01)


@pytest.fixture(scope='module')
def uninterrupted_run(dataset_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp('uninterrupted')
    run_main(*main_args(dataset_dir, save_dir, *RESUME_FLAGS), env=OPTIMIZED_XLA_ENV)
    return save_dir / 'default' / f'gcbc_{ENV}_sd0'


def test_preempted_then_killed_run_resumes_to_the_uninterrupted_result(dataset_dir, tmp_path, uninterrupted_run):
    """SIGTERM (preemption) after the first checkpoint, --resume, SIGKILL after the resumed run's next
    checkpoint, --resume to the end: the logs equal those of the run nobody stopped."""
    args = main_args(dataset_dir, tmp_path, *RESUME_FLAGS)
    run_dir = tmp_path / 'default' / f'gcbc_{ENV}_sd0'
    checkpoint = str(run_dir / CHECKPOINT_NAME)
    # Optimised XLA: these runs compile one program (then read from the compilation cache), so fast code
    # beats fast compilation here.
    env = dict(os.environ, **OPTIMIZED_XLA_ENV)

    def start(*extra):
        return launcher.launch([*args, *extra], env=env)

    process = start()
    wait_for(lambda: os.path.exists(checkpoint), process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 143  # preemption: a checkpoint of the current step, then exit
    preempted = checkpoint_step(checkpoint)
    assert not (run_dir / 'DONE').exists(), 'the run finished before it could be stopped'
    assert preempted == int(read_csv(run_dir / 'train.csv')[-1]['step'])

    process = start('--resume')
    wait_for(lambda: checkpoint_step(checkpoint) > preempted, process)
    process.send_signal(signal.SIGKILL)  # no chance to save: the last periodic checkpoint holds
    process.wait(timeout=120)
    assert not (run_dir / 'DONE').exists(), 'the run finished before it could be killed'
    run_main(*args, '--resume', env=OPTIMIZED_XLA_ENV)

    for name in ('train.csv', 'eval.csv'):
        resumed, reference = read_csv(run_dir / name), read_csv(uninterrupted_run / name)
        steps = [int(r['step']) for r in resumed]
        assert steps == sorted(set(steps)), f'{name}: duplicated or unordered rows {steps}'
        assert without_timing(resumed) == without_timing(reference), name


def test_nan_loss_stops_and_keeps_last_good_checkpoint(dataset_dir, tmp_path):
    # lr 1e30: step 1's loss is finite (and checkpointed: one step per chunk, a save after each), the
    # update it makes turns step 2's loss non-finite.
    args = ['--agent=agents/gcbc.py', *SMALL_NETS, '--log_interval=100', '--save_interval=1', '--eval_interval=100000',
            '--eval_episodes=2', '--eval_max_steps=5', '--train_steps=400', '--agent.lr=1e30', '--eval_workers=1']
    result = run_main(*main_args(dataset_dir, tmp_path, *args), check=False)
    assert result.returncode == 1
    assert 'Non-finite' in result.stderr and 'at step 2' in result.stderr and 'Traceback' not in result.stderr
    state = flax.serialization.msgpack_restore((tmp_path / 'default' / f'gcbc_{ENV}_sd0' / CHECKPOINT_NAME).read_bytes())
    assert int(state['step']) == 1
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(state['agent']) if np.asarray(leaf).dtype.kind == 'f')


BAD_INPUTS = [
    (['--env_name=pointmaze-huge-stitch-v0'], 'Unknown environment'),
    (['--agent.agent_name=nope'], 'Valid agents: byol_gamma'),
    (['--agent.not_a_key=1'], "Unknown config key 'not_a_key'"),
    (['--agent.actor_hidden_dims=abc'], "'actor_hidden_dims' must be a tuple of int"),
    (['--agent.lr=abc'], 'could not convert'),
    (['--agent=configs/presets.py:nope'], 'Valid presets'),
    (['--agent=agents/missing.py'], 'not found'),
    (['--eval_tasks=1,x'], '--eval_tasks must be'),
    (['--train_steps=0'], '--train_steps must be positive'),
    (['--eval_tasks=9'], 'has tasks 1..5, so 9 is out of range'),
    (['--eval_max_steps=-1'], '--eval_max_steps must be 0'),
    (['--env_name=pointmaze-medum-stitch-v0'], 'Did you mean pointmaze-medium-stitch-v0'),
]


@pytest.mark.parametrize('extra,message', BAD_INPUTS)
def test_bad_input_gives_one_clear_error(extra, message, dataset_dir, tmp_path):
    result = run_main(*main_args(dataset_dir, tmp_path, *extra), check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert 'Traceback' not in result.stderr
    assert not any(tmp_path.iterdir()), 'a rejected request writes nothing'


def test_missing_dataset_that_cannot_be_generated(tmp_path):
    result = run_main(*main_args(str(tmp_path), tmp_path, '--env_name=humanoidmaze-medium-stitch-v0'), check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr
    assert 'humanoidmaze-medium-stitch-v0.npz' in result.stderr and 'download_datasets' in result.stderr


@pytest.mark.parametrize('corruption', ['garbage', 'truncated_episode', 'nan', 'wrong_shape'])
def test_corrupt_dataset_is_rejected(corruption, dataset_dir, tmp_path):
    data_dir = tmp_path / 'data'
    data_dir.mkdir()
    src = os.path.join(dataset_dir, ENV)
    with np.load(f'{src}.npz') as f:
        arrays = {k: f[k] for k in f.files}
    if corruption == 'garbage':
        (data_dir / f'{ENV}.npz').write_bytes(open(f'{src}.npz', 'rb').read()[:5000])
    else:
        if corruption == 'truncated_episode':
            arrays = {k: v[:-50] for k, v in arrays.items()}
        elif corruption == 'nan':
            arrays['actions'][123, 0] = np.nan
        else:
            arrays['observations'] = arrays['observations'][:, :1]
        np.savez(data_dir / f'{ENV}.npz', **arrays)
    (data_dir / f'{ENV}-val.npz').write_bytes(open(f'{src}-val.npz', 'rb').read())
    result = run_main(*main_args(str(data_dir), tmp_path), check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-2000:]
    expected = {'garbage': 'corrupt or truncated', 'truncated_episode': 'last row is not terminal',
                'nan': 'non-finite action', 'wrong_shape': 'observations have shape'}[corruption]
    assert expected in result.stderr and f'{ENV}.npz' in result.stderr


def test_corrupt_checkpoint_is_a_clear_error(dataset_dir, tmp_path):
    run_dir = tmp_path / 'default' / 'broken'
    run_dir.mkdir(parents=True)
    (run_dir / CHECKPOINT_NAME).write_bytes(b'not a checkpoint')
    result = run_main(*main_args(dataset_dir, tmp_path, '--agent=agents/gcbc.py', '--run_name=broken', '--resume'), check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr
    assert 'unreadable' in result.stderr and CHECKPOINT_NAME in result.stderr


def test_a_forked_launch_gives_what_python_main_py_gives(dataset_dir, tmp_path):
    """The tests start main.py through tests/launcher.py (forked from a process that imported what main.py
    imports). Started both ways, a short run writes the same checkpoint and logs and prints the same
    evaluations, and a rejected request exits with the same code and error."""
    if sys.platform != 'linux':
        pytest.skip('tests/launcher.py forks only on Linux; elsewhere every launch is a plain subprocess')
    tiny = ['--agent=agents/gcbc.py', *SMALL_NETS, '--train_steps=40', '--log_interval=20', '--eval_interval=20',
            '--save_interval=40', '--eval_episodes=2', '--eval_tasks=1', '--eval_max_steps=5', '--eval_workers=1']
    python = subprocess.run(main_args(dataset_dir, tmp_path / 'python', *tiny), cwd=ROOT, capture_output=True, text=True, timeout=600)
    launched = launcher.launch(main_args(dataset_dir, tmp_path / 'forked', *tiny))
    assert isinstance(launched, launcher.Launched)  # forked, not a plain subprocess
    out, err = launched.communicate(timeout=600)
    assert python.returncode == launched.returncode == 0, python.stderr[-2000:] + err[-2000:]
    python_dir, forked_dir = (tmp_path / how / 'default' / f'gcbc_{ENV}_sd0' for how in ('python', 'forked'))
    assert (python_dir / CHECKPOINT_NAME).read_bytes() == (forked_dir / CHECKPOINT_NAME).read_bytes()
    for name in ('train.csv', 'eval.csv'):
        assert without_timing(read_csv(python_dir / name)) == without_timing(read_csv(forked_dir / name)), name
    assert python.stdout == out and 'seed 0 step 40: success' in out

    bad = main_args(dataset_dir, tmp_path / 'bad', '--eval_tasks=9')
    python = subprocess.run(bad, cwd=ROOT, capture_output=True, text=True, timeout=600)
    forked = launcher.run(bad)
    assert python.returncode == forked.returncode == 1
    assert python.stderr.splitlines()[-1] == forked.stderr.splitlines()[-1] and 'out of range' in forked.stderr


def test_existing_run_is_never_overwritten(dataset_dir, tmp_path):
    args = main_args(dataset_dir, tmp_path, '--agent=agents/gcbc.py', *SMALL_NETS, '--train_steps=50', '--log_interval=50',
                     '--eval_interval=50', '--save_interval=50', '--eval_episodes=2', '--eval_max_steps=5')
    run_main(*args)
    result = run_main(*args, check=False)
    assert result.returncode == 1 and '--resume' in result.stderr
