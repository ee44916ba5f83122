"""docs/adding_a_method.md's changes, applied for real: in a copy of the repository, the encoder setting for every
method and the three worked examples are written where the document puts them (the ENCODER_FIELDS entry and its
reader in agents/base.py; each example's agent file, its entry at the end of configs/presets.py's METHODS, its test),
the record command is run, and then the methods' own tests, the generic agent and config tests, the new setting's
behaviour and the guide's command for a method's tests are checked there. The changes touch exactly the files the
document lists. An edit of the document, or of the code, that breaks them fails here."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import (ENCODER_SETTING, KSTEP_EXAMPLE, READING_PATH, ROOT, SPR_EXAMPLE, TD_VALUE_EXAMPLE,
                           example_blocks, guide_section, placed_blocks, presets_source_with_entry)

pytestmark = pytest.mark.xdist_group('adding_a_method')

EXAMPLES = {SPR_EXAMPLE: 'cosine_spr', TD_VALUE_EXAMPLE: 'td_value', KSTEP_EXAMPLE: 'kstep_spr'}
DOCUMENTED_FILES = ['agents/base.py', 'configs/presets.py'] + [path for name in EXAMPLES.values()
                                                                for path in (f'agents/{name}.py', f'tests/agents/test_{name}.py')]


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


def add_encoder_setting(base_py):
    """agents/base.py with the guide's encoder setting: its entry at the end of ENCODER_FIELDS, `state_encoder`'s
    EnsembleEncoder statement replaced by the guide's, and the import the guide names."""
    (file_entry, entry_place, entry), (file_reader, reader_place, reader) = placed_blocks(ENCODER_SETTING)
    assert (file_entry, entry_place, file_reader, reader_place) == ('agents/base.py', 'ENCODER_FIELDS', 'agents/base.py',
                                                                    'state_encoder')
    source = base_py.read_text()
    start = source.index('ENCODER_FIELDS = {')
    end = source.index('\n}\n', start)
    source = source[:end] + '\n' + entry.rstrip() + source[end:]
    function = source.index('def state_encoder(')
    statement = re.compile(r'    encoder = EnsembleEncoder\(.*?\)\n(?=    return)', re.S)
    match = statement.search(source, function)
    assert match, 'state_encoder has no EnsembleEncoder statement for the guide to replace'
    source = source[:match.start()] + reader.rstrip() + '\n' + source[match.end():]
    source = source.replace('import flax\n', 'import flax\nimport flax.linen as nn\n', 1)
    base_py.write_text(source)


@pytest.fixture(scope='module')
def applied(tmp_path_factory):
    """A repository copy with the guide's changes applied as it says, its record command run."""
    copy = tmp_path_factory.mktemp('adding_a_method') / 'repo'
    repository_copy(copy)
    add_encoder_setting(copy / 'agents' / 'base.py')
    presets = copy / 'configs' / 'presets.py'
    for title, name in EXAMPLES.items():
        blocks = example_blocks(title)
        assert sorted(blocks) == [f'agents/{name}.py', 'configs/presets.py', f'tests/agents/test_{name}.py'], blocks
        (copy / 'agents' / f'{name}.py').write_text(blocks[f'agents/{name}.py'])
        (copy / 'tests' / 'agents' / f'test_{name}.py').write_text(blocks[f'tests/agents/test_{name}.py'])
        presets.write_text(presets_source_with_entry(blocks['configs/presets.py'], str(presets)))
    env = dict(os.environ, PYTHONPATH=str(copy), JAX_PLATFORMS='cpu')
    record = subprocess.run([sys.executable, '-m', 'tests.agents.test_regression', '--record'], cwd=copy, env=env,
                            capture_output=True, text=True, timeout=600)
    assert record.returncode == 0 and ', '.join(EXAMPLES.values()) in record.stdout, record.stdout + record.stderr[-3000:]
    return copy, env


def test_the_changes_touch_only_what_the_guide_lists(applied):
    copy, _ = applied
    status = subprocess.run(['git', 'status', '--porcelain'], cwd=copy, capture_output=True, text=True, check=True).stdout
    assert sorted(line[3:] for line in status.splitlines()) == sorted(DOCUMENTED_FILES + ['tests/data/agent_metrics.json'])
    before = json.loads(subprocess.run(['git', 'show', 'HEAD:tests/data/agent_metrics.json'], cwd=copy, capture_output=True,
                                       text=True, check=True).stdout)
    after = json.loads((copy / 'tests' / 'data' / 'agent_metrics.json').read_text())
    assert sorted(after) == sorted([*before, *EXAMPLES.values()]) and all(after[p] == before[p] for p in before)


