"""Kernels and GFLOP per update of main.py's fused training step, read from the compiled, optimised HLO.

    python benchmarks/hlo_kernels.py                                    # GCBC, GCBC-phi, BYOL-gamma^a, TRA, TD-SR^a; N = 1, 4
    python benchmarks/hlo_kernels.py --presets byol_gamma_a --num_seeds 16 --top 20 --json out.json

For each preset and seed count N this lowers and compiles exactly the program main.py runs
(`utils.training.train` for one seed, and vmapped over N seeds:
`--steps_per_call` updates in one `lax.scan`, on-device sampling included) at batch `--batch_size` per seed, on the
backend JAX sees, and prints from the compiled program (`benchmarks.hlo_stats`, which documents the counting rule):
GFLOP per update (XLA's cost analysis of the unoptimised program), kernels per update (every kernel the scan's loop body launches), and where
they come from.
Nothing runs: the agents and the dataset are abstract shapes (`jax.eval_shape`), so this needs no data and
takes one compilation per row.

On the CPU the kernel counts are a proxy for a GPU's (benchmarks/hlo_stats.py explains why). The largest difference
is jax.random: XLA:CPU runs the threefry hash of every random call as a rolled 5-iteration loop, whose small ops
and copies are then counted 5 times; `--rng=unrolled` (the default on the CPU) lowers it as on GPUs (one unrolled
hash), which makes the CPU count of the sampler comparable with a GPU's (the same bits, other code);
`--rng=compiled` counts the program the CPU really runs.

`--target=h100` counts XLA:GPU's kernels without a GPU: it compiles for a compile-only H100 (deviceless AOT
compilation; XLA's own GPU pipeline, without autotuning, so the gemm kernels it picks may differ from a real run's,
and no cost analysis). It needs the CUDA plugin of the installed jax, which this project does not install; e.g. in a
separate environment: `python -m venv /tmp/gpuvenv && echo $PWD/.venv/lib/python3.11/site-packages >
/tmp/gpuvenv/lib/python3.11/site-packages/project.pth && /tmp/gpuvenv/bin/pip install --no-deps
jax-cuda12-plugin==<jax version> jax-cuda12-pjrt==<jax version> nvidia-cuda-nvcc-cu12`, then
`JAX_PLATFORMS=cpu /tmp/gpuvenv/bin/python benchmarks/hlo_kernels.py --target=h100`.

`--layout` picks the optimizer layout, as main.py's --optimizer_layout (per_leaf: optax's, each parameter array on its
own, main.py's default on every backend; one_vector: Adam over all parameters as one vector, utils/optimizers.OneVector).
"""

import argparse
import contextlib
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from agents import get_agent_class
from benchmarks.hlo_stats import format_counter, program_stats
from configs.presets import get_config as preset_config
from utils.optimizers import with_optimizer
from utils.training import DeviceDataset, train

PRESETS = {'gcbc': 'GCBC', 'gcbc_phi': 'GCBC-φ', 'byol_gamma_a': 'BYOL-γ^a', 'tra': 'TRA', 'tdsr_a': 'TD-SR^a'}
# Observation and action sizes of the state-based datasets this project trains on (OGBench's).
ENV_SIZES = {'antmaze-medium-stitch-v0': (29, 8), 'antmaze-large-stitch-v0': (29, 8), 'antmaze-giant-stitch-v0': (29, 8),
             'pointmaze-medium-stitch-v0': (2, 2), 'pointmaze-large-stitch-v0': (2, 2)}


