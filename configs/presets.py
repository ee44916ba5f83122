"""Named presets: one per column of the paper's tables, each an agent config plus overrides.

    python main.py --agent=configs/presets.py:byol_gamma_a --agent.alpha=6

`--agent.<key>=<value>` still overrides any field. Alphas: the paper sweeps alpha per method and
environment and reports the best, without listing the winners; each preset starts at a value from
its method's sweep set (BYOL-gamma {1, 6, 40, 100}, TRA {10, 40, 60, 100}, TD-SR {0.001, 0.005,
0.01, 0.05}) and `scripts/` sweeps the rest.
"""

import importlib

from utils.errors import ConfigError

PRESETS = {
    # name: (agent module, overrides)
    'gcbc': ('gcbc', {}),
    'gcbc_phi': ('gcbc', dict(encoder='phi')),
    # Main table: BYOL-gamma^a (action-conditioned psi_f, psi_b, f_CE, gamma 0.99).
    'byol_gamma_a': ('byol_gamma', {}),
    # BYOL: one-step, forward only, no action, f_l2.
    'byol': ('byol_gamma', dict(discount=0.0, backward_predictor=False, action_conditioned=False, loss_type='l2')),
    # Ablations (paper table "BYOL-gamma ablations").
    'byol_gamma_no_a': ('byol_gamma', dict(action_conditioned=False)),
    'byol_gamma_l2': ('byol_gamma', dict(loss_type='l2')),
    'byol_gamma_no_psi_b': ('byol_gamma', dict(backward_predictor=False)),
    'byol_gamma_gamma0': ('byol_gamma', dict(discount=0.0)),
    'byol_gamma_no_psi_b_gamma0': ('byol_gamma', dict(backward_predictor=False, discount=0.0)),
    # n-step BYOL^a (appendix "N-step BYOL"): recurrent, action-conditioned, forward only.
    'byol_nstep1_a': ('byol_gamma', dict(nstep=1, backward_predictor=False)),
    'byol_nstep3_a': ('byol_gamma', dict(nstep=3, backward_predictor=False)),
    'byol_nstep5_a': ('byol_gamma', dict(nstep=5, backward_predictor=False)),
    # TRA (original, pi(psi(s), phi(g))) and TRA^a.
    'tra': ('tra', {}),
    'tra_a': ('tra', dict(action_conditioned=True)),
    # TD-SR and TD-SR^a (main table).
    'tdsr': ('tdsr', dict(action_conditioned=False)),
    'tdsr_a': ('tdsr', {}),
    # FB (appendix "Forward-Backward Algorithm"): the paper sweeps lr {1e-4, 1e-5, 1e-6}.
    'fb': ('fb', {}),
    'fb_lr1e-5': ('fb', dict(lr=1e-5)),
    'fb_lr1e-6': ('fb', dict(lr=1e-6)),
    # Hierarchical (appendix "Hierarchical Policies", tab:hhparams). HGCBC trains both levels together;
    # HGCBC-phi and HBYOL-gamma are two-stage: the low level for stage1_steps, then the high level
    # (high_lr 1e-4) on the frozen low level -- half of the default 1M steps each, or
    # --agent.stage1_checkpoint=<flat run> for stage 2 alone.
    'hgcbc': ('hierarchical', {}),
    'hgcbc_phi': ('hierarchical', dict(agent_name='hgcbc_phi', high_lr=1e-4, stage1_steps=500_000)),
    'hbyol_gamma_a': ('hierarchical', dict(agent_name='hbyol_gamma', high_lr=1e-4, stage1_steps=500_000)),
}


def get_config(preset: str = 'byol_gamma_a'):
    if preset not in PRESETS:
        raise ConfigError(f'Unknown preset {preset!r}. Valid presets: {", ".join(PRESETS)}.')
    agent_module, overrides = PRESETS[preset]
    config = importlib.import_module(f'agents.{agent_module}').get_config()
    config.update(overrides)
    config.preset = preset
    return config
