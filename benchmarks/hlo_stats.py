"""Kernels per training step, read from the compiled, optimised HLO of a jitted program.

`program_stats(compiled)` takes what `jax.jit(f).lower(...).compile()` returns for a program whose work is one
`lax.scan` (main.py's fused update, `utils.training.train`) and
reports, for one iteration of that scan (one update):

  * `kernels`: how many separate kernels XLA launches (the counting rule below), with a breakdown `by_kind`
    (gemm, elementwise fusion, reduction, copy, ...) and `by_source` (which part of the program each kernel
    comes from: the sampler, the networks' forward and backward passes, LayerNorm, Adam, the gradient norm, the
    EMA targets, ...), read from the source locations XLA keeps in each instruction's metadata;
  * `flops`: XLA's cost analysis of the program (of the unoptimised one, given it: see `program_stats`). XLA's
    HloCostAnalysis counts a while loop's body once, not times its trip count, so for a program that is one scan
    this is one update plus the few ops outside the loop (checked by tests/unit/test_hlo_stats.py, which fails if
    a new XLA starts multiplying).

Counting rule. Every instruction of the scan's while-loop body and condition counts as one kernel, except
those that run no code of their own: `parameter`, `constant`, `get-tuple-element`, `tuple`, `bitcast`,
`opt-barrier`, `after-all`, `add-dependency`, `domain`, and the second half (`*-done`, `*-update`) of an
asynchronous pair. So a fusion is one kernel whatever it fuses, and so is an un-fused op (a `copy`, `gather`,
`dynamic-update-slice`, ...), a `dot`, a library call (`custom-call`: cuBLAS, cuDNN, oneDNN) and a CPU
library fusion (XNNPACK/YNNPACK `kCustom`). Instructions that only call other computations are replaced by
what they call: `call` (XLA:CPU's small calls, XLA:GPU's command buffers) by the callee's kernels; a nested
`while` by (body + condition) x its known trip count + one condition (x 1 when the trip count is unknown,
flagged in `unknown_trip_counts`); a `conditional` by its largest branch plus one kernel (the branch index read
back). Kernels inside XLA:GPU command buffers (CUDA graphs) are counted one by one, and also reported as
`in_graphs` with the number of `graph_launches`, so `launches = kernels - in_graphs + graph_launches` is what
the host issues per update.

CPU counts are a proxy. On the CPU backend a "kernel" is a thunk of XLA:CPU's runtime (a loop fusion, a
YNNPACK/oneDNN/Eigen gemm, a copy), not a device launch, and XLA:CPU differs from XLA:GPU in ways that change
the count: it lowers the threefry hash of every `jax.random` call as a rolled 5-iteration loop (XLA:GPU unrolls
it into one fusion), does no horizontal fusion of independent small ops (XLA:GPU fuses many same-sized
elementwise ops, e.g. Adam over leaves of one shape, into one kernel), and copies loop-carried constants. What
transfers is the structure of the update (how many LayerNorms, ensemble members, optimizer leaves, reductions
there are) and the direction of a change; absolute numbers and ratios must be measured on the GPU
(`benchmarks/bench_gpu.py` prints this same count for the GPU's own compiled program).
"""

import collections
import dataclasses
import re
from typing import Dict, List, Optional

# Instructions that run no code of their own: buffer bookkeeping resolved at compile time.
FREE_OPCODES = frozenset({
    'parameter', 'constant', 'get-tuple-element', 'tuple', 'bitcast', 'opt-barrier', 'after-all',
    'add-dependency', 'domain',
})
GEMM_OPCODES = frozenset({'dot', 'convolution'})
GEMM_TARGET = re.compile(r'gemm|matmul|cublas|conv|dot|onednn|ynn|xnn', re.I)

_COMPUTATION = re.compile(r'^(ENTRY\s+)?%?([^\s(]+)\s*(\(.*)?\{\s*$')
_INSTRUCTION = re.compile(r'^\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*')
_CALLEE = re.compile(r'\b(calls|to_apply|body|condition|true_computation|false_computation)=%?([^\s,{}()]+)')
_BRANCHES = re.compile(r'\bbranch_computations=\{([^}]*)\}')
_METADATA = re.compile(r'\bmetadata=\{([^}]*)\}')


