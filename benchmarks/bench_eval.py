"""Wall time of main.py's evaluation (native stepping, `mujoco.batch`) against the physics limit, measured in the same
run: the evaluation's own episodes (the actions it took, recorded) stepped again by the native stepper with no policy,
on 1, 2, 4, ... and all usable threads: what the machine's cores can step.

    python benchmarks/bench_eval.py                   # one thread per usable core, all tasks in one batch
    python benchmarks/bench_eval.py --seeds 4         # 4 seeds' episodes in one batch, their MLPs vmapped
    python benchmarks/bench_eval.py --workers 1 2     # scaling with threads
    python benchmarks/bench_eval.py --beside_training gcbc   # also: the same evaluation again while GCBC trains in
                                                   # another thread (main.py --eval_mode=async, a GPU run's default)

The policy is a random GCBC-sized MLP (its points press against walls: contact-heavy steps). For each thread count a
line `<label>: X env steps/s = Y% of the physics limit (...)`. With `--beside_training <preset>` the first thread
count is timed once more with that agent training beside it (batch `--train_batch_size`, `--steps_per_call` updates
per call, on JAX's default backend, its metrics fetched after every call as main.py does), with the training's
updates/s while the evaluation ran: on a GPU machine the training runs on the device and its host thread mostly waits;
on a CPU it competes with the evaluation for the same cores.
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
from utils.evaluation.native import NativeEpisodes


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


def make_policy(env, seed, num_seeds=1):
    """A batched policy over seed-major rows: `num_seeds` random MLP actors, one vmapped call (as main.py's seeds
    policy)."""
    obs_dim = env.observation_space.shape[0]
    actor = MeanActor(action_dim=env.action_space.shape[0])
    keys = jax.random.split(jax.random.PRNGKey(seed), num_seeds)
    params = jax.vmap(lambda key: actor.init(key, jnp.zeros((1, obs_dim)), jnp.zeros((1, obs_dim))))(keys)
    apply = jax.jit(jax.vmap(actor.apply))

    def mlp(observations, goals):
        rows = (num_seeds, len(observations) // num_seeds, -1)
        return np.asarray(apply(params, observations.reshape(rows), goals.reshape(rows))).reshape(len(observations), -1)

    return mlp


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


def time_evaluation(policy_fn, envs, seeds, args):
    """Wall time of one `evaluate_seeds` call of `len(seeds)` seeds, after an untimed one-step evaluation that
    compiles the policy for the evaluation's batch shapes (and warms the envs). Returns dict(wall_s, env_steps,
    steps_per_s, results: each seed's episode records)."""
    kwargs = dict(task_ids=tuple(args.tasks), episodes_per_task=args.episodes)
    evaluate_seeds(policy_fn, envs, seeds, max_steps=1, **kwargs)
    envs.batches.clear()  # the warm-up's one step is not the evaluation
    start = time.perf_counter()
    results = evaluate_seeds(policy_fn, envs, seeds, max_steps=args.max_steps, **kwargs)
    wall = time.perf_counter() - start
    env_steps = sum(record.length for episodes in results for record in episodes)
    return dict(wall_s=wall, env_steps=env_steps, steps_per_s=env_steps / wall, results=results)


def beside_training(preset, env, envs, policy, seeds, args):
    """The evaluation on `envs`, timed while `preset` trains in another thread from before its start to after its end,
    as main.py's asynchronous evaluation runs beside training (the training compiled before, not timed). Returns
    (evaluation timing, the training's updates/s over the evaluation)."""
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

    thread = threading.Thread(target=train, name='training-beside-evaluation', daemon=True)
    start = time.perf_counter()
    thread.start()
    timing = time_evaluation(policy, envs, seeds, args)
    end = time.perf_counter()
    stop.set()
    thread.join()
    calls = sum(start < t <= end for t in updates)
    return timing, calls * args.steps_per_call / (end - start)


