"""OGBench goal-reaching evaluation: every episode of every (seed, task) in one lockstep batch, one record per episode.

    envs = make_eval_envs('pointmaze-medium-v0', 50)
    episodes = evaluate(policy_fn, envs, task_ids=(1, 2, 3), episodes_per_task=50, seed=0)  # [Episode] x 150
    metrics = evaluation_metrics(episodes)    # {'evaluation/task1_success': ..., 'evaluation/overall_success': ...}

An evaluation of N seeds x T tasks x E episodes per task is one batch of N * T * E rows, ordered seed-major (row
k * T * E + t * E + j is episode j of the t-th task for the k-th seed). All episodes start together and advance
together, with one policy call per step over all rows: that amortises the per-call cost of a jitted policy
(dispatch, host<->device copies) over the whole batch, and lets a policy for N seeds run the N agents as one vmapped
call (`utils.evaluation.policies.seeds_policy`). Rows of finished episodes stay in the batch, frozen at their last
observation, and their actions are ignored, so a jitted policy compiles for one batch size only.

What steps the episodes (`make_eval_envs`): a native pool (`native.py`: one MuJoCo state per episode, stepped by
threads) holds any number of rows, of which at most MAX_ROWS_PER_BATCH step together (about 220 KB of memory each).
The gym paths (a list of envs stepped here, or an `EnvWorkers` pool of processes, `workers.py`) hold one env per
row; given fewer envs than rows, the evaluation runs in waves: the per-seed rows are cut into blocks of at most
len(envs) // N, and each wave runs one block of every seed (still seed-major, so a seeds policy sees N equal
slices). Stateful policies are reset at the start of every wave.

What an evaluation returns: one `Episode` record per episode (its seed, task, index, success, return, length, final
observation and video). The metrics main.py logs are `evaluation_metrics` of one seed's records, a pure function of
them, so that an analysis or a test computes the same numbers from the same records.

Randomness. An OGBench maze episode draws from three generators:
  * `env.np_random` (gymnasium): qpos/qvel reset noise; seeded by `env.reset(seed=...)`;
  * `env.action_space`'s own generator: the random "stabilising" actions inside the maze reset. They leave the
    ant/humanoid joints where the goal observation is read, and `reset(seed=...)` does not seed them;
  * the global `np.random`: the init/goal xy noise of the maze reset and, in the teleport maze, the choice of exit at
    every teleport, which happens inside `step`.
Episode j of task t under evaluation seed s gets an episode seed derived from (s, t, j) alone, which seeds all three
right before its reset; in the teleport maze the global generator is also re-seeded from (episode seed, step index)
before each step. That makes an episode's draws independent of which other episodes share its batch, of how many
seeds are evaluated together, and of which thread or process steps it, so every path produces identical episodes,
provided the policy gives a row the same action whatever the batch. Plain numpy policies do; jitted policies need
not: XLA fuses (and may contract into FMAs, or turn a division into a reciprocal-multiply) differently per batch
size, so a row's action can change in the last bit, after which the two trajectories drift apart; outcomes then
agree statistically, not bitwise. The caller's global `np.random` state is restored on return.
"""

from typing import Dict, NamedTuple, Optional, Sequence, Union

import numpy as np

from utils.evaluation import native as native_stepping
from utils.evaluation.envs import GymEpisodes, make_env, one_env
from utils.evaluation.workers import EnvWorkers
from utils.progress import progress_bar

# Episodes stepped together at most; an evaluation with more rows runs in successive batches of this size.
MAX_ROWS_PER_BATCH = 4096


