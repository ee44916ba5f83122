"""Config contract: every value is validated before anything is built, with one clear paragraph;
every config field is documented.

The contract of a config depends on its agent class (the fields it holds, their rules and comments, the foreign fields
it refuses) and on which fields its settings make the agent read (the sampler fields its batches declare, the fields
read only under some settings). So it is tested once per agent class (CLASS_PRESETS) and once per preset whose
overrides change which fields are read (READING_PRESETS); test_every_preset_is_valid checks every preset itself, and
that each holds exactly its agent class's fields."""

import glob
import importlib
import os
import re

import pytest

from agents import config_listing, field_comments, get_agent_class
from configs.presets import PRESETS, get_config as preset_config
from main import request_of
from utils.config_checks import (COMMON_RULES, RuleOwner, at_least, check_unread_settings, field_rules, one_of,
                                 unread_fields, validate_config)
from utils.errors import ConfigError
from utils.training import GOAL_RULES, SAMPLER_FIELDS, SamplerConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (preset, field, bad value, words the error must contain). Each breaks a different kind of rule.
BAD_VALUES = [
    ('byol_gamma_a', 'discount', 1.0, '[0, 1)'),
    ('byol_gamma_a', 'discount', -0.1, '[0, 1)'),
    ('byol_gamma_a', 'loss_type', 'xyz', "'ce', 'l2'"),
    ('byol_gamma_a', 'batch_size', 0, '>= 1'),
    ('byol_gamma_a', 'lr', 0.0, '> 0'),
    ('byol_gamma_a', 'lr', float('nan'), 'finite'),
    ('byol_gamma_a', 'alpha', -1.0, '>= 0'),
    ('byol_gamma_a', 'tau', 0.0, '(0, 1]'),
    ('byol_gamma_a', 'tau', 1.5, '(0, 1]'),
    ('byol_gamma_a', 'num_ensemble', 0, '>= 1'),
    ('byol_gamma_a', 'nstep', -1, '>= 0'),
    ('byol_gamma_a', 'latent_dim', -4, '>= 0'),
    ('byol_gamma_a', 'encoder_hidden_dims', (), 'layer sizes'),
    ('byol_gamma_a', 'actor_hidden_dims', (512, 0), 'layer sizes'),
    ('byol_gamma_a', 'value_p_randomgoal', 1.5, 'probability'),
    ('byol_gamma_a', 'actor_p_curgoal', -0.5, 'probability'),
    ('gcbc', 'encoder', 'resnet', "'none', 'impala'"),
    ('gcbc', 'encoder', 'phi', "'none', 'impala'"),  # GCBC-phi is use_phi=True, not an encoder name
    ('byol_gamma_a', 'ce_eps', -1.0, '>= 0'),
    ('fb', 'actor_noise', -0.1, '>= 0'),
    ('hiql', 'subgoal_steps', 0, '>= 1'),
    ('hiql', 'high_alpha', float('inf'), 'finite'),
    ('hbyol_gamma_a', 'stage1_steps', -1, '>= 0'),
    ('tdsr_a', 'batch_size', 1, '>= 2'),
    ('tra', 'norm_penalty', -1e-6, '>= 0'),
    ('fb', 'z_state_ratio', 2.0, 'probability'),
    ('hgcbc', 'high_lr', -1.0, '> 0'),
    ('hgcbc', 'replan_every', 0, '>= 1'),
    ('hgcbc', 'high_p_trajgoal', 0.5, 'must sum to 1'),
    ('gcivl', 'expectile', 1.0, '(0, 1)'),
    ('gciql', 'actor_loss', 'sac', "'ddpgbc', 'awr'"),
]


def checked(config):
    validate_config(config, get_agent_class(config.agent_name))


def fields_read(preset):
    """What `preset`'s settings make its agent read: the agent, the fields it reads only under other settings, and the
    sampler fields its batches declare."""
    config = preset_config(preset)
    agent_class = get_agent_class(config.agent_name)
    return config.agent_name, sorted(unread_fields(config, agent_class)), sorted(agent_class.BATCH.fields(config))


