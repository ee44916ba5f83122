"""The registry of methods and presets: the one list that main.py, the sweeps, the results tables, the
analyses and the tests read.

    python main.py --agent=configs/presets.py:byol_gamma_a --agent.alpha=6

A *method* is a column of the paper's tables (`METHODS`, in the paper's column order): its agent file,
the config fields it changes, its labels, its kind and whether `alpha` is one of its settings. A
*preset* is a runnable config (`PRESETS`): every method is one, and some methods have variants for a
data family (pixel observations, OGBench's per-environment hyperparameters of the offline RL agents),
which report under the method's column.

`--agent.<key>=<value>` still overrides any field. Alphas: the paper sweeps alpha per method and
environment and reports the best, without listing the winners; each preset starts at a value from its
method's sweep set (BYOL-gamma {1, 6, 40, 100}, TRA {10, 40, 60, 100}, TD-SR {0.001, 0.005, 0.01,
0.05}) and `scripts/` sweeps the rest.

Adding a method touches four places (docs/adding_a_method.md): its agent file in agents/ (with `get_config()` and
`AGENTS`), one `Method` entry below, its test, and the record of its first updates' numbers.
"""

import dataclasses
import importlib
from typing import Any, Dict, Mapping

from utils.errors import ConfigError

KINDS = ('bc', 'representation', 'rl', 'hierarchical')


@dataclasses.dataclass(frozen=True)
class Method:
    agent: str  # agents/<agent>.py, whose get_config() the method starts from; '<agent>:<arg>' for get_config(arg)
    label: str  # column label in Markdown tables and plots
    latex: str  # column label in LaTeX tables
    kind: str  # 'bc' (plain behavior cloning), 'representation' (BC + alpha * L_aux), 'rl', 'hierarchical'
    alpha_applies: bool  # config `alpha` is one of its settings (auxiliary weight or RL temperature)
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # fields changed from the agent's default


@dataclasses.dataclass(frozen=True)
class Preset:
    method: str  # the METHODS column it reports under
    agent: str
    overrides: Mapping[str, Any]
    family: str = ''  # the data family its variant is for ('' = any): 'visual', 'antmaze', 'antmaze_giant', ...


# Two-stage hierarchical presets: half of the paper's steps per stage (1M state, 500k visual).
_TWO_STAGE = dict(high_lr=1e-4, stage1_steps=500_000)

