"""Checks of `--agent` config files and `--agent.<key>=<value>` overrides, with clear errors."""

import functools
import importlib.util
import inspect
import math
import os
import re
import traceback

import ml_collections

from utils.errors import ConfigError
from utils.image_encoders import VISUAL_ENCODERS
from utils.training import GOAL_RULES, MIXTURE_FIELDS, SAMPLER_FIELDS, BatchSpec


# Config files already executed in this process, by (absolute path, source bytes): a request check reads its file
# twice, and a sweep checks many commands of one file, so each is executed once, not once per read.
_CONFIG_MODULES = {}


def load_config_file(spec: str):
    """Load `path[:arg]` as ml_collections' config-file flag would: get_config() or get_config(arg). The one reader of
    an --agent file (main.py's flag gets the config it returns). Each call gets a config of its own; a file is executed
    again only when its bytes change. A file that cannot give a config (a directory, a syntax error, an error while it
    runs, no get_config, an argument get_config does not take, a result that is not an ml_collections ConfigDict with
    an agent_name) is a ConfigError naming the file and the fix."""
    path, _, arg = spec.partition(':')
    usage = 'Use --agent=agents/<name>.py (e.g. agents/byol_gamma.py) or --agent=configs/presets.py:<preset>.'
    if not os.path.exists(path):
        raise ConfigError(f'Agent config file {path!r} not found. {usage}')
    if not os.path.isfile(path):
        raise ConfigError(f'--agent={spec}: {path} is a directory, not a config file. {usage}')
    try:
        with open(path, 'rb') as f:
            key = (os.path.abspath(path), f.read())
    except OSError as e:
        raise ConfigError(f'Cannot read agent config file {path}: {e.strerror or e}. Make it readable, or name another '
                          f'with --agent.') from None
    module = _CONFIG_MODULES.get(key)
    if module is None:
        module = _execute(path)
        _CONFIG_MODULES[key] = module
    get_config = getattr(module, 'get_config', None)
    if not callable(get_config):
        raise ConfigError(f'Agent config file {path} defines no get_config() function, which --agent calls for the '
                          f'config. Define one returning an ml_collections.ConfigDict, as agents/*.py do. {usage}')
    args = (arg,) if arg else ()
    try:
        inspect.signature(get_config).bind(*args)
    except TypeError:
        if arg:
            raise ConfigError(f'--agent={spec}: get_config() of {path} takes no argument, but ":{arg}" passes one. '
                              f'Drop ":{arg}" (--agent={path}), or name a file whose get_config takes one, like '
                              f'configs/presets.py:<preset>.') from None
        raise ConfigError(f'--agent={spec}: get_config() of {path} needs an argument: pass it after a colon, '
                          f'--agent={path}:<argument> (e.g. configs/presets.py:gcbc).') from None
    except ValueError:  # a callable without a signature (a builtin): called as is
        pass
    try:
        config = get_config(*args)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f'get_config({", ".join(map(repr, args))}) of agent config file {path} raised '
                          f'{type(e).__name__}{_where(e, path)}: {e}. Fix the file, or name another with --agent.') from None
    if not isinstance(config, ml_collections.ConfigDict) or 'agent_name' not in config:
        got = (f'returned {type(config).__name__}' if not isinstance(config, ml_collections.ConfigDict)
               else 'returned a config without agent_name')
        raise ConfigError(f'get_config() of agent config file {path} {got}; --agent needs an ml_collections.ConfigDict '
                          f'naming its agent (agent_name), as agents/*.py return. Fix the file, or name another with '
                          f'--agent.')
    return config


def _execute(path: str):
    """The module of config file `path`, executed (`read_python_file`)."""
    module_spec = importlib.util.spec_from_file_location('agent_config', path)
    module = importlib.util.module_from_spec(module_spec)
    read_python_file(path, lambda: module_spec.loader.exec_module(module))
    return module


