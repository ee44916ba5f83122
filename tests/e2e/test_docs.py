"""Every shell command in README.md and docs/*.md runs as written, at toy size, so a page cannot drift from the
code. A command runs in a sandbox that looks like a fresh clone (this checkout's folders, its virtual environment,
an empty `runs/`, and a home folder whose `~/.ogbench/data` holds small generated datasets), with:

* `main.py` given tiny budgets, appended after the documented flags (later flags win): TOY_FLAGS['main.py'];
* the sweep scripts and `scripts/sweep.py` given `--dry_run`, which prints their main.py commands and checks each
  with main.py's own request check;
* the other scripts given the small sizes of TOY_FLAGS;
* the commands of NOT_RUN_HERE skipped, each with its reason (this is the one place that lists them).

A documented command that fails (non-zero exit, or a Python traceback) fails the suite; so does a command no rule
covers. tests/test_docs.py's own test checks that a deliberately broken command in a page fails.
"""

import fcntl
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.helpers import example_blocks, module_from_source, presets_source_with_entry

pytestmark = pytest.mark.xdist_group('test_docs')  # its module fixtures are built once, in one worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC_FILES = ['README.md'] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'docs', '*.md')))
FENCES = ('bash', 'sh', 'shell')

# Commands that do not run in the suite, and why.
NOT_RUN_HERE = [
    (r'^python3 -m venv|pip install', "sets up the environment: CI runs README's set-up line itself (.ci/run; "
                                      'test_the_set_up_line_is_the_one_ci_runs)'),
    (r'-m pytest', 'the test suite itself'),
    (r'scripts/ci/slurm_cluster\.sh', 'starts (or stops) Slurm daemons as root: .ci/run does, before the suite, whose '
                                      'tests/test_slurm.py runs against that cluster'),
    (r"default_backend\(\) == 'gpu'", 'needs a GPU'),
    (r'benchmarks/bench_gpu\.py', 'times an accelerator; its --quick form runs in tests/test_bench_gpu.py'),
    (r'ogbench\.download_datasets', 'downloads from the internet'),
    (r'^wandb ', 'needs a wandb account and the network'),
    (r'scripts/train_expert\.py', 'trains the ant expert for an hour; tests/test_sac.py trains it at toy size'),
    (r'benchmarks/bench_ogbench_reference\.py', "needs OGBench's source distribution and its distrax dependency"),
    (r'visual-', 'pixels: rendering a visual dataset takes hours on a CPU; tests/test_visual.py renders, trains and '
                 'evaluates one at toy size'),
    (r'benchmarks/bench_visual\.py', 'pixels: compiles the CNN for minutes on a CPU; tests/test_visual.py covers it'),
]

TINY_MAIN = ['--train_steps=20', '--log_interval=10', '--eval_interval=20', '--save_interval=20', '--eval_episodes=1',
             '--eval_tasks=1', '--eval_max_steps=5', '--agent.batch_size=16', '--wandb_mode=disabled']
# Flags appended to a documented command, by the script it runs: its toy size.
TOY_FLAGS = {
    'main.py': TINY_MAIN,
    'scripts/generate_dataset.py': ['--num_episodes=2', '--num_val_episodes=1', '--dataset_dir=toy-data'],
    'scripts/evaluate_expert.py': ['--episodes_per_task=1'],
    'scripts/horizon.py': ['--episodes=1', '--max_distance=3', '--tasks=1', '--max_steps=20'],
    'scripts/rep_heatmap.py': ['--max_states=40'],
    'scripts/sp_correlation.py': ['--num_pairs=20', '--scatter_points=10'],
    'scripts/finite_mdp.py': ['--fast'],
    'benchmarks/bench_train.py': ['--steps=2', '--rounds=1', '--batch_sizes=16', '--presets=gcbc'],
    'benchmarks/bench_seeds.py': ['--steps=2', '--rounds=1', '--num_seeds=1,2', '--batch_size=16'],
    'benchmarks/bench_init.py': ['--rounds=1', '--presets=gcbc'],
    'benchmarks/bench_eval.py': ['--episodes=1', '--tasks', '1', '--max_steps=5', '--modes', 'native'],
    'benchmarks/bench_datagen.py': ['--num_episodes=2', '--repeats=1'],
    'benchmarks/bench_antmaze_datagen.py': ['--num_episodes=2', '--workers=1'],
}
DRY_RUN = re.compile(r'scripts/(sweep\.py|\w+\.sh)\b')


def documented_commands(pages=DOC_FILES):
    """(page, line, command) of every command in the pages' bash fences: continuation lines joined, comments dropped,
    `&&` chains split into their commands."""
    found = []
    for page in pages:
        with open(os.path.join(ROOT, page)) as f:
            lines = f.read().splitlines()
        fence, pending, start = None, '', 0
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if stripped.startswith('```'):
                fence = None if fence is not None else stripped[3:].strip()
                continue
            if fence not in FENCES:
                continue
            text = without_comment(line).rstrip()
            if not pending:
                start = number
            if text.endswith('\\'):
                pending += text[:-1] + ' '
                continue
            command = (pending + text).strip()
            pending = ''
            for part in command.split(' && ') if command else []:
                found.append((page, start, part.strip()))
    return found


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


