"""scripts/bench_gpu.py --quick runs end to end on the CPU (the full run is meant for a GPU)."""

from scripts import bench_gpu


def test_bench_gpu_quick(capsys):
    result = bench_gpu.main(['--quick'])
    out = capsys.readouterr().out
    assert sorted(result['rates']['gcbc']) == [1, 2] and min(result['rates']['gcbc'].values()) > 0
    assert sorted(result['evaluation_s']) == [1, 2] and min(result['evaluation_s'].values()) > 0
    # Every table was printed, Markdown-formatted, with a projection row per measured agent.
    for header in ('| agent | N=1 | N=2 | compile s (N=1) |', '| evaluation, pointmaze-large-stitch-v0: 2 tasks x 2 episodes',
                   '| 2 seeds |', '| projection (1,000,000 steps'):
        assert header in out, header
    assert out.count('| GCBC |') == 2
    assert 'skipped' not in out and 'failed' not in out