@dataclasses.dataclass
class Instruction:
    name: str
    opcode: str
    line: str

    def callee(self, attribute) -> Optional[str]:
        for key, value in _CALLEE.findall(self.line):
            if key == attribute:
                return value
        return None

    def branches(self) -> List[str]:
        match = _BRANCHES.search(self.line)
        if match:
            return [name.strip().lstrip('%') for name in match.group(1).split(',') if name.strip()]
        return [c for c in (self.callee('true_computation'), self.callee('false_computation')) if c]

    def fusion_kind(self) -> str:
        match = re.search(r'\bkind=(k\w+)', self.line)
        return match.group(1) if match else ''

    def backend_kind(self) -> str:
        """The backend's name for a custom fusion (`__ynn_fusion`, `__triton_gemm`, `__cublas...`), if any."""
        match = re.search(r'"kind"\s*:\s*"([^"]+)"', self.line)
        return match.group(1) if match else ''

    def custom_call_target(self) -> str:
        match = re.search(r'custom_call_target="([^"]*)"', self.line)
        return match.group(1) if match else ''

    def trip_count(self) -> Optional[int]:
        match = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)', self.line)
        return int(match.group(1)) if match else None

    def metadata(self) -> Dict[str, str]:
        match = _METADATA.search(self.line)
        if not match:
            return {}
        return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', match.group(1)))


def _opcode(rest: str) -> str:
    """The opcode of an instruction's right-hand side `SHAPE opcode(operands), attributes`."""
    i = 0
    if rest.startswith('('):  # a tuple shape: skip the balanced parentheses
        depth = 0
        for i, char in enumerate(rest):
            depth += {'(': 1, ')': -1}.get(char, 0)
            if depth == 0:
                break
        i += 1
    else:
        i = rest.find(' ')
    match = re.match(r'\s*([\w\-]+)\(', rest[i:])
    return match.group(1) if match else ''


class HloModule:
    """The computations of an HLO module's text (`compiled.as_text()`), enough of it to count kernels."""

    def __init__(self, text: str):
        self.computations: Dict[str, List[Instruction]] = {}
        self.entry: Optional[str] = None
        current = None
        for line in text.splitlines():
            if current is None:
                match = _COMPUTATION.match(line)
                if match and not line.startswith((' ', 'HloModule')):
                    current = match.group(2)
                    self.computations[current] = []
                    if match.group(1):
                        self.entry = current
                continue
            if line.startswith('}'):
                current = None
                continue
            match = _INSTRUCTION.match(line)
            if match:
                self.computations[current].append(Instruction(match.group(2), _opcode(line[match.end():]), line))
        if self.entry is None:
            raise ValueError('no ENTRY computation in this HLO text')
        self._stack = _StackTable(text)

    def instructions(self, computation: str) -> List[Instruction]:
        return self.computations.get(computation, [])

    def contains(self, computation: str, opcodes, _seen=None) -> bool:
        """Whether `computation` (or one it calls) has an instruction with one of `opcodes`."""
        seen = set() if _seen is None else _seen
        if computation in seen:
            return False
        seen.add(computation)
        for instruction in self.instructions(computation):
            if instruction.opcode in opcodes:
                return True
            for _, callee in _CALLEE.findall(instruction.line):
                if self.contains(callee, opcodes, seen):
                    return True
        return False

    def stack(self, instruction: Instruction) -> List[tuple]:
        """The Python source stack of an instruction, innermost first, as (file, function) pairs."""
        metadata = instruction.metadata()
        frames = self._stack.frames(int(metadata['stack_frame_id'])) if 'stack_frame_id' in metadata else []
        if not frames and 'source_file' in metadata:
            frames = [(metadata['source_file'].strip('"'), '')]
        return frames


