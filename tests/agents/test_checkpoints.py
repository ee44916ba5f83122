"""A checkpoint of an earlier version restores into this version's agent, every array as the file holds it."""

import os

import flax.serialization
import jax
import numpy as np

from configs.presets import get_config as preset_config
from runtime.checkpoints import load_checkpoint
from tests.helpers import ROOT, make_agent, small


def test_a_checkpoint_of_version_0_3_0_restores_every_array_it_holds():
    """tests/data/byol_gamma_a_checkpoint_v0.3.0.msgpack was written by version 0.3.0 after 3 updates of a small
    BYOL-gamma^a with EMA targets. It restores into this version's agent (for analyses and evaluation: --resume refuses
    it, since 0.6.0 computes other goals and targets), each array equal to the file's."""
    config = small(preset_config('byol_gamma_a'))
    config.update(dict(tau=0.99, batch_size=16, actor_hidden_dims=(32, 32), encoder_hidden_dims=(16, 16),
                       predictor_hidden_dims=(16, 16), latent_dim=8))
    path = os.path.join(ROOT, 'tests', 'data', 'byol_gamma_a_checkpoint_v0.3.0.msgpack')
    agent, step, _ = load_checkpoint(path, make_agent(config, seed=7))
    assert step == 3
    with open(path, 'rb') as f:
        saved = flax.serialization.msgpack_restore(f.read())['agent']
    restored = flax.serialization.to_state_dict(agent)
    saved_leaves, restored_leaves = (jax.tree_util.tree_leaves_with_path(tree) for tree in (saved, restored))
    assert [p for p, _ in saved_leaves] == [p for p, _ in restored_leaves]
    for (where, a), (_, b) in zip(saved_leaves, restored_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(where))
