"""Agents whose representation networks run as the fused kernel (utils/fused_mlp.py; Pallas' interpret mode on the
CPU), which a run takes only when it asks (main.py --network_kernel=fused) and only for the networks the kernel is
checked to compute: 5 updates of two vmapped seeds of BYOL-γ^a (its encoder ensemble, TRA's and TD-SR's encoders being
the same module, and its action-conditioned forward and backward predictors) give the same metrics and parameters up
to float32 rounding (rtol 1e-4, atol 1e-6); a network a researcher changed stays on XLA, and the run says why. The XLA
path, every run's default, is what the regression records hold."""

import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import main
from configs.presets import get_config as preset_config
from tests.helpers import make_agent, small, toy_dataset
from utils import fused_mlp, networks
from utils.training import stack_trees, train

NETWORKS = ['backward_predictor', 'encoder', 'forward_predictor']


def small_byol_gamma():
    config = small(preset_config('byol_gamma_a'))
    config.encoder_hidden_dims = (32, 32)
    return config


def test_training_with_the_fused_networks_equals_training_with_xla():
    data = toy_dataset()
    config = small_byol_gamma()
    seeds = [0, 1]
    keys = np.stack([jax.random.PRNGKey(10 + s) for s in seeds])
    agents = stack_trees([make_agent(config, s) for s in seeds])  # the same initial parameters on both paths
    assert fused_mlp.ensemble_names(agents) == NETWORKS
    results = {}
    for fused in (True, False):
        path = fused_mlp.with_kernel(agents, NETWORKS if fused else [])
        traced = jax.make_jaxpr(train, static_argnums=4)(path, data, keys, 0, 1)
        assert ('pallas_call' in str(traced)) == fused  # the update itself takes the path
        results[fused] = train(jax.tree_util.tree_map(jnp.copy, path), data, keys, 0, 5)
    (fused_agents, fused_infos), (xla_agents, xla_infos) = results[True], results[False]
    assert set(fused_infos) == set(xla_infos)
    for name in xla_infos:
        np.testing.assert_allclose(fused_infos[name], xla_infos[name], rtol=1e-4, atol=1e-6, err_msg=name)
    for fused, xla in zip(jax.tree_util.tree_leaves(fused_agents), jax.tree_util.tree_leaves(xla_agents), strict=True):
        np.testing.assert_allclose(np.asarray(fused), np.asarray(xla), rtol=1e-4, atol=1e-6)
    assert not np.allclose(xla_infos['total_loss'][0], xla_infos['total_loss'][1])  # the seeds differ


class ToyData:
    train = toy_dataset()


def test_a_run_fuses_only_the_networks_the_kernel_computes_and_says_why_the_others_stay(monkeypatch, caplog):
    """main.py's check, on the run's batch against each network's own flax module: BYOL-γ^a as written fuses its
    three ensembles; after a researcher gives the encoder's MLP another activation (the kernel's is GELU), the encoder
    stays on XLA and the run's log says so, while the predictors, unchanged, still fuse."""
    config = small_byol_gamma()
    caplog.set_level(logging.INFO)
    agent, = main.with_fused_networks([make_agent(config, 0)], ToyData, seed=0)
    assert 'backward_predictor, encoder, forward_predictor run as the fused kernel' in caplog.text
    assert all(agent.network.model.modules[name].kernel is fused_mlp.member_kernel for name in NETWORKS)

    class GeluFreeEncoder(networks.Encoder):
        @nn.compact
        def __call__(self, x):
            x = networks.MLP(self.hidden_dims, activate_final=True, layer_norm=self.layer_norm, activation=nn.relu)(x)
            return nn.Dense(self.latent_dim)(x)

    monkeypatch.setattr(networks, 'Encoder', GeluFreeEncoder)
    caplog.clear()
    agent, = main.with_fused_networks([make_agent(config, 0)], ToyData, seed=0)
    assert agent.network.model.modules['encoder'].kernel is None
    assert agent.network.model.modules['forward_predictor'].kernel is fused_mlp.member_kernel
    assert "--network_kernel=fused: encoder stays on XLA: the kernel computes another function than this network's " \
           'flax module' in caplog.text
    assert 'backward_predictor, forward_predictor run as the fused kernel' in caplog.text
    jaxpr = str(jax.make_jaxpr(lambda a, x: a.network(x, name='encoder', params=a.network.params))(
        agent, ToyData.train.observations[:3]))
    assert 'pallas_call' not in jaxpr