def print_row(label, timing):
    success = np.mean([evaluation_metrics(episodes)['evaluation/overall_success'] for episodes in timing['results']])
    print(f'| {label} | {timing["wall_s"]:.1f} | {timing["steps_per_s"]:.0f} | {success:.3f} |', flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--env', default='pointmaze-medium-navigate-v0', help='dataset name or env id')
    parser.add_argument('--episodes', type=int, default=50, help='episodes per task')
    parser.add_argument('--tasks', type=int, nargs='+', default=[1, 2, 3, 4, 5])
    parser.add_argument('--seeds', type=int, default=1, help='seeds evaluated together in one batch')
    parser.add_argument('--max_steps', type=int, default=None, help='episode cap (default: the env time limit)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--workers', type=int, nargs='+', default=[usable_cpus()],
                        help='thread counts to time the evaluation on (default: the usable cores)')
    parser.add_argument('--beside_training', default=None, metavar='PRESET',
                        help='time the first thread count again with this preset (configs/presets.py) training beside it')
    parser.add_argument('--train_batch_size', type=int, default=1024, help='--beside_training: batch per update')
    parser.add_argument('--steps_per_call', type=int, default=500, help='--beside_training: updates per call, as main.py')
    args = parser.parse_args()
    if args.beside_training:
        from configs.presets import PRESETS

        if args.beside_training not in PRESETS:
            parser.error(f'--beside_training={args.beside_training}: not a preset of configs/presets.py (e.g. gcbc, '
                         f'byol_gamma_a)')
    env = make_env(args.env)
    if not native.supports(env):
        parser.error(f'--env={args.env} has no native stepping, which this benchmark times; pick a maze or an ant '
                     f'environment, e.g. --env=pointmaze-medium-navigate-v0.')
    policy = make_policy(env, args.seed, args.seeds)
    seeds = [args.seed + k for k in range(args.seeds)]
    print(f'{args.env}, random MLP policy, {args.seeds} seed(s) x {len(args.tasks)} tasks x {args.episodes} '
          f'episodes, jax backend={jax.default_backend()}, {usable_cpus()} usable CPU cores, load average '
          f'{os.getloadavg()[0]:.1f}')
    print('\n| evaluation | wall s | env steps/s | success |')
    print('|---|---|---|---|')
    timings = []
    for workers in args.workers:
        envs = RecordingStepper(make_eval_envs(args.env, args.episodes, num_workers=workers))
        label = f'native, {workers} thread{"s" * (workers > 1)}, all tasks in one batch'
        timings.append((label, time_evaluation(policy, envs, seeds, args), workers, envs))
        print_row(label, timings[-1][1])
        envs.close()
    if args.beside_training:
        label, _, workers, _ = timings[0]
        envs = RecordingStepper(make_eval_envs(args.env, args.episodes, num_workers=workers))
        timing, train_rate = beside_training(args.beside_training, env, envs, policy, seeds, args)
        envs.close()
        label = f'{label}, beside {args.beside_training} training'
        print_row(label, timing)
        print(f'training beside it ({args.beside_training}, batch {args.train_batch_size}, on '
              f'{jax.default_backend()}): {train_rate:.0f} updates/s while the evaluation ran', flush=True)
        timings.append((label, timing, workers, envs))

    print('\nThe physics limit: the first evaluation\'s episodes stepped again with no policy\n')
    print('| threads | env steps/s | x one thread |')
    print('|---|---|---|')
    recorded, physics = timings[0][3].batches, {}
    for threads in sorted(set(thread_counts(usable_cpus())) | {workers for _, _, workers, _ in timings}):
        physics[threads] = physics_rate(args.env, recorded, threads)
        print(f'| {threads} | {physics[threads]:.0f} | {physics[threads] / physics[1]:.2f} |', flush=True)
    for label, timing, threads, _ in timings:
        print(f'{label}: {timing["steps_per_s"]:.0f} env steps/s = {100 * timing["steps_per_s"] / physics[threads]:.0f}% '
              f'of the physics limit (no-policy native stepping of the same episodes on {threads} '
              f'thread{"s" * (threads > 1)}: {physics[threads]:.0f})')


if __name__ == '__main__':
    main()
