"""OGBench goal-reaching evaluation: every episode of every (seed, task) in one lockstep batch.

An evaluation of N seeds x T tasks x E episodes per task is one batch of N * T * E rows, ordered seed-major (row
k * T * E + t * E + j is episode j of the t-th task for the k-th seed). All episodes start together and advance
together, with one policy call per step over all rows: that amortises the per-call cost of a jitted policy
(dispatch, host<->device copies) over the whole batch, and lets a policy for N seeds run the N agents as one vmapped
call (`utils.evaluation.policies.seeds_policy`). Rows of finished episodes stay in the batch, frozen at their last
observation, and their actions are ignored, so a jitted policy compiles for one batch size only.

What steps the episodes (`make_eval_envs`): a native pool (`native.py`: one MuJoCo state per episode, stepped by
threads) holds any number of rows, of which at most MAX_ROWS_PER_BATCH step together (about 220 KB of memory each). The gym paths (a list of envs stepped here, or an `EnvWorkers` pool of processes)
hold one env per row; given fewer envs than rows, the evaluation runs in waves: the per-seed rows are cut into
blocks of at most len(envs) // N, and each wave runs one block of every seed (still seed-major, so a seeds policy
sees N equal slices). Stateful policies are reset at the start of every wave.

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

import numpy as np

from utils.evaluation.envs import one_env
from utils.evaluation.videos import Renderer
from utils.progress import progress_bar

# Episodes stepped together at most; an evaluation with more rows runs in successive batches of this size.
MAX_ROWS_PER_BATCH = 4096


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
    """Run `episodes_per_task` episodes of every task and report success rates: `evaluate_seeds` for one seed.

    Args:
        policy_fn: deterministic batched policy, `(observations [B, ...], goals [B, ...]) -> actions [B, action_dim]`.
            A policy with a `reset()` method (acting state) is reset whenever a new batch of episodes starts.
        envs: from `make_eval_envs` (or a list of gym envs, stepped here).
        task_ids: OGBench task ids (1..num_tasks), each of which may instead be a task given as a dict the env's reset
            accepts as `options['task_info']` (mazes: `dict(init_ij=..., goal_ij=...)`); the k-th entry of `task_ids`
            given that way is reported as task `info{k}` (`evaluation/taskinfo{k}_success`, `per_episode['info{k}']`).
        lockstep: if False, run one episode at a time with batch-1 calls (same seeds, same episodes).
        max_steps: episode length cap that replaces the env's own time limit (`env.spec.max_episode_steps`).
        num_video_episodes: render the first this many episodes of each task, one frame every `video_frame_skip`
            steps plus the first and last frames. Headless MuJoCo rendering needs MUJOCO_GL=egl; if rendering fails
            the evaluation warns and goes on without videos.

    Returns:
        `evaluation/overall_success`, `evaluation/task{t}_success`, `evaluation/overall_return` and
        `evaluation/overall_length` (means over episodes), `per_episode` {task_id: 0/1 success per episode},
        `final_observations` {task_id: [episodes, ...]}, and `videos` (list of uint8 [T, H, W, 3]) when requested.
    """
    (metrics,) = evaluate_seeds(
        policy_fn, envs, [seed], task_ids, episodes_per_task, lockstep, max_steps, num_video_episodes,
        video_frame_skip, progress,
    )
    return metrics


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
    `seeds` (R = rows per seed in the batch). Other arguments as in `evaluate`; `cancel`, a threading.Event, ends the
    evaluation with EvaluationCancelled at the next environment step once it is set. Returns one metrics dict per
    seed, each exactly what `evaluate(..., seed=seeds[k])` returns for a policy whose rows do not depend on the batch.
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
    return [plan.metrics(outcome, k, num_video_episodes > 0) for k in range(len(plan.seeds))]


def episode_seed(seed, task_key, episode):
    """The seed of episode `episode` of the task keyed `task_key` under evaluation seed `seed`."""
    return int(np.random.SeedSequence([seed, task_key, episode]).generate_state(1)[0])


def reset_episode(env, task, seed):
    """Reset `env` to the episode of `task` (a task id or a `task_info` dict) with episode seed `seed`, seeding the
    three generators a maze episode draws from (module docstring). Returns (observation, info)."""
    np.random.seed(seed)
    env.action_space.seed(seed)
    options = dict(task_info=task) if isinstance(task, dict) else dict(task_id=task)
    return env.reset(seed=seed, options=dict(options, render_goal=False))


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

    def metrics(self, outcome, k, with_videos):
        """Seed `k`'s metrics, as a one-seed evaluation reports them."""
        results = {}
        for position, label in enumerate(self.labels):
            rows = slice(k * self.per_seed + position * self.episodes, k * self.per_seed + (position + 1) * self.episodes)
            results[label] = {key: values[rows] for key, values in outcome.arrays.items()}
        task_success = {t: float(r['success'].mean()) for t, r in results.items()}
        metrics = {f'evaluation/task{t}_success': s for t, s in task_success.items()}
        metrics['evaluation/overall_success'] = float(np.mean(list(task_success.values())))
        metrics['evaluation/overall_return'] = float(np.mean([r['return'] for r in results.values()]))
        metrics['evaluation/overall_length'] = float(np.mean([r['length'] for r in results.values()]))
        metrics['per_episode'] = {t: r['success'] for t, r in results.items()}
        metrics['final_observations'] = {t: r['final_observation'] for t, r in results.items()}
        if with_videos:
            seed_rows = range(k * self.per_seed, (k + 1) * self.per_seed)
            frames = [outcome.frames[r] for r in seed_rows if r in outcome.frames]
            metrics['videos'] = [np.stack(f) for f in frames] if outcome.render_ok else []
        return metrics


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


