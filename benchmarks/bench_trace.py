"""Where the device time of main.py's training step goes: a profiler trace of a few fused calls, summed by kernel.

    python benchmarks/bench_trace.py                                   # GCBC and BYOL-gamma^a, N = 1 and 16 seeds
    python benchmarks/bench_trace.py --presets byol_gamma_a --num_seeds 16 --out /tmp/trace --xla_flags='...'
    python benchmarks/bench_trace.py --quick                           # CPU smoke run (host ops stand in for kernels)

For each preset and seed count it compiles exactly the program main.py runs (benchmarks/bench_gpu.py's synthetic
batches of `--train_env`'s sizes, batch 1024 per seed), warms it up, and records `--calls` calls of `--steps_per_call`
updates with `jax.profiler.trace`. From the trace's device events it prints, per update:

  * wall: the traced calls' wall time over their updates;
  * busy: the time at least one kernel ran (the union of the kernels' intervals), and idle = wall - busy. A device
    idle for most of the wall time waits on the host: launches, the loop's per-iteration host round trip;
  * kernels: how many ran, and their time by kind, by source and by network (gemm / reduction / elementwise ...;
    sampler, Dense, LayerNorm, Adam ... backward; encoder, predictors, actor), each kernel matched to its instruction
    in the compiled program and attributed by benchmarks/hlo_stats.py's rules; the slowest kernels by name;
  * XLA's estimate of the update's FLOPs and bytes, and the device's memory bandwidth, measured.

`--activations` adds a what-if: the same update with the MLPs' activations in bfloat16 (not a training option).

Each run leaves, under `--out`, the profiler's perfetto trace (open it in ui.perfetto.dev), the optimised HLO and a
JSON summary. Figures are for the machine it runs on; docs/performance.md gives the command behind each.
"""

import argparse
import collections
import contextlib
import glob
import gzip
import json
import os
import re
import sys
import time


ACTIVATIONS = ('float32', 'bf16_representation', 'bf16_all')
GEMM_KERNEL = re.compile(r'gemm|xmma|cutlass|cublas', re.I)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--presets', nargs='+', default=None, help='default gcbc byol_gamma_a')
    parser.add_argument('--num_seeds', type=int, nargs='+', default=None, help='default 1 16 (quick: 1)')
    parser.add_argument('--train_env', default='antmaze-medium-stitch-v0', help='its observation/action sizes shape the batches')
    parser.add_argument('--batch_size', type=int, default=None, help='per seed; default 1024 (quick: 32)')
    parser.add_argument('--steps_per_call', type=int, default=None, help='updates per traced call; default 20 (quick: 2)')
    parser.add_argument('--calls', type=int, default=3, help='traced calls (after one untraced warm call)')
    parser.add_argument('--activations', nargs='+', default=['float32'], choices=ACTIVATIONS,
                        help='what-if: the MLPs with LayerNorm (encoders, predictors; bf16_representation) or all MLPs '
                             '(bf16_all) compute and keep their activations in bfloat16, parameters in float32')
    parser.add_argument('--xla_flags', default='', help='added to XLA_FLAGS before JAX starts its backend')
    parser.add_argument('--out', default='runs/bench_trace', help='folder for the traces, HLO and summaries')
    parser.add_argument('--top', type=int, default=8, help='rows of the slowest-kernel table')
    parser.add_argument('--quick', action='store_true', help='tiny sizes for a CPU smoke run')
    args = parser.parse_args(argv)
    defaults = dict(presets=['gcbc', 'byol_gamma_a'], num_seeds=[1] if args.quick else [1, 16],
                    batch_size=32 if args.quick else 1024, steps_per_call=2 if args.quick else 20)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def load_trace(folder):
    """The events of the newest perfetto trace under `folder` (what jax.profiler.trace wrote)."""
    paths = sorted(glob.glob(os.path.join(folder, '**', 'perfetto_trace.json.gz'), recursive=True), key=os.path.getmtime)
    if not paths:
        raise FileNotFoundError(f'no perfetto_trace.json.gz under {folder}: the profiler wrote no trace')
    with gzip.open(paths[-1], 'rt') as f:
        trace = json.load(f)
    return paths[-1], trace['traceEvents'] if isinstance(trace, dict) else trace


def device_events(events, device_pattern):
    """Complete ('X') events of the processes whose name matches `device_pattern`, as (start us, duration us, name, args)."""
    pids = {e['pid'] for e in events
            if e.get('ph') == 'M' and e.get('name') == 'process_name' and re.search(device_pattern, e['args'].get('name', ''))}
    return [(float(e['ts']), float(e.get('dur', 0.0)), e.get('name', ''), e.get('args', {}))
            for e in events if e.get('ph') == 'X' and e.get('pid') in pids]


