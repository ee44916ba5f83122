"""The agents take their random streams by name (utils/random_streams.py; tests/unit/test_random_streams.py checks
that no two streams coincide)."""

import jax

from agents.base import update_keys
from configs.presets import get_config
from tests.helpers import key_bytes, make_agent, sampling_key, small, toy_dataset
from utils.random_streams import stream_key
from utils.training import batch_config, sample_batch

STEPS = range(4)


def test_agents_take_their_streams_by_name():
    """A flat agent's rng is its update stream; a hierarchy's acting seed is its own, its low level's the flat one's;
    FB's update noise (its latents and smoothing noise) never reuses a key of the batch draw."""
    hierarchical = make_agent(small(get_config('hbyol_gamma_a')), 1)
    assert key_bytes(hierarchical.rng) == key_bytes(stream_key(1, 'high/acting'))
    assert key_bytes(hierarchical.low.rng) == key_bytes(stream_key(1, 'update'))
    # FB's update: the noise key of each step is update_keys of the agent's rng, and never a key the sampler used.
    data, fb = toy_dataset(), make_agent(small(get_config('fb')), 0)
    assert key_bytes(fb.rng) == key_bytes(stream_key(0, 'update'))
    batch_keys = []
    for step in STEPS:
        batch_key = jax.random.fold_in(sampling_key(0), step)
        batch_keys += [batch_key, *jax.random.split(batch_key, 5)]
        next_rng, noise_key = update_keys(fb.rng)
        fb, _ = fb.update(sample_batch(batch_key, data, batch_config(fb)))
        assert key_bytes(fb.rng) == key_bytes(next_rng)
        noise_keys = [noise_key, *jax.random.split(noise_key, 3)]
        assert not {key_bytes(k) for k in noise_keys} & {key_bytes(k) for k in batch_keys}
