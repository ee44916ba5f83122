"""Every random stream of a run, derived from its seed by name.

    init          network initialisation (the flat agent, or a hierarchy's low level)
    update        the agent's update noise (its `rng`: latents, target smoothing, actor noise) and acting seed
    sampling      the batches: the batch of step t is drawn with fold_in(sampling, t)
    validation    the held-out batch logged at step t: fold_in(validation, t)
    validation/noise  the noise of that batch's losses (FB's latents, RL agents' actor noise): fold_in(it, t)
    evaluation    the evaluation seed at step t: drawn from fold_in(evaluation, t)
    high/init     a hierarchy's high-level initialisation
    high/acting   a hierarchy's acting seed (the levels' own streams are the flat agent's)

A stream is fold_in(PRNGKey(seed), id) with `id` a 32-bit hash of its name, so no stream is derived from another
and no two share bits whatever JAX's PRNG implementation. Deriving them by position would not do that: with JAX's
partitionable threefry, split(k, n)[i] == fold_in(k, i), so the i-th key of one split is the i-th of every other
split, and a stream's key at step i is the i-th key of a split of the same root.
"""

import zlib

import jax

STREAMS = ('init', 'update', 'sampling', 'validation', 'validation/noise', 'evaluation', 'high/init', 'high/acting')

# Runs recorded before this version drew their streams by position (see above): their checkpoints cannot continue
# with the same random numbers, so --resume refuses them (runtime/run_writer.py).
NAMED_STREAMS_SINCE = '0.5.0'


def stream_id(name: str) -> int:
    """The fold_in constant of stream `name`: a 32-bit hash of its name."""
    return zlib.crc32(name.encode())


if len({stream_id(name) for name in STREAMS}) != len(STREAMS):
    raise AssertionError('two stream names hash to the same fold_in constant: rename one')


def stream_key(seed, name: str) -> jax.Array:
    """The key of stream `name` of the run seeded `seed` (an int, or a traced int inside `jit`)."""
    if name not in STREAMS:
        raise ValueError(f'unknown random stream {name!r}; the streams are {", ".join(STREAMS)}')
    return jax.random.fold_in(jax.random.PRNGKey(seed), stream_id(name))
