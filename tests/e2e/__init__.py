"""End-to-end tests: main.py, the scripts and sweeps run as users run them, in subprocesses on real files."""
