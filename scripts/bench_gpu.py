"""Throughput on whatever accelerator JAX sees, and the wall time of a paper run projected from it.

    python scripts/bench_gpu.py --dataset_dir=~/.ogbench/data    # one GPU: about 5 min, under 8 by construction
    python scripts/bench_gpu.py --quick                          # CPU smoke run: GCBC only, tiny sizes (~20 s)

Measures, in one process and in this order (each table is printed as soon as it is complete, so a run cut short
still leaves every finished figure on the screen):
  1. training steps/s of GCBC, GCBC-phi and BYOL-gamma^a at batch 1024 with the fused update main.py runs
     (`train_steps`: `--steps_per_call` updates in one jitted lax.scan, results fetched after every call as
     main.py does);
  2. total seed-steps/s with N = 1, 4, 16 seeds vmapped in one process (`train_steps_multi`, main.py's
     --num_seeds), per agent;
  3. one evaluation's wall time (5 tasks x 50 episodes, deterministic actions of an untrained BYOL-gamma^a agent,
     whose episodes all run to the 1000-step limit: an upper bound), with the episodes stepped in parallel on every
     usable core (main.py's default: native threads where the env supports it, else worker processes) and by one
     thread alone (--eval_workers=1);
  4. the projected wall time of one paper run (1M steps + 10 evaluations) and of a 10-seed sweep cell.
Compilation is excluded from every rate and reported separately. Uses pointmaze-medium-stitch, generated in
--dataset_dir if missing (a minute or two). A time budget (--budget_s) skips what would not fit, saying so.
"""

import argparse
import sys
import time

import jax
import numpy as np

from agents import get_agent_class
from configs.presets import get_config as preset_config
import datagen
from utils.datasets import ensure_dataset, load_dataset
from utils.evaluation import env_spaces, evaluate, make_eval_envs, usable_cpus
from utils.evaluation.native import NativeEpisodes
from utils.sampler import DeviceDataset, SamplerConfig
from utils.training import stack_trees, train_steps, train_steps_multi

PRESETS = {'gcbc': 'GCBC', 'gcbc_phi': 'GCBC-φ', 'byol_gamma_a': 'BYOL-γ^a'}
PAPER_STEPS, PAPER_EVALUATIONS, SWEEP_SEEDS = 1_000_000, 10, 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--env_name', default='pointmaze-medium-stitch-v0')
    parser.add_argument('--dataset_dir', default='~/.ogbench/data', help='generated here if missing')
    parser.add_argument('--quick', action='store_true', help='tiny sizes for a CPU smoke run')
    parser.add_argument('--presets', nargs='+', default=None, choices=list(PRESETS), help='default all (quick: gcbc)')
    parser.add_argument('--batch_size', type=int, default=None, help='default 1024 (quick: 32)')
    parser.add_argument('--steps_per_call', type=int, default=None, help='default 500, as main.py (quick: 2)')
    parser.add_argument('--seconds', type=float, default=None, help='timed seconds per measurement (quick: 0)')
    parser.add_argument('--num_seeds', type=int, nargs='+', default=None, help='default 1 4 16 (quick: 1 2)')
    parser.add_argument('--eval_episodes', type=int, default=None, help='per task; default 50 (quick: 2)')
    parser.add_argument('--eval_tasks', type=int, default=None, help='default 5 (quick: 1)')
    parser.add_argument('--eval_max_steps', type=int, default=None, help='default: the env limit (quick: 10)')
    parser.add_argument('--eval_workers', type=int, default=0, help='0 = one per usable core, as main.py')
    parser.add_argument('--budget_s', type=float, default=420.0, help='skip measurements once this is spent')
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = dict(presets=['gcbc'] if quick else list(PRESETS), batch_size=32 if quick else 1024, steps_per_call=2 if quick else 500, seconds=0.0 if quick else 3.0,
                    num_seeds=[1, 2] if quick else [1, 4, 16], eval_episodes=2 if quick else 50,
                    eval_tasks=1 if quick else 5, eval_max_steps=10 if quick else 0)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


class Budget:
    def __init__(self, seconds):
        self.start, self.seconds = time.perf_counter(), seconds

    def elapsed(self):
        return time.perf_counter() - self.start

    def allows(self, estimate):
        return self.elapsed() + estimate <= self.seconds


