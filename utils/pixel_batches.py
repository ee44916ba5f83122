"""The sampler's steps for pixel observations (docs/visual.md): frame stacking, random-crop augmentation, and the
example input a frame stack implies. `utils.training.sample_batch` calls them only when `frame_stack > 1` or
`p_aug > 0`; state-based agents never run anything here.
"""

import jax
import jax.numpy as jnp
import numpy as np


def stacked_observations(data, rows, frame_stack: int):
    """Observations of `rows` (any shape S), each the channel-wise stack [o_{i-F+1}, ..., o_i] of its
    last F = `frame_stack` frames; frames before the episode's first row repeat that first row (as
    OGBench's frame stacking, and as an evaluation episode starts). The sampler gathers F = 1 itself
    (`utils.training.observations_at`).

    `data` is a `utils.training.DeviceDataset`. Row i - j lies in i's episode iff it has the same episode end;
    once a step back leaves the episode every further one does too, so holding the last in-episode row gives
    max(i - j, start).
    """
    frames = [rows]
    for j in range(1, frame_stack):
        candidate = jnp.maximum(rows - j, 0)
        frames.append(jnp.where(data.episode_end[candidate] == data.episode_end[rows], candidate, frames[-1]))
    return jnp.concatenate([data.observations[r] for r in reversed(frames)], axis=-1)


# Random-crop augmentation (OGBench's): pad every image by CROP_PADDING pixels, repeating its edge,
# and cut a window of the original size at a uniformly random offset in {0, ..., 2 * CROP_PADDING}^2.
CROP_PADDING = 3
AUGMENT_STREAM = 0x61756720  # fold_in constant: the augmentation's randomness is its own stream


def crop_images(images, offsets, padding: int = CROP_PADDING):
    """images [B, ..., H, W, C] cropped at per-sample `offsets` [B, 2] (row, column) into the
    edge-padded images; the same offset for all of a sample's leading axes. Offset (padding,
    padding) is the identity."""
    pad = [(0, 0)] * (images.ndim - 3) + [(padding, padding), (padding, padding), (0, 0)]
    padded = jnp.pad(images, pad, mode='edge')

    def crop_one(image, offset):
        start = (0,) * (image.ndim - 3) + (offset[0], offset[1], 0)
        return jax.lax.dynamic_slice(image, start, images.shape[1:])

    return jax.vmap(crop_one)(padded, offsets)


def augment_batch(key, batch, p_aug: float):
    """With probability `p_aug` (one draw per batch, as OGBench), random-crop every image in the batch:
    one offset per sample, shared by all of that sample's images (state, next state, goals), so their
    relative geometry is kept. Image entries are those with at least 4 axes ([B, ..., H, W, C])."""
    coin_key, offset_key = jax.random.split(key)
    image_keys = [k for k, v in batch.items() if v.ndim >= 4]
    batch_size = batch[image_keys[0]].shape[0]
    offsets = jax.random.randint(offset_key, (batch_size, 2), 0, 2 * CROP_PADDING + 1)

    def crop(images):
        return {k: crop_images(v, offsets) for k, v in images.items()}

    images = {k: batch[k] for k in image_keys}
    if p_aug < 1.0:
        images = jax.lax.cond(jax.random.uniform(coin_key) < p_aug, crop, lambda x: x, images)
    else:
        images = crop(images)
    return dict(batch, **images)


def example_observations(observations, frame_stack: int):
    """An example input [1, ...] of the agent's networks: the first row stacked `frame_stack` times, the
    shape of every observation the sampler (and evaluation) will feed it."""
    return np.concatenate([np.asarray(observations[:1])] * max(frame_stack, 1), axis=-1)
