"""Checks of `--agent` config files and `--agent.<key>=<value>` overrides, with clear errors."""

import importlib.util
import math
import os
import re

from utils.errors import ConfigError


def load_config_file(spec: str):
    """Load `path[:arg]` the way ml_collections' config flag does: get_config() or get_config(arg)."""
    path, _, arg = spec.partition(':')
    if not os.path.exists(path):
        raise ConfigError(f'Agent config file {path!r} not found. Use --agent=agents/<name>.py (e.g. agents/byol_gamma.py) or --agent=configs/presets.py:<preset>.')
    module_spec = importlib.util.spec_from_file_location('agent_config', path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg) if arg else module.get_config()


def check_override_keys(argv, default_spec: str):
    """Raise ConfigError for any `--agent.<key>` the chosen config does not define."""
    spec = default_spec
    for i, arg in enumerate(argv):
        if arg.startswith('--agent='):
            spec = arg.split('=', 1)[1]
        elif arg == '--agent' and i + 1 < len(argv):
            spec = argv[i + 1]
    config = load_config_file(spec)
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
# family's base class, or in a shared dict its owners include, e.g. agents.encoders.ENCODER_RULES).
# A key that is a tuple of field names is a rule on those fields together (its check receives their
# values in that order). Two naming conventions need no rule of their own: `*_hidden_dims` are layer
# sizes and `<prefix>_p_curgoal/_p_trajgoal/_p_randomgoal` a goal mixture of the sampler. Agents, the
# sampler and the networks check nothing themselves.
# ---------------------------------------------------------------------------------------------


class Rule:
    """A requirement on one config value (or, keyed by a tuple of fields, on several): `check(*values) ->
    bool`, described as `requirement`, with an `example` of a valid value (or flags) for the fix."""

    def __init__(self, check, requirement: str, example):
        self.check, self.requirement, self.example = check, requirement, example


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


# The fields every agent's config has (tests/test_config.py checks that every agent's does).
COMMON_RULES = {
    'lr': positive(3e-4),
    'batch_size': at_least(1, 1024),
}

# The sampler's hierarchical goals (low_goals, high_goals, high_targets), read by the agents that have
# two levels; agents/hiql.py and agents/hierarchical.py include these in their CONFIG_RULES.
SUBGOAL_RULES = {
    'subgoal_steps': at_least(1, 25),
}

MIXTURE_FIELDS = ('p_curgoal', 'p_trajgoal', 'p_randomgoal')


class RuleOwner:
    """A class with `CONFIG_RULES = {field: Rule}` for the fields it reads. A subclass lists only its own
    rules: they are merged with its bases' when the class is defined (a rule on a field a base also
    checks replaces the base's), so `SomeAgent.CONFIG_RULES` is every rule its config must meet besides
    COMMON_RULES."""

    CONFIG_RULES = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        rules = {}
        for base in reversed(cls.__mro__[1:]):
            rules.update(vars(base).get('CONFIG_RULES', {}))
        rules.update(vars(cls).get('CONFIG_RULES', {}))
        cls.CONFIG_RULES = rules


def rule_for(key: str, agent_rules=None):
    """The rule field `key` is checked by: the agent's (`agent_rules`), else COMMON_RULES', else a naming
    convention's (layer sizes, goal-mixture probabilities); None for a field no rule constrains."""
    rules = {**COMMON_RULES, **(agent_rules or {})}
    if key in rules:
        return rules[key]
    if key.endswith('_hidden_dims'):
        return layer_sizes((64, 64, 64))
    if any(key.endswith(f'_{field}') for field in MIXTURE_FIELDS):
        return probability(0.0)
    return None


def _shown(value) -> str:
    return str(value).replace(' ', '') if isinstance(value, tuple) else str(value)


def _invalid(key, value, requirement, example) -> ConfigError:
    return ConfigError(
        f'Config value agent.{key}={value!r} is invalid: it {requirement}. '
        f'Fix the override (e.g. --agent.{key}={_shown(example)}) or the config file.'
    )


def _mixture_rules(config):
    """A joint rule per goal mixture `<prefix>_p_curgoal/_p_trajgoal/_p_randomgoal` in `config`: the
    three probabilities sum to 1."""
    rules = {}
    for key in config.keys():
        if key.endswith('_p_curgoal'):
            prefix = key[: -len('_p_curgoal')]
            fields = tuple(f'{prefix}_{field}' for field in MIXTURE_FIELDS)
            if all(field in config for field in fields):
                example = ' '.join(f'--agent.{f}={v}' for f, v in zip(fields, (0, 1, 0)))
                rules[fields] = Rule(lambda *p: abs(sum(float(v) for v in p) - 1.0) <= 1e-6,
                                     f'form the {prefix} goal mixture, so they must sum to 1 (adjust the three together)', example)
    return rules


def validate_config(config, agent_rules=None):
    """Raise ConfigError for the first config value that breaks its rule (`rule_for`: the agent's
    `agent_rules`, COMMON_RULES, the naming conventions), then for the first joint rule that fails (goal
    mixtures that do not sum to 1, and the agent's tuple-keyed rules). Non-finite floats are rejected
    whatever the field, with the field's own valid example (its rule's; every float field of an agent
    config has a rule, tests/test_config.py checks)."""
    agent_rules = agent_rules or {}
    for key in config.keys():
        value = config[key]
        rule = rule_for(key, agent_rules)
        if isinstance(value, float) and not math.isfinite(value):
            example = rule.example if rule is not None else "its config file's default"
            raise _invalid(key, value, 'must be finite', example)
        if rule is not None and not rule.check(value):
            raise _invalid(key, value, rule.requirement, rule.example)
    joint = {**_mixture_rules(config), **{k: r for k, r in agent_rules.items() if isinstance(k, tuple)}}
    for fields, rule in joint.items():
        if all(field in config for field in fields) and not rule.check(*(config[f] for f in fields)):
            values = ', '.join(f'agent.{field}={config[field]!r}' for field in fields)
            raise ConfigError(
                f'Config values {values} are invalid together: they {rule.requirement}. '
                f'Fix the overrides (e.g. {rule.example}) or the config file.'
            )
