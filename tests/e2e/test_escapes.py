"""The security promise, tried as an attacker would: no flag, config value, environment variable or data file makes
the project write outside the folders the user named, or run code the user did not write (docs/guarantees.md)."""

import os
import shlex
import subprocess
import sys

import pytest

from tests.helpers import BUDGET, error_paragraph, main_command, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def files_under(directory):
    return sorted(os.path.relpath(os.path.join(d, f), directory) for d, _, names in os.walk(directory) for f in names)


@pytest.mark.parametrize('preset', ['../../../escaped', '/ABSOLUTE', 'config file'])
def test_a_preset_label_cannot_put_the_run_outside_save_dir(tmp_path, pointmaze_data_dir, preset):
    """The run name is made from the config's preset label: a label holding a path (from --agent.preset or from a
    config file's get_config) is refused where run names are made, before anything is written anywhere."""
    work = tmp_path / 'a' / 'b' / 'c'
    work.mkdir(parents=True)
    save_dir = work / 'runs'
    if preset == 'config file':
        config = tmp_path / 'evil_config.py'
        config.write_text('from agents.gcbc import get_config as gcbc_config\n\n'
                          'def get_config():\n    config = gcbc_config()\n    config.preset = "../../../escaped"\n'
                          '    return config\n')
        agent, label = str(config), '../../../escaped'
    else:
        agent, label = 'configs/presets.py:gcbc', preset.replace('ABSOLUTE', str(tmp_path / 'abs'))
    command = [f'--agent={agent}' if arg.startswith('--agent=') else arg
               for arg in main_command(pointmaze_data_dir, save_dir, *BUDGET)]
    if preset != 'config file':
        command.append(f'--agent.preset={label}')
    before = files_under(tmp_path)
    code, _, err = run(command)
    paragraph = error_paragraph(code, err)
    assert f'made from the preset {label!r} of the --agent config, is not one directory name' in paragraph
    assert 'Nothing was written' in paragraph and '--run_name' in paragraph
    assert files_under(tmp_path) == before  # nothing outside save_dir, and nothing inside it either


def headline(tmp_path, **environment):
    """scripts/headline.sh --dry_run with HEADLINE_* variables, run where a planted file would show."""
    env = dict(os.environ, PYTHON=sys.executable, SAVE_DIR=str(tmp_path / 'runs'), **environment)
    return subprocess.run(['bash', os.path.join(ROOT, 'scripts', 'headline.sh'), '--dry_run'], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)


def test_headline_variables_are_values_never_code(tmp_path):
    """HEADLINE_SEEDS pasted into a `python -c` string would run the code in a quote. Every value reaches Python
    as an argument: code in it is a bad value, named by the sweep's own check; a bad range is named, not a
    traceback; a dataset folder with a space stays one flag."""
    planted = tmp_path / 'PLANTED'
    attack = headline(tmp_path, HEADLINE_SEEDS=f"0')); open({str(planted)!r}, 'w'); print(('")
    assert attack.returncode != 0 and not planted.exists(), attack.stderr
    assert 'Bad --seeds' in attack.stderr and 'Traceback' not in attack.stderr
    backwards = headline(tmp_path, HEADLINE_SEEDS='3-1')
    assert backwards.returncode != 0 and "Bad --seeds '3-1'" in backwards.stderr and 'Traceback' not in backwards.stderr
    spaced = headline(tmp_path, HEADLINE_SEEDS='0-1', HEADLINE_DATASET_DIR=str(tmp_path / 'my data'))
    assert spaced.returncode == 0, spaced.stderr
    commands = [line for line in spaced.stdout.splitlines() if 'main.py' in line]
    assert len(commands) == 2 and all(' --num_seeds=2 ' in c for c in commands)  # every seed of a method in one job
    assert all(f'--dataset_dir={tmp_path / "my data"}' in shlex.split(c) for c in commands), commands
    assert not (tmp_path / 'runs').exists()


def test_stitch_benchmark_counts_are_numbers_before_bash_arithmetic_reads_them(tmp_path):
    """bash's arithmetic evaluates the command substitutions an array subscript holds: a count is checked first."""
    planted = tmp_path / 'PLANTED'
    env = dict(os.environ, PYTHON=sys.executable, STITCH_SAVE_DIR=str(tmp_path / 'runs'),
               STITCH_STEPS=f'x[$(touch {planted})]')
    result = subprocess.run(['bash', os.path.join(ROOT, 'scripts', 'stitch_benchmark.sh'), '--dry_run'], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2 and not planted.exists()
    assert "STITCH_STEPS must be a positive whole number, got 'x[$(touch" in result.stderr