def first_preset_by(key):
    """The first preset (in registry order) of each value of `key(preset)`."""
    firsts = {}
    for preset in PRESETS:
        firsts.setdefault(repr(key(preset)), preset)
    return list(firsts.values())


# The first preset of each agent class (its method's own), and of each distinct `fields_read` (those among them).
CLASS_PRESETS = first_preset_by(lambda preset: preset_config(preset).agent_name)
READING_PRESETS = first_preset_by(fields_read)


def test_every_preset_is_valid():
    """Every preset passes the config check and holds exactly the fields of its agent class's preset in CLASS_PRESETS
    (a preset changes values, never which fields a config has): what the per-class tests find holds for each."""
    class_fields = {preset_config(p).agent_name: sorted(preset_config(p)) for p in CLASS_PRESETS}
    for preset in PRESETS:
        config = preset_config(preset)
        checked(config)
        assert sorted(config) == class_fields[config.agent_name], preset


@pytest.mark.parametrize('preset,key,value,words', BAD_VALUES)
def test_bad_value_is_one_paragraph_naming_field_value_and_fix(preset, key, value, words):
    config = preset_config(preset)
    config[key] = value
    with pytest.raises(ConfigError) as error:
        checked(config)
    message = str(error.value)
    assert words in message and key in message and '\n' not in message
    assert '--agent.' in message  # the fix: an override to pass


def test_a_mixture_that_does_not_sum_to_one_names_all_three_fields():
    config = preset_config('byol_gamma_a')
    config.value_p_trajgoal, config.value_p_curgoal = 0.5, 0.2
    with pytest.raises(ConfigError, match='agent.value_p_curgoal=0.2, agent.value_p_trajgoal=0.5, agent.value_p_randomgoal=0.0'):
        checked(config)


def test_a_non_finite_value_gets_the_fields_own_example():
    config = preset_config('byol_gamma_a')
    config.lr = float('nan')
    with pytest.raises(ConfigError) as error:
        checked(config)
    assert 'agent.lr=nan' in str(error.value) and '(e.g. --agent.lr=0.0003)' in str(error.value)
    assert 'a finite number)' not in str(error.value)
    config = preset_config('fb')
    config.actor_noise = float('inf')
    with pytest.raises(ConfigError, match=r'e\.g\. --agent\.actor_noise=0\.2\)'):
        checked(config)


# Every field any preset's config holds, with its value there: what another agent's config could carry by mistake.
ALL_FIELDS = {key: value for preset in sorted(PRESETS) for key, value in preset_config(preset).items() if key != 'preset'}


@pytest.mark.parametrize('preset', READING_PRESETS)
def test_every_field_has_a_rule_and_the_sampler_reads_what_the_agent_declares(preset):
    """The config contract: a bad value of any field gets a requirement and a valid example, a field nothing reads
    cannot be in a config, and the sampler is built from exactly the fields the agent's BatchSpec declares: each
    declared field, changed, changes the sampler config (SamplerConfig.for_agent reads it), and the config holds no
    sampler field the agent does not declare."""
    config = preset_config(preset)
    agent_class = get_agent_class(config.agent_name)
    spec = agent_class.BATCH
    assert [key for key in config if key != 'preset' and key not in field_rules(agent_class)] == []
    assert {key[:-len('_p_curgoal')] for key in config if key.endswith('_p_curgoal')} == set(spec.mixtures)
    assert {key for key in config if key in SAMPLER_FIELDS} == set(spec.reads), preset
    sampler = SamplerConfig.for_agent(agent_class, config)
    for field in spec.fields(config):
        changed, value = preset_config(preset), config[field]
        if isinstance(value, bool):
            changed[field] = not value
            if field.endswith('_geom_sample') and 'discount' not in changed:  # now geometric: needs its gamma
                changed['discount'] = 0.99
        elif isinstance(value, int):
            changed[field] = value + 1
        elif isinstance(value, str):  # goal_rule
            changed[field] = next(rule for rule in GOAL_RULES if rule != value)
        else:
            changed[field] = 0.5 if value != 0.5 else 0.25
        assert SamplerConfig.for_agent(agent_class, changed) != sampler, (preset, field)


