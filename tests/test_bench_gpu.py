"""scripts/bench_gpu.py --quick runs end to end on the CPU (the full run is meant for a GPU)."""

from scripts import bench_gpu


def test_bench_gpu_quick(pointmaze_data_dir, capsys):
    result = bench_gpu.main(['--quick', f'--dataset_dir={pointmaze_data_dir}'])
    out = capsys.readouterr().out
    assert result['single']['gcbc'] > 0
    assert sorted(result['multi']['gcbc']) == [1, 2] and min(result['multi']['gcbc'].values()) > 0
    assert result['evaluation_s'] > 0
    # Every table was printed, Markdown-formatted, with a projection row per measured agent.
    for header in ('| agent | batch | steps/s', '| agent | N=1 | N=2 |', '| evaluation (1 tasks x 2 episodes)',
                   '| projection (1,000,000 steps'):
        assert header in out, header
    assert out.count('| GCBC |') == 3
    assert 'skipped' not in out