class _StackTable:
    """The FileNames / FunctionNames / FileLocations / StackFrames tables XLA prints before the computations."""

    def __init__(self, text: str):
        self.tables = {}
        for name in ('FileNames', 'FunctionNames', 'FileLocations', 'StackFrames'):
            match = re.search(r'^' + name + r'\n(.*?)(?:\n\n|\Z)', text, re.S | re.M)
            rows = {}
            for row in (match.group(1).splitlines() if match else []):
                key, _, value = row.partition(' ')
                if key.isdigit():
                    rows[int(key)] = value.strip()
            self.tables[name] = rows
        self._cache = {}

    def _fields(self, table, key):
        return {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', self.tables[table].get(key, ''))}

    def frames(self, frame_id: int) -> List[tuple]:
        if frame_id in self._cache:
            return self._cache[frame_id]
        out, seen, frame = [], set(), frame_id
        while frame in self.tables['StackFrames'] and frame not in seen:
            seen.add(frame)
            fields = self._fields('StackFrames', frame)
            location = self._fields('FileLocations', fields.get('file_location_id', -1))
            file_name = self.tables['FileNames'].get(location.get('file_name_id', -1), '').strip('"')
            function = self.tables['FunctionNames'].get(location.get('function_name_id', -1), '').strip('"')
            out.append((file_name, function))
            # The printed parent id is the parent's row number plus one (row 0 does not exist: a root's parent).
            frame = fields.get('parent_frame_id', 0) - 1
        self._cache[frame_id] = out
        return out


def kind_of(module: HloModule, instruction: Instruction) -> str:
    """What a kernel is, in words comparable across backends."""
    opcode = instruction.opcode
    if opcode == 'fusion':
        callee = instruction.callee('calls')
        backend = instruction.backend_kind()
        if GEMM_TARGET.search(backend) or module.contains(callee, GEMM_OPCODES):
            return 'gemm'
        if module.contains(callee, {'reduce', 'reduce-window'}):
            return 'reduction'
        if module.contains(callee, {'scatter'}):
            return 'scatter'
        if module.contains(callee, {'gather', 'dynamic-slice', 'dynamic-update-slice'}):
            return 'gather/dynamic-slice'
        if module.contains(callee, {'rng-bit-generator', 'rng'}):
            return 'rng'
        return 'elementwise'
    if opcode in GEMM_OPCODES or (opcode == 'custom-call' and GEMM_TARGET.search(instruction.custom_call_target())):
        return 'gemm'
    if opcode == 'custom-call':
        return f'custom-call:{instruction.custom_call_target()}'
    if opcode in ('copy', 'copy-start'):
        return 'copy'
    if opcode in ('reduce', 'reduce-window'):
        return 'reduction'
    if opcode in ('gather', 'dynamic-slice', 'dynamic-update-slice'):
        return 'gather/dynamic-slice'
    if opcode in ('conditional', 'while'):
        return 'control flow'
    return f'unfused {opcode}'


# Where a kernel comes from: the first rule (in this order) that any frame of its source stack matches. jax.random's
# own frames are not in the stack (JAX leaves its internals out), so random ops are told by their op_name.
SAMPLER_FUNCTIONS = ('sample_batch', 'sample_goal_indices', 'geometric_offset', 'uniform_future_index', 'observations_at',
                     'goal_rewards', '_hierarchical_goals')


def in_sampler(f, fn) -> bool:
    """Whether a frame is the sampler's: utils/training.py's batch drawing, or the pixel steps it calls."""
    return f.endswith('utils/pixel_batches.py') or (f.endswith('utils/training.py') and fn in SAMPLER_FUNCTIONS)


SOURCE_RULES = (
    ('sampler', in_sampler),
    ('EMA targets', lambda f, fn: fn.startswith(('ema_update', 'Agent.updated_targets', 'fused_ema'))),
    ('grad norm', lambda f, fn: fn in ('tree_norm', 'tree_sum', 'global_norm') or fn.startswith('grad_norm')),
    ('optimizer (Adam)', lambda f, fn: '/optax/' in f or fn.startswith(('TrainState.apply_gradients', 'TrainState._apply_gradients'))),
    ('LayerNorm', lambda f, fn: f.endswith('linen/normalization.py')),
    ('Dense', lambda f, fn: f.endswith('linen/linear.py')),
    ('activations', lambda f, fn: f.endswith('jax/_src/nn/functions.py')),
    ('losses', lambda f, fn: f.endswith(('utils/losses.py', 'utils/rl_losses.py'))),
)
RNG_OP_NAMES = ('threefry', 'random_bits', '_randint', '_uniform', 'random_split', 'random_fold_in', '_normal', '_gumbel',
                '_bernoulli', '_categorical', 'random_wrap', 'random_unwrap')


def source_of(module: HloModule, instruction: Instruction) -> str:
    """`by_source` key of a kernel (a fusion is attributed to the op it computes last, its root): the first of
    SOURCE_RULES that its source stack matches, with ' backward' for an op of a gradient (a transposed JVP), 'rng'
    for jax.random's hash (told by its op_name); else the innermost frame of this project's code, else 'other'."""
    frames = module.stack(instruction)
    op_name = instruction.metadata().get('op_name', '')
    sampling = any(in_sampler(f, fn) for f, fn in frames)
    if any(name in op_name for name in RNG_OP_NAMES):
        return 'sampler (rng)' if sampling else 'rng (jax.random)'
    if not frames:
        return 'unattributed (XLA-made)' if not op_name else 'other'
    label = next((name for name, rule in SOURCE_RULES if any(rule(f, fn) for f, fn in frames)), None)
    if label is None:
        own = [(f, fn) for f, fn in frames if '/site-packages/' not in f]
        file_name, function = own[0] if own else frames[0]
        label = f'{file_name.rsplit("/", 1)[-1]}:{function}'
    if 'transpose(' in op_name and label not in ('sampler', 'EMA targets', 'grad norm', 'optimizer (Adam)'):
        label += ' backward'
    return label


@dataclasses.dataclass
class KernelCount:
    kernels: float = 0.0
    by_kind: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    by_source: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    by_opcode: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    in_graphs: float = 0.0
    graph_launches: float = 0.0
    nested_loops: int = 0
    unknown_trip_counts: int = 0

    def add(self, other: 'KernelCount', times: float = 1.0):
        self.kernels += times * other.kernels
        for mine, theirs in ((self.by_kind, other.by_kind), (self.by_source, other.by_source), (self.by_opcode, other.by_opcode)):
            for key, value in theirs.items():
                mine[key] += times * value
        self.in_graphs += times * other.in_graphs
        self.graph_launches += times * other.graph_launches
        self.nested_loops += other.nested_loops
        self.unknown_trip_counts += other.unknown_trip_counts

    def one(self, module: HloModule, instruction: Instruction):
        self.kernels += 1
        self.by_kind[kind_of(module, instruction)] += 1
        self.by_source[source_of(module, instruction)] += 1
        self.by_opcode[instruction.opcode if instruction.opcode != 'fusion' else f'fusion:{instruction.fusion_kind()}'] += 1

    @property
    def launches(self) -> float:
        return self.kernels - self.in_graphs + self.graph_launches


def count_kernels(module: HloModule, computation: str, skip: Optional[Instruction] = None, _depth=0) -> KernelCount:
    """Kernels that one execution of `computation` launches (the module docstring's rule); `skip`: an
    instruction left out (the main loop, when counting what a call runs besides it)."""
    if _depth > 64:
        raise ValueError('HLO call nesting deeper than 64')
    count = KernelCount()
    for instruction in module.instructions(computation):
        opcode = instruction.opcode
        if instruction is skip or opcode in FREE_OPCODES or opcode.endswith(('-done', '-update')):
            continue
        if opcode == 'call':
            callee = instruction.callee('to_apply')
            inner = count_kernels(module, callee, skip, _depth + 1)
            if callee and callee.startswith('command_buffer'):
                inner.in_graphs = inner.kernels
                inner.graph_launches = 1
            count.add(inner)
        elif opcode == 'while':
            body = count_kernels(module, instruction.callee('body'), skip, _depth + 1)
            condition = count_kernels(module, instruction.callee('condition'), skip, _depth + 1)
            trips = instruction.trip_count()
            count.nested_loops += 1
            if trips is None:
                count.unknown_trip_counts += 1
                trips = 1
            count.add(body, trips)
            count.add(condition, trips + 1)
        elif opcode == 'conditional':
            branches = [count_kernels(module, branch, skip, _depth + 1) for branch in instruction.branches()]
            if branches:
                count.add(max(branches, key=lambda c: c.kernels))
            count.one(module, instruction)
        else:
            count.one(module, instruction)
    return count


def _top_level_whiles(module: HloModule, computation: str, _depth=0):
    """The while instructions `computation` runs, looking through calls but not into other loops."""
    found = []
    for instruction in module.instructions(computation):
        if instruction.opcode == 'while':
            found.append(instruction)
        elif instruction.opcode == 'call' and _depth < 64:
            found.extend(_top_level_whiles(module, instruction.callee('to_apply'), _depth + 1))
    return found


def main_loop(module: HloModule) -> Optional[Instruction]:
    """The program's scan: of the loops ENTRY runs (not nested in another loop), the one whose body launches
    the most kernels; None when XLA removed the loop (a scan of length 1)."""
    loops = _top_level_whiles(module, module.entry)
    if not loops:
        return None
    return max(loops, key=lambda loop: count_kernels(module, loop.callee('body')).kernels)


def cost_analysis(compiled) -> Dict[str, float]:
    """`compiled.cost_analysis()` as one dict (older jax versions return a list with one dict per device)."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # a backend without cost analysis
        return {}
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return dict(cost or {})


@dataclasses.dataclass
class ProgramStats:
    """One iteration of a compiled program's scan: kernels (`per_update`), and per call of the program the
    kernels outside the scan, the scan's trip count and XLA's flop count."""

    per_update: KernelCount
    outside: KernelCount
    trip_count: Optional[int]
    flops: float
    bytes_accessed: float

    @property
    def kernels(self) -> float:
        return self.per_update.kernels

    def summary(self, top: int = 8) -> Dict:
        kernels = self.per_update
        return dict(
            kernels=kernels.kernels, launches=kernels.launches, gflop=self.flops / 1e9, trip_count=self.trip_count,
            outside_loop_kernels=self.outside.kernels, nested_loops=kernels.nested_loops,
            by_kind=dict(kernels.by_kind.most_common()), by_source=dict(kernels.by_source.most_common(top)),
        )


def module_stats(text: str, cost: Optional[Dict[str, float]] = None) -> ProgramStats:
    """`ProgramStats` of an optimised HLO module's text (and its cost analysis, if given)."""
    module = HloModule(text)
    loop = main_loop(module)
    cost = cost or {}
    flops, bytes_accessed = float(cost.get('flops', 0.0)), float(cost.get('bytes accessed', 0.0))
    if loop is None:  # no loop left: the whole program is one update
        return ProgramStats(count_kernels(module, module.entry), KernelCount(), None, flops, bytes_accessed)
    per_update = count_kernels(module, loop.callee('body'))
    per_update.add(count_kernels(module, loop.callee('condition')))
    outside = count_kernels(module, module.entry, skip=loop)
    outside.add(count_kernels(module, loop.callee('condition')))  # the final test that ends the loop
    return ProgramStats(per_update, outside, loop.trip_count(), flops, bytes_accessed)


def program_stats(compiled, lowered=None) -> ProgramStats:
    """`ProgramStats` of a `jax.stages.Compiled` (what `jax.jit(f).lower(...).compile()` returns). With `lowered` (the
    `jax.stages.Lowered` it was compiled from), `flops` is XLA's count for the unoptimised program instead: the same
    on every backend, where XLA:GPU's count of the compiled program leaves out the gemms it hands to cuBLAS."""
    stats = module_stats(compiled.as_text(), cost_analysis(compiled))
    if lowered is not None:
        stats.flops = float(cost_analysis(lowered).get('flops', stats.flops))
    return stats


def format_counter(counter, total=None, top=8) -> str:
    total = total if total is not None else sum(counter.values())
    parts = [f'{key} {value:.0f}' for key, value in counter.most_common(top)]
    rest = total - sum(value for _, value in counter.most_common(top))
    if rest > 0.5:
        parts.append(f'others {rest:.0f}')
    return ', '.join(parts)
