"""Python's cyclic garbage collector, set for a process that imports JAX, flax and the agents once, then runs many short
programs: the test workers (tests/conftest.py).

Those imports leave about 230,000 objects that live as long as the process. With the collector's defaults every full
collection walks all of them again, and tracing allocates fast enough to trigger hundreds of collections. Once the
imports are done, `freeze_imported_objects` moves what they made out of the collector's reach, and collections go on
over the objects made since. main.py keeps Python's settings: over README's command 1 the freeze changes too little
to be worth a line of the run's own code (docs/performance.md, "Start-up").
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