def busy_time(intervals):
    """Length of the union of [start, start + duration) intervals."""
    total, end = 0.0, float('-inf')
    for start, duration in sorted(intervals):
        stop = start + duration
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def labels_of(name, args, index):
    """(kind, source, network) of a device event: its kernel matched to the instruction it runs. XLA names a fusion's kernel
    after its instruction ('.' written '_'; instructions that share code share the first one's name); the profiler's
    `hlo_op` names the instruction, or the command buffer (CUDA graph) that ran the kernel, which tells nothing, so
    the kernel name comes first. A library kernel (cuBLAS, cutlass) inside a command buffer matches neither."""
    op = str(args.get('hlo_op', ''))
    for key in (name, '' if op.startswith('command_buffer') else op):
        if key in index:
            return index[key]
    if GEMM_KERNEL.search(name):
        return 'gemm', 'library gemm (cuBLAS/cutlass)', 'unknown (library gemm)'
    if name.startswith(('Memcpy', 'Memset', 'memcpy')):
        return 'copy', 'memcpy/memset', 'none (sampler, optimizer, losses)'
    return 'unmatched', 'unmatched', 'unmatched'


def network_of(instruction):
    """The agent's sub-network an instruction computes (`ModuleDict`'s modules_<name> in its op_name), else 'none'."""
    match = re.search(r'modules_(\w+)', instruction.metadata().get('op_name', ''))
    return match.group(1) if match else 'none (sampler, optimizer, losses)'


def instruction_index(hlo_text):
    """{kernel-style name: (kind, source, network)} for every instruction of the optimised module."""
    from benchmarks.hlo_stats import HloModule, kind_of, source_of

    module = HloModule(hlo_text)
    index = {}
    for computation in module.computations:
        for instruction in module.instructions(computation):
            try:
                labels = (kind_of(module, instruction), source_of(module, instruction), network_of(instruction))
            except Exception:  # an instruction the rules cannot read: leave it unattributed
                continue
            index[instruction.name] = labels
            index[instruction.name.replace('.', '_')] = labels
    return index


def summarize(events, updates, wall_us, index):
    """Per-update figures of the traced calls' device events (see the module docstring)."""
    by_kind, by_source, by_name, by_network = (collections.Counter() for _ in range(4))
    count_kind, durations = collections.Counter(), []
    for start, duration, name, args in events:
        kind, source, network = labels_of(name, args, index)
        by_network[network] += duration
        by_kind[kind] += duration
        count_kind[kind] += 1
        by_source[source] += duration
        by_name[name[:80]] += duration
        durations.append(duration)
    busy = busy_time([(s, d) for s, d, _, _ in events])
    per = lambda x: x / updates  # noqa: E731
    short = sum(d < 5.0 for d in durations)
    return dict(
        wall_us=per(wall_us), busy_us=per(busy), idle_fraction=1.0 - busy / wall_us if wall_us else 0.0,
        kernels=per(len(events)), kernel_us=per(sum(durations)), under_5us=per(short),
        mean_kernel_us=sum(durations) / len(durations) if durations else 0.0,
        by_kind={k: dict(us=per(v), kernels=per(count_kind[k])) for k, v in by_kind.most_common()},
        by_source={k: per(v) for k, v in by_source.most_common()},
        by_network={k: per(v) for k, v in by_network.most_common()},
        slowest={k: per(v) for k, v in by_name.most_common(40)},
    )


@contextlib.contextmanager
def activations_in(which):
    """Agents built inside get `which` activations (see --activations): a measurement of what halving the
    activations' bytes would buy, not a training option (no test covers bfloat16 training)."""
    import jax.numpy as jnp

    from utils import networks

    original = networks.MLP
    if which == 'float32':
        yield
        return

    class MLP(original):  # the same class name: the parameter tree keeps its names
        def __post_init__(self):
            if which == 'bf16_all' or self.layer_norm:
                object.__setattr__(self, 'dtype', jnp.bfloat16)
            super().__post_init__()

    networks.MLP = MLP
    try:
        yield  # the what-if is of XLA's kernels (every run's default path)
    finally:
        networks.MLP = original


