"""Offline generation of OGBench-format datasets (see SPEC section 2)."""
