"""README.md and docs/*.md say what the code does: every command they show runs as written and makes what the page
says it makes, and every path they name exists.

**Commands.** A page's commands are the lines of its ```bash (sh, shell) fences (continuation lines joined, shell
comments dropped, `a && b` taken as two commands), its ```python fences (each one script, run by `.venv/bin/python`),
and its inline `code` spans that are commands: they start with an interpreter or tool (`.venv/bin/python`, `bash`,
`python`, `wandb`, ...) or with environment assignments, or are a `*.sh` script with arguments. A bare path
(`scripts/sweep_state.sh`) or a script with a flag and no interpreter (`main.py --resume`) is a reference to a file or
a flag, not a command; its path must exist all the same.

**Expectations.** Beside each command, in an HTML comment the rendered page hides, the page states what the command
promises:

    ```bash
    .venv/bin/python main.py ...
    ```
    <!-- expect: file runs/default/byol_gamma_a-*_pointmaze-medium-stitch-v0_sd0/eval.csv -->

    ... `.venv/bin/python scripts/results.py --runs=runs/state`<!-- expect: output "| antmaze-medium-stitch" --> ...

A fence's comments are the lines right after its closing line, an inline command's the comment right after its span.
Each line of a comment is one expectation: `file GLOB` (the command wrote a file matching GLOB: relative to the
checkout, `~/` the home folder, `**` any folders), `dir GLOB` (a folder matching it exists afterwards),
`output "TEXT"` (TEXT is in its standard output or error) or `table` (the page's next Markdown table after the fence,
the second `table` the second one, is in the output line for line: a published table is what its command prints from
the committed run records). A fence's commands run one after the other in one bash
with `set -euo pipefail` (so a pipeline fails when any of its commands does), and its expectations are checked after
the last. Every command that runs has at least one expectation; a command that does not run has none.

**Not run here.** NOT_RUN lists the commands the suite does not run, each with its reason (the one place that lists
them): the set-up (CI runs it), the test suite itself, and commands that need a GPU, the network, root, a wandb
account or hours, each covered by another test where one exists.

**At toy size.** The pages' commands are mostly paper-sized; the suite runs each at toy size:
* Python scripts and `main.py` get the flags of TOY_FLAGS appended after the documented ones (later flags win); every
  entry there is used by some documented command (test_every_toy_flag_entry_is_used);
* sweeps (`scripts/sweep.py`, `scripts/*.sh`) get `--dry_run`, which prints their main.py commands after checking
  each with main.py's own request check; those of RUN_SWEEPS run for real, their main.py flags followed by TINY_MAIN,
  so that what a running sweep prints is checked;
* AS_DOCUMENTED names the scripts that are already quick as written; a command whose script is in none of these
  fails the suite (a new long command needs its toy flags here).

**The sandbox.** Commands run in what a newcomer has after README's command 1 (whose main job the sandbox fixture runs,
at toy size, before anything else):
* the checkout (its folders linked, its top-level files copied, docs/adding_a_method.md's worked example applied for
  that page's "Use it" commands) and its `.venv`, which is NOT on PATH: there `python`, `python3`, `pip`, `pytest`
  and `wandb` are stand-ins that fail, so a page must say `.venv/bin/python`. PYTHONPATH names the sandbox, as the
  editable install of README's set-up names the checkout;
* a home folder whose `~/.ogbench/data` holds pointmaze-medium-stitch-v0 and pointmaze-large-stitch-v0, written by
  `datagen.pointmaze.write_dataset` with seed 0. That is the function and the seed with which main.py generates
  them offline on first use (README's command 1 makes the first; its quick start and the stitching benchmark the
  second), and the files have the same names, format and provenance record; only the episode counts are toy-sized
  (250 + 25 and 30 + 3 instead of 5000 + 500), as the runs' budgets are. That main.py generates a missing
  pointmaze dataset, and the full-size counts, are tested by tests/agents/test_datagen.py (and with processes
  racing for one, by tests/e2e/test_dataset_faults.py);
* the run directories the pages' analyses, tables and plots read, which the pages make with sweeps that run here
  only as dry runs: the stitching benchmark's BYOL-gamma^a alpha=1 cell, trained by `scripts/stitch_benchmark.sh`
  itself at toy size (2 seeds), and the sweeps' runs written directly with made-up scores (FAKE_RUNS: what is tested
  is that the commands read them).
wandb is off (WANDB_MODE=disabled); its offline runs are tested by tests/e2e/test_wandb.py.

A mistake on a page fails the suite; test_mistakes_on_a_page_fail shows each kind.
"""

import dataclasses
import fcntl
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import List, Tuple

import pytest

from tests.helpers import (KSTEP_EXAMPLE, SPR_EXAMPLE, TD_VALUE_EXAMPLE, example_blocks, module_from_source,
                           presets_source_with_entry)

pytestmark = pytest.mark.xdist_group('test_docs')  # its sandbox is built once, in one worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC_FILES = ['README.md'] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'docs', '*.md')))
SHELL_FENCES = ('bash', 'sh', 'shell')
# Called bare, these are whatever the reader's PATH holds, not the project's environment.
VENV_TOOLS = ('python', 'python3', 'pip', 'pip3', 'pytest', 'wandb')
EXPECTATION_KINDS = ('file', 'dir', 'output', 'table')

