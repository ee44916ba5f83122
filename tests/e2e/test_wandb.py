"""wandb as a user reads it: every seed of a vmapped run (--num_seeds) logs into its own wandb run, with its own
history, config, name, group and tags, and --resume continues that same run. The offline runs' `.wandb` files are
decoded here record by record (wandb's LevelDB-style log of protobuf `Record`s), so nothing needs the network."""

import csv
import glob
import json
import os
import struct
import subprocess

import pytest

from tests.helpers import MAIN_PROCESS, start

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = 'pointmaze-medium-stitch-v0'
BLOCK_BYTES = 32 * 1024  # the log's block size: a record header never straddles two blocks
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path):
    """The protobuf records of one `.wandb` file, in the order they were written."""
    from wandb.proto import wandb_internal_pb2

    with open(path, 'rb') as f:
        data = f.read()
    ident, magic, _version = struct.unpack('<4sHB', data[:7])
    assert (ident, magic) == (b':W&B', 0xBEE1), f'{path} is not a wandb log'
    position, pending = 7, b''
    while position + 7 <= len(data):
        left_in_block = BLOCK_BYTES - position % BLOCK_BYTES
        if left_in_block < 7:  # zero padding up to the next block
            position += left_in_block
            continue
        _checksum, length, kind = struct.unpack('<IHB', data[position:position + 7])
        if kind == 0:
            position += left_in_block
            continue
        chunk = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (FULL, FIRST):
            pending = chunk
        else:
            pending += chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def item_key(item):
    return item.key or '/'.join(item.nested_key)


def decoded_run(run_dir, last_attempt_only=False):
    """(run record, {step: {metric: value}} of every history row) over the `.wandb` files of a run directory (or of
    its last attempt's only)."""
    files = sorted(glob.glob(os.path.join(run_dir, 'wandb', 'offline-run-*', '*.wandb')))
    assert files, f'no .wandb file under {run_dir}'
    runs, rows = [], []
    for path in files[-1:] if last_attempt_only else files:
        for record in wandb_records(path):
            kind = record.WhichOneof('record_type')
            if kind == 'run':
                runs.append(record.run)
            elif kind == 'history':
                rows.append({item_key(i): json.loads(i.value_json) for i in record.history.item})
    return runs, files, rows


# main.py logs the same Python floats to train.csv (csv writes repr, which reads back exactly) and to wandb (JSON, also
# exact): the rows compare equal.
def training_rows(rows):
    return {int(r['step']): r['training/total_loss'] for r in rows if 'training/total_loss' in r}


def csv_losses(run_dir):
    with open(os.path.join(run_dir, 'train.csv'), newline='') as f:
        return {int(r['step']): float(r['training/total_loss']) for r in csv.DictReader(f)}


def run_main(dataset_dir, save_dir, *extra):
    args = [*MAIN_PROCESS, '--agent=configs/presets.py:gcbc', f'--env_name={ENV}',
            f'--dataset_dir={dataset_dir}', f'--save_dir={save_dir}', '--nodownload', '--wandb_mode=offline',
            '--agent.batch_size=32', '--agent.actor_hidden_dims=(32,32)', '--log_interval=10', '--eval_interval=40',
            '--eval_episodes=1', '--eval_max_steps=5', '--eval_tasks=1', '--num_seeds=2', '--run_group=wb', *extra]
    env = dict(os.environ, WANDB_MODE='offline', WANDB_API_KEY='', WANDB_SILENT='true')
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_each_seed_logs_its_own_wandb_run_and_resume_continues_it(tmp_path, pointmaze_data_dir):
    pytest.importorskip('wandb')
    run_main(pointmaze_data_dir, tmp_path, '--train_steps=40')
    run_dirs = sorted(glob.glob(str(tmp_path / 'wb' / '*_sd*')))
    assert [d[-3:] for d in run_dirs] == ['sd0', 'sd1']
    ids = {}
    for seed, run_dir in enumerate(run_dirs):
        runs, files, rows = decoded_run(run_dir)
        assert len(files) == 1, files
        # Only this seed's rows: one per logged step (not the two seeds' interleaved), equal to its own CSV.
        assert training_rows(rows) == csv_losses(run_dir)
        assert sorted(training_rows(rows)) == [10, 20, 30, 40]
        run = runs[0]
        name = os.path.basename(run_dir)
        config = {item_key(i): json.loads(i.value_json) for i in run.config.update}
        assert (run.display_name, config['seed'], config['run_name'], config['wandb_mode']) == (name, seed, name, 'offline')
        assert config['data'].startswith('generated'), config['data']  # the data's provenance, as results tables show it
        assert run.run_group == f'wb/{name[:-len("_sd0")]}'  # the seeds of one setting share a group
        assert set(run.tags) == {'gcbc', ENV, f'sd{seed}', 'wb'}
        ids[seed] = run.run_id
    assert ids[0] != ids[1]
    losses_before = [training_rows(decoded_run(d)[2]) for d in run_dirs]
    assert losses_before[0] != losses_before[1]

    run_main(pointmaze_data_dir, tmp_path, '--train_steps=60', '--resume')
    for seed, run_dir in enumerate(run_dirs):
        runs, files, rows = decoded_run(run_dir)
        assert len(files) == 2 and {r.run_id for r in runs} == {ids[seed]}  # the same wandb run, continued
        assert sorted(training_rows(rows)) == [10, 20, 30, 40, 50, 60]
        assert training_rows(rows) == csv_losses(run_dir)
        # The resumed attempt replayed the rows before it: its own file holds the whole history.
        assert training_rows(decoded_run(run_dir, last_attempt_only=True)[2]) == csv_losses(run_dir)


