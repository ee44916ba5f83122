"""docs/adding_a_method.md's worked example, applied for real: in a copy of the repository, its blocks are written
where the document puts them (the agent file, the entry at the end of configs/presets.py's METHODS, the method's
test), its record command is run, and then the method's own test and the generic agent and config tests run there
on the new preset. The change touches exactly the files the document lists. An edit of the document, or of the code,
that breaks the example fails here."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT, example_blocks, presets_source_with_entry

pytestmark = pytest.mark.xdist_group('adding_a_method')

DOCUMENTED_FILES = ['agents/cosine_spr.py', 'configs/presets.py', 'tests/agents/test_cosine_spr.py']


def repository_copy(destination):
    """The working tree's files (tracked, and untracked ones git does not ignore) copied to `destination`, as git."""
    listed = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split('\0')
    for name in filter(None, listed):
        source = os.path.join(ROOT, name)
        if os.path.isfile(source):
            os.makedirs(os.path.join(destination, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(source, os.path.join(destination, name))
    for command in (['init', '-q'], ['add', '-A'], ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'copy']):
        subprocess.run(['git', *command], cwd=destination, check=True, capture_output=True)


@pytest.fixture(scope='module')
def applied(tmp_path_factory):
    """A repository copy with the worked example applied as the document says, its record command run."""
    copy = tmp_path_factory.mktemp('adding_a_method') / 'repo'
    repository_copy(copy)
    blocks = example_blocks()
    assert sorted(blocks) == DOCUMENTED_FILES, sorted(blocks)
    (copy / 'agents' / 'cosine_spr.py').write_text(blocks['agents/cosine_spr.py'])
    (copy / 'tests' / 'agents' / 'test_cosine_spr.py').write_text(blocks['tests/agents/test_cosine_spr.py'])
    presets = copy / 'configs' / 'presets.py'
    presets.write_text(presets_source_with_entry(blocks['configs/presets.py'], str(presets)))
    env = dict(os.environ, PYTHONPATH=str(copy), JAX_PLATFORMS='cpu', JAX_DISABLE_MOST_OPTIMIZATIONS='1')
    record = subprocess.run([sys.executable, '-m', 'tests.agents.test_regression', '--record'], cwd=copy, env=env,
                            capture_output=True, text=True, timeout=600)
    assert record.returncode == 0 and 'cosine_spr' in record.stdout, record.stdout + record.stderr[-3000:]
    return copy, env


def test_the_change_touches_only_what_the_guide_lists(applied):
    copy, _ = applied
    status = subprocess.run(['git', 'status', '--porcelain'], cwd=copy, capture_output=True, text=True, check=True).stdout
    assert sorted(line[3:] for line in status.splitlines()) == sorted(DOCUMENTED_FILES + ['tests/data/agent_metrics.json'])
    before = json.loads(subprocess.run(['git', 'show', 'HEAD:tests/data/agent_metrics.json'], cwd=copy, capture_output=True,
                                       text=True, check=True).stdout)
    after = json.loads((copy / 'tests' / 'data' / 'agent_metrics.json').read_text())
    assert sorted(after) == sorted([*before, 'cosine_spr']) and all(after[p] == before[p] for p in before)


def test_the_suite_passes_with_the_method_added(applied):
    """The method's own test, and every generic test that takes the new preset, in the copy."""
    copy, env = applied
    tests = ['tests/agents/test_cosine_spr.py', 'tests/agents/test_agents.py', 'tests/agents/test_regression.py',
             'tests/unit/test_config.py']
    result = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-k',
                             'cosine_spr or every_preset', *tests], cwd=copy, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(summary.split(' passed')[0].split()[-1])
    assert passed >= 6 and 'failed' not in summary, result.stdout[-4000:]