class EpisodeBatch:
    """What every stepper of a lockstep batch keeps per episode row and reports back: `start` calls `_begin`, `step`
    advances the live rows' envs and hands each step's outcome to `_end_step`, the one rule of an episode's end and
    success for every stepper; `results` returns them (the contract `_run_batch` and the worker processes read)."""

    def _begin(self, n, frames, limit, frame_skip):
        self.frames = frames
        self.success = np.zeros(n)
        self.returns = np.zeros(n)
        self.lengths = np.zeros(n, dtype=np.int64)
        self.live = np.ones(n, dtype=bool)
        self.limit, self.frame_skip = limit, frame_skip

    def _end_step(self, rows, rewards, terminated, success, render):
        """The step just taken by live `rows`: each adds its reward and one step; an episode ends when its env
        terminates it or at the time limit, and its success is its last step's. A recorded episode gets a frame
        (`render(row)`) every `frame_skip` steps and at its end."""
        self.returns[rows] += rewards
        self.lengths[rows] += 1
        done = np.asarray(terminated, dtype=bool) | (self.lengths[rows] >= self.limit)
        for i, finished in zip(rows, done):
            if self.frames[i] is not None and (finished or self.lengths[i] % self.frame_skip == 0):
                self.frames[i].append(render(i))
        finished = rows[done]
        self.success[finished] = np.asarray(success, dtype=np.float64)[done]
        self.live[finished] = False

    def results(self):
        return {
            'success': self.success,
            'return': self.returns,
            'length': self.lengths,
            'final_observation': self.observations,
            'frames': self.frames,
            'render_ok': self.renderer.ok,
        }


class GymEpisodes(EpisodeBatch):
    """The bookkeeping of episodes that advance together through gym envs, one per env: resets with per-episode
    seeds, clipped steps of the live ones, success read at each episode's last step. Evaluation in this process and
    every `EnvWorkers` process run this same code, which is what makes their episodes identical."""

    def __init__(self, envs, renderer=None):
        self.envs = envs
        self.capacity = len(envs)
        # Step the raw envs and count the time limit here: the gymnasium wrappers cost a sizeable part of a step.
        self.raw_envs = [env.unwrapped for env in envs]
        self.low, self.high = envs[0].action_space.low, envs[0].action_space.high
        self.renderer = renderer or Renderer()
        # Only the teleport maze draws from the global np.random inside `step`; re-seeding everywhere would cost.
        self.reseed_each_step = getattr(self.raw_envs[0], '_teleport_info', None) is not None
        self.live = np.zeros(0, dtype=bool)

    def start(self, tasks, seeds, record, max_steps, frame_skip):
        """Reset the first len(seeds) envs to their episodes (row i: task `tasks[i]`, episode seed `seeds[i]`);
        returns (observations, goals)."""
        n = len(seeds)
        if n > len(self.envs):
            raise ValueError(f'{n} episodes need {n} envs, got {len(self.envs)}.')
        first_steps = [reset_episode(env, task, seed) for env, task, seed in zip(self.envs, tasks, seeds)]
        self.seeds = list(seeds)
        self.observations = np.stack([ob for ob, _ in first_steps])
        goals = np.stack([info['goal'] for _, info in first_steps])
        frames = [[self.renderer(env)] if rec else None for env, rec in zip(self.envs, record)]
        self._begin(n, frames, max_steps or self.envs[0].spec.max_episode_steps, frame_skip)
        return self.observations, goals

    def step(self, actions):
        """Advance every live episode by its row of `actions` (rows of finished episodes are ignored); returns the
        observations, finished episodes' rows frozen at their last observation."""
        actions = np.clip(actions, self.low, self.high)
        live = np.flatnonzero(self.live)
        rewards, terminated, success = np.zeros(len(live)), np.zeros(len(live), bool), np.zeros(len(live))
        for k, i in enumerate(live):
            if self.reseed_each_step:
                np.random.seed((self.seeds[i] + self.lengths[i]) % 2**32)
            self.observations[i], rewards[k], terminated[k], _, info = self.raw_envs[i].step(actions[i])
            success[k] = info['success']
        self._end_step(live, rewards, terminated, success, lambda i: self.renderer(self.envs[i]))
        return self.observations