def reason_not_run(command):
    return next((why for pattern, why in NOT_RUN_HERE if re.search(pattern, command)), None)


def script_of(command):
    """The .py or .sh file a command runs (None for a shell or Python one-liner)."""
    words = shlex.split(command.partition(' | ')[0])
    return next((w for w in words if w.endswith(('.py', '.sh'))), None)


def toy_version(command):
    """The command as the suite runs it: its toy flags appended (a sweep: `--dry_run`, before its `--`), before any
    pipe."""
    head, pipe, tail = command.partition(' | ')
    script = script_of(command)
    if script is not None and DRY_RUN.search(script):
        if '--dry_run' not in head.split():
            before, dashes, after = head.partition(' -- ')
            head = before + ' --dry_run' + (dashes + after if dashes else '')
        return head + pipe + tail
    for name, flags in TOY_FLAGS.items():
        if script is not None and script.endswith(name):
            head += ' ' + shlex.join(flags)
    return head + pipe + tail


COMMANDS = documented_commands()


def test_every_page_has_commands_and_every_command_a_rule():
    assert len(COMMANDS) > 20 and {page for page, _, _ in COMMANDS} >= {'README.md', 'docs/reproduce.md'}
    assert_every_command_has_a_rule(COMMANDS)


def assert_every_command_has_a_rule(commands):
    for page, line, command in commands:
        script = script_of(command)
        known = reason_not_run(command) or script is None or DRY_RUN.search(script) or any(
            script.endswith(name) for name in TOY_FLAGS) or script.endswith(('results.py', 'plot_curves.py'))
        assert known, f'{page}:{line}: no rule says how to run {command!r} at toy size (tests/test_docs.py)'


def test_the_set_up_line_is_the_one_ci_runs():
    """README's command 1 starts with the set-up .ci/run performs (CI then runs README's command 2)."""
    readme = [command for page, _, command in COMMANDS if page == 'README.md']
    with open(os.path.join(ROOT, '.ci', 'run')) as f:
        ci = f.read()
    assert readme[0] == 'python3 -m venv .venv' and 'python3 -m venv .venv' in ci
    assert readme[1] == '.venv/bin/pip install -r requirements.txt -e .'
    assert '.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt -e .' in ci
    assert readme[3] == '.venv/bin/python -m pytest -q -n 2 tests' and ci.rstrip().splitlines()[-2] == readme[3]


