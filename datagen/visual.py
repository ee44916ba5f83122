"""Offline generator for OGBench visual datasets (antmaze, scene): the state dataset's rows, rendered.

OGBench's visual datasets hold the same kind of trajectories as the state ones, with each
observation replaced by the 64x64x3 image of the environment's own camera (`visual-<env>`: for the
ant, the tracking 'back' camera, a floor coloured by position, one white leg; for the scene, its
'front_pixels' camera, with the buttons coloured by their states, which the scene rows carry). So
`visual-antmaze-<maze>-<type>-v0` is made from `antmaze-<maze>-<type>-v0` (downloaded, or generated
by `datagen.antmaze`) without re-running any dynamics: for each row, set the visual env's
qpos / qvel to the row's and render. Actions, terminals, qpos and qvel are copied unchanged.

Rendering from qpos gives the image of exactly that state (MuJoCo's forward kinematics are rerun).
A live pixel env's observation after `step` is rendered from the kinematics MuJoCo computed before
the last of its `frame_skip` physics substeps, one substep (10 ms for the ant) behind its qpos; the
two differ by that much motion (tested). OGBench stores qpos as float32: rendering from the stored
rows moves a few percent of a scene frame's pixels by a few intensity levels against the exact
state (tested against a live visual-scene collection with the same seed; none in the antmaze checks).
Downloaded OGBench visual files are used unchanged.

Cost: one MuJoCo render per row, about 1.1M for antmaze-*-stitch: hours on a CPU, far less with EGL
on a GPU (rates in docs/performance.md; the generator prints its own estimate before starting). The
frames go into a memory-mapped file in batches, with the number of finished rows recorded after
each batch, so a killed run resumes where it stopped; the `.npz` files appear only when complete.
Memory: the frames never need to fit in RAM here (1M x 64 x 64 x 3 uint8 = 12.3 GB on disk).
"""

import json
import logging
import os
import time

import gymnasium
import numpy as np

from datagen import antmaze, scene
from datagen.pointmaze import _save_npz_atomic, generator_record
from runtime.dataset_files import check_writable_space
from runtime.provenance import file_source, source_label, write_sidecar
from utils.render_backend import unavailable_message
from utils.errors import DatasetError
from utils.progress import progress_bar

IMAGE_SHAPE = (64, 64, 3)
# State-dataset generators by name, for the datasets this module renders.
_STATE_GENERATORS = {name: antmaze for name in antmaze.GENERATABLE_DATASETS}
_STATE_GENERATORS.update({name: scene for name in scene.GENERATABLE_DATASETS})
GENERATABLE_DATASETS = tuple(f'visual-{name}' for name in _STATE_GENERATORS)
# Frames of OGBench's state rows: OGBench's camera and procedure, but rendered here (and from this
# project's generated state data when those are what the folder holds), so generated only on request.
FAITHFUL = False
DESCRIPTION = 'state rows rendered with the visual env camera'
# Rows rendered between two progress records (one fsync each): ~1 min of rendering on a CPU.
RENDER_BATCH_ROWS = 2000


def can_generate(dataset_name):
    return dataset_name in GENERATABLE_DATASETS


def state_dataset_name(visual_name):
    """`visual-antmaze-medium-stitch-v0` -> `antmaze-medium-stitch-v0`."""
    return visual_name[len('visual-'):]


def env_id(dataset_name):
    """`visual-antmaze-medium-stitch-v0` -> `visual-antmaze-medium-v0`."""
    parts = dataset_name.split('-')
    return '-'.join(parts[:-2] + parts[-1:])