def timed_chunks(run, state, seconds):
    """Calls `run(state) -> (state, infos)` until `seconds` have passed (at least once), fetching the metrics
    after every call as main.py does. Returns (state, calls, wall seconds)."""
    calls, start = 0, time.perf_counter()
    while True:
        state, infos = run(state)
        jax.device_get(infos)
        calls += 1
        if time.perf_counter() - start >= seconds:
            return state, calls, time.perf_counter() - start


def measure_training(preset, num_seeds, raw, data, args):
    """(seed-steps/s, compile seconds) of `num_seeds` seeds of `preset` trained together."""
    config = preset_config(preset)
    config.batch_size = args.batch_size
    sampler_config = SamplerConfig.from_config(config)
    agent_class = get_agent_class(config.agent_name)
    agents = [agent_class.create(s, raw['observations'][:1], raw['actions'][:1], config) for s in range(num_seeds)]
    keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in range(num_seeds)])
    step = [0]

    def run(state):  # exactly main.py's calls: train_steps for one seed, train_steps_multi for several
        if num_seeds == 1:
            out = train_steps(state, data, keys[0], step[0], sampler_config, args.steps_per_call)
        else:
            out = train_steps_multi(state, data, keys, step[0], sampler_config, args.steps_per_call)
        step[0] += args.steps_per_call
        return out

    state = agents[0] if num_seeds == 1 else stack_trees(agents)
    start = time.perf_counter()
    state, _, _ = timed_chunks(run, state, 0.0)  # the first call compiles
    compile_s = time.perf_counter() - start
    state, _, _ = timed_chunks(run, state, 0.0)  # one more warm call (allocator, autotuning)
    state, calls, wall = timed_chunks(run, state, args.seconds)
    return num_seeds * calls * args.steps_per_call / wall, compile_s, state


def evaluation_policy(agent):
    return lambda observations, goals: np.asarray(agent.sample_actions(observations, goals, temperature=0.0))


