"""main.py as a user runs it: learning, exact kill-and-resume, preemption, evaluation beside training, time limits,
run names, and bad-input errors (checked in-process by the request check, and end to end for a few)."""

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

from main import request_of
from runtime.checkpoints import CHECKPOINT_NAME, checkpoint_step
from runtime.exits import EXIT_TIME_LIMIT
from tests.helpers import MAIN_PROCESS, OPTIMIZED_XLA_ENV
from tests.helpers import start as start_process

pytestmark = pytest.mark.xdist_group('test_main')  # its module fixtures are built once, in one worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = 'pointmaze-medium-stitch-v0'
SMALL_NETS = ['--agent.actor_hidden_dims=(64,64)', '--agent.batch_size=64']


@pytest.fixture(scope='module')
def dataset_dir(pointmaze_data_dir):
    return pointmaze_data_dir


def main_args(dataset_dir, save_dir, *extra):
    return [*MAIN_PROCESS, f'--env_name={ENV}', f'--dataset_dir={dataset_dir}',
            f'--save_dir={save_dir}', '--wandb_mode=disabled', '--nodownload', *extra]


def start(args, env=None, cwd=ROOT):
    return start_process(list(args), cwd=cwd, env=None if env is None else dict(os.environ, **env))


def finish(process, check=True, timeout=600):
    out, err = process.communicate(timeout=timeout)
    if check and process.returncode != 0:
        raise AssertionError(f'main.py failed ({process.returncode}):\n{err[-3000:]}')
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def run_main(*args, check=True, env=None, cwd=ROOT):
    return finish(start(args, env=env, cwd=cwd), check=check)


def read_csv(path):
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def without_timing(rows):
    return [{k: v for k, v in r.items() if not k.startswith('time/')} for r in rows]


def test_gcbc_learns_on_generated_pointmaze(dataset_dir, tmp_path):
    # The default networks at a higher learning rate: fewer steps to learn than at the paper's 3e-4.
    run_main(*main_args(dataset_dir, tmp_path, '--agent=agents/gcbc.py', '--agent.batch_size=256', '--agent.lr=1e-3',
                        '--train_steps=500', '--log_interval=100', '--eval_interval=500', '--eval_episodes=8',
                        '--eval_tasks=1,2', '--save_interval=500', '--run_name=gcbc'),
             env=OPTIMIZED_XLA_ENV)
    run_dir = tmp_path / 'default' / 'gcbc'
    train = read_csv(run_dir / 'train.csv')
    losses = [float(r['training/actor/bc_loss']) for r in train]
    assert losses[-1] < losses[0] - 0.05, losses
    evaluation = read_csv(run_dir / 'eval.csv')
    # The two short tasks: the untrained policy never reaches them (0 of 16 episodes, seeds 0 and 1); after 500
    # steps GCBC does (success 1.0 for seeds 0-2, 0.94 for seed 3).
    assert float(evaluation[-1]['evaluation/overall_success']) >= 0.5, evaluation[-1]
    assert (run_dir / 'DONE').exists() and (run_dir / 'flags.json').exists() and (run_dir / 'config.json').exists()


# GCBC: which agent is stopped does not matter to what this chain checks, and GCBC compiles fast. Two chunks per
# training row: a stop may land inside a row, whose steps so far the checkpoint carries. Batch 1024 (about
# 850 steps/s on a 2-core CPU) leaves about a second between the checkpoint a stop waits for and the end of the run.
RESUME_FLAGS = ['--agent=agents/gcbc.py', '--agent.actor_hidden_dims=(64,64)', '--agent.batch_size=1024',
                '--train_steps=800', '--log_interval=50', '--save_interval=200', '--eval_interval=400',
                '--eval_episodes=3', '--eval_max_steps=60', '--steps_per_call=25', '--run_name=r']


def wait_for(predicate, process, timeout=300):
    start_time = time.time()
    while not predicate():
        assert process.poll() is None, f'main.py exited early: {process.stderr.read()[-3000:]}'
        assert time.time() - start_time < timeout
        time.sleep(0.01)