def read_python_file(path: str, execute, fix: str = 'Fix it, or name another with --agent.'):
    """`execute()`, which runs the Python file `path` (an --agent config file; an agents/ module, imported to find the
    agent classes), with a syntax error or an error while it runs as one ConfigError paragraph naming the file, the
    line and `fix`."""
    try:
        return execute()
    except SyntaxError as e:
        raise ConfigError(f'Agent config file {path} has a syntax error (line {e.lineno}: {e.msg}). {fix}') from None
    except Exception as e:
        raise ConfigError(f'Agent config file {path} raised {type(e).__name__}{_where(e, path)} while it was read: {e}. '
                          f'{fix}') from None


def _where(error: BaseException, path: str) -> str:
    """' at line N' of the deepest line of `path` in `error`'s traceback ('' if none is there)."""
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
             if os.path.abspath(frame.filename) == os.path.abspath(path)]
    return f' at line {lines[-1]}' if lines else ''


def check_override_keys(argv, spec: str, config):
    """Raise ConfigError for any `--agent.<key>` in `argv` that `config`, read from --agent=`spec`, does not define."""
    for arg in argv:
        match = re.match(r'--agent\.([A-Za-z0-9_]+)', arg)
        if match and match.group(1) not in config:
            raise ConfigError(
                f'Unknown config key {match.group(1)!r} in {arg!r} for {spec}. Valid keys: {", ".join(sorted(config))}.'
            )


def _describe(value) -> str:
    if isinstance(value, tuple):
        return f'tuple of {type(value[0]).__name__}' if value else 'tuple'
    return type(value).__name__


def check_types(config, defaults):
    """Every field keeps the type of its default (tuples stay tuples of the same element type)."""
    for key, default in defaults.items():
        value = config[key]
        if isinstance(default, bool) or isinstance(value, bool):
            ok = isinstance(value, bool) and isinstance(default, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float))
        elif isinstance(default, tuple):
            ok = isinstance(value, tuple) and all(type(v) is type(d) for v in value for d in default[:1])
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ConfigError(
                f'Config field {key!r} must be a {_describe(default)} like its default, got {value!r}. '
                f'Example: --agent.{key}="{str(default).replace(" ", "")}"'
            )


# ---------------------------------------------------------------------------------------------
# Value checks: the one place where config values are judged. Every agent config is checked before
# anything is built or compiled, so a bad value stops the run with one paragraph naming the field, the
# value and a valid example, instead of a traceback (or, worse, a NaN loss thousands of steps later).
# The rules are data, each kept by its owner: COMMON_RULES below for the fields every agent's config
# has, and an agent class's `CONFIG_RULES` for the fields it reads (a family's shared fields on the
# family's base class, or in a shared dict its owners include, e.g. agents/base.py's ENCODER_RULES).
# A key that is a tuple of field names is a rule on those fields together (its check receives their
# values in that order). Every field of an agent's config has a rule, so a field no rule owns is one nothing
# reads: an error. A field read only under some settings says which (`Rule.only_when`), and a config that changes it
# where nothing reads it is an error too. The sampler's fields have theirs (SAMPLER_RULES, the goal mixtures), for the
# agents whose BatchSpec declares them; an agent's own rule on such a field, or on a common one, holds beside the
# shared rule (AllOf). Agents, the sampler and the networks check nothing themselves.
# ---------------------------------------------------------------------------------------------


class Rule:
    """A requirement on one config value (or, keyed by a tuple of fields, on several): `check(*values) ->
    bool`, described as `requirement`, with an `example` of a valid value (or flags) for the fix. A field read only
    under some settings carries `read_if`: (predicate(config) -> bool, those settings in words)."""

    def __init__(self, check, requirement: str, example, read_if=None):
        self.check, self.requirement, self.example, self.read_if = check, requirement, example, read_if

    def only_when(self, predicate, settings: str) -> 'Rule':
        """This rule, on a field that the agent reads only when `predicate(config)` holds (`settings`, in words)."""
        return Rule(self.check, self.requirement, self.example, (predicate, settings))

    def reading(self, transform) -> 'Rule':
        """This rule with its read condition judged on `transform(config)` (a level's own config, for a hierarchy)."""
        if self.read_if is None:
            return self
        predicate, settings = self.read_if
        return Rule(self.check, self.requirement, self.example, (lambda config: predicate(transform(config)), settings))

    def broken_by(self, *values) -> 'Rule':
        """The rule `values` break (this one), None if they meet it."""
        return None if self.check(*values) else self


