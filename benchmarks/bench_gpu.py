"""Throughput on whatever accelerator JAX sees and the projected wall time of the paper's headline rows on this
machine.

    python benchmarks/bench_gpu.py                 # one GPU machine: under 8 min (--budget_s), see below
    python benchmarks/bench_gpu.py --quick         # CPU smoke run: tiny sizes (~10 s)
    python benchmarks/bench_gpu.py --xla_flags='--xla_gpu_enable_command_buffer=FUSION,CUBLAS,WHILE'

Measures, in one process and in this order (each table is printed as soon as it is complete, so a run cut short
still leaves every finished figure on the screen):
  1. training, per agent (GCBC, GCBC-phi, BYOL-gamma^a, TRA, TD-SR^a) at batch 1024 per seed with the fused update
     main.py runs (`--steps_per_call` updates in one jitted lax.scan; metrics fetched after every call as main.py
     does), for N = 1, 4, 16 seeds vmapped in one process (main.py's --num_seeds): total seed-steps/s, GFLOP per
     update (XLA's cost analysis of the unoptimised program, the same on every backend), the achieved TFLOP/s, and
     each agent's time per update relative to GCBC's. The data are a synthetic dataset with `--train_env`'s
     observation and action sizes (antmaze-medium-stitch: 29 and 8, the paper's headline row): the cost of an update
     does not depend on the values, so no dataset is needed;
  2. evaluation: one evaluation of N = 1, 4, 10 seeds of an untrained BYOL-gamma^a agent (--eval_preset) on
     `--eval_env` (antmaze-medium-stitch; 5 tasks x 50 episodes per seed, all seeds' episodes in one lockstep batch,
     as main.py runs it). Untrained episodes run to the time limit, so this is an upper bound;
  3. the projected wall time of the paper's headline rows (GCBC and BYOL-gamma^a on antmaze-medium-stitch, 4 and 10
     seeds per method; the model is printed with them).
Compilation is excluded from every rate and reported separately. A time budget (--budget_s) skips what would not
fit, saying so; a figure that fails (e.g. out of device memory) says why in its cell, and the run then exits with
status 1. `--xla_flags` adds XLA flags (e.g. command buffers / CUDA graphs for the while loop) for the whole
run: compare two runs' tables.
"""

import argparse
import os
import sys
import time

import numpy as np


