"""Experiment tooling built on the core library: sweeps, results tables, representation analyses."""

import utils  # noqa: F401  (stops a script of another checkout from running this one's code)
