"""One update of every agent with target networks, and of the RL baselines without, is OGBench's update rule written
out (tests/helpers.py, `ogbench_update`): the gradient of the agent's loss at its weights theta_t, one optax Adam step
on it, and each target network moved to

    target <- tau * theta_t + (1 - tau) * target,

theta_t the online weights the step's loss read, before the step: OGBench 1.2.2's agents (impls/agents/*.py) call
their `target_update` with the train state the step returned but average the weights of the one it started from, and
the paper's authors' BYOL-gamma and TD-SR do the same. The same operations, so parameters, Adam state and targets are
compared bit for bit; the targets of the weights after the step (tau times one Adam step away) are not those.

Each agent takes a first update, so that Adam's moments are not zero (an update that dropped or reset the optimizer
state would show), and its targets are then moved off the online weights, so that the rate tau is told from 1 - tau.
The agents are the presets' (layer norm and all), at small sizes."""

import jax
import numpy as np
import pytest

from configs.presets import get_config as preset_config
from tests.helpers import assert_one_update, random_agent, random_batch

SMALL = dict(batch_size=8, actor_hidden_dims=(8,), value_hidden_dims=(8,), encoder_hidden_dims=(8,),
             predictor_hidden_dims=(8,), latent_dim=8, rep_dim=4, subgoal_steps=3)

# (preset, settings): the RL baselines (OGBench's agents), and the representation agents and FB with EMA targets.
CASES = [('gcivl', {}), ('gciql', {}), ('qrl', {}), ('crl', {}), ('hiql', {}), ('tdsr_a', {}),
         ('fb', {'encoder_hidden_dims': (8, 8)}), ('byol_gamma_a', {'tau': 0.5})]


@pytest.mark.parametrize('preset, fields', CASES, ids=[preset for preset, _ in CASES])
def test_one_update_is_ogbench_update_rule_with_targets_from_the_pre_step_weights(preset, fields):
    config = preset_config(preset)
    for field, value in {**SMALL, **fields}.items():
        if field in config:
            config[field] = value
    rng = np.random.default_rng(0)
    agent, first, second = random_agent(config, rng), random_batch(config, rng), random_batch(config, rng)
    warm, _ = agent.update(first)
    moved = jax.tree_util.tree_map(lambda t: t + np.float32(0.01) * rng.normal(size=t.shape).astype(np.float32), warm.targets)
    warm = warm.replace(targets=moved)
    assert bool(warm.targets) == ('tau' in config and config.tau < 1.0)
    assert_one_update(warm, second, *warm.update(second))
