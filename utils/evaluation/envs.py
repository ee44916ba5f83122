"""Evaluation envs: one OGBench env by name, the spaces of what an evaluation steps, and the cores to use."""

import os

import gymnasium
import ogbench  # noqa: F401  (registers the OGBench env ids with gymnasium)


def usable_cpus():
    """CPU cores this process may run on: its affinity mask (which taskset and Slurm narrow), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity on macOS
        return os.cpu_count() or 1


def make_env(env_name):
    """One OGBench env from an env id (pointmaze-medium-v0) or a dataset name (pointmaze-medium-stitch-v0).

    Without gymnasium's env checker: it only warns, and on a manipulation env it resets (and renders) the
    env once more at creation just to look at an observation."""
    if env_name in gymnasium.registry:
        return gymnasium.make(env_name, disable_env_checker=True)
    return ogbench.make_env_and_datasets(env_name, env_only=True, disable_env_checker=True)


def one_env(envs):
    """A gym env of `make_eval_envs`'s result (or of a list of envs): for its spaces, spec and maze layout."""
    return envs.local_env if hasattr(envs, 'local_env') else envs[0]


def env_spaces(envs):
    """(observation_space, action_space) of `make_eval_envs`'s result."""
    env = one_env(envs)
    return env.observation_space, env.action_space