def test_the_suite_passes_with_the_changes(applied):
    """The methods' own tests, and every generic test that takes the new presets, in the copy; BYOL-gamma^a's trained
    numbers equal its record there, so the new encoder setting at its default changes nothing."""
    copy, env = applied
    tests = [f'tests/agents/test_{name}.py' for name in EXAMPLES.values()] + [
        'tests/agents/test_agents.py', 'tests/agents/test_regression.py', 'tests/unit/test_config.py']
    result = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-k',
                             ' or '.join(EXAMPLES.values()) + ' or every_preset or finite_decreasing_loss and byol_gamma_a',
                             *tests], cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(summary.split(' passed')[0].split()[-1])
    assert passed >= 19 and 'failed' not in summary, result.stdout[-4000:]


def test_the_guides_command_for_a_methods_tests_selects_them(applied):
    """The guide's one command for a method's tests (`pytest -n 2 tests/unit tests/agents -k <preset>`), as the guide
    writes it for each example's preset, collects in the copy the method's own test file (all of it) and the generic
    tests that take its preset: its config contract, a training run (with the record of its first updates), the
    auxiliary loss kept away from the actor head."""
    copy, env = applied
    documented = dict(re.findall(r'`?(\.venv/bin/python -m pytest -n 2 tests/unit tests/agents -k (\w+))`?',
                                 guide_section(SPR_EXAMPLE) + guide_section(KSTEP_EXAMPLE)))
    assert sorted(documented.values()) == ['cosine_spr', 'kstep_spr'], documented
    for command, preset in documented.items():
        words = command.split()
        assert words[:6] == ['.venv/bin/python', '-m', 'pytest', '-n', '2', 'tests/unit'] and words[-2] == '-k'
        collect = [sys.executable, *words[1:3], '--collect-only', '-q', '-p', 'no:cacheprovider', *words[5:]]
        listed = subprocess.run(collect, cwd=copy, env=env, capture_output=True, text=True, timeout=300)
        assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-2000:]
        selected = [line for line in listed.stdout.splitlines() if '::' in line]
        own = [line for line in selected if line.startswith(f'tests/agents/test_{preset}.py::')]
        assert len(own) == len(re.findall(r'^def test_', example_blocks(
            next(title for title, name in EXAMPLES.items() if name == preset))[f'tests/agents/test_{preset}.py'],
            flags=re.M)), own
        for generic in (f'tests/unit/test_config.py::test_every_field_has_a_rule_and_the_sampler_reads_what_the_agent_'
                        f'declares[{preset}]', f'tests/agents/test_agents.py::test_preset_trains_with_finite_decreasing_'
                        f'loss[{preset}]', f'tests/agents/test_agents.py::test_auxiliary_loss_never_reaches_the_actor_'
                        f'head[{preset}]'):
            assert generic in selected, (generic, selected)


SETTING_PROBE = '''
import flax.linen as nn, numpy as np
import main
from utils.errors import ConfigError
request = main.request_of(["main.py", "--agent=configs/presets.py:byol_gamma_a", "--agent.encoder_activation=relu"])
agent = main.compiled_create(request.agent_class, np.zeros((1, 4), np.float32), np.zeros((1, 2), np.float32),
                             request.config)(0)
print("activation", agent.network.model.modules["encoder"].activation is nn.relu)
try:
    main.request_of(["main.py", "--agent=configs/presets.py:gcbc", "--agent.encoder_activation=relu"])
except ConfigError as error:
    print("refused", error)
'''


