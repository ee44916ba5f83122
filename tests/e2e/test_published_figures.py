"""The figures the pages publish are what their commands draw from the committed run records: every documented command
that writes into docs/figures/ is run again into a temporary folder, and each picture it draws equals the committed
one pixel for pixel. The scripts run in-process (their `main(argv)`), from the checkout's root. (The pages' other commands run in tests/e2e/test_docs.py, which does not run these: they would
rewrite the checkout's figures.)"""

import contextlib
import importlib
import os
import re
import shlex

import numpy as np
from matplotlib import image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ('README.md', 'docs/results.md', 'docs/experiments.md')
FIGURES = 'docs/figures/'
# Figures drawn from runs that are not committed (an illustration of what a command draws, not a result).
ILLUSTRATIONS = {'docs/figures/demo_alpha_pointmaze-medium-stitch.png'}


def figure_commands():
    """(page, command) of every documented command that writes into docs/figures/."""
    commands = []
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        for fence in re.findall(r'```bash\n(.*?)```', text, flags=re.S):
            for command in fence.replace('\\\n', ' ').splitlines():
                command = command.split(' #')[0].strip()
                if not command.startswith('#') and any(w.startswith(f'--out={FIGURES}') for w in shlex.split(command)):
                    commands.append((page, command))
    return commands


def drawn_paths(out_dir):
    """The PNGs a command wrote into `out_dir` (its figure paths, moved there)."""
    return sorted(os.path.join(dirpath, name) for dirpath, _, names in os.walk(out_dir) for name in names
                  if name.endswith('.png'))


def test_every_published_figure_is_drawn_again_from_the_committed_runs(tmp_path):
    commands = figure_commands()
    assert commands, 'no documented command writes into docs/figures/'
    drawn = {}
    for index, (page, command) in enumerate(commands):
        out_dir = tmp_path / str(index)
        words = [w.replace(f'--out={FIGURES}', f'--out={out_dir}/') for w in shlex.split(command)]
        assert words[0] == '.venv/bin/python' and re.fullmatch(r'scripts/\w+\.py', words[1]), f'{page}: {command}'
        script = importlib.import_module('scripts.' + os.path.basename(words[1])[:-3])  # its main(argv), in-process
        with contextlib.chdir(ROOT):
            assert script.main(words[2:]) == 0, f'{page}: {command}'
        for path in drawn_paths(out_dir):
            drawn[FIGURES + os.path.relpath(path, out_dir)] = path
    committed = {os.path.join('docs/figures', name) for name in os.listdir(os.path.join(ROOT, FIGURES))}
    assert committed - ILLUSTRATIONS == set(drawn), 'committed figures that no documented command draws, or the reverse'
    for published, path in sorted(drawn.items()):
        expected, actual = image.imread(os.path.join(ROOT, published)), image.imread(path)
        assert expected.shape == actual.shape and np.array_equal(expected, actual), \
            f'{published} is not what its command draws from the committed runs: run the command again'


def test_every_committed_figure_is_shown_on_a_page():
    shown = set()
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            for target in re.findall(r'!\[[^\]]*\]\(([^)]+\.png)\)', f.read()):
                shown.add(os.path.normpath(os.path.join(os.path.dirname(page), target)))
    committed = {os.path.join('docs/figures', name) for name in os.listdir(os.path.join(ROOT, FIGURES))}
    assert committed <= shown, f'figures no page shows: {sorted(committed - shown)}'
