"""Offline generator for OGBench's scene-play-v0, with OGBench's scripted skill policies (no learned expert).

Follows OGBench's ``data_gen_scripts/generate_manipspace.py`` for ``--env_name=scene-v0
--dataset_type=play`` (its commands.sh line for scene-play-v0: 1000 episodes of 1001 steps, a tenth
as many for validation):

- env: ``gymnasium.make('scene-v0', terminate_at_goal=False, mode='data_collection',
  max_episode_steps=1001)``; in that mode every reset randomises the scene and draws a task;
- one "plan" oracle per task kind (cube, button, drawer, window; ``ogbench.manipspace.oracles.plan``,
  noise 0.1, noise smoothing 0.5): a non-Markovian policy that follows noisy interpolated keyframes;
- each step: the active oracle's action clipped to [-1, 1]; when the oracle is done, the env draws a
  new target (``set_new_target``, stacking probability 0.5) and that task's oracle takes over;
- rows: the observation before the step, the action, ``terminal`` on the last step, and the pre-step
  ``qpos``, ``qvel`` and ``button_states`` (what ``visual.py`` needs to render the row);
- an episode in which the cube leaves the visible table (y >= 0.29, or y <= -0.3 outside the drawer's
  height band 0.06..0.08) is discarded and re-collected, as OGBench does.

OGBench's script draws from the unseeded global NumPy generator; here one seed fixes it (and the
env's own generator), so a seed gives the same files.
"""

import logging

import gymnasium
import numpy as np
import ogbench.manipspace  # noqa: F401  (registers the manipulation envs with gymnasium)

from datagen.pointmaze import _seeded_global_np_random, generator_record, save_train_val
from utils.progress import progress_bar

GENERATABLE_DATASETS = ('scene-play-v0',)
# OGBench's scripted oracles, re-collected here with this project's seeding: not OGBench's files, and
# the collection was not compared with them at scale, so they are generated only on request.
FAITHFUL = False
DESCRIPTION = "OGBench's scripted scene oracles, re-collected here"
# Bytes per row before compression: observation 40, action 5, qpos 25, qvel 24 (float32), the terminal
# flag and 2 int64 button states.
ROW_BYTES = 4 * (40 + 5 + 25 + 24) + 1 + 8 * 2
NUM_TRAIN_EPISODES = 1000
EPISODE_LENGTH = 1001  # OGBench's --max_episode_steps for scene-play
PLAN_NOISE, PLAN_NOISE_SMOOTHING = 0.1, 0.5
STACK_PROBABILITY = 0.5  # the script's p_stack for a scene (not a single/double/... cube env)
# Measured ~300 env steps/s on this project's shared 2-core machine: for the log's time estimate.
_APPROX_ENV_STEPS_PER_SECOND = 300


def can_generate(dataset_name):
    return dataset_name in GENERATABLE_DATASETS


def make_oracles(env):
    from ogbench.manipspace.oracles.plan.button_plan import ButtonPlanOracle
    from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle
    from ogbench.manipspace.oracles.plan.drawer_plan import DrawerPlanOracle
    from ogbench.manipspace.oracles.plan.window_plan import WindowPlanOracle

    kinds = dict(cube=CubePlanOracle, button=ButtonPlanOracle, drawer=DrawerPlanOracle, window=WindowPlanOracle)
    return {task: oracle(env=env, noise=PLAN_NOISE, noise_smoothing=PLAN_NOISE_SMOOTHING) for task, oracle in kinds.items()}


def cube_stays_visible(qpos):
    """OGBench's health check of a scene episode, on its rows' qpos [T, nq] (cube xyz at 14:17): the
    cube never goes too far right, nor too far left unless it sits in the drawer."""
    cube = qpos[:, 14:17]
    too_far_right = cube[:, 1] >= 0.29
    too_far_left_outside_drawer = (cube[:, 1] <= -0.3) & ((cube[:, 2] < 0.06) | (cube[:, 2] > 0.08))
    return not (too_far_right.any() or too_far_left_outside_drawer.any())


