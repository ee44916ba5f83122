"""benchmarks/bench_gpu.py and bench_trace.py --quick run end to end on the CPU (the full runs are meant for a GPU)."""

import json
import os

import jax
import numpy as np
import pytest

from benchmarks import bench_gpu, bench_trace
from utils import networks


def test_bench_gpu_quick(capsys):
    result = bench_gpu.main(['--quick'])
    out = capsys.readouterr().out
    rates = result['rates']
    assert sorted(rates) == ['byol_gamma_a', 'gcbc'] and all(sorted(r) == [1, 2] and min(r.values()) > 0 for r in rates.values())
    # Kernels and GFLOP per update come from the compiled programs that were timed.
    measured = result['results']
    gcbc, byol = measured['gcbc', ('per_leaf', 'xla')][1]['stats'], measured['byol_gamma_a', ('per_leaf', 'xla')][1]['stats']
    assert byol.kernels > gcbc.kernels > 0 and byol.flops > gcbc.flops > 0 and gcbc.trip_count == 2
    assert sorted(result['evaluation_s']) == [1, 2] and min(result['evaluation_s'].values()) > 0
    # Every table was printed, Markdown-formatted, and the headline rows projected for 4 and 10 seeds.
    for header in ('| agent | GFLOP/update | kernels/update | N=1 seed-steps/s | N=2 seed-steps/s | TFLOP/s (N=2) | '
                   'time/update vs GCBC (N=1, N=2) |', '| GCBC |', '| BYOL-γ^a |', 'Kernels per update by kind and by source',
                   '| evaluation, pointmaze-large-stitch-v0: 2 tasks x 2 episodes', '| 2 seeds |',
                   'Projected wall time of the headline rows', 'max(training, evaluations) + the last evaluation + start-up',
                   '| 4 | ', '| 10 | '):
        assert header in out, header
    assert result['projections']['total', 10] > result['projections']['total', 4] > 0
    # The tables say which optimizer layout and network kernel they timed: main.py's defaults.
    assert 'Training, --optimizer_layout=per_leaf --network_kernel=xla: total seed-steps/s' in out
    assert 'skipped' not in out and 'failed' not in out


def test_wall_time_model_of_asynchronous_evaluations():
    # Evaluations shorter than a tenth of training hide behind it: only the last one adds.
    assert bench_gpu.method_wall(100.0, 5.0, startup_s=3.0) == pytest.approx(3.0 + 100.0 + 5.0)
    # Longer ones queue on the evaluator: the first starts at 10% of training, then one after another.
    assert bench_gpu.method_wall(100.0, 20.0, startup_s=0.0) == pytest.approx(10.0 + 10 * 20.0)
    assert bench_gpu.interpolate({4: 100.0, 16: 400.0}, 10) == pytest.approx(250.0)
    assert bench_gpu.interpolate({4: 100.0, 16: 400.0}, 32) == pytest.approx(400.0)
    # An evaluation grows with its seeds: 1 seed measured at 15 s projects 4 seeds at 60 s, 10 at 150 s (not 15 s).
    assert [bench_gpu.evaluation_time({1: 15.0}, n) for n in (1, 4, 10)] == pytest.approx([15.0, 60.0, 150.0])
    assert bench_gpu.evaluation_time({1: 15.0, 4: 56.0}, 10) == pytest.approx(140.0)  # the 4-seed rate per seed


def test_bench_trace_quick(tmp_path):
    summaries = bench_trace.main(['--quick', '--presets', 'byol_gamma_a', '--activations', 'bf16_representation',
                                  '--steps_per_call', '1', '--calls', '1', '--out', str(tmp_path)])
    (summary,) = summaries
    name = 'byol_gamma_a_n1_bf16_representation'
    # The program's operations were found in the trace and attributed to the agent's networks.
    assert summary['kernels'] > 0 and summary['wall_us'] > 0 and summary['kernel_us'] > 0
    assert {'encoder', 'forward_predictor', 'backward_predictor', 'actor'} <= set(summary['by_network'])
    assert json.loads((tmp_path / f'{name}.summary.json').read_text())['kernels'] == summary['kernels']
    assert os.path.exists(summary['trace'])
    # The what-if computed the representation networks in bfloat16, and left the networks as they were after.
    assert 'bf16[' in (tmp_path / f'{name}.hlo.txt').read_text()
    assert networks.MLP.__module__ == 'utils.networks'


def test_bfloat16_what_if_keeps_float32_parameters_and_their_names():
    raw = bench_gpu.synthetic_dataset(29, 8, num_episodes=2, length=3)
    plain = bench_gpu.make_agents('byol_gamma_a', 1, raw, 8)
    with bench_trace.activations_in('bf16_all'):
        mixed = bench_gpu.make_agents('byol_gamma_a', 1, raw, 8)
        z = mixed.network(raw['observations'][:4], name='encoder', params=mixed.network.params)
    assert jax.tree_util.tree_structure(plain.network.params) == jax.tree_util.tree_structure(mixed.network.params)
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(mixed.network.params)} == {np.dtype('float32')}
    assert z.dtype == np.float32  # the encoder's last projection is not an MLP layer: float32 out
