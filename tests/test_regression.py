"""Every agent's numbers stay what they were: the per-step metrics (losses, gradient norms, ...) of the first 10
fused updates at seed 0, for a preset of each code path, against values recorded from an earlier version of the
code (tests/data/agent_metrics.json). A refactor that changes what any agent computes fails here. The presets that
tests/test_agents.py trains anyway are compared there, on the first 10 of its updates (the same computations).

Record again only for a change that is meant to change the numbers, and say so in its commit:

    JAX_PLATFORMS=cpu JAX_DISABLE_MOST_OPTIMIZATIONS=1 python -m tests.test_regression --record
"""

import json
import os
import sys

import jax
import numpy as np
import pytest

from configs.presets import PRESETS
from configs.presets import get_config as preset_config
from tests.test_agents import TRAINED_PRESETS, distinct_presets, make_agent, small, toy_dataset
from utils.sampler import SamplerConfig
from utils.training import train_steps

RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'agent_metrics.json')
STEPS = 10
PRESETS_CHECKED = [p for p in distinct_presets() if PRESETS[p].family != 'visual']


def regression_config(preset):
    config = small(preset_config(preset))
    if config.get('stage1_steps', 0) > 0:
        config.stage1_steps = STEPS // 2  # both stages of a two-stage hierarchy within the run
    return config


def metrics_of(preset):
    """{metric: [value at each of the STEPS updates]} of `preset` trained from seed 0."""
    config = regression_config(preset)
    agent = make_agent(config, seed=0)
    _, infos = train_steps(agent, toy_dataset(), jax.random.PRNGKey(0), 0, SamplerConfig.from_config(config), STEPS)
    return {key: np.asarray(values, np.float64).tolist() for key, values in sorted(infos.items())}


def assert_recorded_metrics(preset, infos):
    """The first STEPS values of each per-step metric in `infos` equal the recorded ones."""
    with open(RECORD) as f:
        recorded = json.load(f)[preset]
    assert sorted(infos) == sorted(recorded), f'{preset}: metric names changed'
    for key, values in recorded.items():
        np.testing.assert_allclose(np.asarray(infos[key])[:STEPS], values, rtol=1e-6, atol=1e-7, err_msg=f'{preset}: {key}')


@pytest.mark.parametrize('preset', [p for p in PRESETS_CHECKED if p not in TRAINED_PRESETS])
def test_agent_metrics_equal_the_recorded_ones(preset):
    assert_recorded_metrics(preset, metrics_of(preset))


if __name__ == '__main__':
    if sys.argv[1:] != ['--record']:
        sys.exit(__doc__)
    os.makedirs(os.path.dirname(RECORD), exist_ok=True)
    with open(RECORD, 'w') as f:
        json.dump({preset: metrics_of(preset) for preset in PRESETS_CHECKED}, f, indent=1, sort_keys=True)
        f.write('\n')
    print(f'recorded {len(PRESETS_CHECKED)} presets in {RECORD}')