def collect_episode(env, oracles, episode_length):
    """One episode's rows (lists of arrays) with the scripted oracles, switching task whenever the
    active oracle finishes."""
    observation, info = env.reset()
    oracle = oracles[info['privileged/target_task']]
    oracle.reset(observation, info)
    rows = dict(observations=[], actions=[], terminals=[], qpos=[], qvel=[], button_states=[])
    for _ in range(episode_length):
        action = np.clip(np.asarray(oracle.select_action(observation, info)), -1.0, 1.0)
        next_observation, _, terminated, truncated, info = env.step(action)
        if oracle.done:
            task_observation, task_info = env.unwrapped.set_new_target(p_stack=STACK_PROBABILITY)
            oracle = oracles[task_info['privileged/target_task']]
            oracle.reset(task_observation, task_info)
        rows['observations'].append(observation)
        rows['actions'].append(action)
        rows['terminals'].append(terminated or truncated)
        rows['qpos'].append(info['prev_qpos'])
        rows['qvel'].append(info['prev_qvel'])
        rows['button_states'].append(info['prev_button_states'])
        observation = next_observation
        if terminated or truncated:
            break
    return rows


def generate_scene_dataset(num_episodes, seed, episode_length=EPISODE_LENGTH, progress=True, env_id='scene-v0'):
    """`num_episodes` healthy scene-play episodes in OGBench's keys and dtypes: observations, actions,
    qpos, qvel (float32), terminals (bool), button_states (int64). Same seed, same arrays. `env_id`
    'visual-scene-v0' collects the same episodes with live 64x64 uint8 frames as observations (OGBench's
    own way of making visual-scene-play; here only a check of the rendered dataset)."""
    # No env checker: its extra reset at creation costs a second and changes no row.
    env = gymnasium.make(env_id, terminate_at_goal=False, mode='data_collection', max_episode_steps=episode_length,
                         disable_env_checker=True)
    oracles = make_oracles(env)
    episodes = []
    with _seeded_global_np_random(seed):
        env.reset(seed=seed)  # seeds the env's own generator once; later resets continue it
        env.action_space.seed(seed)
        for _ in progress_bar(range(num_episodes), desc='scene-play-v0', unit='episode', disable=not progress):
            while True:
                rows = collect_episode(env, oracles, episode_length)
                if cube_stays_visible(np.asarray(rows['qpos'])):
                    break
                logging.info('Scene episode with the cube out of view: collecting it again (as OGBench).')
            episodes.append(rows)
    env.close()
    pixels = env_id.startswith('visual-')
    dtypes = dict(observations=np.uint8 if pixels else np.float32, actions=np.float32, terminals=bool, qpos=np.float32, qvel=np.float32, button_states=np.int64)
    return {key: np.concatenate([np.asarray(e[key], dtype=dtype) for e in episodes]) for key, dtype in dtypes.items()}


def write_dataset(dataset_name, dataset_dir, seed=0, num_train_episodes=None, num_val_episodes=None, progress=True,
                  episode_length=EPISODE_LENGTH):
    """Generates `<dataset_dir>/scene-play-v0.npz` and `-val.npz` (OGBench's sizes by default: 1000 + 100
    episodes of 1001 rows). Returns (train_path, val_path)."""
    if not can_generate(dataset_name):
        raise ValueError(f'Cannot generate {dataset_name!r}; supported: {", ".join(GENERATABLE_DATASETS)}.')
    num_train_episodes = NUM_TRAIN_EPISODES if num_train_episodes is None else num_train_episodes
    num_val_episodes = max(1, num_train_episodes // 10) if num_val_episodes is None else num_val_episodes
    total_steps = (num_train_episodes + num_val_episodes) * episode_length
    logging.info('Generating %s offline with OGBench\'s scripted oracles: %d episodes x %d steps; about %d minutes.',
                 dataset_name, num_train_episodes + num_val_episodes, episode_length,
                 max(1, round(total_steps / _APPROX_ENV_STEPS_PER_SECOND / 60)))
    dataset = generate_scene_dataset(num_train_episodes + num_val_episodes, seed, episode_length, progress)
    split = int(np.flatnonzero(dataset['terminals'])[num_train_episodes - 1]) + 1
    provenance = generator_record(__name__, DESCRIPTION, FAITHFUL, dataset_name, seed, num_train_episodes, num_val_episodes,
                                  episode_length=episode_length)
    return save_train_val(dataset, dataset_name, dataset_dir, split, provenance)


def estimated_bytes(dataset_name, num_train_episodes=None, num_val_episodes=None, episode_length=EPISODE_LENGTH, **_):
    """Upper bound of the bytes write_dataset puts on disk (uncompressed rows)."""
    num_train_episodes = NUM_TRAIN_EPISODES if num_train_episodes is None else num_train_episodes
    num_val_episodes = max(1, num_train_episodes // 10) if num_val_episodes is None else num_val_episodes
    return (num_train_episodes + num_val_episodes) * episode_length * ROW_BYTES
