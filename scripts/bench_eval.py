"""Wall time of sequential, lockstep and parallel lockstep OGBench evaluation, side by side, against the
env-only limit (stepping processes x one env's step rate on one core).

    python scripts/bench_eval.py --policy=mlp      # random MLP(512,512,512) actor: episodes run to the time limit
    python scripts/bench_eval.py --policy=oracle   # BFS oracle actions (realistic episode lengths), paying the
                                                   # MLP's forward pass on every call as a trained agent would
    python scripts/bench_eval.py --workers 2 4 8 16 --modes lockstep parallel   # scaling with worker processes

Parallel lockstep's per-episode outcomes must equal in-process lockstep's (printed at the end; also tested).
"""

import argparse
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from utils.evaluation import evaluate, make_eval_envs, pointmaze_oracle_policy, usable_cpus


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


def make_policy(kind, env, seed):
    obs_dim = env.observation_space.shape[0]
    actor = MeanActor(action_dim=env.action_space.shape[0])
    params = actor.init(jax.random.PRNGKey(seed), jnp.zeros((1, obs_dim)), jnp.zeros((1, obs_dim)))
    apply = jax.jit(actor.apply)

    def mlp(observations, goals):
        return np.asarray(apply(params, observations, goals))

    if kind == 'mlp':
        return mlp
    oracle = pointmaze_oracle_policy(env)

    def oracle_at_mlp_cost(observations, goals):
        mlp(observations, goals)
        return oracle(observations, goals)

    return oracle_at_mlp_cost


def env_step_rate(env_name, seconds=2.0, seed=0):
    """Steps/s of one env on one core with random actions (raw env, as evaluation steps it): the physics-only
    bound of one evaluation process; N processes can at best reach N times this."""
    (env,) = make_eval_envs(env_name, 1)
    raw, rng = env.unwrapped, np.random.default_rng(seed)
    env.reset(seed=seed)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            raw.step(rng.uniform(-1.0, 1.0, size=env.action_space.shape))
        steps += 100
        if steps % 1000 == 0:
            env.reset(seed=seed)
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--env', default='pointmaze-medium-navigate-v0', help='dataset name or env id')
    parser.add_argument('--policy', choices=('mlp', 'oracle'), default='mlp')
    parser.add_argument('--episodes', type=int, default=50, help='episodes per task')
    parser.add_argument('--tasks', type=int, nargs='+', default=[1, 2, 3, 4, 5])
    parser.add_argument('--max_steps', type=int, default=None, help='episode cap (default: the env time limit)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--workers', type=int, nargs='+', default=[usable_cpus()],
                        help='process counts (this one + workers) for parallel lockstep (default: the usable cores)')
    parser.add_argument('--modes', nargs='+', default=['sequential', 'lockstep', 'parallel'],
                        choices=('sequential', 'lockstep', 'parallel'))
    args = parser.parse_args()

    cores = usable_cpus()
    envs = make_eval_envs(args.env, args.episodes)
    policy = make_policy(args.policy, envs[0], args.seed)
    print(f'{args.env}, policy={args.policy}, {len(args.tasks)} tasks x {args.episodes} episodes, '
          f'jax backend={jax.default_backend()}, {cores} usable CPU cores, load average {os.getloadavg()[0]:.1f}')
    # The lockstep speedup is bounded by (env step + policy call at B=1) / (env step + policy call at B=N / N).
    for batch in (1, args.episodes):
        observations = np.zeros((batch,) + envs[0].observation_space.shape)
        policy(observations, observations + 1.0)  # compile outside the timed regions
        start = time.perf_counter()
        for _ in range(200):
            policy(observations, observations + 1.0)
        print(f'policy call at batch {batch}: {(time.perf_counter() - start) / 200 * 1e6:.0f} us')
    one_env = env_step_rate(args.env)
    print(f'one env alone, one core: {one_env:.0f} steps/s ({1e6 / one_env:.0f} us per step)\n')

    runs = []  # (label, mode, envs, workers)
    if 'sequential' in args.modes:
        runs.append(('sequential', False, envs, 1))
    if 'lockstep' in args.modes:
        runs.append(('lockstep', True, envs, 1))
    pools = []
    if 'parallel' in args.modes:
        for workers in args.workers:
            workers = min(workers, args.episodes)
            if workers > 1:
                pools.append(make_eval_envs(args.env, args.episodes, num_workers=workers))
                runs.append((f'parallel lockstep, {workers} processes', True, pools[-1], workers))
    print('| mode | wall s | env steps/s | vs lockstep | env-only limit (processes x one env) | success |')
    print('|---|---|---|---|---|---|')
    results, walls = {}, {}
    # Warm-up, untimed, before any timing: first resets are slow, and a pool's first use waits for its worker
    # processes to start and build their envs (which would load the cores under the modes timed meanwhile).
    for label, lockstep, run_envs, workers in runs:
        evaluate(policy, run_envs, task_ids=(args.tasks[0],), episodes_per_task=args.episodes, lockstep=lockstep,
                 max_steps=1)
    for label, lockstep, run_envs, workers in runs:
        start = time.perf_counter()
        results[label] = evaluate(policy, run_envs, task_ids=tuple(args.tasks), episodes_per_task=args.episodes,
                                  seed=args.seed, lockstep=lockstep, max_steps=args.max_steps)
        walls[label] = time.perf_counter() - start
        steps = results[label]['evaluation/overall_length'] * args.episodes * len(args.tasks)
        versus = f'{walls["lockstep"] / walls[label]:.2f}x' if 'lockstep' in walls else '-'
        print(f'| {label} | {walls[label]:.1f} | {steps / walls[label]:.0f} | {versus} | {workers * one_env:.0f} | '
              f'{results[label]["evaluation/overall_success"]:.3f} |', flush=True)
    for pool in pools:
        pool.close()
    if 'lockstep' in results:
        for label in results:
            if label != 'lockstep':
                same = all(np.array_equal(results['lockstep']['per_episode'][t], results[label]['per_episode'][t])
                           for t in args.tasks)
                print(f'per-episode outcomes of {label} identical to lockstep: {same}')


if __name__ == '__main__':
    main()
