"""Wall time of OGBench evaluation against two limits, measured in the same run:
* the physics limit: the evaluation's own episodes (the actions it took, recorded) stepped again by the native stepper
  (`mujoco.batch`) with no policy, on 1, 2, 4, ... and all usable threads: what the machine's cores can step;
* the env-only limit: P x one env's raw gym step rate on one core (through the same episodes), where P is the
  parallelism a mode uses (threads or processes), which assumes perfect scaling.

    python benchmarks/bench_eval.py                   # main.py's default path: native stepping (where the env supports
                                                   # it), one thread per usable core, all tasks in one batch
    python benchmarks/bench_eval.py --modes native parallel lockstep sequential    # side by side
    python benchmarks/bench_eval.py --policy=oracle   # BFS oracle actions (realistic episode lengths), paying the
                                                   # MLP's forward pass on every call as a trained agent would
    python benchmarks/bench_eval.py --seeds 4         # 4 seeds' episodes in one batch, their MLPs vmapped
    python benchmarks/bench_eval.py --workers 1 2 --modes native       # scaling with threads
    python benchmarks/bench_eval.py --beside_training gcbc   # also: the same evaluation again while GCBC trains in
                                                   # another thread (main.py --eval_mode=async, a GPU run's default)

Modes: native = `make_eval_envs`'s default (per-episode MuJoCo states stepped by a thread pool; envs it does not
support fall back to the gym paths); parallel = gym envs in an `EnvWorkers` pool of processes; lockstep = gym envs in
this process; sequential = one episode at a time. The gym modes hold `--episodes` envs, so they run one task's
episodes per batch, as main.py did before native stepping. The last line reports the first mode:
`<mode>: X env steps/s = Y% of the env-only limit (P x one env)`, and for native stepping the line before it
`<mode>: X env steps/s = Y% of the physics limit (...)`. With `--beside_training <preset>` the first native mode
is timed once more with that agent training beside it (batch `--train_batch_size`, `--steps_per_call` updates per
call, on JAX's default backend, its metrics fetched after every call as main.py does), its share of the physics limit
printed the same way, with the training's updates/s while the evaluation ran: on a GPU machine the training runs on the
device and its host thread mostly waits; on a CPU it competes with the evaluation for the same cores.
"""

import argparse
import os
import threading
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from utils.evaluation import evaluate_seeds, evaluation_metrics, make_env, make_eval_envs, native, usable_cpus
from utils.evaluation.envs import reset_episode
from utils.evaluation.episodes import episode_seed
from utils.evaluation.native import NativeEpisodes
from utils.maze import pointmaze_oracle_policy

MODES = ('native', 'parallel', 'lockstep', 'sequential')


class MeanActor(nn.Module):
    """GCBC actor shape: MLP on concat(observation, goal) -> Gaussian mean (what deterministic evaluation uses)."""

    action_dim: int
    hidden_dims: tuple = (512, 512, 512)

    @nn.compact
    def __call__(self, observations, goals):
        x = jnp.concatenate([observations, goals], axis=-1)
        for width in self.hidden_dims:
            x = nn.gelu(nn.Dense(width)(x))
        return nn.Dense(self.action_dim)(x)


