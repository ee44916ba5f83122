"""Wall time of lockstep vs sequential OGBench evaluation, side by side.

    python scripts/bench_eval.py --policy=mlp      # random MLP(512,512,512) actor: episodes run to the time limit
    python scripts/bench_eval.py --policy=oracle   # BFS oracle actions (realistic episode lengths), paying the
                                                   # MLP's forward pass on every call as a trained agent would
"""

import argparse
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from utils.evaluation import evaluate, make_eval_envs, pointmaze_oracle_policy


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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--env', default='pointmaze-medium-navigate-v0', help='dataset name or env id')
    parser.add_argument('--policy', choices=('mlp', 'oracle'), default='mlp')
    parser.add_argument('--episodes', type=int, default=50, help='episodes per task')
    parser.add_argument('--tasks', type=int, nargs='+', default=[1, 2, 3, 4, 5])
    parser.add_argument('--max_steps', type=int, default=None, help='episode cap (default: the env time limit)')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()

    envs = make_eval_envs(args.env, args.episodes)
    policy = make_policy(args.policy, envs[0], args.seed)
    print(f'{args.env}, policy={args.policy}, {len(args.tasks)} tasks x {args.episodes} episodes, '
          f'jax backend={jax.default_backend()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}')
    # The speedup is bounded by (env step + policy call at B=1) / (env step + policy call at B=N / N).
    for batch in (1, args.episodes):
        observations = np.zeros((batch,) + envs[0].observation_space.shape)
        policy(observations, observations + 1.0)  # compile outside the timed regions
        start = time.perf_counter()
        for _ in range(200):
            policy(observations, observations + 1.0)
        print(f'policy call at batch {batch}: {(time.perf_counter() - start) / 200 * 1e6:.0f} us')
    print(f'{"mode":<11}{"wall s":>9}{"env steps":>11}{"steps/s":>10}{"success":>9}')
    results, walls = {}, {}
    for lockstep in (True, False):
        mode = 'lockstep' if lockstep else 'sequential'
        start = time.perf_counter()
        results[mode] = evaluate(policy, envs, task_ids=tuple(args.tasks), episodes_per_task=args.episodes,
                                 seed=args.seed, lockstep=lockstep, max_steps=args.max_steps)
        walls[mode] = time.perf_counter() - start
        steps = results[mode]['evaluation/overall_length'] * args.episodes * len(args.tasks)
        print(f'{mode:<11}{walls[mode]:>9.1f}{steps:>11.0f}{steps / walls[mode]:>10.0f}'
              f'{results[mode]["evaluation/overall_success"]:>9.3f}')
    print(f'lockstep speedup: {walls["sequential"] / walls["lockstep"]:.2f}x')
    same = all(np.array_equal(results['lockstep']['per_episode'][t], results['sequential']['per_episode'][t])
               for t in args.tasks)
    print(f'per-episode outcomes identical in both modes: {same}')


if __name__ == '__main__':
    main()