class AllOf(Rule):
    """The rules of a field that several owners read (an agent's own rule on a sampler field, a goal mixture's or a
    common field): a value must meet every one, and a value that breaks one is described by the first it breaks, so
    an agent's stricter rule (`nstep >= 1`) holds beside the shared one (`nstep >= 0`) instead of being replaced by it.
    The field is read wherever any of its owners reads it."""

    def __init__(self, *rules):
        self.rules = rules
        conditions = [rule.read_if for rule in rules]
        read_if = None if None in conditions else (lambda config: any(p(config) for p, _ in conditions),
                                                    ' or '.join(dict.fromkeys(s for _, s in conditions)))
        super().__init__(lambda *values: self.broken_by(*values) is None, rules[0].requirement, rules[0].example, read_if)

    def broken_by(self, *values) -> Rule:
        return next((rule for rule in self.rules if not rule.check(*values)), None)

    def only_when(self, predicate, settings: str) -> Rule:
        return AllOf(*(rule.only_when(predicate, settings) for rule in self.rules))

    def reading(self, transform) -> Rule:
        return AllOf(*(rule.reading(transform) for rule in self.rules))


def is_finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive(example):
    return Rule(lambda v: is_finite_number(v) and v > 0, 'must be a finite number > 0', example)


def non_negative(example):
    return Rule(lambda v: is_finite_number(v) and v >= 0, 'must be a finite number >= 0', example)


def at_least(low: int, example):
    return Rule(lambda v: is_finite_number(v) and v >= low, f'must be >= {low}', example)


def probability(example):
    return Rule(lambda v: is_finite_number(v) and 0.0 <= v <= 1.0, 'must be a probability in [0, 1]', example)


def one_of(*choices):
    return Rule(lambda v: v in choices, f'must be one of {", ".join(repr(c) for c in choices)}', choices[0])


def layer_sizes(example):
    return Rule(lambda v: len(v) > 0 and all(is_finite_number(d) and d >= 1 for d in v),
                'must be a non-empty tuple of positive layer sizes', example)


def switch(example: bool = False):
    return Rule(lambda v: isinstance(v, bool), 'must be True or False', example)


def text(example: str):
    return Rule(lambda v: isinstance(v, str), 'must be a string', repr(example))


# The fields every agent's config has (tests/unit/test_config.py checks that every agent's does). The fields shared
# by the agents that encode observations are agents/base.py's ENCODER_FIELDS.
COMMON_RULES = {
    'agent_name': text('gcbc'),
    'lr': positive(3e-4),
    'batch_size': at_least(1, 1024),
}

# gamma: of the geometric goal offsets (the sampler) and of the losses that discount.
DISCOUNT_RULE = Rule(lambda v: is_finite_number(v) and 0.0 <= v < 1.0,
                     'must lie in [0, 1) (geometric offsets k ~ Geometric(1 - gamma) need gamma < 1)', 0.99)

# The rules of the sampler's fields (utils/training.py's SAMPLER_FIELDS), which hold for the agents that declare them
# in their BatchSpec. Crop augmentation acts on images only.
SAMPLER_RULES = {
    'nstep': non_negative(0),
    'subgoal_steps': at_least(1, 25),
    'frame_stack': at_least(1, 1),
    'p_aug': probability(0.5).only_when(lambda c: c.get('encoder', 'none') in VISUAL_ENCODERS,
                                        'an image encoder reads pixel observations (encoder=impala_small)'),
    'gc_negative': switch(True),
}
if set(SAMPLER_RULES) != set(SAMPLER_FIELDS):
    raise AssertionError('every sampler field (utils/training.py) needs its rule here, and only those')

