"""Every agent's numbers stay what they were: the per-step metrics of the first updates at seed 0, for a preset of each
code path, against tests/data/agent_metrics.json (tests/helpers.py says when to record them again). The presets that
tests/agents/test_agents.py trains anyway are compared there, on the first updates of its run.

    JAX_PLATFORMS=cpu python -m tests.agents.test_regression --record

records every preset of a code path (a new method's preset included), keeping the others' records unchanged unless
`--all` is passed, compiled with the test processes' XLA settings (tests/__init__.py).
"""

import json
import sys

import numpy as np
import pytest

from configs.presets import METHODS, PRESETS
from tests.helpers import (RECORD, RECORDED_STEPS, assert_recorded_metrics, distinct_presets, make_agent,
                           recorded_metrics, regression_config, sampling_key, toy_dataset)
from utils.training import train

PRESETS_CHECKED = [p for p in distinct_presets() if PRESETS[p].family != 'visual']
# The presets test_agents.py trains (and compares there).
TRAINED = {p for p in PRESETS_CHECKED if METHODS[PRESETS[p].method].kind in ('bc', 'representation') or PRESETS[p].agent == 'fb'}


def metrics_of(preset):
    """{metric: [value at each of the RECORDED_STEPS updates]} of `preset` trained from seed 0."""
    config = regression_config(preset)
    _, infos = train(make_agent(config, seed=0), toy_dataset(), sampling_key(0), 0, RECORDED_STEPS)
    return {key: np.asarray(values, np.float64).tolist() for key, values in sorted(infos.items())}


def test_every_preset_of_a_code_path_is_recorded():
    missing = [p for p in PRESETS_CHECKED if p not in recorded_metrics()]
    assert not missing, (f'no recorded metrics for {missing}: JAX_PLATFORMS=cpu '
                         f'.venv/bin/python -m tests.agents.test_regression --record')


@pytest.mark.parametrize('preset', [p for p in PRESETS_CHECKED if p not in TRAINED])
def test_agent_metrics_equal_the_recorded_ones(preset):
    assert_recorded_metrics(preset, metrics_of(preset))


if __name__ == '__main__':
    if sys.argv[1:] not in (['--record'], ['--record', '--all']):
        sys.exit(__doc__)
    records = {} if '--all' in sys.argv else recorded_metrics()
    new = [p for p in PRESETS_CHECKED if p not in records]
    records.update({preset: metrics_of(preset) for preset in new})
    with open(RECORD, 'w') as f:
        json.dump({p: records[p] for p in sorted(records)}, f, indent=1, sort_keys=True)
        f.write('\n')
    print(f'recorded {len(new)} preset(s) in {RECORD}: {", ".join(new) or "none new"}')
