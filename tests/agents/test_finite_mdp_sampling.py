"""scripts/finite_mdp.py's sampled run: BYOL-gamma trained on minibatches drawn from a finite MDP (paper appendix
"Finite MDP") lands on the rank-d truncation of the successor representation, as the full-batch runs of
tests/unit/test_finite_mdp.py do. Thousands of updates: not the fast tier.

Bounds were picked from measurements of the --fast setting (seed 0 is what runs here; seeds 0-5 were measured to check
the margins), quoted next to each bound.
"""

import pytest

from experiments import finite_mdp as F
from tests.helpers import optimized_xla


@pytest.fixture(scope='module')
def cfg():
    return F.fast_config()


def test_sampled_minibatch_training_also_lands_on_sr_truncation(cfg):
    """The default sampled run (s ~ U(S), s+ ~ M~(s, .), batch 512, 10000 steps, decaying lr)."""
    with optimized_xla():
        res = F.run_spectral(F.Config(), cfg.gamma, batch_size=F.Config().sampled_batch)
    final = res['final']
    assert final['err_M_d'] < 0.03                        # measured 0.0137 (seeds 0-5: 0.0134-0.0138)
    assert final['err_P_d'] > 0.15                        # measured 0.173
    assert final['angle'] < 2.0                           # measured 0.35 degrees (seeds 0-5: <= 0.51)
