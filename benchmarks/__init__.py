"""Performance tooling: the benchmark programs (bench_*.py) and XLA program statistics (hlo_stats.py,
hlo_kernels.py). docs/performance.md gives each command and what it measured."""
