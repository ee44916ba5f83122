"""benchmarks/bench_trace.py's reading of a profiler trace: the device's busy time is the union of its kernels'
intervals, device events are told from host events by their process, and a kernel is matched to its instruction by
its own name before the profiler's `hlo_op` (which names the command buffer that ran it)."""

import numpy as np

from benchmarks.bench_trace import busy_time, device_events, labels_of, summarize


def test_busy_time_is_the_union_of_intervals():
    rng = np.random.default_rng(0)
    for _ in range(20):
        starts = rng.integers(0, 200, 12)
        durations = rng.integers(0, 30, 12)
        covered = np.zeros(300, bool)  # a direct count on a 1 us grid
        for start, duration in zip(starts, durations):
            covered[start:start + duration] = True
        assert busy_time(list(zip(starts.astype(float), durations.astype(float)))) == covered.sum()


def test_device_events_are_those_of_the_device_processes():
    events = [
        {'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/host:CPU'}},
        {'ph': 'M', 'pid': 2, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}},
        {'ph': 'X', 'pid': 1, 'ts': 0.0, 'dur': 5.0, 'name': 'PjitFunction(train)'},
        {'ph': 'X', 'pid': 2, 'ts': 1.0, 'dur': 2.0, 'name': 'loop_add_fusion_3', 'args': {'hlo_op': 'command_buffer_7'}},
        {'ph': 'i', 'pid': 2, 'ts': 1.0, 'name': 'marker'},
    ]
    assert device_events(events, r'/device:GPU') == [(1.0, 2.0, 'loop_add_fusion_3', {'hlo_op': 'command_buffer_7'})]


def test_kernels_are_matched_by_name_before_the_command_buffer_that_ran_them():
    index = {'loop_add_fusion_3': ('elementwise', 'Dense', 'encoder'), 'command_buffer_7': ('unfused call', 'other', 'none'),
             'copy.2': ('copy', 'other', 'none')}
    assert labels_of('loop_add_fusion_3', {'hlo_op': 'command_buffer_7'}, index) == ('elementwise', 'Dense', 'encoder')
    assert labels_of('MemcpyD2D', {'hlo_op': 'copy.2'}, index)[0] == 'copy'  # outside a command buffer: hlo_op names it
    assert labels_of('sm90_xmma_gemm_f32f32', {'hlo_op': 'command_buffer_7'}, index)[0] == 'gemm'
    assert labels_of('mystery_kernel', {}, index)[0] == 'unmatched'


def test_summary_per_update():
    index = {'a': ('gemm', 'Dense', 'actor'), 'b': ('reduction', 'LayerNorm backward', 'encoder')}
    # Two updates: kernels a (0-4 us) and b (2-6 us) overlap, then b again (10-12 us).
    events = [(0.0, 4.0, 'a', {}), (2.0, 4.0, 'b', {}), (10.0, 2.0, 'b', {})]
    summary = summarize(events, updates=2, wall_us=20.0, index=index)
    assert summary['wall_us'] == 10.0 and summary['busy_us'] == 4.0 and summary['kernels'] == 1.5
    assert summary['kernel_us'] == 5.0 and summary['idle_fraction'] == 1.0 - 8.0 / 20.0
    assert summary['by_network'] == {'encoder': 3.0, 'actor': 2.0}
    assert summary['by_kind']['reduction'] == {'us': 3.0, 'kernels': 1.0}
