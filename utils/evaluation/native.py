"""Native stepping of OGBench maze episodes: one MuJoCo simulation per episode, all stepped together on a thread pool.

Evaluation is bound by physics. MuJoCo's `mujoco.batch.Batch` steps many simulations of one model on a C++ thread
pool in one call, bit-identical to stepping each on its own `MjData`: parallel stepping inside this process, without
the per-step hand-off between processes of an `EnvWorkers` pool, without one GIL hand-off per episode per step (which
is what caps Python threads looping over `mj_step`), and without the gym env's per-step Python around the physics.
The batch is persistent: it keeps one `MjData` per episode, so each episode's whole state is there to render.

Every episode stays the gym env's episode, step for step. The env still does each reset (task set-up and the seeding
of `envs.reset_episode`); the episode's simulation then starts from the env's post-reset integration state
(`mjSTATE_INTEGRATION`: time, qpos, qvel, act, the solver's warm start, controls, ...), the whole input of a
MuJoCo step. Each env step then does to that state exactly what the env's `step` does to its data:
  * point: qpos += 0.2 * action, qvel = 0, then `frame_skip` mj_steps; observation qpos;
  * ant: ctrl = action, `frame_skip` mj_steps; observation (qpos, qvel). gymnasium's step ends with
    mj_rnePostConstraint, which only fills cacc/cfrc_int/cfrc_ext, read by nothing here or in the next step;
  * humanoid: ctrl = action, `frame_skip` mj_steps, then the position and velocity stages at the new state (OGBench's
    DMC-style mj_step2 / mj_step / mj_step1 computes the same); observation: the env's own `get_ob`, read from the
    episode's data;
then the maze's bookkeeping: success when |xy - goal xy| <= the goal tolerance after the step (OGBench's 'post'
timing), reward 1 on success and 0 otherwise, and the episode ends on success if the env terminates at the goal,
else at the time limit. Actions are clipped to the action space first, as on the gym path. (`mujoco.rollout` would
parallelise too, but it does not hand back the solver's warm start, so a trajectory continued over calls is not the
env's.)

`why_not(env)` says why an env is stepped the gym way instead: anything but the point/ant/humanoid maze itself
(antsoccer's ball maze, manipulation, ...), pixel observations, the teleport maze (its step draws the exit from the
global np.random), 'pre' success timing, and the single-task reward mode.
"""

import mujoco
import numpy as np
from mujoco import batch as mujoco_batch
from ogbench.locomaze.ant import AntEnv
from ogbench.locomaze.humanoid import HumanoidEnv
from ogbench.locomaze.point import PointEnv

from utils.evaluation.envs import EpisodeBatch, reset_episode
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


