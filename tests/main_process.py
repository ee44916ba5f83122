"""main.py as most of the suite's subprocesses start it: `python -P tests/main_process.py <main.py's flags>`
(tests/helpers.MAIN_PROCESS); and the garbage collector's setting of every test process (`freeze_imported_objects`,
which tests/conftest.py applies to the test workers).

The same main.py (its `main`, as `python main.py` calls it through absl), with two savings for a suite that starts a few
hundred toy runs: the objects main.py's imports leave are frozen out of the garbage collector's reach, and the process
ends without the interpreter's teardown, which would free every compiled program and array one by one. Each saves a
fraction of a second per toy run (docs/performance.md, "Start-up"); neither is worth a line of main.py, whose runs last
minutes to days. The exit handlers still run (wandb's, multiprocessing's) and the logs and standard streams are
flushed, so a run ends with the status and output it would have. The pages' commands (tests/e2e/test_docs.py) and the
tests of main.py's own start and end run `python main.py`.

Importing JAX, flax and the agents leaves about 230,000 objects that live as long as the process. With the collector's
defaults every full collection walks all of them again, and tracing allocates fast enough to trigger hundreds of
collections. Once the imports are done, `freeze_imported_objects` moves what they made out of the collector's reach,
and collections go on over the objects made since.
"""

import atexit
import gc
import logging
import os
import sys

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


def exit_code(end: SystemExit) -> int:
    """The status `sys.exit(end.code)` ends with; a message is printed, as Python prints it."""
    if end.code is None or isinstance(end.code, int):
        return end.code or 0
    print(end.code, file=sys.stderr)
    return 1


if __name__ == '__main__':
    gc.disable()  # nothing collected while the imports build what lives as long as the process
    import main

    freeze_imported_objects()
    sys.argv[0] = main.__file__
    try:
        main.app.run(main.main, flags_parser=main.keep_argv)
        code = 0
    except SystemExit as end:
        code = exit_code(end)
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can reach it
            pass
    os._exit(code)