class FrameRenderer:
    """Renders dataset rows with the visual env's own camera: `render(qpos, qvel) -> uint8 [64, 64, 3]`."""

    def __init__(self, visual_env_id):
        try:
            self.env = gymnasium.make(visual_env_id).unwrapped
            self.env.render()
        except Exception as e:  # GL back-ends fail with many different exception types
            raise DatasetError(
                f'Cannot render {visual_env_id} ({type(e).__name__}: {e}). '
                + (unavailable_message() or 'Headless MuJoCo rendering needs MUJOCO_GL=egl (or osmesa) set in the '
                   'environment before Python starts, e.g. MUJOCO_GL=egl python scripts/generate_dataset.py '
                   '--env_name=...')
            ) from e

    def render(self, qpos, qvel, button_states=None):
        """The frame of the state (qpos, qvel) (and, in the scene, the buttons' states, which colour them)."""
        qpos, qvel = np.asarray(qpos, np.float64), np.asarray(qvel, np.float64)
        if button_states is None:
            self.env.set_state(qpos, qvel)
        else:
            self.env.set_state(qpos, qvel, np.asarray(button_states))
        if hasattr(self.env, 'get_pixel_observation'):  # manipulation envs: their pixel camera
            return self.env.get_pixel_observation()
        return self.env.render()

    def close(self):
        self.env.close()


def _row_state(data, i):
    """The arguments of FrameRenderer.render for row i of a state dataset."""
    buttons = data['button_states'][i] if 'button_states' in data else None
    return data['qpos'][i], data['qvel'][i], buttons


def measure_frames_per_second(renderer, data, num_frames=30):
    """Frames/s of `renderer` on the first rows of a state dataset, after one warm-up frame."""
    renderer.render(*_row_state(data, 0))
    num_frames = min(num_frames, len(data['qpos']))
    start = time.perf_counter()
    for i in range(num_frames):
        renderer.render(*_row_state(data, i))
    return num_frames / max(time.perf_counter() - start, 1e-9)


def render_rows(renderer, data, frames_path, progress_path, desc='render', progress=True):
    """Render every row of the state dataset `data` (qpos, qvel and, if present, button_states) into
    the uint8 .npy memmap `frames_path`, resumably.

    `progress_path` (JSON) records the rows finished, written only after the frames before it are
    flushed; a rerun skips them. Returns the memmap, [N, 64, 64, 3].
    """
    num_rows = len(data['qpos'])
    done = 0
    if os.path.exists(frames_path) and os.path.exists(progress_path):
        with open(progress_path) as f:
            record = json.load(f)
        if record.get('num_rows') == num_rows:
            done = int(record['rows_done'])
    if done == 0 or not os.path.exists(frames_path):
        done = 0
        frames = np.lib.format.open_memmap(frames_path, mode='w+', dtype=np.uint8, shape=(num_rows, *IMAGE_SHAPE))
    else:
        frames = np.lib.format.open_memmap(frames_path, mode='r+')
    bar = progress_bar(total=num_rows, initial=done, desc=desc, unit='frame', disable=not progress, smoothing=0.05)
    while done < num_rows:
        stop = min(done + RENDER_BATCH_ROWS, num_rows)
        for i in range(done, stop):
            frames[i] = renderer.render(*_row_state(data, i))
        frames.flush()
        done = stop
        with open(progress_path + '.tmp', 'w') as f:
            json.dump(dict(num_rows=num_rows, rows_done=done), f)
        os.replace(progress_path + '.tmp', progress_path)
        bar.update(stop - bar.n)
    bar.close()
    return frames


def _load_state_split(path, num_episodes):
    """The state file's arrays, cut to its first `num_episodes` episodes (all when None)."""
    with np.load(path) as file:
        missing = [k for k in ('observations', 'actions', 'terminals', 'qpos', 'qvel') if k not in file]
        if missing:
            raise DatasetError(
                f'{path} lacks {missing}: a visual dataset is rendered from the qpos/qvel of each row. '
                f'Regenerate the state dataset with this project (scripts/generate_dataset.py) or download it from OGBench.'
            )
        data = {k: file[k] for k in ('actions', 'terminals', 'qpos', 'qvel', 'button_states') if k in file}
    if num_episodes is not None:
        ends = np.flatnonzero(data['terminals'])
        if num_episodes > len(ends):
            raise DatasetError(f'{path} has {len(ends)} episodes, fewer than the {num_episodes} requested.')
        data = {k: v[: ends[num_episodes - 1] + 1] for k, v in data.items()}
    return data