def trace_one(preset, num_seeds, raw, data, args, device_pattern, activations='float32'):
    import jax

    from benchmarks.bench_gpu import compile_training, timed_chunks
    from benchmarks.hlo_stats import program_stats

    state, run, lowered, compiled = compile_training(preset, num_seeds, raw, data, args.batch_size, args.steps_per_call)
    name = f'{preset}_n{num_seeds}' + ('' if activations == 'float32' else f'_{activations}')
    hlo = compiled.as_text()
    with open(os.path.join(args.out, f'{name}.hlo.txt'), 'w') as f:
        f.write(hlo)
    state, _, _ = timed_chunks(run, state, 0.0)  # a warm call (allocator, autotuning results loaded)
    folder = os.path.join(args.out, f'{name}.profile')
    with jax.profiler.trace(folder, create_perfetto_trace=True):
        start = time.perf_counter()
        for _ in range(args.calls):
            state, infos = run(state)
            jax.device_get(infos)
        wall_us = (time.perf_counter() - start) * 1e6
    path, events = load_trace(folder)
    index = instruction_index(hlo)
    device = device_events(events, device_pattern)
    if jax.default_backend() == 'cpu':  # the host's events nest Python frames and runtime calls: keep the program's ops
        device = [event for event in device if labels_of(event[2], event[3], index)[0] != 'unmatched']
    updates = args.calls * args.steps_per_call
    summary = summarize(device, updates, wall_us, index)
    stats = program_stats(compiled, lowered)  # XLA's cost analysis counts the scan's body once: one update (all seeds)
    summary.update(gflop=stats.flops / 1e9, mbytes=stats.bytes_accessed / 1e6)
    summary.update(preset=preset, num_seeds=num_seeds, activations=activations, updates=updates, trace=path,
                   seed_steps_per_s=num_seeds * updates / (wall_us / 1e6))
    with open(os.path.join(args.out, f'{name}.summary.json'), 'w') as f:
        json.dump(summary, f, indent=1)
    return summary


def measure_bandwidth(megabytes=1024, repeats=10):
    """Device memory bandwidth in bytes/s: bytes read plus written by an elementwise pass over a large array
    (the median of `repeats`)."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones(megabytes * 2**20 // 4, jnp.float32)
    step = jax.jit(lambda x: x * 1.0001)
    jax.block_until_ready(step(x))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(x))
        times.append(time.perf_counter() - start)
    return 2 * x.nbytes / sorted(times)[repeats // 2]


def print_summary(s, top, bandwidth):
    floor = f' ({s["mbytes"] * 1e6 / bandwidth * 1e6:.0f} us at the measured bandwidth)' if bandwidth else ''
    print(f'\n## {s["preset"]}, N={s["num_seeds"]}, {s["activations"]} activations: {s["seed_steps_per_s"]:.0f} seed-steps/s while traced\n'
          f'XLA\'s cost-analysis estimate per update (all seeds): {s["gflop"]:.2f} GFLOP, {s["mbytes"]:.0f} MB accessed{floor}\n'
          f'per update: wall {s["wall_us"]:.0f} us, device busy {s["busy_us"]:.0f} us (idle {100 * s["idle_fraction"]:.0f}%), '
          f'{s["kernels"]:.0f} kernels taking {s["kernel_us"]:.0f} us (mean {s["mean_kernel_us"]:.1f} us, '
          f'{s["under_5us"]:.0f} under 5 us)')
    print('by kind: ' + ', '.join(f'{k} {v["us"]:.0f} us / {v["kernels"]:.0f}' for k, v in s['by_kind'].items()))
    print('by network: ' + ', '.join(f'{k} {v:.0f}' for k, v in s['by_network'].items()) + ' (us)')
    print('by source: ' + ', '.join(f'{k} {v:.0f}' for k, v in list(s['by_source'].items())[:12]) + ' (us)')
    print('slowest kernels (us per update): ' + ', '.join(f'{k} {v:.0f}' for k, v in list(s['slowest'].items())[:top]), flush=True)


def main(argv=None):
    args = parse_args(argv)
    from benchmarks.bench_gpu import apply_xla_flags, synthetic_dataset
    note = apply_xla_flags(args.xla_flags)
    import jax

    from utils.evaluation import env_spaces, make_eval_envs
    from utils.training import DeviceDataset

    os.makedirs(args.out, exist_ok=True)
    backend = jax.default_backend()
    device_pattern = r'/host:CPU' if backend == 'cpu' else r'/device:(GPU|TPU)'
    print(f'# bench_trace: jax {jax.__version__}, {jax.devices()[0].device_kind}, '
          f'XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}{note}' + ('; CPU: host events stand in for kernels' if backend == 'cpu' else ''))
    observation_space, action_space = env_spaces(make_eval_envs(args.train_env, 1))
    raw = synthetic_dataset(observation_space.shape[0], action_space.shape[0],
                            num_episodes=20 if args.quick else 2000, length=21 if args.quick else 201)
    data = DeviceDataset.from_numpy(**raw)
    bandwidth = measure_bandwidth() if backend != 'cpu' else None
    if bandwidth:
        print(f'device memory bandwidth (read + write of a 1 GiB elementwise pass): {bandwidth / 1e12:.2f} TB/s')
    summaries = []
    for activations in args.activations:
        for preset in args.presets:
            for n in args.num_seeds:
                with activations_in(activations):  # the networks are built, and traced, in this context
                    summaries.append(trace_one(preset, n, raw, data, args, device_pattern, activations))
                summaries[-1]['bandwidth_bytes_per_s'] = bandwidth
                print_summary(summaries[-1], args.top, bandwidth)
    return summaries


if __name__ == '__main__':
    main(sys.argv[1:])
