"""Native stepping of OGBench maze episodes: one MuJoCo state per episode, stepped by a pool of threads.

Evaluation is bound by physics, and `mujoco.mj_step` releases the GIL, so threads of this process can step
different episodes' `MjData` at the same time: parallel stepping without the per-step hand-off between processes of
an `EnvWorkers` pool, and without the gym env's per-step Python around the physics.

Every episode stays the gym env's episode, step for step. The env still does each reset (task set-up and the seeding
of `episodes.reset_episode`), and `mj_copyData` hands the whole post-reset state (qpos, qvel, time, the solver's warm
start, ...) to the episode's own `MjData`. A step then does to that data exactly what the env's `step` does to its
own:
  * point: qpos += 0.2 * action, qvel = 0, then `frame_skip` mj_steps; observation qpos;
  * ant: ctrl = action, `frame_skip` mj_steps and mj_rnePostConstraint (gymnasium's MujocoEnv); observation
    (qpos, qvel);
  * humanoid: ctrl = action, mj_step2, `frame_skip - 1` mj_steps, mj_step1 (OGBench's DMC-style step, mj_step
    alone under RK4); observation: the env's own `get_ob`, read from the episode's data;
then the maze's bookkeeping: success when |xy - goal xy| <= the goal tolerance after the step (OGBench's 'post'
timing), reward 1 on success and 0 otherwise, and the episode ends on success if the env terminates at the goal,
else at the time limit. Actions are clipped to the action space first, as on the gym path. `mujoco.rollout` would
parallelise too, but it starts each rollout's solver from qacc = 0 instead of the episode's warm start, so its
trajectories are not the env's.

`why_not(env)` says why an env is stepped the gym way instead: anything but the point/ant/humanoid maze itself
(antsoccer's ball maze, manipulation, ...), pixel observations, the teleport maze (its step draws the exit from the
global np.random), 'pre' success timing, and the single-task reward mode.
"""

import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np
from ogbench.locomaze.ant import AntEnv
from ogbench.locomaze.humanoid import HumanoidEnv
from ogbench.locomaze.point import PointEnv

from utils.evaluation.episodes import reset_episode
from utils.evaluation.videos import Renderer


def why_not(env):
    """Why `env` cannot be stepped natively, or None if it can."""
    raw = env.unwrapped
    if type(raw).__name__ != 'MazeEnv' or not isinstance(raw, (PointEnv, AntEnv, HumanoidEnv)):
        return f'{type(raw).__name__} is not an OGBench point, ant or humanoid maze'
    if raw._ob_type != 'states':
        return f'{raw._ob_type} observations are rendered, not read from the physics state'
    if raw._teleport_info is not None:
        return 'the teleport maze draws its exits from the global np.random inside step'
    if raw._success_timing != 'post':
        return f"success timing {raw._success_timing!r} (only 'post' is ported)"
    if raw._reward_task_id is not None:
        return 'single-task reward mode (only goal-conditioned rewards are ported)'
    return None


def supports(env):
    """Whether `make_eval_envs` steps `env` natively."""
    return why_not(env) is None


