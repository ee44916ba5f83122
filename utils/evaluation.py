"""OGBench goal-reaching evaluation, with the episodes of a task run in lockstep.

In lockstep mode the `episodes_per_task` episodes of a task live in as many env copies and share one batched policy
call per step, which amortises the per-call cost of a jitted policy (dispatch, host<->device copies) over the batch.
With an `EnvWorkers` pool (`make_eval_envs(..., num_workers=N)`; main.py's default: N = the usable cores)
the physics steps of those episodes run in N processes (this one and N - 1 workers), and the one batched policy
call per step stays here.

Randomness. An OGBench maze episode draws from three generators:
  * `env.np_random` (gymnasium): qpos/qvel reset noise; seeded by `env.reset(seed=...)`;
  * `env.action_space`'s own generator: the random "stabilising" actions inside the maze reset. They leave the
    ant/humanoid joints where the goal observation is read, and `reset(seed=...)` does not seed them;
  * the global `np.random`: the init/goal xy noise of the maze reset and, in the teleport maze, the choice of exit at
    every teleport, which happens inside `step`.
Episode j of task t gets a seed derived from (seed, t, j) that seeds all three right before its reset; in the
teleport maze the global generator is also re-seeded from (episode seed, step index) before each step. That makes
an episode's draws independent of how episodes are interleaved (and of which process steps them), so lockstep,
parallel lockstep and sequential evaluation produce identical episodes in every maze, teleport included,
provided the policy gives a row the same action whatever the batch size. Jitted policies need not: XLA fuses (and
may contract into FMAs, or turn a division into a reciprocal-multiply) differently per batch size, so a row's action
can change in the last bit, after which the two trajectories drift apart; outcomes then agree statistically, not
bitwise. Parallel lockstep hands the policy exactly the batches in-process lockstep does, so those two agree
bitwise for any policy. The caller's global `np.random` state is restored on return.
"""

import io
import math
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import traceback
import warnings
import weakref

import gymnasium
import numpy as np
import ogbench  # noqa: F401  (registers the OGBench env ids with gymnasium)
from tqdm import tqdm


def usable_cpus():
    """CPU cores this process may run on: its affinity mask (which taskset and Slurm narrow), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity on macOS
        return os.cpu_count() or 1


def make_eval_envs(env_name, num_envs, num_workers=1):
    """`num_envs` copies of an OGBench env, from an env id (pointmaze-medium-v0) or a dataset name
    (pointmaze-medium-stitch-v0). Make them once and reuse them across evaluations.

    With `num_workers` > 1 (capped at `num_envs`) they are an `EnvWorkers` pool, the copies spread over this process
    and `num_workers - 1` worker processes, which `evaluate` steps in parallel; otherwise a plain list stepped here.
    """
    num_workers = min(num_workers, num_envs)
    if num_workers > 1:
        return EnvWorkers(env_name, num_envs, num_workers)
    return [_make_env(env_name) for _ in range(num_envs)]


def env_spaces(envs):
    """(observation_space, action_space) of `make_eval_envs`'s result, a list or an `EnvWorkers` pool."""
    env = envs.local_env if isinstance(envs, EnvWorkers) else envs[0]
    return env.observation_space, env.action_space