def hms(seconds):
    seconds = int(round(seconds))
    return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m' if seconds >= 3600 else f'{seconds // 60}m{seconds % 60:02d}s'


def main(argv=None):
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    device = jax.devices()[0]
    print(f'# bench_gpu: jax {jax.__version__}, backend {jax.default_backend()}, device {device.device_kind} '
          f'(x{jax.device_count()}), {usable_cpus()} usable CPU cores{", --quick" if args.quick else ""}', flush=True)
    train_path, _ = ensure_dataset(args.env_name, args.dataset_dir, download=False, generator=datagen, log=print)
    eval_workers = args.eval_workers or usable_cpus()
    # Made now: worker processes (envs without native stepping) build their envs while training is measured.
    pool = make_eval_envs(args.env_name, args.eval_episodes, num_workers=eval_workers) if eval_workers > 1 else None
    local_envs = make_eval_envs(args.env_name, args.eval_episodes)
    raw = load_dataset(train_path, *env_spaces(local_envs))
    data = DeviceDataset.from_numpy(**raw)
    print(f'{args.env_name}: {len(raw["observations"])} rows; batch {args.batch_size}, {args.steps_per_call} steps '
          f'per call, >= {args.seconds:g} s timed per figure\n', flush=True)

    single, multi, trained = {}, {}, {}
    print('| agent | batch | steps/s (fused, 1 seed) | compile s |\n|---|---|---|---|', flush=True)
    for preset in args.presets:
        if not budget.allows(args.seconds + 60):
            print(f'| {PRESETS[preset]} | {args.batch_size} | skipped (time budget) | |', flush=True)
            continue
        try:
            single[preset], compile_s, trained[preset] = measure_training(preset, 1, raw, data, args)
        except Exception as e:  # e.g. out of device memory: report it and go on with the next figure
            print(f'| {PRESETS[preset]} | {args.batch_size} | failed: {type(e).__name__}: {str(e)[:200]} | |', flush=True)
            continue
        print(f'| {PRESETS[preset]} | {args.batch_size} | {single[preset]:.0f} | {compile_s:.1f} |', flush=True)

    counts = [n for n in args.num_seeds if n > 1]
    print('\n| agent | ' + ' | '.join(f'N={n}' for n in args.num_seeds) + ' | (total seed-steps/s at batch '
          f'{args.batch_size} per seed; ratio to N=1) |\n|---|' + '---|' * (len(args.num_seeds) + 1), flush=True)
    # BYOL-gamma^a first: the paper's method, the one a sweep runs most.
    for preset in sorted(single, key=lambda p: p != 'byol_gamma_a'):
        multi[preset] = {1: single[preset]}
        for n in counts:
            if not budget.allows(args.seconds + 90):
                multi[preset][n] = 'skipped (time budget)'
                continue
            try:
                multi[preset][n], _, _ = measure_training(preset, n, raw, data, args)
            except Exception as e:
                multi[preset][n] = f'failed: {type(e).__name__}: {str(e)[:120]}'
        cells = [f'{multi[preset][n]:.0f} ({multi[preset][n] / single[preset]:.1f}x)'
                 if isinstance(multi[preset][n], float) else multi[preset][n] for n in args.num_seeds]
        multi[preset] = {n: r for n, r in multi[preset].items() if isinstance(r, float)}
        print(f'| {PRESETS[preset]} | ' + ' | '.join(cells) + ' | |', flush=True)

    evaluation_s = None
    tasks = tuple(range(1, args.eval_tasks + 1))
    policy_agent = trained.get('byol_gamma_a') or next(iter(trained.values()), None)
    print(f'\n| evaluation ({args.eval_tasks} tasks x {args.eval_episodes} episodes) | wall s | env steps/s |\n'
          f'|---|---|---|', flush=True)
    if policy_agent is None:
        print('| skipped: no agent was trained | | |', flush=True)
    else:
        policy = evaluation_policy(policy_agent)
        stepping = 'native threads' if isinstance(local_envs, NativeEpisodes) else 'processes'
        modes = ([(f'{eval_workers} {stepping} (default)', pool)] if pool else [])
        modes.append(('one thread (--eval_workers=1)', local_envs))
        for label, envs in modes:
            # One thread takes up to `eval_workers` times as long as the parallel evaluation measured first.
            estimate = 60.0 if evaluation_s is None else 1.2 * evaluation_s * eval_workers
            if not budget.allows(estimate):
                print(f'| {label} | skipped (time budget) | |', flush=True)
                continue
            try:
                evaluate(policy, envs, task_ids=(1,), episodes_per_task=args.eval_episodes, max_steps=2)  # warm up
                start = time.perf_counter()
                result = evaluate(policy, envs, task_ids=tasks, episodes_per_task=args.eval_episodes, seed=0,
                                  max_steps=args.eval_max_steps or None)
                wall = time.perf_counter() - start
            except Exception as e:
                print(f'| {label} | failed: {type(e).__name__}: {str(e)[:200]} | |', flush=True)
                continue
            steps = result['evaluation/overall_length'] * args.eval_episodes * len(tasks)
            evaluation_s = wall if evaluation_s is None else evaluation_s
            print(f'| {label} | {wall:.1f} | {steps / wall:.0f} |', flush=True)
    if pool is not None:
        pool.close()

    print(f'\n| projection ({PAPER_STEPS:,} steps at batch {args.batch_size} + {PAPER_EVALUATIONS} evaluations as '
          f'above) | one seed | {SWEEP_SEEDS}-seed sweep cell, --num_seeds={SWEEP_SEEDS} | {SWEEP_SEEDS} seeds one '
          f'after another |\n|---|---|---|---|', flush=True)
    for preset, rate in single.items():
        evaluations = PAPER_EVALUATIONS * (evaluation_s or 0.0)
        one = PAPER_STEPS / rate + evaluations
        # Seed-steps/s at N = 10, read off the measured N by linear interpolation (or the nearest measured N).
        measured = sorted(multi.get(preset, {1: rate}).items())
        throughput = float(np.interp(SWEEP_SEEDS, [n for n, _ in measured], [r for _, r in measured]))
        cell = SWEEP_SEEDS * PAPER_STEPS / throughput + SWEEP_SEEDS * evaluations  # main.py evaluates seeds in turn
        print(f'| {PRESETS[preset]} | {hms(one)} | {hms(cell)} | {hms(SWEEP_SEEDS * one)} |', flush=True)
    if evaluation_s is None:
        print('(evaluations not measured: projections count training only)')
    print(f'\ntotal bench time {budget.elapsed():.0f} s', flush=True)
    return dict(single=single, multi=multi, evaluation_s=evaluation_s)


if __name__ == '__main__':
    main(sys.argv[1:])
