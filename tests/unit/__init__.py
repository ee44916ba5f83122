"""Unit tests: pure functions and single components on small arrays (the fast tier)."""
