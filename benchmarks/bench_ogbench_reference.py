r"""Training steps/s of this codebase's GCIVL / GCIQL next to OGBench's reference implementation of the
same agent, on the same dataset, same hyperparameters, in one process.

    pip download --no-binary :all: --no-deps ogbench==1.2.2 -d /tmp/ogb && tar xzf /tmp/ogb/ogbench-1.2.2.tar.gz -C /tmp/ogb
    python benchmarks/bench_ogbench_reference.py --ogbench_src=/tmp/ogb/ogbench-1.2.2 --agent=gcivl \
        --dataset=/tmp/ogbench_data/pointmaze-medium-stitch-v0.npz

OGBench's agents need `distrax` (and its dependencies) importable; nothing of OGBench is copied here:
its `impls/` directory is imported from the given source distribution. Both codebases name their
packages `agents` and `utils`, so OGBench's are loaded from its impls/ directory under a temporary swap of
`sys.modules` (our own import path is left alone).

Three numbers, each the median of `--repeats` timed blocks of `--steps` gradient steps after a warm-up
block (compilation excluded), the three blocks timed in turn within each round:
  ours        -- this codebase's fused step: on-device sampling + update, `--steps_per_call` per jitted call
                 (main.py's training loop).
  ogb_loop    -- OGBench's loop: host-side numpy GCDataset.sample, then the jitted agent.update, per step
                 (impls/main.py's training loop).
  ogb_update  -- OGBench's agent.update alone on batches pre-sampled by its GCDataset and already on the
                 device (its update without the host sampling cost).
and the ratios ours / ogb_loop and ours / ogb_update.
"""

import argparse
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import time

import jax
import numpy as np

from agents import get_agent_class
from configs.presets import get_config as preset_config
from utils.training import DeviceDataset, train

# Config fields that both codebases' configs share and that change the computation.
SHARED_FIELDS = (
    'lr', 'batch_size', 'actor_hidden_dims', 'value_hidden_dims', 'layer_norm', 'discount', 'tau', 'expectile',
    'alpha', 'const_std', 'gc_negative', 'actor_loss',
    'value_p_curgoal', 'value_p_trajgoal', 'value_p_randomgoal', 'value_geom_sample',
    'actor_p_curgoal', 'actor_p_trajgoal', 'actor_p_randomgoal', 'actor_geom_sample',
)


def import_ogbench(impls_dir: str, agent: str):
    """(agent module, datasets module) of OGBench's impls/, imported without disturbing ours."""
    shadowed = ('agents', 'utils')
    ours = {name: mod for name, mod in sys.modules.items() if name.split('.')[0] in shadowed}
    for name in ours:
        del sys.modules[name]
    try:
        # Register OGBench's own `agents` and `utils` packages (found in impls_dir only) under those names
        # for the duration of the import, so that their internal absolute imports resolve to each other.
        specs = {}
        for package in shadowed:
            specs[package] = importlib.machinery.PathFinder.find_spec(package, [impls_dir])
            if specs[package] is None:
                raise SystemExit(f'{impls_dir} has no {package}/ package: pass --ogbench_src=<unpacked ogbench sdist>.')
            sys.modules[package] = importlib.util.module_from_spec(specs[package])
        for package in shadowed:
            specs[package].loader.exec_module(sys.modules[package])
        agent_module = importlib.import_module(f'agents.{agent}')
        datasets_module = importlib.import_module('utils.datasets')
    finally:
        for name in [n for n in sys.modules if n.split('.')[0] in shadowed]:
            del sys.modules[name]
        sys.modules.update(ours)
    return agent_module, datasets_module