class NativeEpisodes(EpisodeBatch):
    """Episodes of one maze env, each a simulation of a persistent `mujoco.batch.Batch` stepped on `num_threads`
    threads (this one included). It holds any number of episodes (`capacity` None): the batch grows on demand and is
    kept for the next evaluation. The env itself does the resets and renders the video frames."""

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
        self._raw = env.unwrapped
        self._model = self._raw.model
        self._physics = _physics_for(self._raw)
        self._low, self._high = env.action_space.low, env.action_space.high
        self.renderer = Renderer()
        self._batch = None
        self._scratch = mujoco.MjData(self._model)  # one episode's data at a time, to observe or render it
        self.live = np.zeros(0, dtype=bool)

    def start(self, tasks, seeds, record, max_steps, frame_skip):
        """Reset episode i to task `tasks[i]` with episode seed `seeds[i]`; returns (observations, goals)."""
        n = len(seeds)
        if self._batch is None or self._batch.nsim < n:
            self._batch = mujoco_batch.Batch(self._model, n, nthread=self.num_threads, persistent=True)
        state = self._batch.state
        first_steps, goal_xy, frames = [], [], []
        for i, (task, seed, rec) in enumerate(zip(tasks, seeds, record)):
            first_steps.append(reset_episode(self.local_env, task, seed))
            mujoco.mj_getState(self._model, self._raw.data, state[i], _INTEGRATION_STATE)
            goal_xy.append(self._raw.cur_goal_xy)
            frames.append([self.renderer(self.local_env)] if rec else None)
        self.observations = np.stack([ob for ob, _ in first_steps])
        self._goal_xy = np.array(goal_xy, dtype=np.float64)
        self._begin(n, frames, max_steps or self.spec.max_episode_steps, frame_skip)
        return self.observations, np.stack([info['goal'] for _, info in first_steps])

    def step(self, actions):
        """Advance every live episode by its row of `actions` (other rows are ignored); returns the observations,
        finished episodes' rows frozen at their last observation."""
        live = np.flatnonzero(self.live)
        actions = np.clip(actions, self._low, self._high)[live]
        self._physics.advance(self._batch, live, actions)
        self._physics.observe(self, live)
        # The maze's step: reward 1 at the goal, else 0; the episode terminates at the goal if the env does.
        success = self._at_goal(live)
        self._end_step(live, success.astype(np.float64), success & self._raw._terminate_at_goal, success,
                       self._render_episode)
        return self.observations

    def close(self):
        """Free the episodes' simulations (the next evaluation makes them again)."""
        self._batch = None

    def episode_data(self, i):
        """Episode i's whole MjData as its last step left it (a scratch copy, valid until the next call)."""
        return self._batch.get_data(i, self._scratch)

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

    def _render_episode(self, i):
        """A frame of episode i, drawn by the env from the episode's own data and goal marker."""
        data = self.episode_data(i)
        # The marker is a world geom placed by the model, which the last reset moved (and the batch's copy of the
        # model holds where it was when the batch was made); the episode's geom_xpos has it from there. Put this
        # episode's goal in both places (a world geom's frame position is its model position, exactly) to draw.
        self._raw.set_goal(goal_xy=tuple(self._goal_xy[i]))
        target = self._model.geom('target').id
        data.geom_xpos[target] = self._model.geom_pos[target]
        with _reading(self._raw, data):
            return self.renderer(self.local_env)


_INTEGRATION_STATE = mujoco.mjtState.mjSTATE_INTEGRATION


class _reading:
    """Points the env at another MjData for the duration of a `with` block (its get_ob and render read `data`)."""

    def __init__(self, raw, data):
        self.raw, self.data = raw, data

    def __enter__(self):
        self.own, self.raw.data = self.raw.data, self.data

    def __exit__(self, *exc):
        self.raw.data = self.own


class _Point:
    """PointEnv.step: the action moves the point directly (qpos += 0.2 * action, qvel = 0) before the physics."""

    def __init__(self, raw):
        self.frame_skip = raw.frame_skip

    def advance(self, batch, rows, actions):
        qpos = batch.bind('qpos')
        qpos[rows] = qpos[rows] + 0.2 * actions  # 0.2 * action in the action's dtype, as the env scales it
        batch.bind('qvel')[rows] = 0.0
        batch.step(rows, nstep=self.frame_skip)

    @staticmethod
    def observe(episodes, rows):
        episodes.observations[rows] = episodes._batch.bind('qpos')[rows]


class _Ant:
    """AntEnv.step: gymnasium's MujocoEnv.do_simulation (ctrl, then the physics)."""

    def __init__(self, raw):
        self.frame_skip = raw.frame_skip
        self.nq = raw.model.nq

    def advance(self, batch, rows, actions):
        batch.bind('ctrl')[rows] = actions
        batch.step(rows, nstep=self.frame_skip)

    def observe(self, episodes, rows):
        batch = episodes._batch
        episodes.observations[rows, :self.nq] = batch.bind('qpos')[rows]
        episodes.observations[rows, self.nq:] = batch.bind('qvel')[rows]


class _Humanoid:
    """HumanoidEnv.step: the physics, then the position and velocity stages at the new state, which its
    observation reads (body frames and sensors): the env's own `get_ob` on each episode's data."""

    def __init__(self, raw):
        self.frame_skip = raw.frame_skip
        self.raw = raw

    def advance(self, batch, rows, actions):
        batch.bind('ctrl')[rows] = actions
        batch.step(rows, nstep=self.frame_skip, stage=mujoco.mjtStage.mjSTAGE_VEL.value)

    def observe(self, episodes, rows):
        for i in rows:
            with _reading(self.raw, episodes.episode_data(i)):
                episodes.observations[i] = self.raw.get_ob()


def _physics_for(raw):
    if isinstance(raw, PointEnv):
        return _Point(raw)
    if isinstance(raw, AntEnv):
        return _Ant(raw)
    return _Humanoid(raw)