@pytest.fixture(scope='session')
def sandbox(tmp_path_factory, worker_id, pointmaze_data_dir):
    """A fresh clone's layout with small data and a few runs: what the pages' commands need. Made once per test run
    and shared by the pytest-xdist workers (the first to need it makes it, under a lock)."""
    base = tmp_path_factory.getbasetemp()
    base = base if worker_id == 'master' else base.parent
    root = base / 'docs-sandbox'
    with open(base / 'docs-sandbox.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / 'ready').exists():
            shutil.rmtree(root, ignore_errors=True)
            make_sandbox(root, pointmaze_data_dir)
            (root / 'ready').write_text('')
    return root, sandbox_environment(root)


def sandbox_environment(root):
    # This sandbox is the installed checkout, as a fresh clone after README's set-up is.
    return dict(os.environ, HOME=str(root / 'home'), PYTHON=sys.executable, WANDB_MODE='disabled', PYTHONPATH=str(root),
                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH'])


def make_sandbox(root, pointmaze_data_dir):
    from datagen.pointmaze import write_dataset

    root.mkdir()
    for name in os.listdir(ROOT):
        if name in ('runs', 'data', '.git', 'wandb') or name.startswith('.pytest'):
            continue
        if os.path.isfile(os.path.join(ROOT, name)):  # copied: Python puts a started script's real folder on sys.path
            shutil.copy(os.path.join(ROOT, name), root / name)
        elif name in ('agents', 'configs'):  # their files, to which the worked example of adding_a_method.md adds
            (root / name).mkdir()
            for file in os.listdir(os.path.join(ROOT, name)):
                os.symlink(os.path.join(ROOT, name, file), root / name / file)
        else:
            os.symlink(os.path.join(ROOT, name), root / name)
    # docs/adding_a_method.md's worked example, applied as the page says, for its "Use it" commands.
    blocks = example_blocks()
    (root / 'agents' / 'cosine_spr.py').write_text(blocks['agents/cosine_spr.py'])
    os.unlink(root / 'configs' / 'presets.py')
    (root / 'configs' / 'presets.py').write_text(presets_source_with_entry(blocks['configs/presets.py']))
    data = root / 'home' / '.ogbench' / 'data'
    data.mkdir(parents=True)
    for name in os.listdir(pointmaze_data_dir):
        os.symlink(os.path.join(pointmaze_data_dir, name), data / name)
    write_dataset('pointmaze-large-stitch-v0', str(data), seed=0, num_train_episodes=30, num_val_episodes=3, progress=False)
    env = sandbox_environment(root)
    # The runs the pages' analyses read (two trained seeds of the CPU stitching benchmark's BYOL-gamma^a cell, at
    # toy size), and those their tables and plots read (made up).
    trained = subprocess.run(
        [sys.executable, 'main.py', '--env_name=pointmaze-large-stitch-v0', '--agent=configs/presets.py:byol_gamma_a',
         '--agent.alpha=1', '--num_seeds=2', '--run_group=stitch', '--run_name=byol_gamma_a_pointmaze-large-stitch-v0_a1',
         *TINY_MAIN, '--eval_interval=10'], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    write_runs(root / 'runs', FAKE_RUNS)
    write_runs(root / 'runs', [('spr', 'cosine_spr', {'alpha': 6.0}, ANTMAZES[:1], range(4))], example_config)


# The sweeps' run directories the pages' table and plot commands read, scores made up (what is tested is that the
# commands run): (sweep, preset, overrides, datasets, seeds).
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
    *(('stitch', preset, {}, ('pointmaze-large-stitch-v0',), range(2)) for preset in ('gcbc', 'gcbc_phi')),
    *(('stitch_confirm', preset, overrides, ('pointmaze-large-stitch-v0',), range(8, 10))
      for preset, overrides in (('gcbc', {}), ('gcbc_phi', {}), ('byol_gamma_a', {'alpha': 1.0}))),
    ('spr', 'gcbc', {}, ANTMAZES[:1], range(4)),  # the worked example's sweep, with its cosine_spr runs below
]


def example_config(preset):
    """The worked example's config, as its preset gives it (the agent file's get_config, named after the preset)."""
    module = module_from_source('cosine_spr_example', example_blocks()['agents/cosine_spr.py'], 'agents/cosine_spr.py')
    config = module.get_config()
    config.preset = preset
    return config


def write_runs(runs, specs, get_config=None):
    """Run directories as main.py leaves them (flags.json, config.json, eval.csv with 3 evaluations, DONE)."""
    import numpy as np

    from configs.presets import get_config as preset_config
    from runtime.atomic_io import write_json

    get_config = get_config or preset_config
    from runtime.request import FLAG_DEFAULTS, plain

    rng = np.random.default_rng(0)
    for sweep, preset, overrides, envs, seeds in specs:
        config = get_config(preset)
        config.update(overrides)
        for env in envs:
            for seed in seeds:
                name = '_'.join([preset, env] + [f'a{v:g}' for k, v in overrides.items() if k == 'alpha']) + f'_sd{seed}'
                directory = runs / sweep / name
                directory.mkdir(parents=True)
                write_json(str(directory / 'flags.json'), dict(FLAG_DEFAULTS, env_name=env, seed=seed, train_steps=300,
                                                               eval_interval=100, run_group=sweep, run_name=name))
                write_json(str(directory / 'config.json'), plain(config.to_dict()))
                rows = ['step,evaluation/overall_success,' + ','.join(f'evaluation/task{t}_success' for t in range(1, 6))]
                for step in (100, 200, 300):
                    tasks = rng.uniform(0, 1, 5).round(2)
                    rows.append(f'{step},{tasks.mean():.3f},' + ','.join(map(str, tasks)))
                (directory / 'eval.csv').write_text('\n'.join(rows) + '\n')
                (directory / 'DONE').write_text('{}\n')


def run_documented(command, sandbox):
    root, env = sandbox
    return subprocess.run(toy_version(command), shell=True, cwd=root, env=env, capture_output=True, text=True,
                          timeout=600, executable='/bin/bash')


def assert_ran(page, line, command, result):
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0 and 'Traceback' not in result.stderr, \
        f'{page}:{line}: `{toy_version(command)}` failed:\n{output}'


def commands_to_run():
    """The commands the suite runs: each distinct one once, at its first place in the pages (a command several pages
    show, as the stitching benchmark's, runs once)."""
    first = {}
    for page, line, command in COMMANDS:
        if reason_not_run(command) is None:
            first.setdefault(' '.join(command.split()), (page, line, command))  # the same words, however wrapped
    return list(first.values())


@pytest.mark.parametrize('page,line,command', commands_to_run(),
                         ids=lambda value: value if isinstance(value, str) and not value.startswith(('python', '.venv', 'bash', 'scripts')) else None)
def test_documented_command_runs(page, line, command, sandbox):
    assert_ran(page, line, command, run_documented(command, sandbox))


def test_a_broken_command_in_a_page_fails(tmp_path, sandbox):
    """What the tests above do to a page with a mistake in it: a command that fails, and one no rule covers."""
    page = tmp_path / 'broken.md'
    page.write_text('Train:\n\n```bash\npython main.py --agent=configs/presets.py:no_such_preset\n'
                    'python scripts/unknown_script.py --x=1\n```\n')
    (broken, unknown) = documented_commands([str(page)])
    with pytest.raises(AssertionError, match='no_such_preset'):
        assert_ran(*broken, run_documented(broken[2], sandbox))
    with pytest.raises(AssertionError, match='no rule says how to run'):
        assert_every_command_has_a_rule([unknown])
