"""Throughput on whatever accelerator JAX sees, and the wall time of a paper run projected from it.

    python scripts/bench_gpu.py                 # one GPU machine: a few minutes, under --budget_s by construction
    python scripts/bench_gpu.py --quick         # CPU smoke run: tiny sizes (~30 s)

Measures, in one process and in this order (each table is printed as soon as it is complete, so a run cut
short still leaves every finished figure on the screen):
  1. training: total seed-steps/s of GCBC, GCBC-phi and BYOL-gamma^a at batch 1024 per seed with the fused update
     main.py runs (`--steps_per_call` updates in one jitted lax.scan, metrics fetched after every call as main.py
     does), for N = 1, 4, 16 seeds vmapped in one process (main.py's --num_seeds), and BYOL-gamma^a's cost per update
     relative to GCBC-phi's. The data are a synthetic dataset with `--train_env`'s observation and action sizes
     (antmaze-medium-stitch: 29 and 8, the paper's headline row): the cost of an update does not depend on the
     values, so no dataset is needed;
  2. evaluation: one evaluation of N = 1, 4, 16 seeds of an untrained BYOL-gamma^a agent (--eval_preset) on `--eval_env` (5 tasks x
     50 episodes per seed, all seeds' episodes in one lockstep batch, as main.py runs it); untrained episodes run to
     the time limit, so this is an upper bound;
  3. the projected wall time of one paper run (1M steps + 10 evaluations) and of a 10-seed sweep cell
     (--num_seeds=10).
Compilation is excluded from every rate and reported separately. A time budget (--budget_s) skips what would
not fit, saying so.
"""

import argparse
import sys
import time

import jax
import numpy as np

from agents import get_agent_class
from configs.presets import get_config as preset_config
from utils.evaluation import env_spaces, evaluate_seeds, make_eval_envs, seeds_policy, usable_cpus
from utils.sampler import DeviceDataset, SamplerConfig
from utils.training import stack_trees, train_steps, train_steps_multi

PRESETS = {'gcbc': 'GCBC', 'gcbc_phi': 'GCBC-φ', 'byol_gamma_a': 'BYOL-γ^a'}
PAPER_STEPS, PAPER_EVALUATIONS, SWEEP_SEEDS = 1_000_000, 10, 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--train_env', default='antmaze-medium-stitch-v0', help='its observation/action sizes shape the training data')
    parser.add_argument('--eval_env', default='pointmaze-large-stitch-v0', help='the env of the evaluation timings')
    parser.add_argument('--quick', action='store_true', help='tiny sizes for a CPU smoke run')
    parser.add_argument('--presets', nargs='+', default=None, choices=list(PRESETS), help='default all (quick: gcbc)')
    parser.add_argument('--eval_preset', default=None, choices=list(PRESETS), help='the agent evaluated; default byol_gamma_a (quick: gcbc)')
    parser.add_argument('--batch_size', type=int, default=None, help='per seed; default 1024 (quick: 32)')
    parser.add_argument('--steps_per_call', type=int, default=None, help='default 500, as main.py (quick: 2)')
    parser.add_argument('--seconds', type=float, default=None, help='timed seconds per training figure (quick: 0)')
    parser.add_argument('--num_seeds', type=int, nargs='+', default=None, help='training seeds; default 1 4 16 (quick: 1 2)')
    parser.add_argument('--eval_seeds', type=int, nargs='+', default=None, help='evaluated seeds; default 1 4 16 (quick: 1 2)')
    parser.add_argument('--eval_episodes', type=int, default=None, help='per task and seed; default 50 (quick: 2)')
    parser.add_argument('--eval_tasks', type=int, default=None, help='default 5 (quick: 2)')
    parser.add_argument('--eval_max_steps', type=int, default=None, help='default: the env limit (quick: 10)')
    parser.add_argument('--eval_workers', type=int, default=0, help='0 = one per usable core, as main.py')
    parser.add_argument('--budget_s', type=float, default=420.0, help='skip measurements once this is spent')
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = dict(presets=['gcbc'] if quick else list(PRESETS), eval_preset='gcbc' if quick else 'byol_gamma_a',
                    batch_size=32 if quick else 1024,
                    steps_per_call=2 if quick else 500, seconds=0.0 if quick else 2.0,
                    num_seeds=[1, 2] if quick else [1, 4, 16], eval_seeds=[1, 2] if quick else [1, 4, 16],
                    eval_episodes=2 if quick else 50, eval_tasks=2 if quick else 5, eval_max_steps=10 if quick else 0)
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