# Commands that do not run in the suite, and why: (pattern searched in the command, reason).
NOT_RUN = [
    (r'^python3 -m venv|pip install', "sets up the environment: CI runs README's set-up itself (.ci/run; "
                                      'test_the_set_up_line_is_the_one_ci_runs)'),
    (r'-m pytest', 'the test suite itself'),
    (r'\.ci/slurm_cluster\.sh', 'starts (or stops) Slurm daemons as root: .ci/run does, before the suite, whose '
                                'tests/e2e/test_slurm.py runs against that cluster'),
    (r"default_backend\(\) == 'gpu'", 'needs a GPU'),
    (r'benchmarks/bench_gpu\.py(?!.* --quick)', 'times an accelerator for minutes; its --quick form runs here'),
    (r'ogbench\.download_datasets', 'downloads from the internet'),
    (r'^\.venv/bin/wandb ', 'needs a wandb account and the network'),
    (r'scripts/train_expert\.py', 'trains the ant expert for an hour; tests/agents/test_sac.py trains it at toy size'),
    (r'^(?!.*scripts/sweep\.py).*visual-', 'pixels: needs a rendered visual dataset (hours on a CPU) and compiles the '
                                          'CNN for minutes; tests/agents/test_visual.py renders, trains and evaluates '
                                          'one at toy size'),
    (r'tests\.agents\.test_regression --record', "rewrites the checkout's tests/data/agent_metrics.json: "
                                                 'tests/agents/test_adding_a_method.py runs it in a copy of the '
                                                 'repository with the worked example applied'),
    (r'class CosineSPRAgent|cosine_spr.: Method\(|from agents\.cosine_spr import|class TDValueAgent|td_value.: Method\('
     r'|from agents\.td_value import|class KStepSPRAgent|kstep_spr.: Method\(|from agents\.kstep_spr import',
     "a file of one of docs/adding_a_method.md's worked examples: tests/agents/test_adding_a_method.py writes it where "
     'the page says and runs its tests'),
    (r"'encoder_activation': EncoderField|activation=getattr\(nn, config\.encoder_activation\)",
     "a fragment of agents/base.py that docs/adding_a_method.md adds: tests/agents/test_adding_a_method.py puts it "
     'where the page says and checks what the page promises of it'),
    (r"--out='?docs/figures/", "rewrites a figure of the checkout: tests/e2e/test_published_figures.py runs it into a "
                             'temporary folder and compares the picture with the committed one'),
    (r'^\. \.venv/bin/activate$', "changes the reader's own shell; the pages' commands name .venv/bin/ instead"),
]

TINY_MAIN = ['--train_steps=20', '--log_interval=10', '--eval_interval=20', '--save_interval=20', '--eval_episodes=1',
             '--eval_tasks=1', '--eval_max_steps=5', '--agent.batch_size=16', '--wandb_mode=disabled']
# Flags appended to a documented command, by the script it runs: its toy size.
TOY_FLAGS = {
    'main.py': TINY_MAIN,
    'scripts/generate_dataset.py': ['--num_episodes=2', '--num_val_episodes=1'],
    'scripts/evaluate_expert.py': ['--episodes_per_task=1'],
    'scripts/horizon.py': ['--episodes=1', '--max_distance=3', '--tasks=1', '--max_steps=20'],
    'scripts/rep_heatmap.py': ['--max_states=40'],
    'scripts/sp_correlation.py': ['--num_pairs=20', '--scatter_points=10'],
    'scripts/finite_mdp.py': ['--fast'],
    'benchmarks/bench_eval.py': ['--episodes=2', '--tasks', '1', '--max_steps=50', '--train_batch_size=16',
                                 '--steps_per_call=2'],
}
# Scripts that are quick as the pages write them.
AS_DOCUMENTED = ('scripts/results.py', 'scripts/plot_curves.py', 'scripts/plot_difference.py',
                 'benchmarks/bench_gpu.py')  # bench_gpu.py's --quick form: the others are not run
DRY_RUN = re.compile(r'scripts/(sweep\.py|\w+\.sh)$')
# The sweeps that run for real, at toy size, so that what a running sweep prints (each job's start and end, the steps
# its running jobs reached) is checked against the page: the launcher's flags of SWEEP_TOY_FLAGS (a progress line
# every second instead of every minute) and TINY_MAIN after the documented main.py flags. Every other sweep is a dry
# run.
RUN_SWEEPS = (r'scripts/sweep\.py --name=demo_alpha ',)
SWEEP_TOY_FLAGS = ['--progress_interval=1']


