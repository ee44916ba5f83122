"""What steps an evaluation's episodes: `make_eval_envs` picks the native stepper (`native.py`) where the env
supports it, else gym envs stepped here or by an `EnvWorkers` pool of processes (`workers.py`)."""

from utils.evaluation import native as native_stepping
from utils.evaluation.envs import make_env
from utils.evaluation.workers import EnvWorkers


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
    if num_envs < 1 or num_workers < 1:
        raise ValueError(f'make_eval_envs needs num_envs >= 1 and num_workers >= 1, got {num_envs} and {num_workers}.')
    env = make_env(env_name)
    if native and native_stepping.supports(env):
        return native_stepping.NativeEpisodes(env, num_threads=num_workers)
    num_workers = min(num_workers, num_envs)
    if num_workers > 1:
        env.close()
        return EnvWorkers(env_name, num_envs, num_workers)
    return [env] + [make_env(env_name) for _ in range(num_envs - 1)]
