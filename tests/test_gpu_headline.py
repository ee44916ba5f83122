"""scripts/gpu_headline.sh at a toy budget: calls on fresh 'machines', each given only the state the previous
call packed, end with the same logs and checkpoints as one uninterrupted call; the packing itself."""

import csv
import os
import subprocess
import sys

import pytest

from experiments import headline
from tests.conftest import POINTMAZE
from utils.checkpoints import CHECKPOINT_NAME
from utils.rundir import DONE_FILE, EVAL_LOG, TRAIN_LOG

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'scripts', 'gpu_headline.sh')
TOY_FLAGS = ['--agent.actor_hidden_dims=(32,32)', '--agent.encoder_hidden_dims=(16,16)', '--agent.batch_size=32',
             '--eval_tasks=1', '--eval_max_steps=30', '--eval_workers=1', '--log_interval=50', '--save_interval=50',
             '--steps_per_call=10']
RUNS = [f'{preset}_{POINTMAZE}{alpha}_sd{seed}' for preset, alpha in (('gcbc', ''), ('byol_gamma_a', '_a1')) for seed in (0, 1)]


def call(data_dir, save_dir, **env):
    environ = dict(os.environ, PYTHON=sys.executable, ENV=POINTMAZE, DATASET_DIR=data_dir, SAVE_DIR=str(save_dir),
                   HEADLINE_SEEDS='0-1', HEADLINE_GROUP_SEEDS='2', HEADLINE_STEPS='200', HEADLINE_EVAL_INTERVAL='100',
                   HEADLINE_EVAL_EPISODES='1', **env)
    result = subprocess.run(['bash', SCRIPT, '--', *TOY_FLAGS], env=environ, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def rows(path):
    """A CSV log's rows without its wall-clock columns."""
    with open(path, newline='') as f:
        return [{k: v for k, v in row.items() if not k.startswith('time/')} for row in csv.DictReader(f)]


def test_chunked_calls_match_one_uninterrupted_call(pointmaze_data_dir, tmp_path):
    reference = tmp_path / 'reference'
    output = call(pointmaze_data_dir, reference)
    assert 'all runs done' in output and 'Per-seed scores' in output and '95% CI' in output

    outputs = []
    for k in range(1, 6):
        outputs.append(call(pointmaze_data_dir, tmp_path / f'machine{k}', HEADLINE_CHUNK_STEPS='100',
                            HEADLINE_STATE_IN=str(tmp_path / f'state{k - 1}'), HEADLINE_STATE_OUT=str(tmp_path / f'state{k}')))
        if 'all runs done' in outputs[-1]:
            break
    assert len(outputs) >= 2 and 'step budget reached' in outputs[0], outputs
    assert all('NOT FINISHED' in out and 'chunks left' in out for out in outputs[:1]), outputs[0]
    assert 'all runs done' in outputs[-1], outputs[-1]

    last = tmp_path / f'machine{len(outputs)}' / headline.SWEEP_NAME
    for name in RUNS:
        expected = reference / headline.SWEEP_NAME / name
        for log in (TRAIN_LOG, EVAL_LOG):
            assert rows(last / name / log) == rows(expected / log), (name, log)
        assert (last / name / DONE_FILE).exists()
        # The machine that finished a run has its final checkpoint (later packs leave it out).
        finished = next(tmp_path / f'machine{k}' / headline.SWEEP_NAME / name for k in range(len(outputs), 0, -1)
                        if (tmp_path / f'machine{k}' / headline.SWEEP_NAME / name / CHECKPOINT_NAME).exists())
        assert (finished / CHECKPOINT_NAME).read_bytes() == (expected / CHECKPOINT_NAME).read_bytes(), name


def make_run(sweep_dir, name, step, done):
    run = sweep_dir / name
    run.mkdir(parents=True)
    (run / CHECKPOINT_NAME).write_bytes(headline.msgpack.packb({'agent': {'w': os.urandom(1000)}, 'step': step, 'extra': {}}))
    (run / EVAL_LOG).write_text('step,evaluation/overall_success\n100,0.5\n')
    if done:
        (run / DONE_FILE).write_text('{}\n')


def test_pack_and_unpack_state(tmp_path, monkeypatch):
    sweep_dir = tmp_path / 'here' / headline.SWEEP_NAME
    make_run(sweep_dir, 'gcbc_sd0', 200, done=True)
    make_run(sweep_dir, 'gcbc_sd1', 100, done=False)
    (sweep_dir / 'gcbc_sd0-1.log').write_text('log\n')
    monkeypatch.setattr(headline, 'PART_BYTES', 700)
    total = headline.pack_state(str(sweep_dir), str(tmp_path / 'out'))
    parts = sorted(p for p in os.listdir(tmp_path / 'out') if p.startswith(headline.PART_PREFIX))
    assert len(parts) == -(-total // 700) > 1

    assert headline.unpack_state(str(tmp_path / 'out'), str(tmp_path / 'there'))
    there = tmp_path / 'there' / headline.SWEEP_NAME
    assert sorted(os.listdir(there)) == ['gcbc_sd0', 'gcbc_sd0-1.log', 'gcbc_sd1']
    assert not (there / 'gcbc_sd0' / CHECKPOINT_NAME).exists()  # finished: its checkpoint stays behind
    assert (there / 'gcbc_sd0' / DONE_FILE).exists()
    assert (there / 'gcbc_sd1' / CHECKPOINT_NAME).read_bytes() == (sweep_dir / 'gcbc_sd1' / CHECKPOINT_NAME).read_bytes()
    assert headline.checkpoint_step(headline.RunDir(str(there / 'gcbc_sd1'))) == 100
    # Already here (a warm machine): left alone.
    assert not headline.unpack_state(str(tmp_path / 'out'), str(tmp_path / 'there'))
    # A missing part is refused, nothing written.
    os.remove(tmp_path / 'out' / parts[-1])
    with pytest.raises(SystemExit, match='missing or damaged'):
        headline.unpack_state(str(tmp_path / 'out'), str(tmp_path / 'elsewhere'))
    assert not (tmp_path / 'elsewhere').exists()


def test_seed_groups_and_alpha_choices():
    assert headline.seed_groups(range(10), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert headline.seed_groups([3, 1, 2], 2) == [[1, 2], [3]]
    with pytest.raises(SystemExit):
        headline.parse_args(['--dataset_dir=d', '--alpha=3'])
    args, extra = headline.parse_args(['--dataset_dir=d', '--alpha=40', '--', '--agent.batch_size=32'])
    assert args.alpha == '40' and extra == ['--agent.batch_size=32']
