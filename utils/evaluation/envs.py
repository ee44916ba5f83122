"""Evaluation env creation: one env, the set of envs an evaluation steps, their spaces, and the cores to use."""

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


def make_eval_envs(env_name, num_envs, num_workers=1, native=True):
    """What an evaluation of `env_name` steps. Make it once and reuse it across evaluations.

    Args:
        num_envs: env copies for the gym paths, i.e. the rows one lockstep batch can hold there; an evaluation with
            more episodes runs them in successive batches ("waves", see `evaluate_seeds`). A native pool holds any
            number of episodes and ignores it.
        num_workers: parallelism: threads of a native pool, or processes (this one and `num_workers - 1` workers)
            of an `EnvWorkers` pool; 1 steps everything in this thread.
        native: step the episodes on per-episode MuJoCo states with a thread pool (`utils.evaluation.native`) where
            the env supports it (`native.supports`); other envs, or native=False, get today's gym stepping.

    Returns a `NativeEpisodes` pool, an `EnvWorkers` pool of `num_envs` copies (when num_workers > 1, capped at
    `num_envs`), or a plain list of `num_envs` gym envs stepped in this process. `one_env` and `env_spaces` read any
    of them.
    """
    from utils.evaluation import native as native_stepping

    if num_envs < 1 or num_workers < 1:
        raise ValueError(f'make_eval_envs needs num_envs >= 1 and num_workers >= 1, got {num_envs} and {num_workers}.')
    env = make_env(env_name)
    if native and native_stepping.supports(env):
        return native_stepping.NativeEpisodes(env, num_threads=num_workers)
    num_workers = min(num_workers, num_envs)
    if num_workers > 1:
        # Imported here: the workers run this package as `python -m utils.evaluation.workers`, and a package that
        # imported that module on its own import would have runpy execute it twice.
        from utils.evaluation.workers import EnvWorkers

        env.close()
        return EnvWorkers(env_name, num_envs, num_workers)
    return [env] + [make_env(env_name) for _ in range(num_envs - 1)]


def one_env(envs):
    """A gym env of `make_eval_envs`'s result (or of a list of envs): for its spaces, spec and maze layout."""
    return envs.local_env if hasattr(envs, 'local_env') else envs[0]


def env_spaces(envs):
    """(observation_space, action_space) of `make_eval_envs`'s result."""
    env = one_env(envs)
    return env.observation_space, env.action_space
