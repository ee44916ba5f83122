"""A run's random streams are derived from its seed by name (utils/random_streams.py): no two streams of a run, nor
of runs with other seeds, nor the per-step keys drawn from them, coincide, under either threefry layout; and a
checkpoint written before the streams were named cannot be resumed (tests/agents/test_agent_streams.py: the agents take
their streams from there)."""

import itertools
import os

import flax.serialization
import jax
import pytest

from agents.base import update_keys
from runtime.checkpoints import CHECKPOINT_NAME, COMPUTATION_CHANGES, check_resumable, checkpoint_header
from runtime.errors import ResumeMismatchError
from tests.helpers import key_bytes
from utils.random_streams import NAMED_STREAMS_SINCE, STREAMS, stream_key

SEEDS = range(4)
STEPS = range(4)


@pytest.fixture(params=[True, False], ids=['partitionable', 'classic'])
def threefry_layout(request):
    """Both of JAX's threefry layouts (in the partitionable one, split(k, n)[i] == fold_in(k, i))."""
    before = jax.config.jax_threefry_partitionable
    jax.config.update('jax_threefry_partitionable', request.param)
    yield request.param
    jax.config.update('jax_threefry_partitionable', before)


def assert_pairwise_distinct(named_keys):
    seen = {}
    for name, key in named_keys:
        data = key_bytes(key)
        assert data not in seen, f'{name} and {seen[data]} are the same key'
        seen[data] = name


def per_step_keys(seed):
    """What a run draws from its streams in its first steps: the batch, validation and evaluation keys of each step
    (and the sampler's sub-keys of a batch), and the agent's update-noise keys (and FB's sub-keys of them)."""
    streams = {name: stream_key(seed, name) for name in STREAMS}
    keys = [(f'seed {seed} {name}', key) for name, key in streams.items()]
    rng = streams['update']
    for step in STEPS:
        for name in ('sampling', 'validation', 'evaluation'):
            step_key = jax.random.fold_in(streams[name], step)
            keys.append((f'seed {seed} {name} step {step}', step_key))
        batch_key = jax.random.fold_in(streams['sampling'], step)
        keys += [(f'seed {seed} batch sub-key {i} step {step}', k) for i, k in enumerate(jax.random.split(batch_key, 5))]
        rng, noise_key = update_keys(rng)
        keys.append((f'seed {seed} update noise step {step}', noise_key))
        keys += [(f'seed {seed} FB sub-key {i} step {step}', k) for i, k in enumerate(jax.random.split(noise_key, 3))]
    return keys


def test_no_two_streams_of_a_run_or_of_its_seeds_coincide(threefry_layout):
    assert_pairwise_distinct(itertools.chain.from_iterable(per_step_keys(seed) for seed in SEEDS))


def test_the_positional_derivation_did_coincide():
    """The defect the names fix: under the partitionable layout (JAX's default) the old data key,
    split(PRNGKey(seed), 3)[0], was the agent's update stream, split(PRNGKey(seed))[0]: both fold_in(PRNGKey(seed), 0)."""
    assert jax.config.jax_threefry_partitionable
    root = jax.random.PRNGKey(0)
    assert key_bytes(jax.random.split(root, 3)[0]) == key_bytes(jax.random.split(root)[0]) == key_bytes(jax.random.fold_in(root, 0))


def test_unknown_stream_names_are_refused():
    with pytest.raises(ValueError, match='unknown random stream'):
        stream_key(0, 'data')


@pytest.mark.parametrize('version', [None, '0.3.0', '0.4.0', '0.5.0'])
def test_a_checkpoint_from_before_a_change_of_what_runs_compute_is_not_resumed(tmp_path, version):
    """Named streams (0.5.0), then OGBench's goals and pre-step targets (0.6.0): a checkpoint older than either is
    refused, naming each change since it; one of the newest version resumes."""
    state = {'agent': {}, 'step': 10, 'extra': {}}
    if version:
        state['version'] = version
    path = os.path.join(tmp_path, CHECKPOINT_NAME)
    with open(path, 'wb') as f:
        f.write(flax.serialization.msgpack_serialize(state))
    with pytest.raises(ResumeMismatchError, match='since version 0.6.0') as error:
        check_resumable(path, checkpoint_header(path)[1])
    assert (f'version {version}' if version else 'before 0.4.0') in str(error.value)
    assert (f'since version {NAMED_STREAMS_SINCE}' in str(error.value)) == (version != '0.5.0')
    state['version'] = COMPUTATION_CHANGES[-1][0]
    with open(path, 'wb') as f:
        f.write(flax.serialization.msgpack_serialize(state))
    check_resumable(path, checkpoint_header(path)[1])


def test_every_stream_is_listed_once():
    assert len(set(STREAMS)) == len(STREAMS)