@pytest.fixture(scope='module')
def uninterrupted_run(dataset_dir, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp('uninterrupted')
    run_main(*main_args(dataset_dir, save_dir, *RESUME_FLAGS), env=OPTIMIZED_XLA_ENV)
    return save_dir / 'default' / 'r'


def assert_same_logs(run_dir, reference_dir):
    for name in ('train.csv', 'eval.csv'):
        resumed, reference = read_csv(run_dir / name), read_csv(reference_dir / name)
        steps = [int(r['step']) for r in resumed]
        assert steps == sorted(set(steps)), f'{name}: duplicated or unordered rows {steps}'
        assert without_timing(resumed) == without_timing(reference), name


def test_preempted_then_killed_run_resumes_to_the_uninterrupted_result(dataset_dir, tmp_path, uninterrupted_run):
    """SIGTERM (preemption) after the first checkpoint, --resume, SIGKILL after the resumed run's next
    checkpoint, --resume to the end: the logs equal those of the run nobody stopped."""
    args = main_args(dataset_dir, tmp_path, *RESUME_FLAGS)
    run_dir = tmp_path / 'default' / 'r'
    checkpoint = str(run_dir / CHECKPOINT_NAME)
    process = start(args, env=OPTIMIZED_XLA_ENV)
    wait_for(lambda: os.path.exists(checkpoint), process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 143  # preemption: a checkpoint of the current step, then exit
    preempted = checkpoint_step(checkpoint)
    assert not (run_dir / 'DONE').exists(), 'the run finished before it could be stopped'
    assert int(read_csv(run_dir / 'train.csv')[-1]['step']) == preempted // 50 * 50

    process = start([*args, '--resume'], env=OPTIMIZED_XLA_ENV)
    wait_for(lambda: checkpoint_step(checkpoint) > preempted, process)
    process.send_signal(signal.SIGKILL)  # no chance to save: the last periodic checkpoint holds
    process.wait(timeout=120)
    assert not (run_dir / 'DONE').exists(), 'the run finished before it could be killed'
    run_main(*args, '--resume', env=OPTIMIZED_XLA_ENV)
    assert_same_logs(run_dir, uninterrupted_run)


def test_training_rows_do_not_depend_on_steps_per_call(dataset_dir, tmp_path, uninterrupted_run):
    """A training row averages every step since the last row: two chunks of 25 steps per row, or chunks of 13 steps
    (cut at the row boundaries), log the same rows."""
    for steps_per_call in (13,):
        save_dir = tmp_path / str(steps_per_call)
        run_main(*main_args(dataset_dir, save_dir, *RESUME_FLAGS, f'--steps_per_call={steps_per_call}'),
                 env=OPTIMIZED_XLA_ENV)
        rows = without_timing(read_csv(save_dir / 'default' / 'r' / 'train.csv'))
        assert rows == without_timing(read_csv(uninterrupted_run / 'train.csv')), steps_per_call
        assert len(rows) == 16



# A GCBC run of 20 steps in chunks of 5: two training rows of 10 steps, the checkpoint of step 20.
TOY_FLAGS = ['--agent=agents/gcbc.py', '--agent.actor_hidden_dims=(16,)', '--agent.batch_size=16', '--train_steps=20',
             '--log_interval=10', '--steps_per_call=5', '--save_interval=20', '--eval_interval=20', '--eval_episodes=1',
             '--eval_tasks=1', '--eval_max_steps=2', '--run_name=toy']


@pytest.fixture(scope='module')
def toy_run(dataset_dir, tmp_path_factory):
    """(the run directory, main.py's request of it, its train and validation data as main.py loads them)."""
    from utils.datasets import load_dataset
    from utils.evaluation import make_env
    from utils.training import DeviceDataset

    save_dir = tmp_path_factory.mktemp('toy')
    args = main_args(dataset_dir, save_dir, *TOY_FLAGS)
    run_main(*args)
    env = make_env(ENV)
    data = {split: DeviceDataset.from_numpy(**load_dataset(os.path.join(dataset_dir, f'{ENV}{suffix}.npz'),
                                                           env.observation_space, env.action_space))
            for split, suffix in (('train', ''), ('val', '-val'))}
    return save_dir / 'default' / 'toy', request_of(['main.py', *args[len(MAIN_PROCESS):]]), data


def toy_agent(request, data, seed=0):
    """The agent main.py starts the toy run with."""
    from main import compiled_create

    observations = np.asarray(data['train'].observations[:1])
    return compiled_create(request.agent_class, observations, np.asarray(data['train'].actions[:1]), request.config)(seed)


def test_a_training_row_is_the_mean_of_its_steps(toy_run):
    """train.csv's row at step 10k holds each metric's mean over steps 10(k-1)+1 .. 10k, recomputed here by training
    the run's first agent on its batches in its chunks (the same programs: the same per-step values), to the rounding
    of a float32 mean of 10 terms in any order, (10 + 1) u times their mean magnitude; not the value of one step."""
    from utils.random_streams import stream_key
    from utils.training import train

    run_dir, request, data = toy_run
    agent, steps = toy_agent(request, data), []
    for start in range(0, 20, 5):
        agent, infos = train(agent, data['train'], stream_key(0, 'sampling'), start, 5)
        steps.append({name: np.asarray(values, np.float64) for name, values in infos.items()})
    per_step = {name: np.concatenate([chunk[name] for chunk in steps]) for name in steps[0]}
    rows = read_csv(run_dir / 'train.csv')
    assert [int(row['step']) for row in rows] == [10, 20]
    for row, first in zip(rows, (0, 10)):
        for name, values in per_step.items():
            interval = values[first:first + 10]
            logged, mean = float(row[f'training/{name}']), interval.mean()
            assert abs(logged - mean) <= 11 * 2.0 ** -24 * np.abs(interval).mean(), (name, row['step'], logged, mean)


def test_the_validation_row_is_the_loss_on_the_validation_file(toy_run):
    """train.csv's validation/* at step 20 are the losses of the run's agent at step 20 (its checkpoint) on a batch of
    the validation file drawn from the run's validation streams at that step, bit for bit, and not those of the same
    batch draw from the training file."""
    from runtime.checkpoints import load_checkpoint
    from utils.random_streams import stream_key
    from utils.training import validation_metrics

    run_dir, request, data = toy_run
    agent, step, _ = load_checkpoint(str(run_dir / CHECKPOINT_NAME), toy_agent(request, data))
    keys = [jax.random.fold_in(stream_key(0, name), step) for name in ('validation', 'validation/noise')]
    on_val, on_train = (jax.device_get(validation_metrics(agent, data[split], *keys)) for split in ('val', 'train'))
    row = read_csv(run_dir / 'train.csv')[-1]
    assert int(row['step']) == step == 20
    logged = {key[len('validation/'):]: float(v) for key, v in row.items() if key.startswith('validation/')}
    assert logged == {key: float(v) for key, v in on_val.items()}
    assert logged['total_loss'] != float(on_train['total_loss'])

def test_time_limit_checkpoints_exits_75_and_resumes_exactly(dataset_dir, tmp_path):
    """--time_limit: the run stops at a chunk boundary before its limit with a checkpoint and status 75; --resume
    (here extending it by 100 steps) continues it to the logs of a run nobody stopped."""
    tiny = ['--agent=agents/gcbc.py', '--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32', '--log_interval=20',
            '--steps_per_call=20', '--eval_interval=100000000', '--save_interval=100000000', '--eval_episodes=2',
            '--eval_tasks=1', '--eval_max_steps=5', '--run_name=r']
    # The 3 s may pass before training starts on a busy machine: a time-limited run still makes one chunk of progress.
    limited = run_main(*main_args(dataset_dir, tmp_path / 'limited', *tiny, '--train_steps=100000000', '--time_limit=3'),
                       check=False)
    assert limited.returncode == EXIT_TIME_LIMIT and '--time_limit=3s reached' in limited.stderr, limited.stderr[-2000:]
    run_dir = tmp_path / 'limited' / 'default' / 'r'
    step = checkpoint_step(str(run_dir / CHECKPOINT_NAME))
    assert step > 0 and step == int(read_csv(run_dir / 'train.csv')[-1]['step']) and not (run_dir / 'DONE').exists()
    reference = start(main_args(dataset_dir, tmp_path / 'reference', *tiny, f'--train_steps={step + 100}'))
    run_main(*main_args(dataset_dir, tmp_path / 'limited', *tiny, f'--train_steps={step + 100}', '--resume'))
    finish(reference)
    assert_same_logs(run_dir, tmp_path / 'reference' / 'default' / 'r')


def test_evaluation_beside_training_gives_the_rows_of_evaluation_in_the_loop(dataset_dir, tmp_path):
    """--eval_mode=async (the default on accelerators) against sync on the same run: identical eval.csv rows. The
    evaluations (untrained episodes, run to the time limit) outlast the training between them, so training waits
    for the one in flight and says so, and the checkpoint of step 60 waits for the evaluation of step 40. A SIGTERM
    while an evaluation is in flight ends it and saves the checkpoint of the step it evaluated (no save was due
    there); --resume runs that evaluation first and ends with the same logs."""
    common = ['--agent=agents/gcbc.py', '--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32', '--train_steps=60',
              '--log_interval=20', '--steps_per_call=20', '--eval_interval=20', '--save_interval=60', '--eval_tasks=1',
              '--eval_episodes=4', '--eval_max_steps=400', '--run_name=r', '--eval_workers=1']
    sync = start(main_args(dataset_dir, tmp_path / 'sync', *common, '--eval_mode=sync'))
    asynchronous = start(main_args(dataset_dir, tmp_path / 'async', *common, '--eval_mode=async'))
    stopped_dir = tmp_path / 'stopped' / 'default' / 'r'
    stopped = start(main_args(dataset_dir, tmp_path / 'stopped', *common, '--eval_mode=async'))
    # Training reached step 40 and waits for the evaluation of step 20, which has no row yet: stop it now.
    wait_for(lambda: os.path.exists(stopped_dir / 'train.csv') and [r['step'] for r in read_csv(stopped_dir / 'train.csv')][-1:] == ['40'],
             stopped)
    assert not os.path.exists(stopped_dir / 'eval.csv'), 'the evaluation of step 20 ended before training reached step 40'
    stopped.send_signal(signal.SIGTERM)
    result = finish(stopped, check=False)
    assert result.returncode == 143 and 'checkpoints saved at step 20' in result.stderr, result.stderr[-3000:]
    assert checkpoint_step(str(stopped_dir / CHECKPOINT_NAME)) == 20 and not os.path.exists(stopped_dir / 'eval.csv')

    reference = finish(sync)
    result = finish(asynchronous)
    assert 'training waits for it' in result.stderr and 'waits for the evaluation of step' in result.stderr, result.stderr[-3000:]
    sync_dir, async_dir = tmp_path / 'sync' / 'default' / 'r', tmp_path / 'async' / 'default' / 'r'
    assert [r['step'] for r in read_csv(async_dir / 'eval.csv')] == ['20', '40', '60']
    assert_same_logs(async_dir, sync_dir)
    assert 'training waits' not in reference.stderr

    resumed = run_main(*main_args(dataset_dir, tmp_path / 'stopped', *common, '--eval_mode=async', '--resume'))
    assert 'Running the evaluation of step 20 that was due' in resumed.stderr
    assert_same_logs(stopped_dir, sync_dir)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(dataset_dir, tmp_path):
    # lr 1e30: step 1's loss is finite (and checkpointed: one step per chunk, a save after each), the
    # update it makes turns step 2's loss non-finite.
    args = ['--agent=agents/gcbc.py', *SMALL_NETS, '--log_interval=100', '--save_interval=1', '--eval_interval=100000',
            '--eval_episodes=2', '--eval_max_steps=5', '--train_steps=400', '--agent.lr=1e30', '--eval_workers=1', '--run_name=r']
    result = run_main(*main_args(dataset_dir, tmp_path, *args), check=False)
    assert result.returncode == 1
    assert 'Non-finite' in result.stderr and 'at step 2' in result.stderr and 'Traceback' not in result.stderr
    assert 'start a new run (another --run_name) with a lower --agent.lr' in result.stderr
    state = flax.serialization.msgpack_restore((tmp_path / 'default' / 'r' / CHECKPOINT_NAME).read_bytes())
    assert int(state['step']) == 1
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(state['agent']) if np.asarray(leaf).dtype.kind == 'f')


def test_a_nonfinite_loss_of_huge_data_names_the_data(dataset_dir, tmp_path):
    """Observations of 1e30 made the loss non-finite, and the paragraph advised a lower --agent.lr, with which the run
    fails at the same step: it names the data's largest values, and to fix the data if one is far beyond their scale."""
    corrupt_copy(dataset_dir, tmp_path / 'data', 'huge')
    args = ['--agent=agents/gcbc.py', *SMALL_NETS, '--train_steps=20', '--log_interval=20', '--eval_interval=20',
            '--save_interval=20', '--eval_episodes=2', '--eval_max_steps=5', '--eval_workers=1']
    result = run_main(*main_args(str(tmp_path / 'data'), tmp_path, *args), check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-2000:]
    assert "Non-finite" in result.stderr and "The training data's largest values are |observations| 1e+30" in result.stderr
    assert 'fix the data (such values overflow float32 arithmetic at any learning rate)' in result.stderr


def test_bad_input_gives_one_paragraph_and_writes_nothing(dataset_dir, tmp_path):
    """End to end, as a user meets them: the request check's errors are one paragraph, exit 1, nothing written."""
    for extra, message in ((['--agent.actor_hidden_dims=abc'], "'actor_hidden_dims' must be a tuple of int"),
                           (['--eval_episodes=1000000000'], 'does not fit in host memory')):
        result = run_main(*main_args(dataset_dir, tmp_path, *extra), check=False)
        assert result.returncode == 1 and 'Traceback' not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith('Error: ') and message in result.stderr
        assert not any(tmp_path.iterdir())
    result = run_main(sys.executable, os.path.join(ROOT, 'main.py'), '--help', check=False)
    assert result.returncode == 0 and '--time_limit' in result.stdout and 'configs/presets.py:<name>' in result.stdout
    assert '--print_config: list every field of the --agent config' in result.stdout


def test_print_config_lists_every_field_with_its_value_and_comment(tmp_path):
    """main.py --print_config: a preset's fields, overrides applied, each with its one-line comment; exit 0, nothing
    written, nothing trained."""
    result = run_main(sys.executable, os.path.join(ROOT, 'main.py'), '--agent=configs/presets.py:byol_gamma_a',
                      '--agent.alpha=6', '--print_config', f'--save_dir={tmp_path}', check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    header, *rows = result.stdout.strip().splitlines()
    assert header.endswith('configs/presets.py:byol_gamma_a: 31 fields (--agent.<field>=<value> sets one)')
    fields = {row.split(' = ')[0]: row for row in rows}
    assert len(fields) == 31 and all('  # ' in row and '(no comment' not in row for row in rows)
    assert fields['alpha'].startswith('alpha = 6.0 ') and 'Weight of the representation loss' in fields['alpha']
    assert "phi's (and psi's) MLP hidden sizes." in fields['encoder_hidden_dims']  # a shared encoder field's comment
    assert 'probability it is a later state of the same trajectory' in fields['value_p_trajgoal']
    assert not any(tmp_path.iterdir())


def test_missing_dataset_that_cannot_be_generated(tmp_path):
    result = run_main(*main_args(str(tmp_path), tmp_path, '--env_name=humanoidmaze-medium-stitch-v0'), check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr
    assert 'humanoidmaze-medium-stitch-v0.npz' in result.stderr and 'download_datasets' in result.stderr


CORRUPTIONS = {'garbage': 'corrupt or truncated', 'truncated_episode': 'last row is not terminal',
               'nan': '1 action values that are not finite in float32', 'wrong_shape': 'observations have shape',
               'float64_beyond_float32': '1 observation values that are not finite in float32'}


def corrupt_copy(dataset_dir, data_dir, corruption):
    """The fixture's dataset copied into `data_dir`, its train file damaged as `corruption` says."""
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
        elif corruption == 'float64_beyond_float32':  # finite in float64, inf once read in float32
            arrays['observations'] = arrays['observations'].astype(np.float64)
            arrays['observations'][123, 0] = 1e300
        elif corruption == 'huge':  # finite in float32, far beyond the data's scale
            arrays['observations'][:, 0] = 1e30
        else:
            arrays['observations'] = arrays['observations'][:, :1]
        np.savez(data_dir / f'{ENV}.npz', **arrays)
    (data_dir / f'{ENV}-val.npz').write_bytes(open(f'{src}-val.npz', 'rb').read())


@pytest.mark.parametrize('corruption', sorted(CORRUPTIONS))
def test_corrupt_dataset_is_rejected(corruption, dataset_dir, tmp_path):
    """main.py's dataset reader names the file and the problem (main.py turns the error into its one paragraph:
    the test below)."""
    from utils.datasets import load_dataset
    from utils.errors import DatasetError
    from utils.evaluation import make_env

    corrupt_copy(dataset_dir, tmp_path / 'data', corruption)
    env = make_env(ENV)
    with pytest.raises(DatasetError) as error:
        load_dataset(str(tmp_path / 'data' / f'{ENV}.npz'), env.observation_space, env.action_space)
    assert CORRUPTIONS[corruption] in str(error.value) and f'{ENV}.npz' in str(error.value)


def test_corrupt_dataset_is_one_paragraph_from_main(dataset_dir, tmp_path):
    corrupt_copy(dataset_dir, tmp_path / 'data', 'nan')
    result = run_main(*main_args(str(tmp_path / 'data'), tmp_path), check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith('Error: ')
    assert CORRUPTIONS['nan'] in result.stderr and f'{ENV}.npz' in result.stderr


def test_corrupt_checkpoint_is_a_clear_error(dataset_dir, tmp_path):
    run_dir = tmp_path / 'default' / 'broken'
    run_dir.mkdir(parents=True)
    (run_dir / CHECKPOINT_NAME).write_bytes(b'not a checkpoint')
    result = run_main(*main_args(dataset_dir, tmp_path, '--agent=agents/gcbc.py', '--run_name=broken', '--resume'), check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr
    assert 'is damaged' in result.stderr and CHECKPOINT_NAME in result.stderr and 'without --resume to start the run over' in result.stderr


def test_existing_run_is_never_overwritten_and_presets_do_not_collide(dataset_dir, tmp_path):
    """A run lands in the directory the request check names (another preset would name another one); the same
    command again is refused (nothing overwritten); --resume of a run that has no checkpoint says it starts a new
    one. Run from another directory, with the README's relative agent paths."""
    tiny = ['--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32', '--train_steps=20', '--log_interval=20',
            '--eval_interval=20', '--save_interval=20', '--eval_episodes=1', '--eval_tasks=1', '--eval_max_steps=3']
    gcbc = main_args(dataset_dir, tmp_path, '--agent=configs/presets.py:gcbc', *tiny)
    run_main(*gcbc, cwd=tmp_path)
    names = {preset: request_of(['main.py', f'--agent=configs/presets.py:{preset}', *tiny]).run_names[0]
             for preset in ('gcbc', 'gcbc_phi')}
    assert [p.name for p in (tmp_path / 'default').iterdir()] == [names['gcbc']] and names['gcbc'] != names['gcbc_phi']
    result = run_main(*gcbc, check=False)
    assert result.returncode == 1 and '--resume' in result.stderr and 'already holds a finished run' in result.stderr
    result = run_main(*main_args(dataset_dir, tmp_path, '--agent=configs/presets.py:gcbc', *tiny, '--run_name=new', '--resume'))
    assert 'has no checkpoint, so this starts a new run there' in result.stderr
    # A checkpoint of version 0.4.0 drew its random streams by position: --resume refuses to continue it.
    checkpoint = tmp_path / 'default' / names['gcbc'] / CHECKPOINT_NAME
    state = flax.serialization.msgpack_restore(checkpoint.read_bytes())
    checkpoint.write_bytes(flax.serialization.msgpack_serialize(dict(state, version='0.4.0')))
    gcbc_longer = [a.replace('--train_steps=20', '--train_steps=40') for a in gcbc]
    result = run_main(*gcbc_longer, '--resume', check=False)
    assert result.returncode == 1 and 'Traceback' not in result.stderr, result.stderr[-2000:]
    assert 'written by version 0.4.0' in result.stderr and 'derived by name' in result.stderr