def synthetic_dataset(observation_dim, action_dim, num_episodes=2000, length=201, seed=0):
    """Random-walk episodes with the given sizes: what an update costs does not depend on the values."""
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (num_episodes * length, action_dim)).astype(np.float32)
    observations = np.cumsum(rng.normal(0, 0.1, (num_episodes, length, observation_dim)), axis=1)
    terminals = np.tile(np.arange(length) == length - 1, num_episodes)
    return dict(observations=observations.reshape(-1, observation_dim).astype(np.float32), actions=actions, terminals=terminals)


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


def make_agents(preset, num_seeds, raw, batch_size):
    config = preset_config(preset)
    config.batch_size = batch_size
    agent_class = get_agent_class(config.agent_name)
    agents = [agent_class.create(s, raw['observations'][:1], raw['actions'][:1], config) for s in range(num_seeds)]
    return (agents[0] if num_seeds == 1 else stack_trees(agents)), SamplerConfig.from_config(config)


def measure_training(preset, num_seeds, raw, data, args):
    """(total seed-steps/s, compile seconds) of `num_seeds` seeds of `preset` trained together."""
    state, sampler_config = make_agents(preset, num_seeds, raw, args.batch_size)
    keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in range(num_seeds)])
    step = [0]

    def run(state):  # exactly main.py's calls: train_steps for one seed, train_steps_multi for several
        if num_seeds == 1:
            out = train_steps(state, data, keys[0], step[0], sampler_config, args.steps_per_call)
        else:
            out = train_steps_multi(state, data, keys, step[0], sampler_config, args.steps_per_call)
        step[0] += args.steps_per_call
        return out

    start = time.perf_counter()
    state, _, _ = timed_chunks(run, state, 0.0)  # the first call compiles
    compile_s = time.perf_counter() - start
    state, _, _ = timed_chunks(run, state, 0.0)  # one more warm call (allocator, autotuning)
    state, calls, wall = timed_chunks(run, state, args.seconds)
    return num_seeds * calls * args.steps_per_call / wall, compile_s


def measure_evaluation(num_seeds, envs, raw, args):
    """(wall seconds, env steps) of one evaluation of `num_seeds` untrained seeds of `--eval_preset` in one batch."""
    agents, _ = make_agents(args.eval_preset, num_seeds, raw, args.batch_size)
    policy = seeds_policy(agents, num_seeds)
    tasks = tuple(range(1, args.eval_tasks + 1))
    seeds = list(range(num_seeds))
    evaluate_seeds(policy, envs, seeds, task_ids=tasks, episodes_per_task=args.eval_episodes, max_steps=2)  # compile
    start = time.perf_counter()
    results = evaluate_seeds(policy, envs, seeds, task_ids=tasks, episodes_per_task=args.eval_episodes,
                             max_steps=args.eval_max_steps or None)
    wall = time.perf_counter() - start
    steps = sum(r['evaluation/overall_length'] for r in results) * args.eval_episodes * len(tasks)
    return wall, steps