def test_wandb_mode_from_the_environment_unless_the_flag_is_given(tmp_path, pointmaze_data_dir):
    """wandb's own switch: WANDB_MODE=disabled without --wandb_mode writes no wandb run and says so; the run records
    the mode it used. (An explicit --wandb_mode=offline beside WANDB_MODE=offline is the test above.)"""
    args = [*MAIN_PROCESS, '--agent=configs/presets.py:gcbc', f'--env_name={ENV}',
            f'--dataset_dir={pointmaze_data_dir}', f'--save_dir={tmp_path}', '--nodownload', '--agent.batch_size=16',
            '--agent.actor_hidden_dims=(32,32)', '--train_steps=10', '--log_interval=10', '--eval_interval=10',
            '--eval_episodes=1', '--eval_max_steps=3', '--eval_tasks=1', '--run_name=r']
    env = dict(os.environ, WANDB_MODE='disabled', WANDB_API_KEY='')
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / 'default' / 'r'
    assert 'wandb: disabled (WANDB_MODE=disabled)' in result.stderr
    assert not (run_dir / 'wandb').exists() and json.loads((run_dir / 'flags.json').read_text())['wandb_mode'] == 'disabled'


def test_a_bad_wandb_mode_in_the_environment_is_refused(monkeypatch):
    from runtime.loggers import effective_wandb_mode
    from utils.errors import ConfigError

    monkeypatch.setenv('WANDB_MODE', 'of')
    with pytest.raises(ConfigError, match='WANDB_MODE=of is not a wandb mode'):
        effective_wandb_mode('online', flag_given=False)
    assert effective_wandb_mode('disabled', flag_given=True) == 'disabled'  # the flag wins over the environment


def test_a_killed_runs_wandb_history_is_whole_after_resume(tmp_path, pointmaze_data_dir):
    """SIGKILL after the first checkpoint loses what wandb's writer buffered; --resume logs every CSV row up to the
    checkpoint again, so the resumed attempt's wandb history equals train.csv and eval.csv, step for step."""
    import signal
    import time

    common = [*MAIN_PROCESS, '--agent=configs/presets.py:gcbc', f'--env_name={ENV}',
              f'--dataset_dir={pointmaze_data_dir}', f'--save_dir={tmp_path}', '--nodownload', '--wandb_mode=offline',
              '--agent.batch_size=32', '--agent.actor_hidden_dims=(32,32)', '--log_interval=10', '--save_interval=40',
              '--eval_interval=40', '--eval_episodes=1', '--eval_max_steps=5', '--eval_tasks=1', '--steps_per_call=10',
              '--run_name=k']
    env = dict(os.environ, WANDB_API_KEY='', WANDB_SILENT='true')
    run_dir = tmp_path / 'default' / 'k'
    process = start([*common, '--train_steps=100000000'], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (run_dir / 'checkpoint.msgpack').exists():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    result = subprocess.run([*common, '--train_steps=120', '--resume'], cwd=ROOT, capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    _, files, rows = decoded_run(run_dir, last_attempt_only=True)
    assert training_rows(rows) == csv_losses(run_dir) and max(csv_losses(run_dir)) == 120
    with open(run_dir / 'eval.csv', newline='') as f:
        evaluated = {int(r['step']): float(r['evaluation/overall_success']) for r in csv.DictReader(f)}
    logged = {int(r['step']): r['evaluation/overall_success'] for r in rows if 'evaluation/overall_success' in r}
    assert logged == evaluated and sorted(evaluated) == [40, 80, 120]