METHODS: Dict[str, Method] = {
    # Main table: BYOL-gamma^a (action-conditioned psi_f, psi_b, f_CE, gamma 0.99).
    'byol_gamma_a': Method('byol_gamma', 'BYOL-γ^a', r'BYOL-$\gamma^a$', 'representation', True),
    # BYOL: one-step, forward only, no action, f_l2.
    'byol': Method('byol_gamma', 'BYOL', 'BYOL', 'representation', True,
                   dict(discount=0.0, backward_predictor=False, action_conditioned=False, loss_type='l2')),
    # TRA (original, pi(psi(s), phi(g))) and TD-SR^a.
    'tra': Method('tra', 'TRA', 'TRA', 'representation', True),
    'tdsr_a': Method('tdsr', 'TD-SR^a', r'TD-SR$^a$', 'representation', True),
    'gcbc': Method('gcbc', 'GCBC', 'GCBC', 'bc', False),
    # Ablations (paper table "BYOL-gamma ablations").
    'byol_gamma_no_a': Method('byol_gamma', 'BYOL-γ −a', r'BYOL-$\gamma$ $-a$', 'representation', True,
                              dict(action_conditioned=False)),
    'byol_gamma_l2': Method('byol_gamma', 'BYOL-γ f_l2', r'BYOL-$\gamma$ $f_{l_2}$', 'representation', True,
                            dict(loss_type='l2')),
    'byol_gamma_no_psi_b': Method('byol_gamma', 'BYOL-γ −ψ_b', r'BYOL-$\gamma$ $-\psi_b$', 'representation', True,
                                  dict(backward_predictor=False)),
    'byol_gamma_gamma0': Method('byol_gamma', 'BYOL-γ γ=0', r'BYOL-$\gamma$ $\gamma=0$', 'representation', True,
                                dict(discount=0.0)),
    'byol_gamma_no_psi_b_gamma0': Method('byol_gamma', 'BYOL-γ −ψ_b γ=0', r'BYOL-$\gamma$ $-\psi_b,\gamma=0$',
                                         'representation', True, dict(backward_predictor=False, discount=0.0)),
    # n-step BYOL^a (appendix "N-step BYOL"): recurrent, action-conditioned, forward only.
    'byol_nstep1_a': Method('byol_gamma', 'BYOL^a n=1', r'BYOL$^a_{n=1}$', 'representation', True,
                            dict(nstep=1, backward_predictor=False)),
    'byol_nstep3_a': Method('byol_gamma', 'BYOL^a n=3', r'BYOL$^a_{n=3}$', 'representation', True,
                            dict(nstep=3, backward_predictor=False)),
    'byol_nstep5_a': Method('byol_gamma', 'BYOL^a n=5', r'BYOL$^a_{n=5}$', 'representation', True,
                            dict(nstep=5, backward_predictor=False)),
    # Action-conditioning ablations: TRA^a (pi(phi(s), phi(g)), psi(s, a)) and TD-SR without actions.
    'tra_a': Method('tra', 'TRA^a', r'TRA$^a$', 'representation', True, dict(action_conditioned=True)),
    'tdsr': Method('tdsr', 'TD-SR', 'TD-SR', 'representation', True, dict(action_conditioned=False)),
    # GCBC with the representation agents' architecture (appendix "GCBC Encoder Ablation").
    'gcbc_phi': Method('gcbc', 'GCBC-φ', r'GCBC-$\phi$', 'bc', False, dict(use_phi=True)),
    # Hierarchical (appendix "Hierarchical Policies", tab:hhparams). HGCBC trains both levels together;
    # HGCBC-phi and HBYOL-gamma are two-stage: the low level for stage1_steps, then the high level (high_lr
    # 1e-4) on the frozen low level, or --agent.stage1_checkpoint=<flat run> for stage 2 alone. Each variant's
    # config holds the fields its two levels read (agents/hierarchical.py's get_config(variant)).
    'hgcbc': Method('hierarchical:hgcbc', 'HGCBC', 'HGCBC', 'hierarchical', False),
    'hgcbc_phi': Method('hierarchical:hgcbc_phi', 'HGCBC-φ', r'HGCBC-$\phi$', 'hierarchical', False, _TWO_STAGE),
    'hbyol_gamma_a': Method('hierarchical:hbyol_gamma', 'HBYOL-γ^a', r'HBYOL-$\gamma^a$', 'hierarchical', True,
                            _TWO_STAGE),
    # FB (appendix "Forward-Backward Algorithm"): the paper sweeps lr {1e-4, 1e-5, 1e-6}; RL, not BC, so it
    # is never bolded against the BC methods.
    'fb': Method('fb', 'FB', 'FB', 'rl', False),
    # Offline goal-conditioned RL baselines (OGBench's reference agents), OGBench's default configs; their
    # per-environment hyperparameters are the `<agent>_<family>` presets below. alpha is their AWR /
    # DDPG+BC temperature.
    'gcivl': Method('gcivl', 'GCIVL', 'GCIVL', 'rl', True),
    'gciql': Method('gciql', 'GCIQL', 'GCIQL', 'rl', True),
    'qrl': Method('qrl', 'QRL', 'QRL', 'rl', True),
    'crl': Method('crl', 'CRL', 'CRL', 'rl', True),
    'hiql': Method('hiql', 'HIQL', 'HIQL', 'rl', False),
}
assert all(method.kind in KINDS for method in METHODS.values())

PRESETS: Dict[str, Preset] = {name: Preset(name, m.agent, dict(m.overrides)) for name, m in METHODS.items()}
# lr-only variants of FB's sweep, as named presets.
PRESETS['fb_lr1e-5'] = Preset('fb', 'fb', dict(lr=1e-5))
PRESETS['fb_lr1e-6'] = Preset('fb', 'fb', dict(lr=1e-6))

