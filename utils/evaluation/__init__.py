"""OGBench goal-reaching evaluation.

    envs = make_eval_envs('pointmaze-medium-v0', 50, num_workers=usable_cpus())
    metrics = evaluate(policy_fn, envs, task_ids=(1, 2, 3, 4, 5), episodes_per_task=50, seed=0)
    per_seed = evaluate_seeds(seeds_policy(agent_stack, 3), envs, seeds=[11, 12, 13])   # one batch, 3 seeds

Modules, by job: `envs` (one env, spaces, cores), `steppers` (what steps an evaluation's episodes), `episodes` (the
lockstep batch: seeding, bookkeeping, metrics), `native` (per-episode MuJoCo states stepped by threads, for the maze
envs it supports), `workers` and `worker_process` (a pool of processes stepping gym envs, for the others), `videos`,
`frame_stack` and `policies` (agents' evaluation policies). Their imports form no cycle: `envs` and `videos` import
nothing of the package, `steppers` and `policies` nothing that imports them. When main.py evaluates (in the training
loop or beside it) is the run machinery's: runtime/evaluations.py.
"""

from utils.evaluation.envs import env_spaces, make_env, one_env, usable_cpus
from utils.evaluation.episodes import evaluate, evaluate_seeds
from utils.evaluation.frame_stack import FrameStackPolicy
from utils.evaluation.policies import agent_policy, evaluate_agents, seeds_policy
from utils.evaluation.steppers import make_eval_envs
from utils.evaluation.videos import tile_videos, videos_to_wandb

__all__ = [
    'FrameStackPolicy',
    'agent_policy',
    'env_spaces',
    'evaluate',
    'evaluate_agents',
    'evaluate_seeds',
    'make_env',
    'make_eval_envs',
    'one_env',
    'seeds_policy',
    'tile_videos',
    'usable_cpus',
    'videos_to_wandb',
]
