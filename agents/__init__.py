"""One file per agent. Each agent module defines its agent class(es), a module-level `get_config()` and
`AGENTS = {agent_name: class}`; `get_agent_class` finds an `agent_name` in whichever module declares it,
so a new agent file needs no edit here."""

import importlib
import inspect
import os
import pkgutil
import re
from typing import Dict

from utils.config_checks import read_python_file
from utils.errors import ConfigError
from utils.training import MIXTURE_FIELD_MEANINGS


def agent_classes():
    """{agent_name: class} over every module of this package (a module that fails to import: the ConfigError
    paragraph of an --agent file that does, utils.config_checks.read_python_file)."""
    classes = {}
    for module_info in pkgutil.iter_modules(__path__):
        path = os.path.relpath(os.path.join(__path__[0], f'{module_info.name}.py'))
        module = read_python_file(path, lambda: importlib.import_module(f'{__name__}.{module_info.name}'),
                                  fix='Fix it, or move it out of agents/, every module of which is read to find the '
                                      'agent classes.')
        classes.update(getattr(module, 'AGENTS', {}))
    return classes


def get_agent_class(agent_name: str):
    classes = agent_classes()
    if agent_name not in classes:
        raise ConfigError(f'Unknown agent {agent_name!r}. Valid agents: {", ".join(sorted(classes))}.')
    return classes[agent_name]


def config_listing(config, spec: str) -> str:
    """Every field of agent config `config` (read from `spec`, overrides applied) with its value and its one-line
    comment, as main.py --print_config prints them."""
    comments = field_comments(get_agent_class(config.agent_name))
    width = max(len(f'{key} = {config[key]!r}') for key in config.keys())
    lines = [f'# {spec}: {len(config.keys())} fields (--agent.<field>=<value> sets one)']
    for key in config.keys():
        shown = f'{key} = {config[key]!r}'
        lines.append(f'{shown:<{width}}  # {comments.get(key, "(no comment: add one where the field is declared)")}')
    return '\n'.join(lines)


def field_comments(agent_class) -> Dict[str, str]:
    """{field: its one-line comment} for the fields of `agent_class`'s config: the `name=value,  # comment` lines of
    its module's get_config() (and of the module of a hierarchy's low level), the shared encoder fields
    (agents/base.py's ENCODER_FIELDS) and goal mixtures (`**goal_mixture('name', ...),  # comment`, each field
    described by utils/training.py's MIXTURE_FIELD_MEANINGS), and the preset label."""
    from agents.base import ENCODER_FIELDS

    comments = {'preset': 'The preset this config is (a label: names the run, read by no agent).'}
    comments.update({field: spec.meaning for field, spec in ENCODER_FIELDS.items()})
    classes = [agent_class] + [c for c in (getattr(agent_class, 'LOW_AGENT', None),) if c is not None]
    for cls in reversed(classes):  # the agent's own module last: its comments win
        source = inspect.getsource(inspect.getmodule(cls))
        for mixture, comment in re.findall(r"\*\*goal_mixture\('(\w+)'.*#\s*(.+)$", source, flags=re.M):
            comments.update({f'{mixture}_{field}': f'{comment.rstrip(".")}: {meaning}'
                             for field, meaning in MIXTURE_FIELD_MEANINGS.items()})
        comments.update(dict(re.findall(r'^\s+(\w+)=.*?,\s+#\s*(.+)$', source, flags=re.M)))
    return comments