def make_policy(kind, env, seed, num_seeds=1):
    """A batched policy over seed-major rows: `num_seeds` random MLP actors, one vmapped call (as main.py's seeds
    policy); with kind 'oracle' the actions are the BFS oracle's, the MLPs' cost still paid."""
    obs_dim = env.observation_space.shape[0]
    actor = MeanActor(action_dim=env.action_space.shape[0])
    keys = jax.random.split(jax.random.PRNGKey(seed), num_seeds)
    params = jax.vmap(lambda key: actor.init(key, jnp.zeros((1, obs_dim)), jnp.zeros((1, obs_dim))))(keys)
    apply = jax.jit(jax.vmap(actor.apply))

    def mlp(observations, goals):
        rows = (num_seeds, len(observations) // num_seeds, -1)
        return np.asarray(apply(params, observations.reshape(rows), goals.reshape(rows))).reshape(len(observations), -1)

    if kind == 'mlp':
        return mlp
    oracle = pointmaze_oracle_policy(env)

    def oracle_at_mlp_cost(observations, goals):
        mlp(observations, goals)
        return oracle(observations, goals)

    return oracle_at_mlp_cost


def env_step_rate(env_name, policy, num_seeds, task_ids, episodes_per_task, max_steps=None, seed=0, seconds=4.0):
    """Steps/s of one env alone on one core: the raw env stepped as the gym paths step it, through a sample of the
    evaluation's own episodes (the tasks in turn, episodes spread over each task's, seeded as the evaluation seeds
    them). The same episodes matter: a step costs more physics when the point presses against a wall, as a random
    MLP's point does, than when it jitters in free space. Each episode runs once with the policy acting (batch 1) to
    record its actions, then is replayed from the same reset and timed, so that no policy call sits between the
    timed steps. P cores can at best reach P times this."""
    env = make_env(env_name)
    limit = max_steps or env.spec.max_episode_steps
    timed, steps, episode = 0.0, 0, 0
    while timed < seconds:
        task = task_ids[episode % len(task_ids)]
        j = (episode // len(task_ids)) * 17 % episodes_per_task  # 17: coprime with usual episode counts, spreads j
        actions = _episode_actions(env, policy, num_seeds, task, episode_seed(seed, task, j), limit)
        reset_episode(env, task, episode_seed(seed, task, j))
        start = time.perf_counter()
        for action in actions:
            env.unwrapped.step(action)
        timed += time.perf_counter() - start
        steps += len(actions)
        episode += 1
    return steps / timed


def _episode_actions(env, policy, num_seeds, task, seed, limit):
    """The clipped actions of one episode of `policy` (its first seed's rows), as the evaluation would step it."""
    ob, info = reset_episode(env, task, seed)
    low, high = env.action_space.low, env.action_space.high
    actions = []
    for _ in range(limit):
        rows = np.repeat(ob[None], num_seeds, axis=0), np.repeat(info['goal'][None], num_seeds, axis=0)
        actions.append(np.clip(np.asarray(policy(*rows))[0], low, high))
        ob, _, terminated, _, _ = env.unwrapped.step(actions[-1])
        if terminated:
            break
    return actions


class RecordingStepper:
    """A stepper that passes everything to `stepper` and records what the evaluation asks of it: each batch's `start`
    arguments and the actions of each step, so the same episodes can be stepped again without a policy."""

    def __init__(self, stepper):
        self.stepper, self.batches = stepper, []

    def __getattr__(self, name):
        return getattr(self.stepper, name)

    def start(self, *args):
        self.batches.append((args, []))
        return self.stepper.start(*args)

    def step(self, actions):
        self.batches[-1][1].append(np.array(actions))
        return self.stepper.step(actions)


def physics_rate(env_name, batches, threads):
    """Env steps/s of the recorded `batches` stepped by a native stepper on `threads` threads, no policy between the
    steps: the most an evaluation of these episodes could reach on that many cores."""
    stepper = NativeEpisodes(make_env(env_name), num_threads=threads)
    steps, timed = 0, 0.0
    for args, actions in batches:
        stepper.start(*args)
        start = time.perf_counter()
        for step_actions in actions:
            stepper.step(step_actions)
        timed += time.perf_counter() - start
        steps += int(stepper.results()['length'].sum())
    stepper.close()
    return steps / timed


def thread_counts(usable):
    """1, 2, 4, ... below `usable`, then `usable`."""
    counts = [1]
    while counts[-1] * 2 < usable:
        counts.append(counts[-1] * 2)
    return counts + [usable] if usable > 1 else counts


def time_seeds_evaluation(policy_fn, envs, seeds, task_ids=(1, 2, 3, 4, 5), episodes_per_task=50, max_steps=None,
                          lockstep=True):
    """Wall time of one `evaluate_seeds` call of `len(seeds)` seeds, after an untimed one-step evaluation that
    compiles the policy for the evaluation's batch shapes (and warms the envs). Returns dict(wall_s, env_steps,
    steps_per_s, results: each seed's episode records)."""
    kwargs = dict(task_ids=tuple(task_ids), episodes_per_task=episodes_per_task, lockstep=lockstep)
    evaluate_seeds(policy_fn, envs, seeds, max_steps=1, **kwargs)
    if isinstance(envs, RecordingStepper):
        envs.batches.clear()  # the warm-up's one step is not the evaluation
    start = time.perf_counter()
    results = evaluate_seeds(policy_fn, envs, seeds, max_steps=max_steps, **kwargs)
    wall = time.perf_counter() - start
    env_steps = sum(record.length for episodes in results for record in episodes)
    return dict(wall_s=wall, env_steps=env_steps, steps_per_s=env_steps / wall, results=results)


def beside_training(preset, env, make_envs, policy, seeds, args):
    """The evaluation `make_envs` runs, timed while `preset` trains in another thread from before its start to after
    its end, as main.py's asynchronous evaluation runs beside training (the training compiled before, not timed).
    Returns (evaluation timing, the training's updates/s over the evaluation)."""
    from benchmarks.bench_gpu import compile_training, synthetic_dataset
    from utils.training import DeviceDataset

    raw = synthetic_dataset(env.observation_space.shape[0], env.action_space.shape[0], num_episodes=100, length=201)
    state, run, _ = compile_training(preset, 1, raw, DeviceDataset.from_numpy(**raw), args.train_batch_size,
                                     args.steps_per_call)
    state, infos = run(state)  # a first call outside the timed region
    jax.device_get(infos)
    stop, updates = threading.Event(), []

    def train():
        nonlocal state
        while not stop.is_set():
            state, infos = run(state)
            jax.device_get(infos)
            updates.append(time.perf_counter())

    envs = make_envs()
    thread = threading.Thread(target=train, name='training-beside-evaluation', daemon=True)
    start = time.perf_counter()
    thread.start()
    timing = time_seeds_evaluation(policy, envs, seeds, args.tasks, args.episodes, args.max_steps, True)
    end = time.perf_counter()
    stop.set()
    thread.join()
    if hasattr(envs, 'close'):
        envs.close()
    calls = sum(start < t <= end for t in updates)
    return timing, calls * args.steps_per_call / (end - start)


def print_row(label, timing, workers, one_env_rate):
    """One row of the modes table: wall time, env steps/s, the env-only limit and the share of it, success."""
    limit = workers * one_env_rate
    success = np.mean([evaluation_metrics(episodes)['evaluation/overall_success'] for episodes in timing['results']])
    print(f'| {label} | {timing["wall_s"]:.1f} | {timing["steps_per_s"]:.0f} | {limit:.0f} ({workers} x '
          f'{one_env_rate:.0f}) | {100 * timing["steps_per_s"] / limit:.0f}% | {success:.3f} |', flush=True)


def mode_runs(args):
    """(label, make_envs, lockstep, parallelism) of every mode and worker count asked for. The envs are made right
    before their mode is timed: a pool's worker processes starting up would load the cores under another mode."""
    runs = []
    natively = native.supports(make_env(args.env))
    for mode in args.modes:
        for workers in (args.workers if mode in ('native', 'parallel') else [1]):
            if mode == 'native':
                kind = 'native' if natively else 'gym fallback (no native stepping)'
                label = f'{kind}, {workers} thread{"s" * (workers > 1)}, all tasks in one batch'
                make = lambda workers=workers: make_eval_envs(args.env, args.episodes, num_workers=workers)
            elif mode == 'parallel':
                workers = min(workers, args.episodes)
                if workers < 2:
                    continue
                label = f'parallel lockstep, {workers} processes'
                make = lambda workers=workers: make_eval_envs(args.env, args.episodes, num_workers=workers, native=False)
            else:
                label = mode
                make = lambda: make_eval_envs(args.env, max(args.episodes, args.seeds), native=False)
            runs.append((label, make, mode != 'sequential', workers))
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--env', default='pointmaze-medium-navigate-v0', help='dataset name or env id')
    parser.add_argument('--policy', choices=('mlp', 'oracle'), default='mlp')
    parser.add_argument('--episodes', type=int, default=50, help='episodes per task')
    parser.add_argument('--tasks', type=int, nargs='+', default=[1, 2, 3, 4, 5])
    parser.add_argument('--seeds', type=int, default=1, help='seeds evaluated together in one batch')
    parser.add_argument('--max_steps', type=int, default=None, help='episode cap (default: the env time limit)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--workers', type=int, nargs='+', default=[usable_cpus()],
                        help='threads (native) or processes (parallel) to try (default: the usable cores)')
    parser.add_argument('--modes', nargs='+', default=['native'], choices=MODES,
                        help='the first is the one the last line reports')
    parser.add_argument('--env_seconds', type=float, default=4.0, help='seconds of env-only stepping timed for the limit')
    parser.add_argument('--beside_training', default=None, metavar='PRESET',
                        help='time the first native mode again with this preset (configs/presets.py) training beside it')
    parser.add_argument('--train_batch_size', type=int, default=1024, help='--beside_training: batch per update')
    parser.add_argument('--steps_per_call', type=int, default=500, help='--beside_training: updates per call, as main.py')
    args = parser.parse_args()
    if args.beside_training:
        from configs.presets import PRESETS

        if args.beside_training not in PRESETS:
            parser.error(f'--beside_training={args.beside_training}: not a preset of configs/presets.py (e.g. gcbc, '
                         f'byol_gamma_a)')

    runs = mode_runs(args)
    native_runs = [(label, make, workers) for label, make, _, workers in runs if label.startswith('native')]
    if args.beside_training and not native_runs:
        why = 'add native to --modes' if 'native' not in args.modes else f'{args.env} has no native stepping'
        parser.error(f'--beside_training times the native mode beside training, and this run has none: {why}.')
    env = make_env(args.env)
    policy = make_policy(args.policy, env, args.seed, args.seeds)
    seeds = [args.seed + k for k in range(args.seeds)]
    rows = args.seeds * len(args.tasks) * args.episodes
    print(f'{args.env}, policy={args.policy}, {args.seeds} seed(s) x {len(args.tasks)} tasks x {args.episodes} '
          f'episodes, jax backend={jax.default_backend()}, {usable_cpus()} usable CPU cores, load average '
          f'{os.getloadavg()[0]:.1f}')
    for batch in sorted({args.seeds, args.seeds * args.episodes, rows}):
        observations = np.zeros((batch,) + env.observation_space.shape)
        policy(observations, observations + 1.0)  # compile outside the timed region
        start = time.perf_counter()
        for _ in range(100):
            policy(observations, observations + 1.0)
        print(f'policy call at batch {batch}: {(time.perf_counter() - start) / 100 * 1e6:.0f} us')
    one_env_rate = env_step_rate(args.env, policy, args.seeds, args.tasks, args.episodes, args.max_steps, args.seed,
                                 args.env_seconds)
    print(f'one env alone, one core, on a sample of the evaluation\'s episodes: {one_env_rate:.0f} steps/s '
          f'({1e6 / one_env_rate:.0f} us per step)\n')

    print('| mode | wall s | env steps/s | env-only limit (P x one env) | of the limit | success |')
    print('|---|---|---|---|---|---|')
    timings, recorded = [], None
    for label, make_envs, lockstep, workers in runs:
        envs = make_envs()
        if isinstance(envs, NativeEpisodes) and recorded is None:
            envs = recorded = RecordingStepper(envs)
        timing = time_seeds_evaluation(policy, envs, seeds, args.tasks, args.episodes, args.max_steps, lockstep)
        print_row(label, timing, workers, one_env_rate)
        timings.append((label, timing, workers))
        if hasattr(envs, 'close'):
            envs.close()
    if args.beside_training:
        label, make_envs, workers = native_runs[0]
        timing, train_rate = beside_training(args.beside_training, env, make_envs, policy, seeds, args)
        label = f'{label}, beside {args.beside_training} training'
        print_row(label, timing, workers, one_env_rate)
        print(f'training beside it ({args.beside_training}, batch {args.train_batch_size}, on '
              f'{jax.default_backend()}): {train_rate:.0f} updates/s while the evaluation ran', flush=True)
        timings.append((label, timing, workers))
    first_label, first, workers = timings[0]
    for label, timing, _ in timings[1:]:
        same = all([record.success for record in a] == [record.success for record in b]
                   for a, b in zip(first['results'], timing['results']))
        print(f'per-episode outcomes of {label} identical to {first_label}: {same}')
    if recorded is not None:
        print('\nThe physics limit: the native evaluation\'s episodes stepped again with no policy\n')
        print('| threads | env steps/s | x one thread |')
        print('|---|---|---|')
        physics = {}
        for threads in sorted(set(thread_counts(usable_cpus())) | {w for _, _, w in timings if w}):
            physics[threads] = physics_rate(args.env, recorded.batches, threads)
            print(f'| {threads} | {physics[threads]:.0f} | {physics[threads] / physics[1]:.2f} |', flush=True)
        for label, timing, threads in timings:
            if label.startswith('native') and threads in physics:
                print(f'{label}: {timing["steps_per_s"]:.0f} env steps/s = '
                      f'{100 * timing["steps_per_s"] / physics[threads]:.0f}% of the physics limit (no-policy native '
                      f'stepping of the same episodes on {threads} thread{"s" * (threads > 1)}: {physics[threads]:.0f})')
    limit = workers * one_env_rate
    print(f'{first_label}: {first["steps_per_s"]:.0f} env steps/s = {100 * first["steps_per_s"] / limit:.0f}% of the '
          f'env-only limit ({workers} x one env)')


if __name__ == '__main__':
    main()
