"""OGBench goal-reaching evaluation, with the episodes of a task run in lockstep.

In lockstep mode the `episodes_per_task` episodes of a task live in as many env copies and share one batched policy
call per step, which amortises the per-call cost of a jitted policy (dispatch, host<->device copies) over the batch.

Randomness. An OGBench maze episode draws from three generators:
  * `env.np_random` (gymnasium): qpos/qvel reset noise; seeded by `env.reset(seed=...)`;
  * `env.action_space`'s own generator: the random "stabilising" actions inside the maze reset. They leave the
    ant/humanoid joints where the goal observation is read, and `reset(seed=...)` does not seed them;
  * the global `np.random`: the init/goal xy noise of the maze reset and, in the teleport maze, the choice of exit at
    every teleport, which happens inside `step`.
Episode j of task t gets a seed derived from (seed, t, j) that seeds all three right before its reset; in the
teleport maze the global generator is also re-seeded from (episode seed, step index) before each step. That makes
an episode's draws independent of how episodes are interleaved, so lockstep and sequential evaluation produce identical episodes in every maze, teleport included,
provided the policy gives a row the same action whatever the batch size. Jitted policies need not: XLA fuses (and
may contract into FMAs, or turn a division into a reciprocal-multiply) differently per batch size, so a row's action
can change in the last bit, after which the two trajectories drift apart; outcomes then agree statistically, not
bitwise. The caller's global `np.random` state is restored on return.
"""

import io
import math
import warnings

import gymnasium
import numpy as np
import ogbench  # noqa: F401  (registers the OGBench env ids with gymnasium)
from tqdm import tqdm


