"""Sweeps, results tables and analyses over run directories."""