# Pixel observations (visual-* datasets; paper: batch 256, 500k steps, a 64-D encoder output after
# OGBench's impala_small CNN). `<method>_visual` adds these to `<method>`. The paper searched gamma in
# {0.66, 0.99} on pixels and found 0.66 better for every representation method, so those use 0.66 (BYOL's
# one-step target has no gamma); BYOL variants use an EMA target (tau 0.99), alpha from the visual grid
# {1, 6, 10, 20}. Random-crop augmentation is off as in OGBench's visual-antmaze commands; OGBench's
# visual-scene commands set --agent.p_aug=0.5.
VISUAL_SETTINGS = dict(encoder='impala_small', batch_size=256, latent_dim=64)
VISUAL_GAMMA = dict(discount=0.66)
VISUAL_OVERRIDES = {
    'gcbc': {},  # OGBench's visual GCBC: one CNN on the stacked (s, g) images
    'gcbc_phi': {},  # GCBC-phi (use_phi): the CNN is phi's first stage
    'byol_gamma_a': dict(VISUAL_GAMMA, tau=0.99),
    'byol': dict(tau=0.99),
    'tra': VISUAL_GAMMA,
    'tra_a': VISUAL_GAMMA,
    'tdsr': VISUAL_GAMMA,
    'tdsr_a': VISUAL_GAMMA,
    'fb': VISUAL_GAMMA,
    'hgcbc_phi': dict(stage1_steps=250_000),  # half of the 500k visual steps per stage
    'hbyol_gamma_a': dict(VISUAL_GAMMA, tau=0.99, stage1_steps=250_000),
}
for _name, _overrides in VISUAL_OVERRIDES.items():
    _base = PRESETS[_name]
    PRESETS[f'{_name}_visual'] = Preset(_name, _base.agent, {**_base.overrides, **VISUAL_SETTINGS, **_overrides}, 'visual')

# The offline RL baselines with OGBench's per-environment hyperparameters (its impls/hyperparameters.sh)
# for a family's stitch datasets: actor goals half same-trajectory, half random, and the alpha / discount /
# subgoal_steps below; giant mazes use discount 0.995. For a navigate dataset add
# --agent.actor_p_trajgoal=1 --agent.actor_p_randomgoal=0 (HIQL: the high_ fields). A dataset's preset is
# `<agent>_<family>`, the family its robot (`<robot>_giant` for a giant maze where the table has one).
_MAZE_ALPHAS = {
    'pointmaze': dict(gcivl=dict(alpha=10.0), gciql=dict(alpha=0.003), qrl=dict(alpha=0.0003), crl=dict(alpha=0.03),
                      hiql=dict(low_alpha=3.0, high_alpha=3.0)),
    'antmaze': dict(gcivl=dict(alpha=10.0), gciql=dict(alpha=0.3), qrl=dict(alpha=0.003), crl=dict(alpha=0.1),
                    hiql=dict(low_alpha=3.0, high_alpha=3.0)),
}
OFFLINE_RL_FAMILIES = {
    **_MAZE_ALPHAS,
    **{f'{maze}_giant': {agent: dict(o, discount=0.995) for agent, o in per_agent.items()}
       for maze, per_agent in _MAZE_ALPHAS.items()},
    'humanoidmaze': dict(gcivl=dict(alpha=10.0, discount=0.995), gciql=dict(alpha=0.1, discount=0.995),
                         qrl=dict(alpha=0.001, discount=0.995), crl=dict(alpha=0.1, discount=0.995),
                         hiql=dict(low_alpha=3.0, high_alpha=3.0, discount=0.995, subgoal_steps=100)),
    'antsoccer': dict(gcivl=dict(alpha=10.0), gciql=dict(alpha=0.1), qrl=dict(alpha=0.003), crl=dict(alpha=0.3),
                      hiql=dict(low_alpha=3.0, high_alpha=3.0)),
}
STITCH_ACTOR_GOALS = dict(actor_p_trajgoal=0.5, actor_p_randomgoal=0.5)
STITCH_HIGH_GOALS = dict(high_p_trajgoal=0.5, high_p_randomgoal=0.5)
for _family, _per_agent in OFFLINE_RL_FAMILIES.items():
    for _agent, _overrides in _per_agent.items():
        _goals = STITCH_HIGH_GOALS if _agent == 'hiql' else STITCH_ACTOR_GOALS
        PRESETS[f'{_agent}_{_family}'] = Preset(_agent, _agent, dict(_goals, **_overrides), _family)


def method_of(preset: str) -> str:
    """The table column of a preset (a preset's own name when unregistered, e.g. an agent name)."""
    return PRESETS[preset].method if preset in PRESETS else preset


def methods_of_kind(*kinds: str):
    return frozenset(name for name, method in METHODS.items() if method.kind in kinds)


def get_config(preset: str = 'byol_gamma_a'):
    if preset not in PRESETS:
        raise ConfigError(f'Unknown preset {preset!r}. Valid presets: {", ".join(PRESETS)}.')
    entry = PRESETS[preset]
    agent, _, arg = entry.agent.partition(':')
    module = importlib.import_module(f'agents.{agent}')
    config = module.get_config(arg) if arg else module.get_config()
    config.update(entry.overrides)
    config.preset = preset
    return config