PRESETS = {'gcbc': 'GCBC', 'gcbc_phi': 'GCBC-φ', 'byol_gamma_a': 'BYOL-γ^a', 'tra': 'TRA', 'tdsr_a': 'TD-SR^a'}
PAPER_STEPS, EVALUATIONS, HEADLINE_SEEDS, HEADLINE_PRESETS = 1_000_000, 10, (4, 10), ('gcbc', 'byol_gamma_a')
# antmaze-medium-stitch (5000 + 500 episodes) generated with `scripts/generate_dataset.py` on the 16 cores of the
# H200 machine of docs/performance.md; `--datagen_s` for another machine.
DATAGEN_S = 64.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--train_env', default='antmaze-medium-stitch-v0', help='its observation/action sizes shape the training data')
    parser.add_argument('--eval_env', default=None, help='the env of the evaluation timings (default antmaze-medium-stitch-v0; quick: pointmaze-large-stitch-v0)')
    parser.add_argument('--quick', action='store_true', help='tiny sizes for a CPU smoke run')
    parser.add_argument('--presets', nargs='+', default=None, choices=list(PRESETS), help='default all (quick: gcbc, byol_gamma_a)')
    parser.add_argument('--eval_preset', default=None, choices=list(PRESETS), help='the agent evaluated; default byol_gamma_a (quick: gcbc)')
    parser.add_argument('--batch_size', type=int, default=None, help='per seed; default 1024 (quick: 32)')
    parser.add_argument('--steps_per_call', type=int, default=None, help='default 500, as main.py (quick: 2)')
    parser.add_argument('--seconds', type=float, default=None, help='timed seconds per training figure (default 1.5; quick: 0)')
    parser.add_argument('--num_seeds', type=int, nargs='+', default=None, help='training seeds; default 1 4 16 (quick: 1 2)')
    parser.add_argument('--eval_seeds', type=int, nargs='+', default=None, help='evaluated seeds; default 1 4 10 (quick: 1 2)')
    parser.add_argument('--eval_episodes', type=int, default=None, help='per task and seed; default 50 (quick: 2)')
    parser.add_argument('--eval_tasks', type=int, default=None, help='default 5 (quick: 2)')
    parser.add_argument('--eval_max_steps', type=int, default=None, help='default: the env limit (quick: 10)')
    parser.add_argument('--eval_workers', type=int, default=0, help='0 = one per usable core, as main.py')
    parser.add_argument('--datagen_s', type=float, default=DATAGEN_S,
                        help=f'dataset generation seconds in the projection (default {DATAGEN_S:g}: antmaze-medium-stitch on 16 cores)')
    parser.add_argument('--startup_extra_s', type=float, default=15.0,
                        help='per method: imports, dataset load and env creation, added to the measured creation + compilation')
    parser.add_argument('--xla_flags', default='', help='added to XLA_FLAGS before JAX starts its backend (whole run)')
    parser.add_argument('--budget_s', type=float, default=450.0, help='skip measurements once this is spent')
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = dict(presets=['gcbc', 'byol_gamma_a'] if quick else list(PRESETS), eval_preset='gcbc' if quick else 'byol_gamma_a',
                    eval_env='pointmaze-large-stitch-v0' if quick else 'antmaze-medium-stitch-v0',
                    batch_size=32 if quick else 1024, steps_per_call=2 if quick else 500, seconds=0.0 if quick else 1.5,
                    num_seeds=[1, 2] if quick else [1, 4, 16], eval_seeds=[1, 2] if quick else [1, 4, 10],
                    eval_episodes=2 if quick else 50, eval_tasks=2 if quick else 5, eval_max_steps=10 if quick else 0)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def apply_xla_flags(flags):
    """Add `flags` to XLA_FLAGS; they take effect only if JAX has not started its backend yet (says so otherwise)."""
    if not flags:
        return ''
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + flags).strip()
    from jax._src import xla_bridge
    if getattr(xla_bridge, '_backends', None):
        return ' (WARNING: JAX\'s backend had started before --xla_flags was set: they may not apply)'
    return ''


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
    import jax

    calls, start = 0, time.perf_counter()
    while True:
        state, infos = run(state)
        jax.device_get(infos)
        calls += 1
        if time.perf_counter() - start >= seconds:
            return state, calls, time.perf_counter() - start


def make_agents(preset, num_seeds, raw, batch_size):
    """`num_seeds` agents of `preset` (stacked on a seed axis when > 1) as main.py creates them."""
    import main
    from agents import get_agent_class
    from configs.presets import get_config as preset_config
    from utils.training import stack_trees

    config = preset_config(preset)
    config.batch_size = batch_size
    create = main.compiled_create(get_agent_class(config.agent_name), raw['observations'][:1], raw['actions'][:1], config)
    agents = [create(s) for s in range(num_seeds)]
    return agents[0] if num_seeds == 1 else stack_trees(agents)


def compile_training(preset, num_seeds, raw, data, batch_size, steps_per_call):
    """main.py's training call for `num_seeds` seeds of `preset`, compiled once ahead of time: (agents, `run`,
    lowered), where `run(agents) -> (agents, metrics)` makes the next call, `steps_per_call` updates on."""
    import jax

    from utils.training import train

    state = make_agents(preset, num_seeds, raw, batch_size)
    keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in range(num_seeds)])
    key = keys[0] if num_seeds == 1 else keys
    lowered = train.lower(state, data, key, 0, steps_per_call)  # exactly main.py's call
    compiled = lowered.compile()
    step = [0]

    def run(state):
        out = compiled(state, data, key, step[0])
        step[0] += steps_per_call
        return out

    return state, run, lowered


