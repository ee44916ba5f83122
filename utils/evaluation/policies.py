"""Evaluation policies of trained agents: one seed's, and N seeds' over one seed-major batch; frame-stacked acting, as
the training sampler stacks frames.

JAX is imported inside the functions: the `EnvWorkers` processes import this package and must not load JAX.
"""

import functools

import numpy as np

from utils.acting import EVALUATION_TEMPERATURE
from utils.evaluation.episodes import evaluate_seeds, evaluation_metrics
from utils.evaluation.videos import videos_to_wandb


class FrameStackPolicy:
    """`policy_fn` on frame-stacked inputs: each step it sees the channel-wise stack of the last `frame_stack`
    observations of every episode (the first observation repeated at an episode's start, as the training sampler
    stacks frames before an episode's first row) and the goal repeated `frame_stack` times. The evaluation resets it
    whenever episodes start."""

    def __init__(self, policy_fn, frame_stack: int):
        self.policy_fn, self.frame_stack = policy_fn, frame_stack
        self.reset()

    def reset(self):
        self.history = None
        if hasattr(self.policy_fn, 'reset'):
            self.policy_fn.reset()

    def __call__(self, observations, goals):
        current = np.array(observations)  # a copy: the evaluator updates its observation buffer in place
        if self.history is None:
            self.history = [current] * self.frame_stack
        else:
            self.history = self.history[1:] + [current]
        stacked_goals = np.concatenate([np.asarray(goals)] * self.frame_stack, axis=-1)
        return self.policy_fn(np.concatenate(self.history, axis=-1), stacked_goals)


def agent_policy(agent, frame_stack=1):
    """Deterministic actions of one agent; agents with acting state (hierarchical re-planning) supply their own
    `evaluation_policy()`. With frame stacking the policy sees the last `frame_stack` observations, as in training."""
    if hasattr(agent, 'evaluation_policy'):
        policy = agent.evaluation_policy()
    else:
        policy = lambda observations, goals: np.asarray(  # noqa: E731
            agent.sample_actions(observations, goals, temperature=EVALUATION_TEMPERATURE))
    return FrameStackPolicy(policy, frame_stack) if frame_stack > 1 else policy


def seeds_policy(agent_stack, num_seeds, frame_stack=1):
    """The policy `evaluate_seeds` needs for `num_seeds` agents trained together: rows [k * R, (k + 1) * R) of each
    call act with seed k's agent.

    `agent_stack` holds the agents stacked on a leading seed axis (`utils.training.stack_trees`, as main.py trains
    them); with num_seeds == 1 it is the single agent, unstacked, and the policy is `agent_policy`'s. Agents act
    through one vmapped `sample_actions` call over [N, R] rows. Agents with their own `evaluation_policy()` (acting
    state) run it per seed on that seed's rows instead, one call each. Frame stacking, if any, wraps the whole
    batch, whose rows keep their own histories.
    """
    if num_seeds == 1:
        return agent_policy(agent_stack, frame_stack)
    if hasattr(agent_stack, 'evaluation_policy'):
        policy = _PerSeedPolicies([_seed_slice(agent_stack, k).evaluation_policy() for k in range(num_seeds)])
    else:
        policy = _VmappedPolicy(agent_stack, num_seeds)
    return FrameStackPolicy(policy, frame_stack) if frame_stack > 1 else policy


def _seed_slice(agent_stack, k):
    import jax

    return jax.tree_util.tree_map(lambda x: x[k], agent_stack)


@functools.cache
def _vmapped_sample_actions():
    """One jitted function for every evaluation, so that it compiles once per batch shape and agent type."""
    import jax

    return jax.jit(jax.vmap(
        lambda agent, observations, goals: agent.sample_actions(observations, goals, temperature=EVALUATION_TEMPERATURE)))


def _split_seeds(array, num_seeds):
    if len(array) % num_seeds:
        raise ValueError(f'A batch of {len(array)} rows does not split into {num_seeds} seeds.')
    return array.reshape((num_seeds, len(array) // num_seeds) + array.shape[1:])


class _VmappedPolicy:
    def __init__(self, agent_stack, num_seeds):
        self.agent_stack, self.num_seeds = agent_stack, num_seeds

    def __call__(self, observations, goals):
        observations, goals = np.asarray(observations), np.asarray(goals)
        actions = _vmapped_sample_actions()(
            self.agent_stack, _split_seeds(observations, self.num_seeds), _split_seeds(goals, self.num_seeds)
        )
        actions = np.asarray(actions)
        return actions.reshape((-1,) + actions.shape[2:])


class _PerSeedPolicies:
    def __init__(self, policies):
        self.policies = policies

    def reset(self):
        for policy in self.policies:
            if hasattr(policy, 'reset'):
                policy.reset()

    def __call__(self, observations, goals):
        num_seeds = len(self.policies)
        observations = _split_seeds(np.asarray(observations), num_seeds)
        goals = _split_seeds(np.asarray(goals), num_seeds)
        return np.concatenate([np.asarray(p(o, g)) for p, o, g in zip(self.policies, observations, goals)])


def evaluate_agents(agent_stack, num_seeds, envs, seed_keys, step, frame_stack=1, **evaluate_kwargs):
    """What main.py logs for each of `num_seeds` agents trained together (`seeds_policy`) at `step`: all seeds'
    episodes in one lockstep batch (`evaluate_seeds`; `evaluate_kwargs` are its), each seed's metrics
    `evaluation_metrics` of its own episodes, and its videos, if any, as one wandb object (`evaluation/video`). Seed
    k's evaluation seed is drawn from fold_in(seed_keys[k], step), so an evaluation depends only on the run's seed and
    the step."""
    import jax

    eval_seeds = [int(jax.random.randint(jax.random.fold_in(seed_keys[k], step), (), 0, 2**31 - 1)) for k in range(num_seeds)]
    per_seed = []
    for episodes in evaluate_seeds(seeds_policy(agent_stack, num_seeds, frame_stack), envs, eval_seeds, **evaluate_kwargs):
        metrics = evaluation_metrics(episodes)
        videos = [record.video for record in episodes if record.video is not None]
        if videos:
            metrics['evaluation/video'] = videos_to_wandb(videos)
        per_seed.append(metrics)
    return per_seed