# ---------------------------------------------------------------------------------------------
# Reading the pages.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Unit:
    """A fence's commands, or one inline command, with what the page expects of them."""

    page: str
    line: int
    language: str  # 'shell' or 'python'
    commands: List[str]  # a python fence: its code, as one command
    expects: List[Tuple[str, str]]

    @property
    def where(self):
        return f'{self.page}:{self.line}'

    def runnable(self):
        return [c for c in self.commands if reason_not_run(c) is None]

    def script(self):
        """What bash runs: the runnable commands at toy size, one per line."""
        if self.language == 'python':
            return ''.join(f".venv/bin/python - <<'END_OF_PAGE_CODE'\n{c}END_OF_PAGE_CODE\n" for c in self.runnable())
        return ''.join(toy_version(c) + '\n' for c in self.runnable())


def reason_not_run(command):
    return next((why for pattern, why in NOT_RUN if re.search(pattern, command, flags=re.M)), None)


def page_units(page):
    """The units of `page` (a path relative to the checkout, or absolute), in page order."""
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    lines = text.splitlines()
    units, prose = [], list(lines)
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped.startswith('```'):
            i += 1
            continue
        language, start = stripped[3:].strip(), i
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith('```'):
            body.append(lines[i])
            i += 1
        for j in range(start, min(i + 1, len(lines))):
            prose[j] = ''  # what is left is prose, where inline commands live
        expects, after = [], i + 1
        while after < len(lines) and lines[after].strip().startswith('<!--'):
            comment = [lines[after]]
            while '-->' not in comment[-1] and after + 1 < len(lines):
                after += 1
                comment.append(lines[after])
            expects += parse_expectations('\n'.join(comment))
            after += 1
        expects = with_page_tables(expects, lines, after)
        if language in SHELL_FENCES:
            units.append(Unit(page, start + 2, 'shell', shell_commands(body), expects))
        elif language == 'python':
            units.append(Unit(page, start + 2, 'python', ['\n'.join(body) + '\n'], expects))
        i += 1
    prose_text = '\n'.join(prose)
    for span in re.finditer(r'`([^`]+)`', prose_text):
        command = ' '.join(span.group(1).split())
        if '\n\n' in span.group(1) or not is_inline_command(command):
            continue
        expects, at = [], span.end()
        while comment := re.match(r'[ \t]*(<!--.*?-->)', prose_text[at:], flags=re.S):  # one or several
            expects += parse_expectations(comment.group(1))
            at += comment.end()
        units.append(Unit(page, prose_text.count('\n', 0, span.start()) + 1, 'shell', [command], expects))
    return sorted(units, key=lambda unit: unit.line)


def with_page_tables(expects, lines, start):
    """Each `table` expectation gets its argument: the page's next Markdown table after line `start` (the first
    `table` the first table, and so on), before the next fence; '' when there is none."""
    tables, current, i = [], [], start
    while i < len(lines) and not lines[i].strip().startswith('```'):
        if lines[i].startswith('|'):
            current.append(lines[i].rstrip())
        elif current:
            tables.append('\n'.join(current))
            current = []
        i += 1
    if current:
        tables.append('\n'.join(current))
    tables = iter(tables)
    return [(kind, next(tables, '')) if kind == 'table' else (kind, argument) for kind, argument in expects]


def shell_commands(body):
    """A fence's commands: continuation lines joined, comments dropped, `&&` chains split."""
    commands, pending = [], ''
    for line in body:
        text = without_comment(line).rstrip()
        if text.endswith('\\'):
            pending += text[:-1] + ' '
            continue
        command, pending = (pending + text).strip(), ''
        commands += [part.strip() for part in command.split(' && ')] if command else []
    return commands