# A goal mixture's fields (utils/training.py): three probabilities that sum to 1, and the trajectory offsets' law.
MIXTURE_PROBABILITIES = MIXTURE_FIELDS[:3]
# Config keys that name a config rather than set it.
LABELS = ('preset',)


class RuleOwner:
    """A class with `CONFIG_RULES = {field: Rule}` for the fields it reads. A subclass lists only its own
    rules: they are merged with its bases' when the class is defined (a rule on a field a base also
    checks replaces the base's; `None` for a field of its bases that it does not read removes it), so
    `SomeAgent.CONFIG_RULES` is every rule its config must meet besides COMMON_RULES and those of the sampler fields
    its `BATCH` declares (utils/training.py)."""

    CONFIG_RULES = {}
    BATCH = BatchSpec()  # what its batches hold: its goal mixtures and the sampler fields its config sets

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        rules = {}
        for base in reversed(cls.__bases__):  # each base's CONFIG_RULES is already merged with its own bases'
            rules.update(getattr(base, 'CONFIG_RULES', {}))
        rules.update(vars(cls).get('CONFIG_RULES', {}))
        cls.CONFIG_RULES = {field: rule for field, rule in rules.items() if rule is not None}


def field_rules(agent_class) -> dict:
    """{field: Rule} of every field an agent's config may (and must, for the sampler's) hold: the agent's CONFIG_RULES,
    COMMON_RULES and the sampler fields its BATCH declares (goal mixtures, `discount`, SAMPLER_FIELDS). A field that
    the agent and a shared owner both have a rule for is held to both (`AllOf`, the agent's first). A goal mixture's
    fields are read when the agent draws it (its BATCH may draw it under some settings only), its `geom_sample` when it
    also draws trajectory goals; `discount`, unless the agent's losses read it, when a mixture draws geometric
    trajectory offsets."""
    rules = {k: r for k, r in agent_class.CONFIG_RULES.items() if isinstance(k, str)}

    def also(field, rule):
        held = rules.get(field)
        rules[field] = rule if held is None or held is rule else AllOf(held, rule)

    for field, rule in COMMON_RULES.items():
        also(field, rule)
    spec = agent_class.BATCH
    for mixture in spec.mixtures:
        drawn, when = spec.draw_condition(mixture)
        for field in MIXTURE_PROBABILITIES:
            also(f'{mixture}_{field}', probability(0.0) if drawn is None else probability(0.0).only_when(drawn, when))
        also(f'{mixture}_geom_sample', switch(False).only_when(
            functools.partial(spec.draws_trajectory_goals, mixture),
            f'{mixture} goals come from the trajectory ({mixture}_p_trajgoal > 0{", " + when if when else ""})'))
    if spec.goals:
        also('goal_rule', one_of(*GOAL_RULES))
        if 'discount' not in rules:  # an agent whose losses read it has its own rule (DISCOUNT_RULE: gamma < 1 too)
            rules['discount'] = DISCOUNT_RULE.only_when(
                spec.geometric_offsets, 'a goal mixture draws geometric trajectory offsets (<mixture>_geom_sample=True '
                                        'and <mixture>_p_trajgoal > 0)')
    for field in spec.reads:
        also(field, SAMPLER_RULES[field])
    return rules


def unread_fields(config, agent_class) -> dict:
    """{field: the settings under which it would be read} of the fields of `config` that `agent_class` reads only
    under settings this config does not have."""
    rules = field_rules(agent_class)
    return {field: rules[field].read_if[1] for field in config.keys()
            if field in rules and rules[field].read_if is not None and not rules[field].read_if[0](config)}


