"""The test suite. Importing it sets the XLA settings every test process compiles with, in the environment before JAX
is imported: pytest imports this package before tests/conftest.py, and so does recording the regression numbers
(`python -m tests.agents.test_regression --record`); main.py subprocesses inherit them.

- Most of XLA's optimisations off: most tests run tiny networks for a few steps, so compiling costs far more than
  running (about four fifths of the suite's CPU time); XLA then compiles in about 60% of the time and computes the
  same functions. The few tests that run long enough to need fast code use `with optimized_xla():` (in-process) or
  `OPTIMIZED_XLA_ENV` (main.py subprocesses), from tests/helpers.py.
- The classic CPU emitters and code generation in one piece: they cut compilation by more than half (22 s -> 8.5 s for
  four presets' training steps); the same numbers up to float rounding.
- No instruction set is pinned: XLA generates code for the host's, and the matrix kernels inside jaxlib choose theirs
  at run time whatever XLA is told, so float32 results differ between machines in their last bits. The regression
  records are computed in float64, where such differences stay far below the tolerance they are compared with, and
  other comparisons with a recorded or exact value derive their tolerance from the arithmetic (tests/helpers.py,
  RECORD_TOLERANCE). CI runs those tests a second time with XLA limited to another instruction set (.ci/run).
"""

import os

XLA_FLAGS = ('--xla_cpu_use_fusion_emitters=false', '--xla_cpu_parallel_codegen_split_count=1')

os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')
for _flag in XLA_FLAGS:
    if _flag.split('=')[0] not in os.environ.get('XLA_FLAGS', ''):
        os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + _flag).strip()