def update_flops(lowered) -> float:
    """XLA's flop count of the unoptimised program, whose scan body it counts once: one update of every seed. The
    same on every backend, where XLA:GPU's count of the compiled program leaves out the gemms it hands to cuBLAS; 0 on
    a backend without cost analysis."""
    try:
        cost = lowered.cost_analysis()
    except Exception:
        return 0.0
    if isinstance(cost, (list, tuple)):  # older jax versions: one dict per device
        cost = cost[0] if cost else {}
    return float((cost or {}).get('flops', 0.0))


def measure_training(preset, num_seeds, raw, data, args):
    """main.py's training call for `num_seeds` seeds of `preset`, compiled once ahead of time: dict of the total
    seed-steps/s, start-up seconds (agent creation + compilation) and XLA's flops per update of all seeds."""
    import jax

    start = time.perf_counter()
    state, run, lowered = compile_training(preset, num_seeds, raw, data, args.batch_size, args.steps_per_call)
    jax.block_until_ready(state)
    startup_s = time.perf_counter() - start
    state, _, _ = timed_chunks(run, state, 0.0)  # a warm call (allocator, autotuning)
    state, calls, wall = timed_chunks(run, state, args.seconds)
    return dict(rate=num_seeds * calls * args.steps_per_call / wall, startup_s=startup_s, flops=update_flops(lowered))


def measure_evaluation(num_seeds, envs, raw, args):
    """(wall seconds, env steps) of one evaluation of `num_seeds` untrained seeds of `--eval_preset` in one batch."""
    from utils.evaluation import evaluate_seeds, seeds_policy

    agents = make_agents(args.eval_preset, num_seeds, raw, args.batch_size)
    policy = seeds_policy(agents, num_seeds)
    tasks = tuple(range(1, args.eval_tasks + 1))
    seeds = list(range(num_seeds))
    evaluate_seeds(policy, envs, seeds, task_ids=tasks, episodes_per_task=args.eval_episodes, max_steps=2)  # compile
    start = time.perf_counter()
    results = evaluate_seeds(policy, envs, seeds, task_ids=tasks, episodes_per_task=args.eval_episodes,
                             max_steps=args.eval_max_steps or None)
    wall = time.perf_counter() - start
    steps = sum(record.length for episodes in results for record in episodes)
    return wall, steps


def interpolate(points, n):
    """Value at seed count `n` read off measured {seeds: value} by linear interpolation (the nearest outside)."""
    xs = sorted(points)
    return float(np.interp(n, xs, [points[x] for x in xs]))


def evaluation_time(evaluation_s, n):
    """One evaluation of `n` seeds: n x the per-seed time, read off the measured {seeds: seconds} (interpolated per
    seed between measured counts, the nearest count's per-seed time outside them), since an evaluation's episodes
    grow with the seeds."""
    return n * interpolate({k: seconds / k for k, seconds in evaluation_s.items()}, n)


def method_wall(training_s, evaluation_s, startup_s, evaluations=EVALUATIONS):
    """Wall seconds of one method's run with evaluations on the CPU cores beside training on the accelerator
    (main.py --eval_mode=async): evaluation k (k = 1..E) starts when training reaches k/E of its steps and the
    evaluator is free, evaluations one at a time; the run ends with the last evaluation. That is about
    max(training, evaluations) + the last evaluation + start-up."""
    end = 0.0
    for k in range(1, evaluations + 1):
        end = max(k * training_s / evaluations, end) + evaluation_s
    return startup_s + end