class Episode(NamedTuple):
    """The record of one evaluation episode: what `evaluate` returns per episode, and what every logged metric is
    computed from (`evaluation_metrics`)."""

    seed: int  # the evaluation seed it ran under
    task: Union[int, str]  # its task id, or 'info{k}' for the k-th entry of task_ids given as a task_info dict
    episode: int  # its index among its task's episodes (its episode seed derives from seed, task and this)
    success: float  # 1.0 if the env reported success at its last step, else 0.0
    return_: float  # the sum of its rewards
    length: int  # the steps it took
    final_observation: np.ndarray  # its observation after its last step
    video: Optional[np.ndarray]  # uint8 [frames, H, W, 3] if it was recorded and rendering worked, else None


def evaluation_metrics(episodes: Sequence[Episode]) -> Dict[str, float]:
    """The metrics main.py logs for one evaluation, from the records of one seed's episodes:
    `evaluation/task{t}_success` per task (the mean success of its episodes; tasks in the order the records give
    them), `evaluation/overall_success` (the mean over tasks of their success), and `evaluation/overall_return` and
    `evaluation/overall_length` (means over all episodes). Records of several seeds are pooled: each task's success
    is then the mean of all its episodes."""
    if not episodes:
        raise ValueError('evaluation_metrics needs the records of at least one episode.')
    successes = {}
    for record in episodes:
        successes.setdefault(record.task, []).append(record.success)
    metrics = {f'evaluation/task{task}_success': float(np.mean(values)) for task, values in successes.items()}
    metrics['evaluation/overall_success'] = float(np.mean(list(metrics.values())))
    metrics['evaluation/overall_return'] = float(np.mean([record.return_ for record in episodes]))
    metrics['evaluation/overall_length'] = float(np.mean([record.length for record in episodes]))
    return metrics


def make_eval_envs(env_name, num_envs, num_workers=1, native=True):
    """What an evaluation of `env_name` steps. Make it once and reuse it across evaluations.

    Args:
        num_envs: env copies for the gym paths, i.e. the rows one lockstep batch can hold there; an evaluation with
            more episodes runs them in successive batches ("waves", see `evaluate_seeds`). A native pool holds any
            number of episodes and ignores it.
        num_workers: parallelism: threads of a native pool, or processes (this one and `num_workers - 1` workers)
            of an `EnvWorkers` pool; 1 steps everything in this thread.
        native: step the episodes on per-episode MuJoCo states with a thread pool (`native.py`) where the env
            supports it (`native.supports`); other envs, or native=False, are stepped as gym envs.

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


class EvaluationCancelled(Exception):
    """The caller's `cancel` event was set: the evaluation stopped without results."""


def evaluate(
    policy_fn,
    envs,
    task_ids=(1, 2, 3, 4, 5),
    episodes_per_task=50,
    seed=0,
    lockstep=True,
    max_steps=None,
    num_video_episodes=0,
    video_frame_skip=3,
    progress=False,
):
    """Run `episodes_per_task` episodes of every task: `evaluate_seeds` for one seed.

    Args:
        policy_fn: deterministic batched policy, `(observations [B, ...], goals [B, ...]) -> actions [B, action_dim]`.
            A policy with a `reset()` method (acting state) is reset whenever a new batch of episodes starts.
        envs: from `make_eval_envs` (or a list of gym envs, stepped here).
        task_ids: OGBench task ids (1..num_tasks), each of which may instead be a task given as a dict the env's reset
            accepts as `options['task_info']` (mazes: `dict(init_ij=..., goal_ij=...)`); the k-th entry of `task_ids`
            given that way is recorded as task `info{k}` (metrics: `evaluation/taskinfo{k}_success`).
        lockstep: if False, run one episode at a time with batch-1 calls (same seeds, same episodes).
        max_steps: episode length cap that replaces the env's own time limit (`env.spec.max_episode_steps`).
        num_video_episodes: render the first this many episodes of each task, one frame every `video_frame_skip`
            steps plus the first and last frames. Headless MuJoCo rendering needs MUJOCO_GL=egl; if rendering fails
            the evaluation warns and goes on without videos.

    Returns:
        The `Episode` records of the evaluation, task by task in the order of `task_ids`, each task's episodes in
        order; `evaluation_metrics` of them are the metrics main.py logs.
    """
    (episodes,) = evaluate_seeds(
        policy_fn, envs, [seed], task_ids, episodes_per_task, lockstep, max_steps, num_video_episodes,
        video_frame_skip, progress,
    )
    return episodes