@pytest.mark.parametrize('preset', CLASS_PRESETS)
def test_a_field_the_agent_does_not_read_is_refused(preset):
    """Every field of any other preset's config that this preset's agent does not read (another method's
    hyperparameters, a sampler field or goal mixture it does not declare, BYOL-gamma's fields on HGCBC) is refused,
    naming it; none is silently carried."""
    config = preset_config(preset)
    agent_class = get_agent_class(config.agent_name)
    # `discount` is read by an agent with goal mixtures whenever one is geometric, so its config may hold it.
    may_hold = {'discount'} if agent_class.BATCH.mixtures else set()
    foreign = sorted(key for key in ALL_FIELDS if key not in config and key not in may_hold)
    assert foreign, preset
    for key in foreign:
        assert key not in field_rules(agent_class), (preset, key)
        carrying = preset_config(preset)
        carrying[key] = ALL_FIELDS[key]
        with pytest.raises(ConfigError, match=f"'{key}' of agent '{config.agent_name}' are read by no part of it"):
            checked(carrying)


def test_hgcbc_configs_hold_none_of_byol_gammas_fields():
    """HGCBC and HGCBC-phi have GCBC low levels: BYOL-gamma's own fields are not in their configs (and so refused,
    above); HBYOL-gamma's low level is BYOL-gamma, whose fields its config holds."""
    byol_only = set(preset_config('byol_gamma_a')) - set(preset_config('gcbc'))
    assert {'alpha', 'loss_type', 'ce_eps', 'action_conditioned', 'backward_predictor', 'tau', 'nstep',
            'predictor_hidden_dims', 'value_p_trajgoal'} <= byol_only
    for preset in ('hgcbc', 'hgcbc_phi', 'hgcbc_phi_visual'):
        assert not byol_only & set(preset_config(preset)), preset
    assert byol_only - {'actor_p_curgoal'} <= set(preset_config('hbyol_gamma_a'))
    assert 'use_phi' not in preset_config('hgcbc') and 'latent_dim' not in preset_config('hgcbc')


@pytest.mark.parametrize('field', ['nstpe', 'value_p_trajgol', 'high_p_curgoal'])
def test_a_field_nothing_reads_is_an_error_naming_it(field):
    """A misspelled field (in a config file or a preset's overrides) would otherwise be silently ignored and the
    value it meant to set left at its default; a goal mixture the agent does not declare would never be drawn."""
    config = preset_config('byol_gamma_a')
    config[field] = 1.0
    with pytest.raises(ConfigError, match=f"'{field}' of agent 'byol_gamma' are read by no part of it"):
        checked(config)


def test_a_declared_sampler_field_missing_from_the_config_is_named():
    for preset, field in [('byol_gamma_a', 'value_geom_sample'), ('byol_gamma_a', 'discount'), ('byol_gamma_a', 'nstep'),
                          ('hiql', 'subgoal_steps'), ('gcivl', 'gc_negative'), ('fb', 'frame_stack')]:
        config = preset_config(preset)
        del config[field]
        with pytest.raises(ConfigError, match=f"declares batches that need {field} "):
            checked(config)
    # GCBC's actor goals are uniform over the future: no discount read, until they are geometric.
    config = preset_config('gcbc')
    del config['discount']
    checked(config)
    config.actor_geom_sample = True
    with pytest.raises(ConfigError, match="declares batches that need discount "):
        checked(config)


def test_common_rules_are_for_fields_every_agent_has():
    for module in agent_modules():
        config = importlib.import_module(f'agents.{module}').get_config()
        assert set(COMMON_RULES) <= set(config), f'agents/{module}.py lacks {set(COMMON_RULES) - set(config)}'