def hms(seconds):
    seconds = int(round(seconds))
    return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m' if seconds >= 3600 else f'{seconds // 60}m{seconds % 60:02d}s'


def report_failure(e):
    return f'failed: {type(e).__name__}: {str(e)[:160]}'


def training_table(results, args):
    """Prints the training table: rates, GFLOP, TFLOP/s, cost relative to GCBC."""
    ns = args.num_seeds
    print('\nTraining: total seed-steps/s of N vmapped seeds; GFLOP per update (per seed) of the program.\n')
    print('| agent | GFLOP/update | ' + ' | '.join(f'N={n} seed-steps/s' for n in ns)
          + f' | TFLOP/s (N={ns[-1]}) | time/update vs GCBC ({", ".join(f"N={n}" for n in ns)}) | start-up s (N={ns[0]}) |')
    print('|---|' + '---|' * (len(ns) + 4))
    gcbc = results.get('gcbc', {})
    for preset in args.presets:
        measured = results.get(preset, {})
        cells = []
        for n in ns:
            m = measured.get(n)
            cells.append(m if isinstance(m, str) else (f'{m["rate"]:.0f}' if m else 'skipped (time budget)'))
        ok = {n: m for n, m in measured.items() if isinstance(m, dict)}
        first = ok[min(ok)] if ok else None
        gflop = f'{first["flops"] / 1e9 / min(ok):.2f}' if first else ''
        last = ok.get(ns[-1])
        tflops = f'{last["flops"] * last["rate"] / ns[-1] / 1e12:.2f}' if last else ''
        relative = ', '.join(f'{gcbc[n]["rate"] / ok[n]["rate"]:.2f}x' for n in ns
                             if n in ok and isinstance(gcbc.get(n), dict))
        startup = f'{first["startup_s"]:.1f}' if first else ''
        print(f'| {PRESETS[preset]} | {gflop} | ' + ' | '.join(cells) + f' | {tflops} | {relative} | {startup} |', flush=True)


def main(argv=None):
    args = parse_args(argv)
    flags_note = apply_xla_flags(args.xla_flags)
    import jax

    from utils.evaluation import env_spaces, make_eval_envs, usable_cpus
    from utils.training import DeviceDataset

    budget = Budget(args.budget_s)
    device = jax.devices()[0]
    print(f'# bench_gpu: jax {jax.__version__}, backend {jax.default_backend()}, device {device.device_kind} '
          f'(x{jax.device_count()}), {usable_cpus()} usable CPU cores{", --quick" if args.quick else ""}; '
          f'XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}{flags_note}', flush=True)
    observation_space, action_space = env_spaces(make_eval_envs(args.train_env, 1))
    raw = synthetic_dataset(observation_space.shape[0], action_space.shape[0],
                            num_episodes=20 if args.quick else 2000, length=21 if args.quick else 201)
    data = DeviceDataset.from_numpy(**raw)
    print(f'training data: synthetic, {args.train_env} sizes (observation {observation_space.shape[0]}, action '
          f'{action_space.shape[0]}), {len(raw["observations"])} rows; batch {args.batch_size} per seed, '
          f'{args.steps_per_call} steps per call, >= {args.seconds:g} s timed per figure', flush=True)

    results, failures = {}, []
    for preset in args.presets:
        measured = results.setdefault(preset, {})
        for n in args.num_seeds:
            if not budget.allows(args.seconds + 20 + 1.5 * n):
                measured[n] = 'skipped (time budget)'
                continue
            try:
                measured[n] = measure_training(preset, n, raw, data, args)
            except Exception as e:  # e.g. out of device memory: report it and go on with the next figure
                measured[n] = report_failure(e)
                failures.append(f'training {preset} N={n}')
    training_table(results, args)

    eval_envs = make_eval_envs(args.eval_env, args.eval_episodes, num_workers=args.eval_workers or usable_cpus())
    eval_raw = synthetic_dataset(*(space.shape[0] for space in env_spaces(eval_envs)), num_episodes=2, length=3)
    evaluation_s = {}
    print(f'\n| evaluation, {args.eval_env}: {args.eval_tasks} tasks x {args.eval_episodes} episodes per seed, one '
          f'batch, untrained {PRESETS[args.eval_preset]} | wall s | env steps/s |\n|---|---|---|', flush=True)
    for n in args.eval_seeds:
        # The last measured evaluation, scaled by its seed count (a first one is assumed to take 30 s per seed).
        done = max(evaluation_s, default=None)
        estimate = 1.2 * n * (evaluation_s[done] / done if done else 30.0)
        if not budget.allows(estimate):
            print(f'| {n} seeds | skipped (time budget) | |', flush=True)
            continue
        try:
            wall, steps = measure_evaluation(n, eval_envs, eval_raw, args)
        except Exception as e:
            print(f'| {n} seeds | {report_failure(e)} | |', flush=True)
            failures.append(f'evaluation N={n}')
            continue
        evaluation_s[n] = wall
        print(f'| {n} seed{"s" if n > 1 else ""} | {wall:.1f} | {steps / wall:.0f} |', flush=True)
    if hasattr(eval_envs, 'close'):
        eval_envs.close()

    project_headline(results, evaluation_s, args)
    print(f'\ntotal bench time {budget.elapsed():.0f} s', flush=True)
    if failures:
        sys.exit(f'failed figures: {", ".join(failures)} (their cells above say why)')


def project_headline(results, evaluation_s, args):
    """Prints the projected wall time of the paper's headline rows on this machine."""
    print(f'\nProjected wall time of the headline rows on this machine (antmaze-medium-stitch, {PAPER_STEPS:,} steps at '
          f'batch {args.batch_size}, {EVALUATIONS} evaluations of {args.eval_tasks} tasks x {args.eval_episodes} episodes):')
    print(f'model: dataset generation ({args.datagen_s:g} s, given by --datagen_s, not measured) + for each method in turn '
          f'(GCBC, then BYOL-γ^a; its seeds vmapped in one process): start-up (agent creation + compilation as measured, '
          f'+ {args.startup_extra_s:g} s --startup_extra_s) + training (N x steps / measured seed-steps/s at N, '
          f'interpolated between measured N) with the evaluations on the CPU cores beside it (main.py --eval_mode=async; '
          f'evaluation k starts at k/{EVALUATIONS} of training once the previous one is done; one evaluation of N seeds is '
          f'N x the measured per-seed evaluation time, the nearest measured count\'s outside them), ending with the last '
          f'evaluation: about max(training, evaluations) + the last evaluation + start-up. Evaluations are timed on '
          f'untrained agents (episodes to the time limit): an upper bound; CPU contention between them and the training '
          f'loop is not modelled.\n')
    print('| seeds per method | GCBC: training / evaluations / wall | BYOL-γ^a: training / evaluations / wall | both, one after another, with data generation |\n|---|---|---|---|')
    for n in HEADLINE_SEEDS:
        cells, total, complete = [], args.datagen_s, True
        for preset in HEADLINE_PRESETS:
            measured = {k: m for k, m in results.get(preset, {}).items() if isinstance(m, dict)}
            if not measured or not evaluation_s:
                cells.append('not measured')
                complete = False
                continue
            rate = interpolate({k: m['rate'] for k, m in measured.items()}, n)
            startup = interpolate({k: m['startup_s'] for k, m in measured.items()}, n) + args.startup_extra_s
            training = n * PAPER_STEPS / rate
            evaluation = evaluation_time(evaluation_s, n)
            wall = method_wall(training, evaluation, startup)
            total += wall
            cells.append(f'{hms(training)} / {EVALUATIONS} x {hms(evaluation)} / {hms(wall)}')
        print(f'| {n} | ' + ' | '.join(cells) + f' | {hms(total) if complete else "incomplete"} |', flush=True)


if __name__ == '__main__':
    main(sys.argv[1:])