def median_rates(blocks, steps: int, repeats: int):
    """Steps/s of each block: one warm-up call each (compilation), then `repeats` rounds that time every
    block in turn, so that load on a shared machine affects all of them alike; the median per block."""
    for run_block in blocks.values():
        run_block()
    times = {name: [] for name in blocks}
    for _ in range(repeats):
        for name, run_block in blocks.items():
            start = time.perf_counter()
            run_block()
            times[name].append(time.perf_counter() - start)
    return {name: steps / float(np.median(t)) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--ogbench_src', required=True, help='Unpacked OGBench source distribution (holds impls/).')
    parser.add_argument('--agent', default='gcivl', choices=('gcivl', 'gciql'))
    parser.add_argument('--family', default='pointmaze', help='Preset family: <agent>_<family> hyperparameters.')
    parser.add_argument('--dataset', default='/tmp/ogbench_data/pointmaze-medium-stitch-v0.npz')
    parser.add_argument('--batch_size', type=int, default=256)
    parser.add_argument('--steps', type=int, default=200, help='Gradient steps per timed block.')
    parser.add_argument('--steps_per_call', type=int, default=100, help='Our steps fused per jitted call.')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    impls_dir = os.path.join(os.path.abspath(args.ogbench_src), 'impls')
    if not os.path.isdir(os.path.join(impls_dir, 'agents')):
        sys.exit(f'Error: {impls_dir}/agents not found: --ogbench_src must be the unpacked ogbench sdist (it holds impls/).')
    if args.steps % args.steps_per_call:
        sys.exit('Error: --steps must be a multiple of --steps_per_call.')

    raw = np.load(args.dataset)
    observations = raw['observations'].astype(np.float32)
    actions = raw['actions'].astype(np.float32)
    terminals = raw['terminals'].astype(np.float32)

    # Ours: preset hyperparameters at the benchmark's batch size.
    config = preset_config(f'{args.agent}_{args.family}')
    config.batch_size = args.batch_size
    agent = get_agent_class(config.agent_name).create(0, observations[:1], actions[:1], config)
    data = DeviceDataset.from_numpy(observations, actions, terminals)
    key = jax.random.PRNGKey(0)
    state = {'agent': agent, 'step': 0}

    def ours_block():
        for _ in range(args.steps // args.steps_per_call):
            state['agent'], info = train(state['agent'], data, key, state['step'], args.steps_per_call)
            state['step'] += args.steps_per_call
        jax.block_until_ready(info)

    # OGBench: its agent and its GCDataset on the same arrays (compact layout, as ogbench.load_dataset gives).
    ogb_agent_module, ogb_datasets = import_ogbench(impls_dir, args.agent)
    ogb_config = ogb_agent_module.get_config()
    for field in SHARED_FIELDS:
        if field in ogb_config and field in config:
            ogb_config[field] = config[field]
    dataset = ogb_datasets.Dataset.create(observations=observations, actions=actions, terminals=terminals, valids=1.0 - terminals)
    ogb_data = ogb_datasets.GCDataset(dataset, ogb_config)
    agent_class = next(v for k, v in vars(ogb_agent_module).items() if k.endswith('Agent') and k != 'Agent')
    ogb_agent = {'agent': agent_class.create(0, observations[:1], actions[:1], ogb_config)}

    def ogb_loop_block():
        for _ in range(args.steps):
            ogb_agent['agent'], info = ogb_agent['agent'].update(ogb_data.sample(args.batch_size))
        jax.block_until_ready(info)

    device_batches = [jax.device_put(ogb_data.sample(args.batch_size)) for _ in range(args.steps)]

    def ogb_update_block():
        for batch in device_batches:
            ogb_agent['agent'], info = ogb_agent['agent'].update(batch)
        jax.block_until_ready(info)

    rates = median_rates({'ours': ours_block, 'ogb_loop': ogb_loop_block, 'ogb_update': ogb_update_block}, args.steps, args.repeats)
    ours, ogb_loop, ogb_update = rates['ours'], rates['ogb_loop'], rates['ogb_update']
    print(f'{args.agent} ({args.family} hyperparameters), batch {args.batch_size}, {len(observations)} rows, '
          f'{jax.devices()[0].platform}; steps/s (median of {args.repeats} x {args.steps} steps):')
    print(f'  ours (fused sample + update, {args.steps_per_call} steps/call): {ours:8.1f}')
    print(f'  OGBench loop (numpy sample + update):                {ogb_loop:8.1f}   ratio ours/OGBench {ours / ogb_loop:5.2f}')
    print(f'  OGBench update only (pre-sampled device batches):    {ogb_update:8.1f}   ratio ours/OGBench {ours / ogb_update:5.2f}')


if __name__ == '__main__':
    main()
