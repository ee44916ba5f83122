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

# Pixel observations (visual-* datasets; paper: batch 256, 500k steps, a 64-D encoder output after
# OGBench's impala_small CNN). `<preset>_visual` adds these to `<preset>`; BYOL-gamma variants use an
# EMA target (tau 0.99) and BYOL-gamma^a gamma 0.66 (the paper searched {0.66, 0.99} and found 0.66
# better for every method), alpha from the visual grid {1, 6, 10, 20}. Random-crop augmentation is
# off as in OGBench's visual-antmaze commands; OGBench's visual-scene commands set --agent.p_aug=0.5.
VISUAL_SETTINGS = dict(encoder='impala_small', batch_size=256, latent_dim=64)
VISUAL_PRESETS = {
    'gcbc': {},  # OGBench's visual GCBC: one CNN on the stacked (s, g) images
    'gcbc_phi': dict(encoder='phi_impala_small'),  # GCBC-phi: the CNN is phi's first stage
    'byol_gamma_a': dict(discount=0.66, tau=0.99),
    'byol': dict(tau=0.99),
    'tra': {},
    'tra_a': {},
    'tdsr': {},
    'tdsr_a': {},
    'fb': {},
    'hgcbc_phi': dict(stage1_steps=250_000),  # half of the 500k visual steps per stage
    'hbyol_gamma_a': dict(discount=0.66, tau=0.99, stage1_steps=250_000),
}
for _name, _overrides in VISUAL_PRESETS.items():
    _module, _base = PRESETS[_name]
    PRESETS[f'{_name}_visual'] = (_module, {**_base, **VISUAL_SETTINGS, **_overrides})

# Offline goal-conditioned RL baselines (OGBench's reference agents). `<agent>` is OGBench's default
# config; `<agent>_<family>` carries OGBench's per-environment hyperparameters for that family's stitch
# datasets (its impls/hyperparameters.sh): actor goals half same-trajectory, half random, and the alpha /
# discount / subgoal_steps below. For a navigate dataset add --agent.actor_p_trajgoal=1
# --agent.actor_p_randomgoal=0 (HIQL: the high_ fields). Results tables list every family under its agent.
OFFLINE_RL_AGENTS = ('gcivl', 'gciql', 'qrl', 'crl', 'hiql')
OFFLINE_RL_FAMILIES = {
    # family: {agent: overrides}
    'pointmaze': dict(gcivl=dict(alpha=10.0), gciql=dict(alpha=0.003), qrl=dict(alpha=0.0003), crl=dict(alpha=0.03),
                      hiql=dict(low_alpha=3.0, high_alpha=3.0)),
    'antmaze': dict(gcivl=dict(alpha=10.0), gciql=dict(alpha=0.3), qrl=dict(alpha=0.003), crl=dict(alpha=0.1),
                    hiql=dict(low_alpha=3.0, high_alpha=3.0)),
    'humanoidmaze': dict(gcivl=dict(alpha=10.0, discount=0.995), gciql=dict(alpha=0.1, discount=0.995),
                         qrl=dict(alpha=0.001, discount=0.995), crl=dict(alpha=0.1, discount=0.995),
                         hiql=dict(low_alpha=3.0, high_alpha=3.0, discount=0.995, subgoal_steps=100)),
    'antsoccer': dict(gcivl=dict(alpha=10.0), gciql=dict(alpha=0.1), qrl=dict(alpha=0.003), crl=dict(alpha=0.3),
                      hiql=dict(low_alpha=3.0, high_alpha=3.0)),
}
STITCH_ACTOR_GOALS = dict(actor_p_trajgoal=0.5, actor_p_randomgoal=0.5)
STITCH_HIGH_GOALS = dict(high_p_trajgoal=0.5, high_p_randomgoal=0.5)
for _agent in OFFLINE_RL_AGENTS:
    PRESETS[_agent] = (_agent, {})
for _family, _per_agent in OFFLINE_RL_FAMILIES.items():
    for _agent, _overrides in _per_agent.items():
        _goals = STITCH_HIGH_GOALS if _agent == 'hiql' else STITCH_ACTOR_GOALS
        PRESETS[f'{_agent}_{_family}'] = (_agent, dict(_goals, **_overrides))
OFFLINE_RL_PRESETS = frozenset(name for name, (module, _) in PRESETS.items() if module in OFFLINE_RL_AGENTS)


def get_config(preset: str = 'byol_gamma_a'):
    if preset not in PRESETS:
        raise ConfigError(f'Unknown preset {preset!r}. Valid presets: {", ".join(PRESETS)}.')
    agent_module, overrides = PRESETS[preset]
    config = importlib.import_module(f'agents.{agent_module}').get_config()
    config.update(overrides)
    config.preset = preset
    return config
