"""Python's cyclic garbage collector, set for a process that imports JAX, flax and the agents, then traces programs.

Those imports leave about 230,000 objects that live as long as the process. With the collector's defaults every full
collection walks all of them again, and importing and tracing allocate fast enough to trigger hundreds of collections.
main.py collects nothing while it imports, then calls `freeze_imported_objects`: what the imports made is never walked
again, and collections go on over the objects made since. A toy BYOL-gamma^a run of main.py: 4.41 CPU s with Python's
settings, 3.97 with these (benchmarks/bench_startup.py; docs/performance.md, "Start-up").
"""

import gc

# Allocations between two young-generation collections (Python's default: 700). Tracing makes many short-lived
# containers; a larger first generation collects them in fewer passes. The older generations keep their defaults.
YOUNG_GENERATION_THRESHOLD = 10_000


def freeze_imported_objects() -> None:
    """Move every object alive now (the imported modules, their classes and functions) out of the collector's reach,
    collect the young generation less often, and (re-)enable the collector. Call once, after the imports, before the
    work."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)
    gc.enable()