def estimated_bytes(dataset_name, num_train_episodes=None, num_val_episodes=None, **kwargs):
    """Upper bound of the bytes write_dataset puts on disk: the state files (if it has to generate
    them), their columns again in the visual files, and every frame twice (memmap and .npz)."""
    state_name = state_dataset_name(dataset_name)
    module = _STATE_GENERATORS[state_name]
    state_bytes = module.estimated_bytes(state_name, num_train_episodes, num_val_episodes, **kwargs)
    return 2 * state_bytes + 2 * (state_bytes // module.ROW_BYTES) * int(np.prod(IMAGE_SHAPE))


def write_dataset(dataset_name, dataset_dir, seed=0, num_train_episodes=None, num_val_episodes=None, progress=True):
    """Writes `<dataset_dir>/<dataset_name>.npz` and `-val.npz`, rendered from the state dataset of the
    same name without `visual-` (from `dataset_dir`; generated with `seed` and the episode counts if
    missing). With episode counts, only the state dataset's first episodes are rendered. Resumable:
    a rerun after a kill continues rendering where it stopped. Returns (train_path, val_path)."""
    if not can_generate(dataset_name):
        raise ValueError(f'Cannot generate {dataset_name!r}; supported: {", ".join(GENERATABLE_DATASETS)}.')
    dataset_dir = os.path.expanduser(dataset_dir)
    os.makedirs(dataset_dir, exist_ok=True)
    state_name = state_dataset_name(dataset_name)
    state_train = os.path.join(dataset_dir, f'{state_name}.npz')
    state_val = os.path.join(dataset_dir, f'{state_name}-val.npz')
    if not (os.path.exists(state_train) and os.path.exists(state_val)):
        logging.info('%s needs the state dataset %s: generating it first.', dataset_name, state_name)
        _STATE_GENERATORS[state_name].write_dataset(
            state_name, dataset_dir, seed=seed, num_train_episodes=num_train_episodes,
            num_val_episodes=num_val_episodes, progress=progress,
        )
    splits = {
        'train': (_load_state_split(state_train, num_train_episodes), os.path.join(dataset_dir, f'{dataset_name}.npz')),
        'val': (_load_state_split(state_val, num_val_episodes), os.path.join(dataset_dir, f'{dataset_name}-val.npz')),
    }
    total_rows = sum(len(data['terminals']) for data, _ in splits.values())
    # The frames twice (the memmap they are rendered into, and the .npz written from it), counted from the state rows.
    check_writable_space(dataset_dir, 2 * total_rows * int(np.prod(IMAGE_SHAPE)), f'{dataset_name} frames')

    renderer = FrameRenderer(env_id(dataset_name))
    first = splits['train'][0]
    fps = measure_frames_per_second(renderer, first)
    message = (
        f'Rendering {dataset_name}: {total_rows} frames at {fps:.0f} frames/s (MUJOCO_GL='
        f'{os.environ.get("MUJOCO_GL", "unset")}), about {total_rows / fps / 3600:.1f} h; '
        f'{total_rows * int(np.prod(IMAGE_SHAPE)) / 1e9:.1f} GB of frames. Resumable: rerun the same command after an interruption.'
    )
    logging.info(message)
    if progress:
        print(message, flush=True)
    # Val first, as the state generators: a loader pointed at the train file then finds its sibling.
    for split in ('val', 'train'):
        data, path = splits[split]
        if os.path.exists(path):
            continue
        frames_path, progress_path = path + '.frames.npy', path + '.progress.json'
        frames = render_rows(renderer, data, frames_path, progress_path, f'{dataset_name} {split}', progress)
        try:
            _save_npz_atomic(path, dict(observations=frames, **data), exclusive=True)
        except FileExistsError:
            raise DatasetError(f'{path} appeared while it was being rendered (another process?); it was not replaced.') from None
        state_path = state_train if split == 'train' else state_val
        state_source = file_source(state_path)
        write_sidecar(path, generator_record(
            __name__, f'{state_name} rendered ({source_label(state_source)})', FAITHFUL, dataset_name, None,
            num_train_episodes, num_val_episodes, split=split, rows=len(data['terminals']), state_dataset=state_source))
        del frames
        os.remove(frames_path)
        os.remove(progress_path)
    renderer.close()
    return splits['train'][1], splits['val'][1]