def without_comment(line):
    """`line` up to a shell comment: a `#` at a word's start, outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in '\'"':
            quote = char
        elif char == '#' and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def is_inline_command(span):
    words = span.split()
    first = 0
    while first < len(words) and re.fullmatch(r'[A-Z_][A-Z0-9_]*=\S*', words[first]):
        first += 1
    if first == len(words):
        return False
    head, has_args = words[first], len(words) > first + 1
    if head in VENV_TOOLS + ('bash', 'sh', '.', 'source') or head.startswith('.venv/bin/'):
        return has_args
    return head.endswith('.sh') and (has_args or first > 0) or head.endswith('.py') and first > 0


def parse_expectations(comment):
    """[(kind, argument)] of an `<!-- expect: ... -->` comment (other comments: none)."""
    body = re.fullmatch(r'\s*<!--\s*(.*?)\s*-->\s*', comment, flags=re.S)
    if not body or not body.group(1).startswith('expect:'):
        return []
    expects = []
    for line in body.group(1)[len('expect:'):].splitlines():
        kind, _, argument = line.strip().partition(' ')
        if kind:
            argument = argument.strip()
            if kind == 'output':
                argument = argument[1:-1] if len(argument) >= 2 and argument[0] == argument[-1] == '"' else None
            expects.append((kind, argument))
    return expects


def script_of(command):
    """The .py or .sh file a command runs (None for a shell or Python one-liner)."""
    words = shlex.split(command.partition(' | ')[0])
    return next((w for w in words if w.endswith(('.py', '.sh'))), None)


def runs_sweep(command):
    return any(re.search(pattern, command) for pattern in RUN_SWEEPS)


def toy_version(command):
    """The command as the suite runs it: its toy flags appended before any pipe (a sweep: `--dry_run`, before its
    `--`; a sweep of RUN_SWEEPS: SWEEP_TOY_FLAGS before its `--` and TINY_MAIN at the end)."""
    head, pipe, tail = command.partition(' | ')
    script = script_of(command)
    if runs_sweep(command):
        before, dashes, after = head.partition(' -- ')
        head = ' '.join([before, *SWEEP_TOY_FLAGS, '--', after, *TINY_MAIN] if dashes else [before, *SWEEP_TOY_FLAGS, '--',
                                                                                          *TINY_MAIN])
    elif script is not None and DRY_RUN.search(script):
        if '--dry_run' not in head.split():
            before, dashes, after = head.partition(' -- ')
            head = before + ' --dry_run' + (dashes + after if dashes else '')
    else:
        for name, flags in TOY_FLAGS.items():
            if script is not None and script.endswith(name):
                head += ' ' + shlex.join(flags)
    return head + pipe + tail


def toy_rule(command):
    """How the suite sizes `command` (None: no rule)."""
    script = script_of(command)
    if script is None:
        return 'as documented'
    if runs_sweep(command):
        return 'sweep at toy size'
    if DRY_RUN.search(script):
        return 'dry run'
    return next((name for name in TOY_FLAGS if script.endswith(name)), None) or (
        'as documented' if script.endswith(AS_DOCUMENTED) else None)


UNITS = [unit for page in DOC_FILES for unit in page_units(page)]


def run_groups(units=UNITS):
    """The units that run, grouped by what they run: a command shown on several pages runs once, and the
    expectations of every place it is shown are checked against that run."""
    groups = {}
    for unit in units:
        if unit.runnable():
            groups.setdefault(unit.script(), []).append(unit)
    return list(groups.values())


GROUPS = run_groups()


# ---------------------------------------------------------------------------------------------
# What the pages say, checked without running anything.
# ---------------------------------------------------------------------------------------------


def test_every_page_has_commands():
    assert len(UNITS) > 40
    assert {unit.page for unit in UNITS} >= {'README.md', 'docs/reproduce.md', 'docs/experiments.md',
                                             'docs/performance.md', 'docs/logging.md', 'docs/results.md'}


def assert_units_are_well_formed(units):
    for unit in units:
        for kind, argument in unit.expects:
            assert kind in EXPECTATION_KINDS and argument, \
                (f'{unit.where}: expectation {kind} {argument!r}: write `file GLOB`, `dir GLOB`, `output "TEXT"` or '
                 f'`table` (the page\'s next Markdown table after the fence, printed as it stands)')
        if unit.runnable():
            assert unit.expects, (f'{unit.where}: no expectation says what `{unit.runnable()[0]}` promises: add '
                                  '<!-- expect: file GLOB | dir GLOB | output "TEXT" --> after it')
        else:
            assert not unit.expects, f'{unit.where}: an expectation on a command that does not run here'
        for command in unit.runnable():
            if unit.language == 'shell':
                assert toy_rule(command), (f'{unit.where}: no rule says how to run {command!r} at toy size '
                                           '(TOY_FLAGS or AS_DOCUMENTED in tests/e2e/test_docs.py)')


def assert_commands_use_the_venv(units):
    """A tool called bare is whatever the reader's PATH holds: every command names the venv's (README's set-up line,
    which makes the venv, excepted)."""
    for unit in units:
        for command in unit.commands if unit.language == 'shell' else []:
            for part in re.split(r'\s*(?:\||;|&&|\$\()\s*', command):
                words = [w for w in part.split() if not re.fullmatch(r'[A-Z_][A-Z0-9_]*=\S*', w)]
                if words and words[0] in VENV_TOOLS and not part.startswith('python3 -m venv'):
                    raise AssertionError(f'{unit.where}: `{command}` calls `{words[0]}` from the PATH: write '
                                         f'`.venv/bin/{words[0]}` (the venv of README\'s set-up)')


def test_every_command_runs_or_is_listed_and_says_what_it_promises():
    assert_units_are_well_formed(UNITS)
    assert_commands_use_the_venv(UNITS)


def test_every_not_run_entry_is_used():
    for pattern, reason in NOT_RUN:
        assert any(re.search(pattern, c, flags=re.M) for unit in UNITS for c in unit.commands), \
            f'NOT_RUN entry {pattern!r} matches no documented command: remove it'


def test_every_toy_flag_entry_is_used():
    used = {toy_rule(c) for group in GROUPS for c in group[0].runnable() if group[0].language == 'shell'}
    assert set(TOY_FLAGS) <= used, f'TOY_FLAGS entries no documented command uses: {sorted(set(TOY_FLAGS) - used)}'
    assert set(AS_DOCUMENTED) <= {script_of(c) for group in GROUPS for c in group[0].runnable()
                                  if group[0].language == 'shell'}
    for pattern in RUN_SWEEPS:
        assert any(re.search(pattern, c) for group in GROUPS for c in group[0].runnable()), \
            f'RUN_SWEEPS entry {pattern!r} matches no documented command: remove it'


REPO_PATH = re.compile(r'(?<![\w./-])((?:agents|benchmarks|configs|datagen|docs|experiments|runtime|scripts|tests|utils'
                       r'|\.ci)/[\w./*<>{}-]*[\w*/]|main\.py|requirements\.txt|pyproject\.toml)')


def path_problems(page):
    """Paths of the checkout a page names (in prose, code and commands) that do not exist, and links to pages or
    headings that do not exist."""
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    # files the reader creates
    created = {path for title in (SPR_EXAMPLE, TD_VALUE_EXAMPLE, KSTEP_EXAMPLE) for path in example_blocks(title)}
    problems = []
    for match in REPO_PATH.finditer(text):
        path = match.group(1)
        if re.search(r'[<>{}]', path) or text[match.end():match.end() + 1] == '<' or path in created:
            continue  # a pattern (agents/<name>.py), not a path
        if not glob.glob(os.path.join(ROOT, path)):
            problems.append(f'{page}:{text.count(chr(10), 0, match.start()) + 1}: {path} does not exist')
    folder = os.path.dirname(os.path.join(ROOT, page))
    for match in re.finditer(r'\]\(([^)\s]+)\)', text):
        target, _, anchor = match.group(1).partition('#')
        if re.match(r'[a-z]+:', target):
            continue  # a web address
        path = os.path.normpath(os.path.join(folder, target)) if target else os.path.join(ROOT, page)
        line = text.count('\n', 0, match.start()) + 1
        if not os.path.exists(path):
            problems.append(f'{page}:{line}: link to {target}, which does not exist')
        elif anchor and path.endswith('.md') and anchor not in heading_anchors(path):
            problems.append(f'{page}:{line}: link to {target}#{anchor}: no such heading')
    return problems


def heading_anchors(path):
    """The anchors GitHub gives a page's headings."""
    with open(path) as f:
        headings = [line.lstrip('#').strip() for line in f if re.match(r'#{1,6} ', line)]
    return {re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-') for heading in headings}


def code_name_problems(page):
    """Dotted names of this project's code a page cites (`utils.training.frozen`) that do not resolve."""
    import importlib

    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    problems = []
    for match in re.finditer(r'`((?:agents|benchmarks|configs|datagen|experiments|runtime|utils)(?:\.\w+)+)', text):
        parts = match.group(1).split('.')
        for split in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                found = importlib.import_module('.'.join(parts[:split]))
            except ImportError:
                continue
            for name in parts[split:]:
                found = getattr(found, name, None)
            break
        else:
            found = None
        if found is None:
            problems.append(f'{page}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(1)} does not exist')
    return problems


def test_every_path_link_and_code_name_exists():
    problems = [problem for page in DOC_FILES for problem in path_problems(page) + code_name_problems(page)]
    assert not problems, '\n'.join(problems)


def test_the_set_up_line_is_the_one_ci_runs():
    """README's command 1 starts with the set-up .ci/run performs (CI then runs README's command 2)."""
    first, second = [unit for unit in UNITS if unit.page == 'README.md'][:2]
    with open(os.path.join(ROOT, '.ci', 'run')) as f:
        ci = f.read()
    assert first.commands[0] == 'python3 -m venv .venv' and 'python3 -m venv .venv' in ci
    assert first.commands[1] == '.venv/bin/pip install -r requirements.txt -e .'
    assert '.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt -e .' in ci
    assert first.commands[2].startswith('.venv/bin/python main.py ') and len(first.commands) == 4
    assert first.commands[3] == '.venv/bin/python -m pytest -q -n 2 tests' == ci.rstrip().splitlines()[-2]


def readme_command_1():
    """README's first fence: the set-up, the main job (the one command of it that runs here) and the tests."""
    first = next(unit for unit in UNITS if unit.page == 'README.md')
    assert [toy_rule(c) for c in first.runnable()] == ['main.py'], first.runnable()
    return first


# ---------------------------------------------------------------------------------------------
# The sandbox.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    returncode: int
    output: str
    started: float


@pytest.fixture(scope='session')
def sandbox(tmp_path_factory, worker_id, pointmaze_data_dir):
    """(root, environment, README command 1's outcome): made once per test run and shared by the pytest-xdist
    workers (the first to need it makes it, under a lock)."""
    base = tmp_path_factory.getbasetemp()
    base = base if worker_id == 'master' else base.parent
    root = base / 'docs-sandbox'
    with open(base / 'docs-sandbox.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / 'ready').exists():
            shutil.rmtree(root, ignore_errors=True)
            make_sandbox(root, pointmaze_data_dir)
            (root / 'ready').write_text('')
    with open(root / 'command-1.out') as f:
        returncode, started, output = f.read().split('\n', 2)
    return root, sandbox_environment(root), Outcome(int(returncode), output, float(started))


STAND_IN = '''#!/bin/sh
echo "$(basename "$0"): not the project's environment here: call .venv/bin/$(basename "$0") (README's set-up)" >&2
exit 127
'''


def sandbox_environment(root):
    venv_bin = os.path.dirname(sys.executable)
    path = [p for p in os.environ['PATH'].split(os.pathsep) if p and os.path.realpath(p) != os.path.realpath(venv_bin)
            and '.venv' not in p]
    env = {k: v for k, v in os.environ.items() if k not in ('VIRTUAL_ENV', 'PYTHON', 'PYTHONHOME')}
    return dict(env, HOME=str(root / 'home'), WANDB_MODE='disabled', PYTHONPATH=str(root),
                PATH=os.pathsep.join([str(root / 'stand-ins')] + path))


def make_sandbox(root, pointmaze_data_dir):
    from datagen.pointmaze import write_dataset

    root.mkdir()
    for name in os.listdir(ROOT):
        if name in ('runs', 'data', '.git', 'wandb', 'plots', 'aux_loss.png') or name.startswith('.pytest'):
            continue
        if os.path.isfile(os.path.join(ROOT, name)):  # copied: Python puts a started script's real folder on sys.path
            shutil.copy(os.path.join(ROOT, name), root / name)
        elif name in ('agents', 'configs'):  # their files, to which the worked example of adding_a_method.md adds
            (root / name).mkdir()
            for file in os.listdir(os.path.join(ROOT, name)):
                os.symlink(os.path.join(ROOT, name, file), root / name / file)
        else:
            os.symlink(os.path.join(ROOT, name), root / name)
    (root / 'stand-ins').mkdir()
    for tool in VENV_TOOLS:
        (root / 'stand-ins' / tool).write_text(STAND_IN)
        (root / 'stand-ins' / tool).chmod(0o755)
    # docs/adding_a_method.md's worked example, applied as the page says, for its "Use it" commands.
    blocks = example_blocks(SPR_EXAMPLE)
    (root / 'agents' / 'cosine_spr.py').write_text(blocks['agents/cosine_spr.py'])
    os.unlink(root / 'configs' / 'presets.py')
    (root / 'configs' / 'presets.py').write_text(presets_source_with_entry(blocks['configs/presets.py']))
    data = root / 'home' / '.ogbench' / 'data'
    data.mkdir(parents=True)
    for name in os.listdir(pointmaze_data_dir):
        os.symlink(os.path.join(pointmaze_data_dir, name), data / name)
    write_dataset('pointmaze-large-stitch-v0', str(data), seed=0, num_train_episodes=30, num_val_episodes=3, progress=False)
    env = sandbox_environment(root)
    # README's command 1, which every page assumes the reader has run.
    outcome = run_script(readme_command_1().script(), root, env)
    (root / 'command-1.out').write_text(f'{outcome.returncode}\n{outcome.started}\n{outcome.output}')
    # The stitching benchmark's BYOL-gamma^a alpha=1 cell, the runs the pages' analyses read, trained by the
    # benchmark itself at toy size: 2 seeds in one process; its table and curves at the end.
    trained = subprocess.run(
        ['bash', 'scripts/stitch_benchmark.sh', '--', *TINY_MAIN, '--eval_interval=10', '--save_interval=10'],
        cwd=root, capture_output=True, text=True, timeout=600,
        env=dict(env, STITCH_METHODS='byol_gamma_a:alpha=1', STITCH_SEEDS='0-1'))
    assert trained.returncode == 0 and (root / 'runs/stitch/byol_gamma_a_pointmaze-large-stitch-v0_a1_sd1/DONE').exists(), \
        trained.stdout[-3000:] + trained.stderr[-3000:]
    write_runs(root / 'runs', FAKE_RUNS)
    # The stitching benchmark's other cells, at the protocol of the cell trained above (a table compares one).
    write_runs(root / 'runs', STITCH_FAKE_RUNS, protocol=STITCH_TOY_PROTOCOL)
    write_runs(root / 'runs', [('spr', 'cosine_spr', {'alpha': 6.0}, ANTMAZES[:1], range(4))], example_config)


# The sweeps' run directories the pages' table and plot commands read, scores made up (what is tested is that the
# commands read them): (sweep, preset, overrides, datasets, seeds).
ANTMAZES = ('antmaze-medium-stitch-v0', 'antmaze-large-stitch-v0')
FAKE_RUNS = [
    *(('state', preset, overrides, ANTMAZES, range(4)) for preset, overrides in (
        ('byol_gamma_a', {'alpha': 1.0}), ('byol_gamma_a', {'alpha': 6.0}), ('byol', {'alpha': 1.0}),
        ('tra', {'alpha': 10.0}), ('tdsr_a', {'alpha': 0.01}), ('gcbc', {}))),
    *(('ablations', preset, {'alpha': 1.0}, ANTMAZES, range(4)) for preset in (
        'byol_gamma_no_a', 'byol_gamma_l2', 'byol_gamma_no_psi_b', 'byol_gamma_gamma0', 'byol_gamma_no_psi_b_gamma0',
        'byol_nstep1_a', 'byol_nstep3_a', 'byol_nstep5_a', 'tra_a', 'tdsr')),
    ('ablations', 'gcbc_phi', {}, ANTMAZES, range(4)), ('ablations', 'fb', {'lr': 1e-4}, ANTMAZES, range(4)),
    ('state_rl', 'gciql_antmaze', {}, ANTMAZES, range(4)),
    ('hierarchical', 'hgcbc', {}, ANTMAZES, range(4)), ('hierarchical', 'hbyol_gamma_a', {'alpha': 1.0}, ANTMAZES, range(4)),
    *(('visual', preset, overrides, ('visual-antmaze-medium-stitch-v0',), range(4))
      for preset, overrides in (('gcbc_visual', {}), ('byol_gamma_a_visual', {'alpha': 1.0}))),
    *(('stitch_confirm', preset, overrides, ('pointmaze-large-stitch-v0',), range(8, 10))
      for preset, overrides in (('gcbc', {}), ('gcbc_phi', {}), ('byol_gamma_a', {'alpha': 1.0}))),
    ('spr', 'gcbc', {}, ANTMAZES[:1], range(4)),  # the worked example's sweep, with its cosine_spr runs below
]


STITCH_FAKE_RUNS = [('stitch', preset, {}, ('pointmaze-large-stitch-v0',), range(2)) for preset in ('gcbc', 'gcbc_phi')]
# The protocol of the benchmark's cell the sandbox trains: TINY_MAIN with an evaluation every 10 steps.
STITCH_TOY_PROTOCOL = dict(train_steps=20, eval_interval=10, eval_episodes=1, eval_tasks='1', eval_max_steps=5)


def example_config(preset):
    """The worked example's config, as its preset gives it (the agent file's get_config, named after the preset)."""
    module = module_from_source('cosine_spr_example', example_blocks(SPR_EXAMPLE)['agents/cosine_spr.py'],
                                'agents/cosine_spr.py')
    config = module.get_config()
    config.preset = preset
    return config


def write_runs(runs, specs, get_config=None, protocol=None):
    """Run directories as main.py leaves them (flags.json, config.json, eval.csv with an evaluation every
    eval_interval, DONE), at `protocol` (main.py's protocol flags; default 300 steps, an evaluation every 100)."""
    protocol = protocol or dict(train_steps=300, eval_interval=100)
    import numpy as np

    from configs.presets import get_config as preset_config
    from main import Flags
    from runtime.atomic_io import write_json
    from runtime.request import flag_defaults, plain

    get_config = get_config or preset_config
    rng = np.random.default_rng(0)
    for sweep, preset, overrides, envs, seeds in specs:
        config = get_config(preset)
        config.update(overrides)
        for env in envs:
            for seed in seeds:
                name = '_'.join([preset, env] + [f'a{v:g}' for k, v in overrides.items() if k == 'alpha']) + f'_sd{seed}'
                directory = runs / sweep / name
                directory.mkdir(parents=True)
                write_json(str(directory / 'flags.json'), dict(flag_defaults(Flags), env_name=env, seed=seed,
                                                               run_group=sweep, run_name=name, **protocol))
                write_json(str(directory / 'config.json'), plain(config.to_dict()))
                rows = ['step,evaluation/overall_success,' + ','.join(f'evaluation/task{t}_success' for t in range(1, 6))]
                for step in range(protocol['eval_interval'], protocol['train_steps'] + 1, protocol['eval_interval']):
                    tasks = rng.uniform(0, 1, 5).round(2)
                    rows.append(f'{step},{tasks.mean():.3f},' + ','.join(map(str, tasks)))
                (directory / 'eval.csv').write_text('\n'.join(rows) + '\n')
                (directory / 'DONE').write_text('{}\n')


# ---------------------------------------------------------------------------------------------
# Running the pages' commands.
# ---------------------------------------------------------------------------------------------


def run_script(script, root, env):
    started = time.time()
    result = subprocess.run(['bash', '-c', 'set -euo pipefail\n' + script], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=900)
    return Outcome(result.returncode, result.stdout, started)


def assert_ran(unit, outcome):
    script = unit.script().rstrip()
    assert outcome.returncode == 0 and 'Traceback (most recent call last)' not in outcome.output, \
        f'{unit.where}: failed (exit {outcome.returncode}):\n{script}\n---\n{outcome.output[-5000:]}'


def assert_expected(unit, outcome, root):
    home = str(root / 'home')
    for kind, argument in unit.expects:
        if kind == 'output':
            assert argument in outcome.output, \
                f'{unit.where}: promised output {argument!r} not in the output:\n{outcome.output[-5000:]}'
            continue
        if kind == 'table':
            printed = '\n'.join(line.rstrip() for line in outcome.output.splitlines())
            assert argument in printed, \
                f'{unit.where}: the page\'s table is not what the command prints:\n{argument}\n---\n{printed[-5000:]}'
            continue
        pattern = os.path.join(home, argument[2:]) if argument.startswith('~/') else os.path.join(root, argument)
        found = glob.glob(pattern, recursive=True)
        if kind == 'dir':
            assert any(os.path.isdir(p) for p in found), f'{unit.where}: promised folder {argument} does not exist'
        else:
            written = [p for p in found if os.path.isfile(p) and os.path.getmtime(p) >= outcome.started - 1]
            assert written, (f'{unit.where}: promised file {argument} was not written '
                             f'({"only older files match" if found else "nothing matches"}):\n{outcome.output[-3000:]}')


@pytest.mark.parametrize('units', GROUPS, ids=[group[0].where for group in GROUPS])
def test_documented_command(units, sandbox):
    root, env, command_1 = sandbox
    unit = units[0]
    outcome = command_1 if unit.script() == readme_command_1().script() else run_script(unit.script(), root, env)
    assert_ran(unit, outcome)
    for shown in units:
        assert_expected(shown, outcome, root)


def scripts_with_main_flags():
    """The scripts/*.sh that give main.py flags of their own (`--main_flags`, or flags after a `--`): those whose own
    flags could override the user's."""
    scripts = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'scripts', '*.sh')))
    return [s for s in scripts if re.search(r'--main_flags|\s--\s', open(os.path.join(ROOT, s)).read())]


