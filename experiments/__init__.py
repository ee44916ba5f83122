"""Experiment tooling built on the core library: sweeps, results tables, representation analyses."""
