"""Every agent's numbers stay what they were: the per-step metrics of the first updates at seed 0, for a preset of each
code path, trained in float64, against tests/data/agent_metrics.json, within what rounding on any machine can move
them (tests/helpers.py, RECORD_TOLERANCE) and far below a change of 1e-6 in a loss. The presets that
tests/agents/test_agents.py trains anyway are compared there, on the first updates of its run.

    JAX_PLATFORMS=cpu python -m tests.agents.test_regression --record

records every preset of a code path that has no record yet (a new method's preset), keeping the others' records
unchanged unless `--all` is passed (after a change meant to change the numbers).
"""

import json
import re
import sys

import numpy as np
import pytest

from configs.presets import METHODS, PRESETS
from tests.helpers import (RECORD, RECORDED_STEPS, assert_recorded_metrics, distinct_presets, make_agent,
                           record_tolerance, recorded_metrics, regression_config, toy_dataset, train_in_float64)

PRESETS_CHECKED = [p for p in distinct_presets() if PRESETS[p].family != 'visual']
# The presets test_agents.py trains (and compares there).
TRAINED = {p for p in PRESETS_CHECKED if METHODS[PRESETS[p].method].kind in ('bc', 'representation') or PRESETS[p].agent == 'fb'}


def metrics_of(preset):
    """{metric: [value at each of the RECORDED_STEPS updates]} of `preset` trained in float64 from seed 0."""
    _, infos = train_in_float64(make_agent(regression_config(preset), seed=0), toy_dataset(), RECORDED_STEPS)
    return {key: np.asarray(values, np.float64).tolist() for key, values in sorted(infos.items())}


def test_every_preset_of_a_code_path_is_recorded():
    missing = [p for p in PRESETS_CHECKED if p not in recorded_metrics()]
    assert not missing, (f'no recorded metrics for {missing}: JAX_PLATFORMS=cpu '
                         f'.venv/bin/python -m tests.agents.test_regression --record')


@pytest.mark.parametrize('preset', [p for p in PRESETS_CHECKED if p not in TRAINED])
def test_agent_metrics_equal_the_recorded_ones(preset):
    assert_recorded_metrics(preset, metrics_of(preset))


def test_the_tolerance_admits_rounding_and_refuses_a_change_of_one_in_a_million():
    """Every recorded value moved to its float32 neighbour away from zero (the most that rounding on another machine
    can do) still equals its record; the values of any one metric moved by 1e-6 of themselves do not, and at the
    metric's largest value that change is over 6 times the tolerance."""
    for preset, recorded in recorded_metrics().items():
        away_from_zero = {key: np.where(np.asarray(values) < 0, -np.inf, np.inf).astype(np.float32)
                          for key, values in recorded.items()}
        neighbours = {key: np.nextafter(np.float32(values), away_from_zero[key]) for key, values in recorded.items()}
        assert_recorded_metrics(preset, neighbours)
        for key, values in recorded.items():
            values = np.asarray(values)
            if not values.any():
                continue  # zero throughout (a frozen level's gradient norm): no relative change to see
            changed = values * (1 + 1e-6)
            with pytest.raises(AssertionError, match=f'{preset} against its record: (.*; )?{re.escape(key)} at updates'):
                assert_recorded_metrics(preset, {**recorded, key: changed})
            largest = np.argmax(np.abs(values))
            assert np.abs(changed - values)[largest] > 6 * record_tolerance(values)[largest], (preset, key)


def test_a_change_of_one_in_a_million_in_a_loss_fails_the_record():
    """The planted change: BYOL-gamma^a's auxiliary loss L_aux times 1 + 1e-6, in a float64 run (a subclass, so that
    no traced program of the real agent changes). The comparison fails on that loss term and blames the computation,
    not the machine."""
    agent = make_agent(regression_config('byol_gamma_a'), seed=0)

    class Planted(type(agent)):
        def representation_loss(self, batch, z, params):
            loss, info = super().representation_loss(batch, z, params)
            return loss * (1 + 1e-6), info

    planted = Planted(rng=agent.rng, network=agent.network, targets=agent.targets, config=agent.config)
    _, infos = train_in_float64(planted, toy_dataset(), RECORDED_STEPS)
    with pytest.raises(AssertionError) as failure:
        assert_recorded_metrics('byol_gamma_a', infos)
    assert re.match(r'byol_gamma_a against its record: (.*; )?representation/loss at updates \[0', str(failure.value))
    assert 'what the agent computes changed' in str(failure.value)


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
