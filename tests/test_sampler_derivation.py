"""The sampler each preset's config implies, `SamplerConfig.from_config(config)`, stays what it was when
the agent configs still listed every goal mixture (recorded from that code, before the unused mixture
fields were removed): dropping a field an agent does not use must not change a single batch."""

import dataclasses

import pytest

from configs.presets import PRESETS, get_config
from utils.sampler import GoalMixture, SamplerConfig

# preset: (batch_size, gamma, actor_goals, value_goals, nstep, subgoal_steps, high_goals, frame_stack, p_aug,
# gc_negative), each goal mixture as (p_curgoal, p_trajgoal, p_randomgoal, geom_sample).
RECORDED = {
    'byol_gamma_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol': (1024, 0.0, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tra': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tdsr_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gcbc': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_gamma_no_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_gamma_l2': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_gamma_no_psi_b': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_gamma_gamma0': (1024, 0.0, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_gamma_no_psi_b_gamma0': (1024, 0.0, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_nstep1_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 1, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_nstep3_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 3, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_nstep5_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 5, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tra_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tdsr': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gcbc_phi': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hgcbc': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 25, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hgcbc_phi': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 25, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hbyol_gamma_a': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 25, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'fb': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 0.0, 1.0, False), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gcivl': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gciql': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'qrl': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 0.0, 1.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'crl': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hiql': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 25, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'fb_lr1e-5': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 0.0, 1.0, False), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'fb_lr1e-6': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.0, 0.0, 1.0, False), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gcbc_visual': (256, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gcbc_phi_visual': (256, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_gamma_a_visual': (256, 0.66, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'byol_visual': (256, 0.0, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tra_visual': (256, 0.66, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tra_a_visual': (256, 0.66, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tdsr_visual': (256, 0.66, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'tdsr_a_visual': (256, 0.66, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'fb_visual': (256, 0.66, (0.0, 1.0, 0.0, False), (0.0, 0.0, 1.0, False), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hgcbc_phi_visual': (256, 0.99, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 25, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hbyol_gamma_a_visual': (256, 0.66, (0.0, 1.0, 0.0, False), (0.0, 1.0, 0.0, True), 0, 25, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gcivl_pointmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gciql_pointmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'qrl_pointmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.0, 0.0, 1.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'crl_pointmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hiql_pointmaze': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 25, (0.0, 0.5, 0.5, False), 1, 0.0, True),
    'gcivl_antmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gciql_antmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'qrl_antmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.0, 0.0, 1.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'crl_antmaze': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hiql_antmaze': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 25, (0.0, 0.5, 0.5, False), 1, 0.0, True),
    'gcivl_pointmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gciql_pointmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'qrl_pointmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.0, 0.0, 1.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'crl_pointmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hiql_pointmaze_giant': (1024, 0.995, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 25, (0.0, 0.5, 0.5, False), 1, 0.0, True),
    'gcivl_antmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gciql_antmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'qrl_antmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.0, 0.0, 1.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'crl_antmaze_giant': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hiql_antmaze_giant': (1024, 0.995, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 25, (0.0, 0.5, 0.5, False), 1, 0.0, True),
    'gcivl_humanoidmaze': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gciql_humanoidmaze': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'qrl_humanoidmaze': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.0, 0.0, 1.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'crl_humanoidmaze': (1024, 0.995, (0.0, 0.5, 0.5, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hiql_humanoidmaze': (1024, 0.995, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 100, (0.0, 0.5, 0.5, False), 1, 0.0, True),
    'gcivl_antsoccer': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'gciql_antsoccer': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.2, 0.5, 0.3, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'qrl_antsoccer': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.0, 0.0, 1.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'crl_antsoccer': (1024, 0.99, (0.0, 0.5, 0.5, False), (0.0, 1.0, 0.0, True), 0, 0, (0.0, 1.0, 0.0, False), 1, 0.0, True),
    'hiql_antsoccer': (1024, 0.99, (0.0, 1.0, 0.0, False), (0.2, 0.5, 0.3, True), 0, 25, (0.0, 0.5, 0.5, False), 1, 0.0, True),
}


def expected_sampler(recorded):
    batch_size, gamma, actor, value, nstep, subgoal_steps, high, frame_stack, p_aug, gc_negative = recorded
    return SamplerConfig(batch_size=batch_size, gamma=gamma, actor_goals=GoalMixture(*actor), value_goals=GoalMixture(*value),
                         nstep=nstep, subgoal_steps=subgoal_steps, high_goals=GoalMixture(*high), frame_stack=frame_stack,
                         p_aug=p_aug, gc_negative=gc_negative)


def test_every_preset_is_recorded():
    assert sorted(PRESETS) == sorted(RECORDED)


@pytest.mark.parametrize('preset', sorted(RECORDED))
def test_derived_sampler_config_is_the_recorded_one(preset):
    derived = dataclasses.asdict(SamplerConfig.from_config(get_config(preset)))
    assert derived == dataclasses.asdict(expected_sampler(RECORDED[preset]))
