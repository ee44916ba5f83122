"""Performance tooling: the benchmark programs (bench_*.py). docs/performance.md gives each command and what it
measured."""