@pytest.mark.parametrize('script', scripts_with_main_flags())
def test_flags_after_dashes_win(script, sandbox):
    """docs/experiments.md: flags after `--` go to every main.py command, after the script's own, so they win."""
    root, env, _ = sandbox
    user = ['--train_steps=7', '--eval_episodes=3']
    outcome = run_script(shlex.join(['bash', script, '--seeds=0', '--dry_run', '--', *user]), root, env)
    assert outcome.returncode == 0, outcome.output[-3000:]
    commands = [line for line in outcome.output.splitlines() if re.search(r'main\.py --', line)]
    assert commands and all(line.endswith(' ' + ' '.join(user)) for line in commands), outcome.output[-3000:]


def test_mistakes_on_a_page_fail(tmp_path, sandbox):
    """What the tests above do with a page holding each kind of mistake."""
    root, env, _ = sandbox
    page = tmp_path / 'broken.md'
    page.write_text(
        'Train:\n\n```bash\n.venv/bin/python main.py --agent=configs/presets.py:no_such_preset\n```\n'
        '<!-- expect: output "Finished" -->\n\n'
        'Plot `.venv/bin/python scripts/plot_curves.py --runs=runs/state --out=plots/x.png`'
        '<!-- expect: file plots/not_what_it_writes.png --> then `python scripts/results.py --runs=runs/state`'
        '<!-- expect: output "GCBC" -->.\n\n'
        'Also `.venv/bin/python scripts/unknown_script.py --x=1`<!-- expect: output "x" -->, and '
        '`.venv/bin/python scripts/results.py --runs=runs/stitch` with nothing promised.\n\n'
        'The code is in `agents/no_such_agent.py` (`utils.training.no_such_function`); see [the method](method.md#no-such-heading) and [more](gone.md).\n')
    (tmp_path / 'method.md').write_text('# The method\n\n## 1. The problem\n')
    broken, wrong_file, bare_python, unknown, unpromised = page_units(str(page))
    with pytest.raises(AssertionError, match='no_such_preset'):
        assert_ran(broken, run_script(broken.script(), root, env))
    outcome = run_script(wrong_file.script(), root, env)
    assert_ran(wrong_file, outcome)
    with pytest.raises(AssertionError, match='promised file plots/not_what_it_writes.png was not written'):
        assert_expected(wrong_file, outcome, root)
    with pytest.raises(AssertionError, match='calls `python` from the PATH'):
        assert_commands_use_the_venv([bare_python])
    with pytest.raises(AssertionError, match="not the project's environment"):  # and, run, it fails
        assert_ran(bare_python, run_script(bare_python.script(), root, env))
    with pytest.raises(AssertionError, match='no rule says how to run'):
        assert_units_are_well_formed([unknown])
    with pytest.raises(AssertionError, match='no expectation says what'):
        assert_units_are_well_formed([unpromised])
    problems = '\n'.join(path_problems(str(page)) + code_name_problems(str(page)))
    assert 'utils.training.no_such_function does not exist' in problems
    assert 'agents/no_such_agent.py does not exist' in problems and 'link to gone.md, which does not exist' in problems
    assert 'link to method.md#no-such-heading: no such heading' in problems
    assert 'method.md#1-the-problem' not in problems and heading_anchors(str(tmp_path / 'method.md')) == {
        'the-method', '1-the-problem'}
    # A published table that its command does not print (a number edited by hand), and a `table` with no table.
    drifted = tmp_path / 'drifted.md'
    drifted.write_text('```bash\n.venv/bin/python scripts/results.py --runs=results/h200_headline_200k\n```\n'
                       '<!-- expect: table -->\n\n| dataset | BYOL-γ^a | GCBC |\n|---|---|---|\n'
                       '| antmaze-medium-stitch | **62** ± 4 (last 2) | 50 ± 8 (last 2) |\n\n'
                       '```bash\n.venv/bin/python scripts/results.py --runs=results/h200_headline_200k\n```\n'
                       '<!-- expect: table -->\n')
    edited, tableless = page_units(str(drifted))
    with pytest.raises(AssertionError, match="the page's table is not what the command prints"):
        assert_expected(edited, run_script(edited.script(), root, env), root)
    with pytest.raises(AssertionError, match='expectation table'):
        assert_units_are_well_formed([tableless])