def check_unread_settings(config, defaults, agent_class):
    """ConfigError for a field that `config` sets away from `defaults` (its config file's own values) although, with
    its other settings, nothing reads it: a sweep over it would train one network under several names."""
    changed = [(field, settings) for field, settings in unread_fields(config, agent_class).items()
               if field in defaults and _plain(config[field]) != _plain(defaults[field])]
    if changed:
        name = config['agent_name'] if 'agent_name' in config else agent_class.__name__
        shown = '; '.join(f'agent.{field}={config[field]!r} is read only when {settings}' for field, settings in changed)
        raise ConfigError(
            f'{shown}. With this config\'s other settings no part of agent {name!r} reads '
            f'{"it" if len(changed) == 1 else "them"}: the run would train exactly what it trains without the '
            f'override, under another run name. Drop the override, or change the setting that makes it read.')


def _plain(value):
    return list(value) if isinstance(value, (tuple, list)) else value


def _shown(value) -> str:
    return str(value).replace(' ', '') if isinstance(value, tuple) else str(value)


def _invalid(key, value, requirement, example) -> ConfigError:
    return ConfigError(
        f'Config value agent.{key}={value!r} is invalid: it {requirement}. '
        f'Fix the override (e.g. --agent.{key}={_shown(example)}) or the config file.'
    )


def _mixture_rules(agent_class):
    """A joint rule per declared goal mixture: its three probabilities sum to 1."""
    rules = {}
    for mixture in agent_class.BATCH.mixtures:
        fields = tuple(f'{mixture}_{field}' for field in MIXTURE_PROBABILITIES)
        example = ' '.join(f'--agent.{f}={v}' for f, v in zip(fields, (0, 1, 0)))
        rules[fields] = Rule(lambda *p: abs(sum(float(v) for v in p) - 1.0) <= 1e-6,
                             f'form the {mixture} goal mixture, so they must sum to 1 (adjust the three together)', example)
    return rules


def validate_config(config, agent_class):
    """The agent config's contract, checked before anything is built or compiled. ConfigError for the first field
    no part of `agent_class` reads (a misspelled field in a config file or preset would otherwise be silently
    ignored, and the value it meant to set left at its default), the sampler fields its BATCH declares and the
    config lacks, the first value that breaks its rule (`field_rules`), then the first joint rule that fails (goal
    mixtures that do not sum to 1, the agent's tuple-keyed rules). Non-finite floats are rejected whatever the
    field, with the field's own valid example."""
    rules, name = field_rules(agent_class), config['agent_name'] if 'agent_name' in config else agent_class.__name__
    unread = [key for key in config.keys() if key not in rules and key not in LABELS]
    if unread:
        raise ConfigError(
            f'Config field(s) {", ".join(repr(k) for k in unread)} of agent {name!r} are read by no part of it, so their '
            f'value would be silently ignored (a misspelling?). Its fields: {", ".join(sorted(rules))}. '
            f'Fix the config file or preset.'
        )
    missing = [field for field in agent_class.BATCH.fields(config) if field not in config]
    if missing:
        raise ConfigError(f'Agent {name!r} declares batches that need {", ".join(missing)} (its BATCH: goal mixtures '
                          f'{", ".join(agent_class.BATCH.mixtures) or "none"}; sampler fields '
                          f'{", ".join(agent_class.BATCH.reads) or "none"}), but its config lacks them. Add them to its '
                          f'get_config() (a goal mixture\'s fields: utils.training.goal_mixture).')
    for key in config.keys():
        value = config[key]
        rule = rules.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            raise _invalid(key, value, 'must be finite', rule.example if rule else "its config file's default")
        broken = rule.broken_by(value) if rule is not None else None
        if broken is not None:
            raise _invalid(key, value, broken.requirement, broken.example)
    joint = {**_mixture_rules(agent_class), **{k: r for k, r in agent_class.CONFIG_RULES.items() if isinstance(k, tuple)}}
    for fields, rule in joint.items():
        if all(field in config for field in fields) and not rule.check(*(config[f] for f in fields)):
            values = ', '.join(f'agent.{field}={config[field]!r}' for field in fields)
            raise ConfigError(
                f'Config values {values} are invalid together: they {rule.requirement}. '
                f'Fix the overrides (e.g. {rule.example}) or the config file.'
            )