def hms(seconds):
    seconds = int(round(seconds))
    return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m' if seconds >= 3600 else f'{seconds // 60}m{seconds % 60:02d}s'


def report_failure(e):
    return f'failed: {type(e).__name__}: {str(e)[:160]}'


def main(argv=None):
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    device = jax.devices()[0]
    print(f'# bench_gpu: jax {jax.__version__}, backend {jax.default_backend()}, device {device.device_kind} '
          f'(x{jax.device_count()}), {usable_cpus()} usable CPU cores{", --quick" if args.quick else ""}', flush=True)
    observation_space, action_space = env_spaces(make_eval_envs(args.train_env, 1))
    raw = synthetic_dataset(observation_space.shape[0], action_space.shape[0],
                            num_episodes=20 if args.quick else 2000, length=21 if args.quick else 201)
    data = DeviceDataset.from_numpy(**raw)
    print(f'training data: synthetic, {args.train_env} sizes (observation {observation_space.shape[0]}, action '
          f'{action_space.shape[0]}), {len(raw["observations"])} rows; batch {args.batch_size} per seed, '
          f'{args.steps_per_call} steps per call, >= {args.seconds:g} s timed per figure\n', flush=True)

    rates = {preset: {} for preset in args.presets}
    print('Training: total seed-steps/s of N vmapped seeds (in brackets the ratio to N=1).\n', flush=True)
    print('| agent | ' + ' | '.join(f'N={n}' for n in args.num_seeds) + ' | compile s (N=1) |\n|---|'
          + '---|' * (len(args.num_seeds) + 1), flush=True)
    for preset in args.presets:
        cells, compile_one = [], ''
        for n in args.num_seeds:
            if not budget.allows(args.seconds + 30 + 2 * n):
                cells.append('skipped (time budget)')
                continue
            try:
                rates[preset][n], compile_s = measure_training(preset, n, raw, data, args)
            except Exception as e:  # e.g. out of device memory: report it and go on with the next figure
                cells.append(report_failure(e))
                continue
            compile_one = f'{compile_s:.1f}' if n == 1 else compile_one
            ratio = f' ({rates[preset][n] / rates[preset][1]:.1f}x)' if 1 in rates[preset] and n > 1 else ''
            cells.append(f'{rates[preset][n]:.0f}{ratio}')
        print(f'| {PRESETS[preset]} | ' + ' | '.join(cells) + f' | {compile_one} |', flush=True)
    if {'gcbc_phi', 'byol_gamma_a'} <= set(rates):
        costs = [f'N={n}: {rates["gcbc_phi"][n] / rates["byol_gamma_a"][n]:.2f}x' for n in args.num_seeds
                 if n in rates['gcbc_phi'] and n in rates['byol_gamma_a']]
        print(f'BYOL-γ^a update cost relative to GCBC-φ: {", ".join(costs)}', flush=True)

    eval_envs = make_eval_envs(args.eval_env, args.eval_episodes, num_workers=args.eval_workers or usable_cpus())
    eval_raw = synthetic_dataset(*(space.shape[0] for space in env_spaces(eval_envs)), num_episodes=2, length=3)
    evaluation_s = {}
    print(f'\n| evaluation, {args.eval_env}: {args.eval_tasks} tasks x {args.eval_episodes} episodes per seed, one '
          f'batch | wall s | env steps/s |\n|---|---|---|', flush=True)
    for n in args.eval_seeds:
        # The last measured evaluation, scaled by its seed count (a first one is assumed to take 30 s per seed).
        done = max(evaluation_s, default=None)
        estimate = 1.5 * n * (evaluation_s[done] / done if done else 30.0)
        if not budget.allows(estimate):
            print(f'| {n} seeds | skipped (time budget) | |', flush=True)
            continue
        try:
            wall, steps = measure_evaluation(n, eval_envs, eval_raw, args)
        except Exception as e:
            print(f'| {n} seeds | {report_failure(e)} | |', flush=True)
            continue
        evaluation_s[n] = wall
        print(f'| {n} seed{"s" if n > 1 else ""} | {wall:.1f} | {steps / wall:.0f} |', flush=True)
    if hasattr(eval_envs, 'close'):
        eval_envs.close()

    print(f'\n| projection ({PAPER_STEPS:,} steps at batch {args.batch_size} + {PAPER_EVALUATIONS} evaluations as above) | '
          f'one seed | {SWEEP_SEEDS}-seed sweep cell, --num_seeds={SWEEP_SEEDS} |\n|---|---|---|', flush=True)
    for preset, measured in rates.items():
        if 1 not in measured:
            continue
        one = PAPER_STEPS / measured[1] + PAPER_EVALUATIONS * evaluation_s.get(1, 0.0)
        # Rates at N = 10, read off the measured N by linear interpolation (or the nearest measured N).
        points = sorted(measured.items())
        throughput = float(np.interp(SWEEP_SEEDS, [n for n, _ in points], [r for _, r in points]))
        eval_points = sorted(evaluation_s.items())
        cell_eval = float(np.interp(SWEEP_SEEDS, [n for n, _ in eval_points], [s for _, s in eval_points])) if eval_points else 0.0
        cell = SWEEP_SEEDS * PAPER_STEPS / throughput + PAPER_EVALUATIONS * cell_eval
        print(f'| {PRESETS[preset]} | {hms(one)} | {hms(cell)} |', flush=True)
    if not evaluation_s:
        print('(evaluations not measured: projections count training only)')
    print(f'\ntotal bench time {budget.elapsed():.0f} s', flush=True)
    return dict(rates=rates, evaluation_s=evaluation_s)


if __name__ == '__main__':
    main(sys.argv[1:])