def evaluate_seeds(
    policy_fn,
    envs,
    seeds,
    task_ids=(1, 2, 3, 4, 5),
    episodes_per_task=50,
    lockstep=True,
    max_steps=None,
    num_video_episodes=0,
    video_frame_skip=3,
    progress=False,
    cancel=None,
):
    """Evaluate N seeds' policies in one lockstep batch of N x tasks x episodes rows (see the module docstring).

    `policy_fn` gets the rows seed-major: rows [k * R, (k + 1) * R) of every call belong to the k-th entry of
    `seeds` (R = rows per seed in the batch). Other arguments as in `evaluate`; `cancel` (anything with `is_set()`) ends the
    evaluation with EvaluationCancelled at the next environment step once it is set. Returns one list of `Episode`
    records per seed, each exactly what `evaluate(..., seed=seeds[k])` returns for a policy whose rows do not depend
    on the batch.
    """
    plan = _Plan(seeds, task_ids, episodes_per_task, num_video_episodes, one_env(envs))
    stepper = envs if hasattr(envs, 'start') else GymEpisodes(list(envs))
    waves = plan.waves(stepper.capacity, lockstep)
    caller_rng_state = np.random.get_state()
    try:
        outcome = _Outcome(plan.num_rows)
        with progress_bar(total=plan.num_rows, desc='evaluation', unit='episode', disable=not progress) as bar:
            for rows in waves:
                outcome.record(rows, _run_batch(policy_fn, stepper, plan, rows, max_steps, video_frame_skip, bar, cancel))
    except BaseException:
        if hasattr(stepper, 'abort'):
            stepper.abort()  # e.g. a worker may be mid-episode: its pool cannot be trusted with another evaluation
        raise
    finally:
        np.random.set_state(caller_rng_state)
    return [plan.records(outcome, k) for k in range(len(plan.seeds))]


def episode_seed(seed, task_key, episode):
    """The seed of episode `episode` of the task keyed `task_key` under evaluation seed `seed`."""
    return int(np.random.SeedSequence([seed, task_key, episode]).generate_state(1)[0])


