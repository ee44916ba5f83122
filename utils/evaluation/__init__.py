"""OGBench goal-reaching evaluation: one protocol, every episode of every (seed, task) in one lockstep batch.

    envs = make_eval_envs('pointmaze-medium-v0', 50, num_workers=usable_cpus())
    episodes = evaluate(policy_fn, envs, task_ids=(1, 2, 3, 4, 5), episodes_per_task=50, seed=0)  # Episode records
    metrics = evaluation_metrics(episodes)                                  # what main.py logs
    per_seed = evaluate_seeds(seeds_policy(agent_stack, 3), envs, seeds=[11, 12, 13])   # one batch, 3 seeds

Modules, by job, each importing only those before it: `videos` (rendering that cannot fail an evaluation, tiling,
wandb), `envs` (one env, its spaces, the cores; gym envs stepping a batch of episodes), `native` (per-episode MuJoCo
states stepped by threads, for the maze envs it supports), `workers` (a pool of processes stepping gym envs, for the
others), `episodes` (what steps an evaluation, the lockstep batch and its seeding, the per-episode records and the
metrics made of them), `policies` (agents' evaluation policies, frame stacking). When main.py evaluates (in the
training loop or beside it) is the run machinery's: runtime/evaluations.py.
"""

from utils.evaluation.envs import env_spaces, make_env, one_env, usable_cpus
from utils.evaluation.episodes import Episode, evaluate, evaluate_seeds, evaluation_metrics, make_eval_envs
from utils.evaluation.policies import FrameStackPolicy, agent_policy, evaluate_agents, seeds_policy
from utils.evaluation.videos import tile_videos, videos_to_wandb

__all__ = [
    'Episode',
    'FrameStackPolicy',
    'agent_policy',
    'env_spaces',
    'evaluate',
    'evaluate_agents',
    'evaluate_seeds',
    'evaluation_metrics',
    'make_env',
    'make_eval_envs',
    'one_env',
    'seeds_policy',
    'tile_videos',
    'usable_cpus',
    'videos_to_wandb',
]