def _make_env(env_name):
    if env_name in gymnasium.registry:
        return gymnasium.make(env_name)
    return ogbench.make_env_and_datasets(env_name, env_only=True)


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
        envs: env copies from `make_eval_envs`; lockstep needs `episodes_per_task` of them, sequential one. Given an
            `EnvWorkers` pool, lockstep episodes are stepped by its processes in parallel, with the same
            single batched policy call per step in this process, so the episodes are identical to in-process
            lockstep ones (the policy sees the very same batches).
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
    workers = envs if isinstance(envs, EnvWorkers) else None
    if lockstep:
        stepper = workers or _LockstepEpisodes(envs[:episodes_per_task], renderer)
    else:
        stepper = _LockstepEpisodes([workers.local_env if workers else envs[0]], renderer)
    caller_rng_state = np.random.get_state()
    try:
        results = {}
        frames = []
        render_ok = True
        for position, task in enumerate(tqdm(task_ids, desc='evaluation', disable=not progress)):
            task_id = f'info{position}' if isinstance(task, dict) else task
            # 2**32 + position: seed entropy that no integer task id (all below 2**32) can collide with.
            seed_key = 2**32 + position if isinstance(task, dict) else task
            seeds = [_episode_seed(seed, seed_key, j) for j in range(episodes_per_task)]
            record = [j < num_video_episodes for j in range(episodes_per_task)]
            if lockstep:
                batches = [(seeds, record)]
            else:
                batches = [([s], [r]) for s, r in zip(seeds, record)]
            runs = [
                _run_episodes(policy_fn, stepper, task, batch_seeds, batch_record, max_steps, video_frame_skip)
                for batch_seeds, batch_record in batches
            ]
            results[task_id] = {
                key: np.concatenate([run[key] for run in runs]) for key in runs[0] if key not in ('frames', 'render_ok')
            }
            frames += [f for run in runs for f in run['frames']]
            render_ok = render_ok and all(run['render_ok'] for run in runs)
    except BaseException:
        if workers is not None:
            workers.close()  # a worker may be mid-episode: the pool cannot be trusted with another evaluation
        raise
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
        metrics['videos'] = [np.stack(f) for f in frames] if render_ok else []
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


def _run_episodes(policy_fn, stepper, task, seeds, record, max_steps, frame_skip):
    """One episode per seed, all started together and stepped with one batched policy call per step. `task` is an
    OGBench task id or a `task_info` dict; `stepper` is a `_LockstepEpisodes` or an `EnvWorkers` pool."""
    if hasattr(policy_fn, 'reset'):  # acting state (e.g. hierarchical re-planning) restarts with the episodes
        policy_fn.reset()
    observations, goals = stepper.start(task, seeds, record, max_steps, frame_skip)
    while stepper.live.any():
        observations = stepper.step(np.asarray(policy_fn(observations, goals)))
    return stepper.results()


class _LockstepEpisodes:
    """The bookkeeping of episodes that advance together, one per env: resets with per-episode seeds, clipped
    steps of the live ones, success read at each episode's last step. Evaluation in this process and every
    `EnvWorkers` process run this same code, which is what makes their episodes identical."""

    def __init__(self, envs, renderer):
        self.envs = envs
        # Step the raw envs and count the time limit here: the gymnasium wrappers cost ~20% of a pointmaze step.
        self.raw_envs = [env.unwrapped for env in envs]
        self.low, self.high = envs[0].action_space.low, envs[0].action_space.high
        self.renderer = renderer
        # Only the teleport maze draws from the global np.random inside `step`; re-seeding costs ~15 us per step.
        self.reseed_each_step = getattr(self.raw_envs[0], '_teleport_info', None) is not None

    def start(self, task, seeds, record, max_steps, frame_skip):
        """Reset the first len(seeds) envs to their episodes of `task`; returns (observations, goals)."""
        n = len(seeds)
        if n > len(self.envs):
            raise ValueError(f'{n} episodes need {n} envs, got {len(self.envs)}.')
        options = dict(task_info=task) if isinstance(task, dict) else dict(task_id=task)
        first_steps = []
        for env, episode_seed in zip(self.envs, seeds):
            np.random.seed(episode_seed)
            env.action_space.seed(episode_seed)
            first_steps.append(env.reset(seed=episode_seed, options=dict(options, render_goal=False)))
        self.seeds = list(seeds)
        self.observations = np.stack([ob for ob, _ in first_steps])
        goals = np.stack([info['goal'] for _, info in first_steps])
        self.frames = [[self.renderer(env)] if rec else None for env, rec in zip(self.envs, record)]
        self.success = np.zeros(n)
        self.returns = np.zeros(n)
        self.lengths = np.zeros(n, dtype=np.int64)
        self.live = np.ones(n, dtype=bool)
        self.limit = max_steps or self.envs[0].spec.max_episode_steps
        self.frame_skip = frame_skip
        return self.observations, goals

    def step(self, actions):
        """Advance every live episode by its row of `actions` (rows of finished episodes are ignored); returns the
        observations, finished episodes' rows frozen at their last observation."""
        actions = np.clip(actions, self.low, self.high)
        for i in np.flatnonzero(self.live):
            if self.reseed_each_step:
                np.random.seed((self.seeds[i] + self.lengths[i]) % 2**32)
            ob, reward, terminated, _, info = self.raw_envs[i].step(actions[i])
            self.observations[i] = ob
            self.returns[i] += reward
            self.lengths[i] += 1
            done = terminated or self.lengths[i] >= self.limit
            if self.frames[i] is not None and (done or self.lengths[i] % self.frame_skip == 0):
                self.frames[i].append(self.renderer(self.envs[i]))
            if done:
                self.live[i] = False
                self.success[i] = info['success']
        return self.observations

    def results(self):
        return {
            'success': self.success,
            'return': self.returns,
            'length': self.lengths,
            'final_observation': self.observations,
            'frames': [f for f in self.frames if f is not None],
            'render_ok': self.renderer.ok,
        }


