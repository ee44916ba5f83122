"""Evaluation envs: one OGBench env by name, the spaces of what an evaluation steps, the cores to use, and the gym way
of stepping a batch of episodes (`GymEpisodes`, one env per episode), which this process and every `EnvWorkers`
worker process run. `EpisodeBatch` is what every stepper of a batch keeps per episode, `native.py`'s included."""

import os

import gymnasium
import numpy as np
import ogbench  # noqa: F401  (registers the OGBench env ids with gymnasium)

from utils.evaluation.videos import Renderer


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


def reset_episode(env, task, seed):
    """Reset `env` to the episode of `task` (a task id or a `task_info` dict) with episode seed `seed`, seeding the
    three generators a maze episode draws from (see utils/evaluation/episodes.py). Returns (observation, info)."""
    np.random.seed(seed)
    env.action_space.seed(seed)
    options = dict(task_info=task) if isinstance(task, dict) else dict(task_id=task)
    return env.reset(seed=seed, options=dict(options, render_goal=False))


class EpisodeBatch:
    """What every stepper of a lockstep batch keeps per episode row and reports back: `start` calls `_begin`, `step`
    advances the live rows' envs and hands each step's outcome to `_end_step`, the one rule of an episode's end and
    success for every stepper; `results` returns them (the contract `episodes._run_batch` and the worker processes
    read)."""

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