def test_subclass_rules_extend_and_override_their_bases():
    class Base(RuleOwner):
        CONFIG_RULES = {'a': at_least(1, 1), 'b': one_of('x', 'y')}

    class Child(Base):
        CONFIG_RULES = {'b': one_of('z'), 'c': at_least(0, 0)}

    class GrandChild(Child):
        pass

    assert sorted(Child.CONFIG_RULES) == sorted(GrandChild.CONFIG_RULES) == ['a', 'b', 'c']
    assert Child.CONFIG_RULES['b'].example == 'z' and Base.CONFIG_RULES['b'].example == 'x'
    assert Child.CONFIG_RULES['a'] is Base.CONFIG_RULES['a']


def test_a_field_a_base_does_not_read_stays_unread_below_it():
    class Base(RuleOwner):
        CONFIG_RULES = {'a': at_least(1, 1), 'b': one_of('x')}

    class Child(Base):
        CONFIG_RULES = {'a': None}

    class GrandChild(Child):
        CONFIG_RULES = {'c': at_least(0, 0)}

    assert sorted(Child.CONFIG_RULES) == ['b'] and sorted(GrandChild.CONFIG_RULES) == ['b', 'c']


def changed_value(rule, value):
    """A value of `value`'s type, other than it, that `rule` accepts."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, tuple):
        candidates = [rule.example, tuple(size + 1 for size in value)]
    elif isinstance(value, int):
        candidates = [rule.example, value + 1]
    elif isinstance(value, float):
        candidates = [rule.example, value * 0.5, value + 1.0]
    else:
        candidates = [rule.example]
    return next(c for c in candidates if c != value and type(c) is type(value) and rule.check(c))


@pytest.mark.parametrize('preset', READING_PRESETS)
def test_a_field_the_presets_settings_never_read_is_refused_when_changed(preset):
    """Every field that its agent reads only under some settings (GCBC's phi fields without use_phi, n-step BYOL's
    target mixture and discount, ce_eps under f_l2, a discount no geometric trajectory goal reads, crop
    augmentation on state vectors...): changed where this preset's settings do not read it, it is refused, naming the
    settings that would read it; changed where they do, it is accepted."""
    config = preset_config(preset)
    agent_class = get_agent_class(config.agent_name)
    rules = field_rules(agent_class)
    unread = unread_fields(config, agent_class)
    conditional = [field for field in config if field in rules and rules[field].read_if is not None]
    assert set(unread) <= set(conditional)
    for field in conditional:
        changed = preset_config(preset)
        changed[field] = changed_value(rules[field], config[field])
        if field in unread:
            with pytest.raises(ConfigError, match=f'agent.{field}=.* is read only when {re.escape(unread[field])}'):
                check_unread_settings(changed, config, agent_class)
        else:
            check_unread_settings(changed, config, agent_class)


def test_the_conditional_fields_are_the_agents_own():
    """What the presets leave unread, spelled out for the cases a sweep would most likely hit."""
    def unread(preset):
        config = preset_config(preset)
        return set(unread_fields(config, get_agent_class(config.agent_name))) - {'p_aug'}

    assert unread('gcbc') == {'encoder_hidden_dims', 'encoder_layer_norm', 'latent_dim', 'num_ensemble', 'discount'}
    assert unread('gcbc_phi') == {'discount'}
    assert unread('byol_gamma_a') == set()
    assert unread('byol_gamma_l2') == {'ce_eps'}
    assert unread('byol_nstep3_a') == {'backward_predictor', 'discount', 'value_p_curgoal', 'value_p_trajgoal',
                                       'value_p_randomgoal', 'value_geom_sample'}
    assert unread('qrl') == {'discount', 'value_geom_sample'} and unread('gcivl') == set()
    assert unread('tdsr_a') == set() and unread('fb') == {'value_geom_sample'}


@pytest.mark.parametrize('override', [
    '--agent.discount=1.0', '--agent.loss_type=xyz', '--agent.value_p_trajgoal=0.5', '--agent.batch_size=0',
])
def test_main_rejects_bad_values_before_loading_data(override, tmp_path):
    # main.py's request check: the run stops at the config, before it looks for data or writes anything.
    with pytest.raises(ConfigError) as error:
        request_of(['main.py', override, f'--dataset_dir={tmp_path}', '--nodownload', f'--save_dir={tmp_path}'])
    paragraph = str(error.value)
    assert override.split('=')[0][2:] in paragraph and '\n' not in paragraph
    assert not any(tmp_path.iterdir()), 'nothing may be written for a rejected config'


def agent_modules():
    names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'agents', '*.py')))
    return [n for n in names if n != '__init__' and hasattr(importlib.import_module(f'agents.{n}'), 'get_config')]


@pytest.mark.parametrize('preset', CLASS_PRESETS)
def test_every_config_field_has_a_one_line_comment(preset):
    """House style, and what main.py --print_config shows: each field of a preset's config has its one-line comment,
    from its agent file's get_config(), the shared encoder fields (agents/base.py) or its goal mixture's line."""
    config = preset_config(preset)
    comments = field_comments(get_agent_class(config.agent_name))
    undocumented = [key for key in config if len(comments.get(key, '')) <= 3]
    assert not undocumented, f'{preset}: fields without a comment: {undocumented}'
    listing = config_listing(config, f'configs/presets.py:{preset}')
    assert len(listing.splitlines()) == 1 + len(config) and '(no comment' not in listing


KSTEP_CONFIG_FILE = '''
import ml_collections
from agents.base import encoder_fields
from utils.training import goal_mixture


def get_config():
    return ml_collections.ConfigDict(dict(agent_name='kstep_rollout', lr=3e-4, batch_size=1024, **encoder_fields(),
                                          alpha=1.0, frame_stack=1, p_aug=0.0, goal_rule='ogbench',
                                          **goal_mixture('actor'), nstep=3))
'''


def test_an_agents_stricter_rule_on_a_sampler_field_holds_beside_the_samplers(tmp_path, monkeypatch):
    """A new agent (a K-step latent rollout) reads the sampler's `nstep` and needs at least one step: its own rule,
    `nstep >= 1`, holds beside the sampler's `nstep >= 0` (replaced by it, `nstep=0` would pass the
    request check and crash in the sampler), and main.py's request check refuses `--agent.nstep=0` with one
    paragraph naming that one field and the agent's requirement, before it writes anything."""
    import agents
    from agents.base import BCAgent

    class KStepRolloutAgent(BCAgent):
        CONFIG_RULES = {'nstep': at_least(1, 3)}
        BATCH = BCAgent.BATCH.with_(reads=['nstep'])

    registered = agents.agent_classes()
    monkeypatch.setattr(agents, 'agent_classes', lambda: {**registered, 'kstep_rollout': KStepRolloutAgent})
    config_file = tmp_path / 'kstep.py'
    config_file.write_text(KSTEP_CONFIG_FILE)
    save_dir = tmp_path / 'runs'
    command = ['main.py', f'--agent={config_file}', f'--dataset_dir={tmp_path}', '--nodownload', f'--save_dir={save_dir}']
    assert request_of(command + ['--agent.nstep=1']).config.nstep == 1
    for bad in (0, -1):
        with pytest.raises(ConfigError) as error:
            request_of(command + [f'--agent.nstep={bad}'])
        paragraph = str(error.value)
        assert f'agent.nstep={bad} is invalid: it must be >= 1' in paragraph and '\n' not in paragraph, paragraph
        assert re.findall(r'agent\.(\w+)=', paragraph) == ['nstep'] * paragraph.count('agent.'), paragraph
    assert not save_dir.exists()
    # The shared rule still holds for the agent, and a common field's rule composes the same way.
    rules = field_rules(KStepRolloutAgent)
    assert not rules['nstep'].check(-1) and not rules['nstep'].check(0) and rules['nstep'].check(2)
    assert rules['batch_size'].broken_by(0).requirement == 'must be >= 1'