class EnvWorkers:
    """`num_envs` copies of an env stepped by `num_workers` processes in parallel: this one and `num_workers - 1`
    worker processes.

    Evaluation is bound by physics (one MuJoCo step per episode per step, in Python), so one core does it all while
    the others idle. A pool splits the episodes of a task into contiguous slices, one per process; every step this
    process makes the one batched policy call for all episodes, sends each worker its rows of actions, steps its own
    (last) slice meanwhile, and gathers the workers' observations back. Workers are separate interpreters started once
    (`python -m utils.evaluation`, which imports no JAX) and reused by every evaluation; they stop when `close()` is
    called, when this object is garbage-collected, at interpreter exit, or on their own when this process dies (their
    socket closes). They ignore SIGINT/SIGTERM, so a preemption signal sent to the whole process group lets the
    running evaluation finish before main.py checkpoints and exits.

    Every step is a hand-off between processes, so on an oversubscribed machine (more busy processes than cores) the
    waits for the scheduler can cost more than the parallel stepping saves; evaluate in-process there.
    """

    def __init__(self, env_name, num_envs, num_workers):
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f'EnvWorkers needs 1 <= num_workers <= num_envs, got {num_workers} and {num_envs}.')
        self.env_name, self.num_envs, self.num_workers = env_name, num_envs, num_workers
        counts = _split(num_envs, num_workers)
        self._processes, self._connections = [], []
        self._finalizer = weakref.finalize(self, _stop_workers, self._processes, self._connections)
        for count in counts[:-1]:
            process, connection = _start_worker()
            self._processes.append(process)
            self._connections.append(connection)
            connection.send(('make', env_name, count))  # workers build their envs while this process goes on
        self._local = _LockstepEpisodes([_make_env(env_name) for _ in range(counts[-1])], _Renderer())
        # Spaces and spec for the caller; also the env of sequential (batch-1) evaluation.
        self.local_env = self._local.envs[0]
        self.observation_space, self.action_space = self.local_env.observation_space, self.local_env.action_space
        self.spec = self.local_env.spec
        self.live = np.zeros(0, dtype=bool)

    def __len__(self):
        return self.num_envs

    def close(self):
        """Stop the workers (idempotent)."""
        self._finalizer()

    @property
    def closed(self):
        return not self._finalizer.alive

    def start(self, task, seeds, record, max_steps, frame_skip):
        if self.closed:
            raise RuntimeError('This EnvWorkers pool is closed (stopped, or broken by an earlier error); make a new one.')
        sizes = _split(len(seeds), self.num_workers)
        bounds = np.cumsum([0] + sizes)
        self._slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]  # the last one is this process's
        self._remote = [w for w in range(self.num_workers - 1) if sizes[w] > 0]
        self._local_rows = self._slices[-1] if sizes[-1] > 0 else None
        for w in self._remote:
            rows = self._slices[w]
            self._send(w, ('start', task, seeds[rows], record[rows], max_steps, frame_skip))
        local = []
        if self._local_rows is not None:
            rows = self._local_rows
            local = [self._local.start(task, seeds[rows], record[rows], max_steps, frame_skip)]
        replies = [self._receive(w) for w in self._remote] + local
        self.observations = np.concatenate([observations for observations, _ in replies])
        self.live = np.ones(len(seeds), dtype=bool)
        return self.observations, np.concatenate([goals for _, goals in replies])

    def step(self, actions):
        busy = [w for w in self._remote if self.live[self._slices[w]].any()]
        for w in busy:
            self._send(w, ('step', actions[self._slices[w]]))
        rows = self._local_rows
        if rows is not None and self.live[rows].any():
            self.observations[rows] = self._local.step(actions[rows])
            self.live[rows] = self._local.live
        for w in busy:
            self.observations[self._slices[w]], self.live[self._slices[w]] = self._receive(w)
        return self.observations

    def results(self):
        for w in self._remote:
            self._send(w, ('results',))
        parts = [self._receive(w) for w in self._remote]
        if self._local_rows is not None:
            parts.append(self._local.results())
        merged = {key: np.concatenate([p[key] for p in parts]) for key in ('success', 'return', 'length')}
        merged['final_observation'] = self.observations.copy()
        merged['frames'] = [f for p in parts for f in p['frames']]
        merged['render_ok'] = all(p['render_ok'] for p in parts)
        return merged

    def _send(self, w, message):
        try:
            self._connections[w].send(message)
        except OSError:
            self._died(w)

    def _receive(self, w):
        try:
            reply = self._connections[w].recv()
        except (EOFError, OSError):
            self._died(w)
        ok, payload = reply
        if not ok:
            self.close()
            raise RuntimeError(f'Evaluation worker {w} of {self.env_name} failed:\n{payload}')
        return payload

    def _died(self, w):
        try:
            code = self._processes[w].wait(timeout=5)
        except subprocess.TimeoutExpired:  # alive, but its socket is broken
            code = None
        self.close()
        raise RuntimeError(
            f'Evaluation worker {w} of {self.env_name} died (exit code {code}); see its output above. Rerun, or '
            f'evaluate in-process with --eval_workers=1.'
        ) from None


