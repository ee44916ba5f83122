"""One file per agent. Each agent module defines its agent class(es), a module-level `get_config()` and
`AGENTS = {agent_name: class}`; `get_agent_class` finds an `agent_name` in whichever module declares it,
so a new agent file needs no edit here."""

import importlib
import pkgutil

from utils.errors import ConfigError


def agent_classes():
    """{agent_name: class} over every module of this package."""
    classes = {}
    for module_info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f'{__name__}.{module_info.name}')
        classes.update(getattr(module, 'AGENTS', {}))
    return classes


def get_agent_class(agent_name: str):
    classes = agent_classes()
    if agent_name not in classes:
        raise ConfigError(f'Unknown agent {agent_name!r}. Valid agents: {", ".join(sorted(classes))}.')
    return classes[agent_name]