def make_eval_envs(env_name, num_envs):
    """`num_envs` copies of an OGBench env, from an env id (pointmaze-medium-v0) or a dataset name
    (pointmaze-medium-stitch-v0). Make them once and reuse them across evaluations."""
    if env_name in gymnasium.registry:
        return [gymnasium.make(env_name) for _ in range(num_envs)]
    return [ogbench.make_env_and_datasets(env_name, env_only=True) for _ in range(num_envs)]


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
    """Run `episodes_per_task` episodes of every task and report success rates.

    Args:
        policy_fn: deterministic batched policy, `(observations [B, ...], goals [B, ...]) -> actions [B, action_dim]`.
            In lockstep mode B is always `episodes_per_task`: rows of finished episodes are kept (frozen at their
            last observation) and their actions ignored, so a jitted policy compiles for one batch size only. A
            policy with a `reset()` method (acting state) is reset whenever a new set of episodes starts.
        envs: env copies from `make_eval_envs`; lockstep needs `episodes_per_task` of them, sequential one.
        task_ids: OGBench task ids (1..5), each of which may instead be a task given as a dict the env's reset
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
    num_envs_needed = episodes_per_task if lockstep else 1
    if len(envs) < num_envs_needed:
        raise ValueError(
            f'{"Lockstep" if lockstep else "Sequential"} evaluation of {episodes_per_task} episodes per task needs at '
            f'least {num_envs_needed} envs, got {len(envs)}; make them with make_eval_envs(env_name, '
            f'{num_envs_needed}).'
        )
    renderer = _Renderer()
    caller_rng_state = np.random.get_state()
    try:
        results = {}
        frames = []
        for position, task in enumerate(tqdm(task_ids, desc='evaluation', disable=not progress)):
            task_id = f'info{position}' if isinstance(task, dict) else task
            # 2**32 + position: seed entropy that no integer task id (all below 2**32) can collide with.
            seed_key = 2**32 + position if isinstance(task, dict) else task
            seeds = [_episode_seed(seed, seed_key, j) for j in range(episodes_per_task)]
            record = [j < num_video_episodes for j in range(episodes_per_task)]
            if lockstep:
                batches = [(envs[:episodes_per_task], seeds, record)]
            else:
                batches = [([envs[0]], [s], [r]) for s, r in zip(seeds, record)]
            runs = [
                _run_episodes(policy_fn, batch_envs, task, batch_seeds, max_steps, batch_record, renderer,
                              video_frame_skip)
                for batch_envs, batch_seeds, batch_record in batches
            ]
            results[task_id] = {key: np.concatenate([run[key] for run in runs]) for key in runs[0] if key != 'frames'}
            frames += [f for run in runs for f in run['frames']]
    finally:
        np.random.set_state(caller_rng_state)

    task_success = {t: float(r['success'].mean()) for t, r in results.items()}
    metrics = {f'evaluation/task{t}_success': s for t, s in task_success.items()}
    metrics['evaluation/overall_success'] = float(np.mean(list(task_success.values())))
    metrics['evaluation/overall_return'] = float(np.mean([r['return'] for r in results.values()]))
    metrics['evaluation/overall_length'] = float(np.mean([r['length'] for r in results.values()]))
    metrics['per_episode'] = {t: r['success'] for t, r in results.items()}
    metrics['final_observations'] = {t: r['final_observation'] for t, r in results.items()}
    if num_video_episodes > 0:
        metrics['videos'] = [np.stack(f) for f in frames] if renderer.ok else []
    return metrics


def _episode_seed(seed, task_id, episode):
    return int(np.random.SeedSequence([seed, task_id, episode]).generate_state(1)[0])


class _Renderer:
    """`env.render()` that, on its first failure, warns once and stays off, so a missing GL backend costs the
    videos and not the evaluation."""

    def __init__(self):
        self.ok = True

    def __call__(self, env):
        if not self.ok:
            return None
        try:
            return env.render()
        except Exception as e:  # MuJoCo raises a variety of GL errors depending on the backend.
            warnings.warn(
                f'env.render() failed ({type(e).__name__}: {e}); evaluating without videos. Headless MuJoCo '
                'rendering needs MUJOCO_GL=egl set before mujoco is imported.'
            )
            self.ok = False
            return None


def _run_episodes(policy_fn, envs, task, seeds, max_steps, record, renderer, frame_skip):
    """One episode per env, all started together and stepped with one batched policy call per step. `task` is an
    OGBench task id or a `task_info` dict."""
    if hasattr(policy_fn, 'reset'):  # acting state (e.g. hierarchical re-planning) restarts with the episodes
        policy_fn.reset()
    options = dict(task_info=task) if isinstance(task, dict) else dict(task_id=task)
    first_steps = []
    for env, episode_seed in zip(envs, seeds):
        np.random.seed(episode_seed)
        env.action_space.seed(episode_seed)
        first_steps.append(env.reset(seed=episode_seed, options=dict(options, render_goal=False)))
    observations = np.stack([ob for ob, _ in first_steps])
    goals = np.stack([info['goal'] for _, info in first_steps])
    frames = [[renderer(env)] if rec else None for env, rec in zip(envs, record)]

    n = len(envs)
    success = np.zeros(n)
    returns = np.zeros(n)
    lengths = np.zeros(n, dtype=np.int64)
    live = np.ones(n, dtype=bool)
    low, high = envs[0].action_space.low, envs[0].action_space.high
    # Step the raw envs and count the time limit here: the gymnasium wrappers cost ~20% of a pointmaze step.
    limit = max_steps or envs[0].spec.max_episode_steps
    raw_envs = [env.unwrapped for env in envs]
    # Only the teleport maze draws from the global np.random inside `step`; re-seeding costs ~15 us per step.
    reseed_each_step = getattr(raw_envs[0], '_teleport_info', None) is not None
    while live.any():
        actions = np.clip(np.asarray(policy_fn(observations, goals)), low, high)
        for i in np.flatnonzero(live):
            if reseed_each_step:
                np.random.seed((seeds[i] + lengths[i]) % 2**32)
            ob, reward, terminated, _, info = raw_envs[i].step(actions[i])
            observations[i] = ob
            returns[i] += reward
            lengths[i] += 1
            done = terminated or lengths[i] >= limit
            if frames[i] is not None and (done or lengths[i] % frame_skip == 0):
                frames[i].append(renderer(envs[i]))
            if done:
                live[i] = False
                success[i] = info['success']
    return {
        'success': success,
        'return': returns,
        'length': lengths,
        'final_observation': observations,
        'frames': [f for f in frames if f is not None],
    }


def tile_videos(videos, n_cols=None):
    """Tile videos of equal frame size into one [T, H * rows, W * cols, 3] video; shorter ones hold their last
    frame, empty cells are black."""
    n_cols = n_cols or math.ceil(math.sqrt(len(videos)))
    n_rows = math.ceil(len(videos) / n_cols)
    length = max(len(v) for v in videos)
    cells = [np.concatenate([v, np.repeat(v[-1:], length - len(v), axis=0)]) for v in videos]
    cells += [np.zeros_like(cells[0])] * (n_rows * n_cols - len(cells))
    rows = [np.concatenate(cells[r * n_cols:(r + 1) * n_cols], axis=2) for r in range(n_rows)]
    return np.concatenate(rows, axis=1)


def videos_to_wandb(videos, fps=15):
    """One wandb.Video (GIF) tiling `videos`. Encoded here with imageio/Pillow because wandb's own encoder for raw
    arrays needs moviepy, which is not a dependency."""
    import imageio.v3 as iio
    import wandb

    buffer = io.BytesIO()
    iio.imwrite(buffer, tile_videos(videos), extension='.gif', duration=1000 / fps, loop=0)
    buffer.seek(0)
    return wandb.Video(buffer, format='gif')


def pointmaze_oracle_policy(env):
    """Batched BFS oracle for point mazes (observations and goals are xy): a unit vector toward the subgoal of
    OGBench's `get_oracle_subgoal` (the scripted expert behind the pointmaze datasets; tabulated by
    `utils.datagen.pointmaze.MazeOracle`), and toward the goal itself once in the goal's cell (the goal carries up to
    a quarter cell of noise per axis and the success radius is a quarter cell).

    It is plain numpy on purpose: numpy applies the same IEEE operations to a row whatever the batch size, so its
    actions (and the evaluation's episodes) are bitwise independent of lockstep batching, which jitted XLA code does
    not promise.
    """
    from utils.maze import MazeOracle

    if env.observation_space.shape != (2,):
        raise ValueError(f'pointmaze_oracle_policy needs xy observations, got shape {env.observation_space.shape}.')
    oracle = MazeOracle(env)

    def policy(observations, goals):
        agent_cells = np.array([oracle.cell(xy) for xy in observations])
        goal_cells = np.array([oracle.cell(xy) for xy in goals])
        subgoals = oracle.subgoal_xy[goal_cells[:, 0], goal_cells[:, 1], agent_cells[:, 0], agent_cells[:, 1]]
        in_goal_cell = np.all(agent_cells == goal_cells, axis=1)[:, None]
        direction = np.where(in_goal_cell, goals, subgoals) - observations
        return direction / np.maximum(np.linalg.norm(direction, axis=-1, keepdims=True), 1e-6)

    return policy
