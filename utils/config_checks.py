"""Checks of `--agent` config files and `--agent.<key>=<value>` overrides, with clear errors."""

import importlib.util
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