# XLA's description of an H100 SXM (80 GB) for compile-only (deviceless) GPU compilation (GpuTargetConfigProto).
H100_TARGET_CONFIG = """
gpu_device_info {
  cuda_compute_capability { major: 9 minor: 0 }
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_block_optin: 232448
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84942979072
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 3 patch: 0 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def compile_only_device(target):
    """None for `target='local'` (JAX's default device); for 'h100', a compile-only H100 (see the docstring)."""
    if target == 'local':
        return None
    from jax.experimental import topologies
    try:
        topology = topologies.get_topology_desc(platform='cuda', topology_name=target, topology='1x1x1',
                                                target_config=H100_TARGET_CONFIG)
    except Exception as e:  # no CUDA plugin, or one that cannot compile without a device
        raise SystemExit(f'--target={target} needs the CUDA plugin of jax {jax.__version__} (see this script\'s docstring): '
                         f'{type(e).__name__}: {str(e)[:300]}')
    return topology.devices[0]


def agent_config(preset, batch_size, overrides=None):
    config = preset_config(preset)
    config.batch_size = batch_size
    for key, value in (overrides or {}).items():
        config[key] = value
    return config


def _sharding(device):
    return None if device is None else jax.sharding.SingleDeviceSharding(device)


def abstract_agents(config, num_seeds, obs_dim, action_dim, device=None, one_vector=False):
    """The agent `create` would build (N stacked along a new axis 0 when num_seeds > 1), as shapes only (placed on
    `device`, e.g. a compile-only GPU, when given), its optimizer over one vector or per leaf (`one_vector`)."""
    agent_class = get_agent_class(config.agent_name)
    observations, actions = np.zeros((1, obs_dim), np.float32), np.zeros((1, action_dim), np.float32)
    def create():
        agent = agent_class.create(0, observations, actions, config)
        return with_optimizer(agent, one_vector)

    agent = jax.eval_shape(create)
    lead = (num_seeds,) if num_seeds > 1 else ()
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct((*lead, *x.shape), x.dtype, sharding=_sharding(device)), agent)


