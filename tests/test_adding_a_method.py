"""docs/adding_a_method.md's worked example runs as written: its three code blocks (the agent file, the
registry entry, the method's test) are taken out of the Markdown file, put where the document says they
go -- the agent file in a temporary folder on the `agents` package's path, the entry into a temporary copy
of configs/presets.py's METHODS -- and run: the new agent is found by its name, its config passes the
config checks, and the document's own tests pass (training lowers both losses). An edit of the document
that breaks the example fails here."""

import importlib.util
import os
import re
import sys

import jax
import numpy as np
import pytest

import agents
import configs
from tests.test_agents import make_agent, small, toy_dataset
from utils.config_checks import rule_for, validate_config
from utils.sampler import SamplerConfig
from utils.training import train_steps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, 'docs', 'adding_a_method.md')


def example_blocks():
    """{file the block belongs in: its code}, for the worked example's numbered blocks '**N. `path`**'."""
    text = open(DOC).read()
    example = text[text.index('## Worked example'):]
    blocks = re.findall(r'\*\*\d+\. `([^`]+)`\*\*.*?```python\n(.*?)```', example, flags=re.S)
    return dict(blocks)


def module_from_source(name, source, path):
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=path))
    module.__file__ = path
    exec(compile(source, path, 'exec'), module.__dict__)
    return module


def presets_source_with_entry(entry):
    """configs/presets.py's source with `entry` added at the end of METHODS (the document: one entry in METHODS)."""
    with open(os.path.join(ROOT, 'configs', 'presets.py')) as f:
        source = f.read()
    start = source.index('METHODS: Dict[str, Method] = {')
    end = source.index('\n}\n', start)
    return source[:end] + '\n' + entry.rstrip() + source[end:]


def presets_with_entry(entry):
    return module_from_source('configs.presets', presets_source_with_entry(entry), os.path.join(ROOT, 'configs', 'presets.py'))


@pytest.fixture
def worked_example(tmp_path, monkeypatch):
    """The example's files in place (and removed afterwards): (agent module name, the method's test module)."""
    blocks = example_blocks()
    assert sorted(blocks) == ['agents/cosine_spr.py', 'configs/presets.py', 'tests/test_cosine_spr.py'], sorted(blocks)
    agent_dir = tmp_path / 'agents'
    agent_dir.mkdir()
    (agent_dir / 'cosine_spr.py').write_text(blocks['agents/cosine_spr.py'])
    monkeypatch.setattr(agents, '__path__', [*agents.__path__, str(agent_dir)])
    presets = presets_with_entry(blocks['configs/presets.py'])
    monkeypatch.setitem(sys.modules, 'configs.presets', presets)
    monkeypatch.setattr(configs, 'presets', presets, raising=False)
    yield presets, blocks['tests/test_cosine_spr.py']
    sys.modules.pop('agents.cosine_spr', None)
    sys.modules.pop('tests.test_cosine_spr', None)


def test_the_worked_example_runs_as_written(worked_example):
    presets, test_source = worked_example
    # Found by its agent_name, registered as a representation method, and its config passes main.py's checks.
    agent_class = agents.get_agent_class('cosine_spr')
    assert agent_class.__module__ == 'agents.cosine_spr'
    assert 'cosine_spr' in presets.PRESETS and presets.METHODS['cosine_spr'].kind == 'representation'
    config = presets.get_config('cosine_spr')
    validate_config(config, agent_class.CONFIG_RULES)
    assert all(rule_for(key, agent_class.CONFIG_RULES) for key, value in config.items() if isinstance(value, float))

    # The method's own test file, as written.
    tests = module_from_source('tests.test_cosine_spr', test_source, os.path.join(ROOT, 'tests', 'test_cosine_spr.py'))
    names = [name for name in vars(tests) if name.startswith('test_')]
    assert names == ['test_cosine_loss_matches_numpy', 'test_training_lowers_both_losses']
    for name in names:
        getattr(tests, name)()


def test_the_example_agent_learns_in_a_few_updates(worked_example):
    presets, _ = worked_example
    config = small(presets.get_config('cosine_spr'))
    agent = make_agent(config)
    agent, infos = train_steps(agent, toy_dataset(), jax.random.PRNGKey(1), 0, SamplerConfig.from_config(config), 60)
    losses = np.asarray(infos['total_loss'])
    assert np.all(np.isfinite(losses)) and losses[-10:].mean() < losses[:10].mean()
    assert 'representation/cosine_loss' in infos