class NativeEpisodes:
    """Episodes of one maze env, each on its own `MjData`, advanced together by `num_threads` threads (this one and
    `num_threads - 1` pool threads). It holds any number of episodes (`capacity` None): their states are made on
    demand and kept for the next evaluation. The env itself does the resets and renders the video frames."""

    def __init__(self, env, num_threads=1):
        reason = why_not(env)
        if reason is not None:
            raise ValueError(f'{env.spec.id} cannot be stepped natively: {reason}.')
        if num_threads < 1:
            raise ValueError(f'num_threads must be >= 1, got {num_threads}.')
        self.local_env = env
        self.observation_space, self.action_space, self.spec = env.observation_space, env.action_space, env.spec
        self.capacity = None
        self.num_threads = num_threads
        raw = env.unwrapped
        self._raw = raw
        self._model = raw.model
        self._physics = _physics_for(raw)
        self._low, self._high = env.action_space.low, env.action_space.high
        self._renderer = Renderer()
        self._datas = []
        self._executor = ThreadPoolExecutor(num_threads - 1, 'native-eval') if num_threads > 1 else None
        if self._executor is not None:
            weakref.finalize(self, self._executor.shutdown)
        self.live = np.zeros(0, dtype=bool)

    def start(self, tasks, seeds, record, max_steps, frame_skip):
        """Reset episode i to task `tasks[i]` with episode seed `seeds[i]`; returns (observations, goals)."""
        n = len(seeds)
        self._datas += [mujoco.MjData(self._model) for _ in range(n - len(self._datas))]
        first_steps, goal_xy, frames = [], [], []
        for i, (task, seed, rec) in enumerate(zip(tasks, seeds, record)):
            first_steps.append(reset_episode(self.local_env, task, seed))
            mujoco.mj_copyData(self._datas[i], self._model, self._raw.data)
            goal_xy.append(self._raw.cur_goal_xy)
            frames.append([self._renderer(self.local_env)] if rec else None)
        self.observations = np.stack([ob for ob, _ in first_steps])
        self._goal_xy = np.array(goal_xy, dtype=np.float64)
        self._frames = frames
        self._recorded = any(record)
        self._frame_skip = frame_skip
        self._limit = max_steps or self.spec.max_episode_steps
        self.success = np.zeros(n)
        self.returns = np.zeros(n)
        self.lengths = np.zeros(n, dtype=np.int64)
        self.live = np.ones(n, dtype=bool)
        return self.observations, np.stack([info['goal'] for _, info in first_steps])

    def step(self, actions):
        """Advance every live episode by its row of `actions` (other rows are ignored); returns the observations,
        finished episodes' rows frozen at their last observation."""
        live = np.flatnonzero(self.live)
        actions = self._physics.prepare(np.clip(actions, self._low, self._high))
        self._advance(live, actions)
        self.lengths[live] += 1
        success = self._at_goal(live)
        self.returns[live] += success
        done = (success & self._raw._terminate_at_goal) | (self.lengths[live] >= self._limit)
        self._render(live, done)
        finished = live[done]
        self.success[finished] = success[done]
        self.live[finished] = False
        return self.observations

    def results(self):
        return {
            'success': self.success,
            'return': self.returns,
            'length': self.lengths,
            'final_observation': self.observations,
            'frames': self._frames,
            'render_ok': self._renderer.ok,
        }

    def close(self):
        if self._executor is not None:
            self._executor.shutdown()

    def _advance(self, rows, actions):
        """One env step of each episode in `rows`, spread over the threads; each thread writes its own rows."""
        chunks = [chunk.tolist() for chunk in np.array_split(rows, self.num_threads) if len(chunk)]
        if not chunks:
            return
        futures = [self._executor.submit(self._advance_chunk, chunk, actions) for chunk in chunks[1:]]
        try:
            self._advance_chunk(chunks[0], actions)
        finally:  # no thread may still be stepping when this returns or raises
            errors = [future.exception() for future in futures]
        for error in errors:
            if error is not None:
                raise error

    def _advance_chunk(self, rows, actions):
        # Everything here but the physics holds the GIL, so the loop body is kept lean.
        advance, observe = self._physics.advance, self._physics.observe
        model, datas, observations = self._model, self._datas, self.observations
        for i in rows:
            data = datas[i]
            advance(model, data, actions[i])
            observe(data, observations[i])

    def _at_goal(self, rows):
        """The maze's success test, |xy - goal xy| <= tolerance, on the rows' new positions. Vectorised, then any row
        within rounding of the boundary re-tested with the env's own arithmetic (np.linalg.norm of the difference)."""
        offsets = self.observations[rows, :2] - self._goal_xy[rows]
        distances = np.sqrt(np.sum(offsets * offsets, axis=1))
        tolerance = self._raw._goal_tol
        success = distances <= tolerance
        for k in np.flatnonzero(np.abs(distances - tolerance) <= 1e-9 * tolerance):
            success[k] = np.linalg.norm(offsets[k]) <= tolerance
        return success

    def _render(self, rows, done):
        if not self._recorded:
            return
        for i, finished in zip(rows, done):
            frames = self._frames[i]
            if frames is not None and (finished or self.lengths[i] % self._frame_skip == 0):
                frames.append(self._render_episode(i))

    def _render_episode(self, i):
        """A frame of episode i, drawn by the env from the episode's own state and goal marker."""
        data = self._datas[i]
        # The marker is a world geom placed by the model, which all episodes share and the last reset moved; each
        # mj_step copied the shared position into the episode's geom_xpos. Put this episode's goal in both places
        # (a world geom's frame position is its model position, exactly) before drawing.
        self._raw.set_goal(goal_xy=tuple(self._goal_xy[i]))
        target = self._model.geom('target').id
        data.geom_xpos[target] = self._model.geom_pos[target]
        own_data = self._raw.data
        self._raw.data = data
        try:
            return self._renderer(self.local_env)
        finally:
            self._raw.data = own_data


class _Point:
    """PointEnv.step: the action moves the point directly (qpos += 0.2 * action, qvel = 0) before the physics."""

    def __init__(self, raw):
        self.frame_skip = raw.frame_skip

    @staticmethod
    def prepare(actions):
        return 0.2 * actions  # in the actions' dtype, as the env scales each row

    def advance(self, model, data, action):
        qpos = data.qpos
        qpos[:] = qpos + action
        data.qvel[:] = 0.0
        mujoco.mj_step(model, data, nstep=self.frame_skip)

    @staticmethod
    def observe(data, out):
        out[:] = data.qpos


class _Ant:
    """AntEnv.step: gymnasium's MujocoEnv.do_simulation (ctrl, mj_step, mj_rnePostConstraint)."""

    def __init__(self, raw):
        self.frame_skip = raw.frame_skip
        self.nq = raw.model.nq

    @staticmethod
    def prepare(actions):
        return actions

    def advance(self, model, data, action):
        data.ctrl[:] = action
        mujoco.mj_step(model, data, nstep=self.frame_skip)
        mujoco.mj_rnePostConstraint(model, data)

    def observe(self, data, out):
        out[:self.nq] = data.qpos
        out[self.nq:] = data.qvel


class _Humanoid:
    """HumanoidEnv.step: OGBench's DMC-style physics step; the observation is the env's own `get_ob` on the
    episode's data (it reads body frames and sensors, so it is not re-derived here)."""

    def __init__(self, raw):
        self.frame_skip = raw.frame_skip
        self.rk4 = raw.model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4.value
        self.raw = raw
        self.lock = threading.Lock()  # get_ob reads `raw.data`, which each thread points at its episode in turn

    @staticmethod
    def prepare(actions):
        return actions

    def advance(self, model, data, action):
        data.ctrl[:] = action
        if self.rk4:
            mujoco.mj_step(model, data, self.frame_skip)
        else:
            mujoco.mj_step2(model, data)
            if self.frame_skip > 1:
                mujoco.mj_step(model, data, self.frame_skip - 1)
        mujoco.mj_step1(model, data)

    def observe(self, data, out):
        with self.lock:
            own_data = self.raw.data
            self.raw.data = data
            try:
                out[:] = self.raw.get_ob()
            finally:
                self.raw.data = own_data


def _physics_for(raw):
    if isinstance(raw, PointEnv):
        return _Point(raw)
    if isinstance(raw, AntEnv):
        return _Ant(raw)
    return _Humanoid(raw)
