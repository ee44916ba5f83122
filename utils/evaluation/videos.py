"""Evaluation videos: rendering that cannot fail an evaluation, tiling, and the wandb GIF."""

import io
import math
import warnings

import numpy as np

from utils.render_backend import unavailable_message


class Renderer:
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
                f'env.render() failed ({type(e).__name__}: {e}); evaluating without videos. '
                + (unavailable_message() or 'Headless MuJoCo rendering needs MUJOCO_GL=egl set before mujoco is '
                   'imported.')
            )
            self.ok = False
            return None


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