def test_the_new_encoder_setting_reaches_phi_and_is_refused_where_nothing_reads_it(applied):
    """`--agent.encoder_activation=relu` builds phi with ReLU; `--print_config` lists the field with the meaning its
    entry gives; plain GCBC, which has no phi, refuses it (the entry marks it as phi's)."""
    copy, env = applied
    probe = subprocess.run([sys.executable, '-c', SETTING_PROBE], cwd=copy, env=env, capture_output=True, text=True,
                           timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert 'activation True' in probe.stdout
    assert "refused agent.encoder_activation='relu' is read only when use_phi=True" in probe.stdout
    listing = subprocess.run([sys.executable, 'main.py', '--agent=configs/presets.py:tra', '--print_config'], cwd=copy,
                             env=env, capture_output=True, text=True, timeout=300)
    assert re.search(r"^encoder_activation = 'gelu' +# phi's hidden-layer activation\.$", listing.stdout, re.M), \
        listing.stdout + listing.stderr[-2000:]


NUMBERS = {'five': 5, 'six': 6}


def walk_steps(title):
    """[(file, text)] of the numbered steps '1. `file`: ...' of a guide section, and the file count its first line
    states ('... crosses six files' / 'reads five files')."""
    from tests.helpers import guide_section

    section = guide_section(title)
    steps = re.findall(r'^\d+\. `([^`]+)`: (.*?)(?=^\d+\. `|^\n|\Z)', section, flags=re.S | re.M)
    stated = re.search(r'\b(five|six) files\b', section).group(1)
    return steps, NUMBERS[stated], section


def defined_names(path):
    """Every function, class and method a file defines, methods as Class.method."""
    import ast

    tree = ast.parse(open(os.path.join(ROOT, path)).read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(f'{node.name}.{item.name}' for item in node.body if isinstance(item, ast.FunctionDef))
    return names


@pytest.mark.parametrize('title', ['`alpha`, from the command line to the loss', 'One update, file by file'])
def test_the_guides_walks_name_what_the_code_defines(title):
    """Each step of the guide's walks names a file and, in code quotes, functions and methods that file defines (a
    `Class.method` whose class the file defines must be one of its methods); the count the section states is the
    number of files its steps name."""
    steps, stated, _ = walk_steps(title)
    assert len({path for path, _ in steps}) == stated, steps
    for path, text in steps:
        defined = defined_names(path)
        found = []
        for token in re.findall(r'`([A-Za-z_][\w.]*)(?:\([^`]*\))?`', text):
            parts = token.split('.')
            if len(parts) >= 2 and parts[-2] in defined:  # Class.method of this file: it must exist
                assert '.'.join(parts[-2:]) in defined, (path, token)
                found.append(token)
            elif parts[-1] in defined:
                found.append(token)
        assert found, (path, text)


def test_the_update_walk_is_the_file_counting_tests_and_its_lines_are_counted():
    steps, _, section = walk_steps('One update, file by file')
    assert sorted(path for path, _ in steps) == READING_PATH
    lines = sum(len(open(os.path.join(ROOT, path)).read().splitlines()) for path in READING_PATH)
    stated = int(re.search(r'about ([\d,]+) lines', section).group(1).replace(',', ''))
    assert abs(lines - stated) <= 100, (lines, stated)  # "about": within 100 lines


def test_one_byol_gamma_update_is_read_in_five_files_from_main_pys_loop():
    """A BYOL-gamma^a gradient step as main.py's loop makes it (utils.training.train, one chunk of one step), traced:
    the repository files whose code runs. With main.py, whose loop calls it, 5 files and under 1,500 lines: main.py,
    utils/training.py (sample a batch on the device, update, scanned), agents/base.py (Agent.update, TrainState, the
    EMA, BCAgent.total_loss and the encoder call), agents/byol_gamma.py (L_aux) and utils/networks.py. No climb back
    up: while the update runs in agents/, no code in utils/training.py runs."""
    import jax

    from configs.presets import get_config as preset_config
    from tests.helpers import make_agent, small, toy_dataset
    from utils.training import train

    data = toy_dataset()
    agent = jax.eval_shape(lambda: make_agent(small(preset_config('byol_gamma_a')), 0))
    seen, stack, climbs = set(), [], []

    def record(frame, event, arg):
        path = frame.f_code.co_filename
        if not path.startswith(ROOT + os.sep) or os.sep + '.venv' + os.sep in path:
            return
        name = os.path.relpath(path, ROOT)
        if name.startswith('tests' + os.sep):  # this test's own lambdas
            return
        if event == 'call':
            if name == 'utils/training.py' and any(f.startswith('agents' + os.sep) for f in stack):
                climbs.append(frame.f_code.co_name)
            seen.add(name)
            stack.append(name)
        elif event == 'return' and stack:
            stack.pop()

    sys.setprofile(record)
    try:
        jax.eval_shape(lambda agent: train(agent, data, jax.random.PRNGKey(1), 0, 1), agent)
    finally:
        sys.setprofile(None)
    assert sorted(seen | {'main.py'}) == READING_PATH and not climbs, (sorted(seen), climbs)  # main.py's loop calls it
    lines = sum(len(open(os.path.join(ROOT, name)).read().splitlines()) for name in READING_PATH)
    assert lines < 1500, lines


def test_alpha_reaches_the_loss_as_the_walk_says():
    """`--agent.alpha=6` on the command line is the weight of L_aux in BCAgent.total_loss."""
    import jax
    import numpy as np

    import main
    from tests.helpers import ACTION_DIM, OBS_DIM, toy_dataset
    from utils.training import batch_config, sample_batch

    request = main.request_of(['main.py', '--agent=configs/presets.py:byol_gamma_a', '--agent.alpha=6',
                               '--agent.batch_size=8', '--agent.actor_hidden_dims=(16,)'])
    agent = main.compiled_create(request.agent_class, np.zeros((1, OBS_DIM), np.float32),
                                 np.zeros((1, ACTION_DIM), np.float32), request.config)(0)
    batch = sample_batch(jax.random.PRNGKey(0), toy_dataset(), batch_config(agent))
    loss, info = agent.total_loss(batch, agent.network.params)
    assert agent.config['alpha'] == 6.0
    # Op by op, the loss is this product and sum of the same float32 values: exactly.
    assert float(loss) == float(info['actor/bc_loss'] + 6.0 * info['representation/loss'])
