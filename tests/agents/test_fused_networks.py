"""Agents whose representation networks take the fused kernel (utils/fused_mlp.py, forced on: Pallas' interpret mode
on the CPU) train as on the XLA path: 5 updates of two vmapped seeds give the same metrics and parameters up to
float32 rounding (rtol 1e-4, atol 1e-6), for BYOL-γ^a: its encoder ensemble (TRA's and TD-SR's encoders are the
same module) and its action-conditioned forward and backward predictors. The XLA path, the CPU's default, is what the regression records hold."""

import jax
import jax.numpy as jnp
import numpy as np

from configs.presets import get_config as preset_config
from tests.helpers import make_agent, small, toy_dataset
from utils import fused_mlp
from utils.training import stack_trees, train_steps_multi


def test_training_with_the_fused_networks_equals_training_with_xla():
    data = toy_dataset()
    config = small(preset_config('byol_gamma_a'))
    config.encoder_hidden_dims = (32, 32)
    seeds = [0, 1]
    keys = np.stack([jax.random.PRNGKey(10 + s) for s in seeds])
    agents = stack_trees([make_agent(config, s) for s in seeds])  # the same initial parameters on both paths
    results = {}
    for mode in ('off', 'on'):
        with fused_mlp.fused_mode(mode):
            traced = jax.make_jaxpr(train_steps_multi, static_argnums=4)(agents, data, keys, 0, 1)
            assert ('pallas_call' in str(traced)) == (mode == 'on')  # the update itself takes the path
            results[mode] = train_steps_multi(jax.tree_util.tree_map(jnp.copy, agents), data, keys, 0, 5)
    (fused_agents, fused_infos), (xla_agents, xla_infos) = results['on'], results['off']
    assert set(fused_infos) == set(xla_infos)
    for name in xla_infos:
        np.testing.assert_allclose(fused_infos[name], xla_infos[name], rtol=1e-4, atol=1e-6, err_msg=name)
    for fused, xla in zip(jax.tree_util.tree_leaves(fused_agents), jax.tree_util.tree_leaves(xla_agents), strict=True):
        np.testing.assert_allclose(np.asarray(fused), np.asarray(xla), rtol=1e-4, atol=1e-6)
    assert not np.allclose(xla_infos['total_loss'][0], xla_infos['total_loss'][1])  # the seeds differ