def _split(total, parts):
    """`total` items in `parts` contiguous chunks whose sizes differ by at most one."""
    return [total // parts + (k < total % parts) for k in range(parts)]


def _start_worker():
    parent_socket, child_socket = socket.socketpair()
    fd = child_socket.fileno()
    # The package root on the path, so the worker imports this same code even where it is not pip-installed.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get('PYTHONPATH')])))
    process = subprocess.Popen(
        [sys.executable, '-m', 'utils.evaluation', str(fd)], pass_fds=(fd,), stdin=subprocess.DEVNULL, env=env
    )
    child_socket.close()
    return process, multiprocessing.connection.Connection(parent_socket.detach())


def _stop_workers(processes, connections):
    for connection in connections:
        try:
            connection.send(('close',))
        except OSError:
            pass  # already gone
        connection.close()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _worker_loop(fd):
    """A worker's life: build its envs, then answer start / step / results requests until told to close or until
    the main process goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    connection = multiprocessing.connection.Connection(fd)
    episodes = None
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return  # the main process closed the socket or died
        kind, args = request[0], request[1:]
        if kind == 'close':
            return
        try:
            if kind == 'make':
                env_name, count = args
                episodes = _LockstepEpisodes([_make_env(env_name) for _ in range(count)], _Renderer())
                continue  # no reply: the first 'start' waits for the envs anyway
            # Replies are (True, result) or (False, traceback): plain tuples, since this module is __main__ here.
            if kind == 'start':
                reply = True, episodes.start(*args)
            elif kind == 'step':
                reply = True, (episodes.step(*args), episodes.live)
            else:
                reply = True, episodes.results()
        except Exception:
            reply = False, traceback.format_exc()
        try:
            connection.send(reply)
        except (EOFError, OSError):
            return


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


if __name__ == '__main__':  # an EnvWorkers process: python -m utils.evaluation <socket fd>
    _worker_loop(int(sys.argv[1]))


class FrameStackPolicy:
    """`policy_fn` on frame-stacked inputs: each step it sees the channel-wise stack of the last `frame_stack`
    observations of every episode (the first observation repeated at an episode's start, as the training sampler
    stacks frames before an episode's first row) and the goal repeated `frame_stack` times. `evaluate` resets it
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