class _Plan:
    """The rows of an evaluation (seed-major, then task, then episode), checked before any episode runs."""

    def __init__(self, seeds, task_ids, episodes_per_task, num_video_episodes, env):
        self.seeds = [int(s) for s in seeds]
        self.task_ids = list(task_ids)
        self.episodes = int(episodes_per_task)
        if not self.seeds:
            raise ValueError('evaluate_seeds needs at least one seed.')
        if self.episodes < 1:
            raise ValueError(f'episodes_per_task must be positive, got {episodes_per_task}.')
        _check_tasks(self.task_ids, env)
        self.labels = [f'info{p}' if isinstance(t, dict) else t for p, t in enumerate(self.task_ids)]
        self.per_seed = len(self.task_ids) * self.episodes
        self.num_rows = len(self.seeds) * self.per_seed
        self.tasks, self.episode_seeds, self.record = [], [], []
        for seed in self.seeds:
            for position, task in enumerate(self.task_ids):
                # 2**32 + position: seed entropy that no integer task id (all below 2**32) can collide with.
                task_key = 2**32 + position if isinstance(task, dict) else task
                for j in range(self.episodes):
                    self.tasks.append(task)
                    self.episode_seeds.append(episode_seed(seed, task_key, j))
                    self.record.append(j < num_video_episodes)

    def waves(self, capacity, lockstep):
        """Row lists of the batches to run in turn: one batch of all rows where the stepper holds them."""
        num_seeds = len(self.seeds)
        if capacity is not None and capacity < num_seeds:
            raise ValueError(
                f'Evaluating {num_seeds} seeds together needs at least {num_seeds} envs (one row per seed in every '
                f'batch), got {capacity}; make them with make_eval_envs(env_name, {num_seeds * self.per_seed}) to run '
                f'all {self.num_rows} episodes in one batch.'
            )
        capacity = MAX_ROWS_PER_BATCH if capacity is None else min(capacity, max(MAX_ROWS_PER_BATCH, num_seeds))
        block = min(self.per_seed, capacity // num_seeds)
        if not lockstep:
            block = 1
        return [
            [k * self.per_seed + p for k in range(num_seeds) for p in range(start, min(start + block, self.per_seed))]
            for start in range(0, self.per_seed, block)
        ]

    def records(self, outcome, k):
        """The records of seed `k`'s episodes, in row order (task, then episode)."""
        records = []
        for row in range(k * self.per_seed, (k + 1) * self.per_seed):
            position, episode = divmod(row - k * self.per_seed, self.episodes)
            frames = outcome.frames.get(row) if outcome.render_ok else None
            records.append(Episode(
                seed=self.seeds[k], task=self.labels[position], episode=episode,
                success=float(outcome.arrays['success'][row]), return_=float(outcome.arrays['return'][row]),
                length=int(outcome.arrays['length'][row]), final_observation=outcome.arrays['final_observation'][row],
                video=None if frames is None else np.stack(frames),
            ))
        return records


def _check_tasks(task_ids, env):
    if not task_ids:
        raise ValueError('task_ids is empty: give at least one task id or task_info dict.')
    num_tasks = getattr(env.unwrapped, 'num_tasks', None)
    valid = f'1..{num_tasks}' if num_tasks else 'positive integers'
    for task in task_ids:
        if isinstance(task, dict):
            continue
        if isinstance(task, bool) or not isinstance(task, (int, np.integer)):
            raise ValueError(f'Task {task!r} is neither a task id ({valid}) nor a task_info dict.')
        if task < 1 or (num_tasks and task > num_tasks):
            raise ValueError(f'Task id {task} is out of range: {env.spec.id} has task ids {valid}.')
    ids = [t for t in task_ids if not isinstance(t, dict)]
    if len(set(ids)) < len(ids):
        raise ValueError(f'task_ids {ids} repeat a task: each task is reported once, so give it once.')


def _run_batch(policy_fn, stepper, plan, rows, max_steps, frame_skip, bar, cancel=None):
    """The episodes of `rows`, started together and stepped with one batched policy call per step."""
    if hasattr(policy_fn, 'reset'):  # acting state (e.g. hierarchical re-planning) restarts with the episodes
        policy_fn.reset()
    observations, goals = stepper.start(
        [plan.tasks[r] for r in rows], [plan.episode_seeds[r] for r in rows], [plan.record[r] for r in rows],
        max_steps, frame_skip,
    )
    live = len(rows)
    while live:
        if cancel is not None and cancel.is_set():
            raise EvaluationCancelled()
        observations = stepper.step(np.asarray(policy_fn(observations, goals)))
        still_live = int(stepper.live.sum())
        bar.update(live - still_live)
        live = still_live
    return stepper.results()


class _Outcome:
    """Per-row results of an evaluation, filled batch by batch."""

    def __init__(self, num_rows):
        self.num_rows = num_rows
        self.arrays = None
        self.frames = {}
        self.render_ok = True

    def record(self, rows, results):
        if self.arrays is None:
            self.arrays = {
                key: np.zeros((self.num_rows,) + results[key].shape[1:], results[key].dtype)
                for key in ('success', 'return', 'length', 'final_observation')
            }
        for key, values in self.arrays.items():
            values[rows] = results[key]
        self.frames.update((r, frames) for r, frames in zip(rows, results['frames']) if frames is not None)
        self.render_ok = self.render_ok and results['render_ok']