def abstract_dataset(obs_dim, action_dim, rows=400_000, device=None):
    shape = lambda *s, dtype=jnp.float32: jax.ShapeDtypeStruct(s, dtype, sharding=_sharding(device))
    return DeviceDataset(observations=shape(rows, obs_dim), actions=shape(rows, action_dim),
                         episode_end=shape(rows, dtype=jnp.int32), sample_idxs=shape(rows - rows // 200, dtype=jnp.int32))


def lower_train_step(agents, data, num_seeds, steps_per_call, device=None):
    """main.py's fused training call, lowered for these (possibly abstract) arguments."""
    step = jax.ShapeDtypeStruct((), jnp.int32, weak_type=True, sharding=_sharding(device))
    if num_seeds == 1:
        key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=_sharding(device))
        return train.lower(agents, data, key, step, steps_per_call)
    keys = jax.ShapeDtypeStruct((num_seeds, 2), jnp.uint32, sharding=_sharding(device))
    return train.lower(agents, data, keys, step, steps_per_call)


@contextlib.contextmanager
def threefry_lowering(mode):
    """`mode='unrolled'`: lower jax.random's threefry hash on the CPU as XLA:GPU gets it (one unrolled hash instead
    of a rolled loop) while inside; 'compiled' (default): leave it as the CPU compiles it. Lowering only: the bits
    are the same. Uses a private JAX hook: if it moved, says so and lowers as compiled."""
    if mode != 'unrolled' or jax.default_backend() != 'cpu':
        yield
        return
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry
        unrolled, rolled = threefry._threefry2x32_lowering_rule, threefry._threefry2x32_cpu_lowering_rule
    except (ImportError, AttributeError) as e:
        print(f'(--rng=unrolled unavailable in this JAX: {e}; counting the CPU lowering)', file=sys.stderr)
        yield
        return
    mlir.register_lowering(threefry.threefry2x32_p, unrolled, platform='cpu')
    try:
        yield
    finally:
        mlir.register_lowering(threefry.threefry2x32_p, rolled, platform='cpu')


def train_step_stats(preset, num_seeds, batch_size=1024, obs_dim=29, action_dim=8, steps_per_call=500, overrides=None,
                     rng='compiled', compiler_options=None, optimizer_layout='per_leaf', device=None):
    """(ProgramStats, compile seconds) of main.py's training call for `preset` at N = `num_seeds` (on `device`, e.g.
    `compile_only_device('h100')`, else JAX's default device)."""
    config = agent_config(preset, batch_size, overrides)
    start = time.perf_counter()
    one_vector = {'per_leaf': False, 'one_vector': True}[optimizer_layout]
    with threefry_lowering(rng):
        lowered = lower_train_step(abstract_agents(config, num_seeds, obs_dim, action_dim, device, one_vector),
                                   abstract_dataset(obs_dim, action_dim, device=device), num_seeds, steps_per_call, device)
        compiled = lowered.compile(compiler_options) if compiler_options else lowered.compile()
    return program_stats(compiled, lowered), time.perf_counter() - start


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--presets', nargs='+', default=list(PRESETS), help='configs/presets.py names')
    parser.add_argument('--num_seeds', type=int, nargs='+', default=[1, 4])
    parser.add_argument('--batch_size', type=int, default=1024, help='per seed')
    parser.add_argument('--steps_per_call', type=int, default=500, help='updates per call (main.py default; >= 2 keeps the loop)')
    parser.add_argument('--env', default='antmaze-medium-stitch-v0', choices=sorted(ENV_SIZES), help='observation/action sizes')
    parser.add_argument('--rng', default='unrolled', choices=['compiled', 'unrolled'], help='CPU only: see the docstring')
    parser.add_argument('--layout', nargs='+', default=['per_leaf'], choices=['per_leaf', 'one_vector'],
                        help='optimizer-state layout(s) to count, side by side (utils/optimizers.py)')
    parser.add_argument('--target', default='local', choices=['local', 'h100'], help="'h100': compile-only H100, see the docstring")
    parser.add_argument('--set', nargs='*', default=[], metavar='KEY=VALUE', help='config overrides, e.g. tau=0.99 (Python literals)')
    parser.add_argument('--top', type=int, default=10, help='breakdown entries shown')
    parser.add_argument('--json', default='', help='also write every figure to this file')
    return parser.parse_args(argv)


def main(argv=None):
    import ast

    args = parse_args(argv)
    obs_dim, action_dim = ENV_SIZES[args.env]
    overrides = {}
    for item in args.set:
        key, _, value = item.partition('=')
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    device = compile_only_device(args.target)
    platform = device.platform if device is not None else jax.default_backend()
    kind = device.device_kind if device is not None else jax.devices()[0].device_kind
    print(f'# hlo_kernels: jax {jax.__version__}, {"compile-only " if device is not None else ""}{platform} ({kind}), {args.env} sizes, '
          f'batch {args.batch_size} per seed{", rng lowering " + args.rng if platform == "cpu" else ""}'
          f'{", " + str(overrides) if overrides else ""}'
          + ('\n# CPU: kernel counts are a proxy for a GPU\'s (benchmarks/hlo_stats.py)' if platform == 'cpu' else ''), flush=True)
    results = {}
    print('\n| agent | N | optimizer | GFLOP/update | kernels/update | launches/update | by kind | compile s |\n|---|---|---|---|---|---|---|---|')
    for preset in args.presets:
        for n in args.num_seeds:
            for optimizer_layout in args.layout:
                stats, compile_s = train_step_stats(preset, n, args.batch_size, obs_dim, action_dim, args.steps_per_call, overrides,
                                                    args.rng, optimizer_layout=optimizer_layout, device=device)
                k = stats.per_update
                results[f'{preset}/N={n}/{optimizer_layout}'] = dict(stats.summary(top=100), compile_s=compile_s)
                gflop = f'{stats.flops / 1e9:.2f}' if stats.flops else 'n/a'
                print(f'| {PRESETS.get(preset, preset)} | {n} | {optimizer_layout} | {gflop} | {k.kernels:.0f} | {k.launches:.0f} | '
                      f'{format_counter(k.by_kind, top=6)} | {compile_s:.1f} |', flush=True)
    print(f'\nWhere the kernels of one update come from (top {args.top}):')
    for name, result in results.items():
        source = ', '.join(f'{key} {value:.0f}' for key, value in list(result['by_source'].items())[:args.top])
        print(f'- {name}: {source}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == '__main__':
    main(sys.argv[1:])
