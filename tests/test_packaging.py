"""The repository installs as one package and stands alone."""

import os
import re
import subprocess
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def requirement_pins(lines):
    return sorted(line.split('#')[0].strip() for line in lines if line.split('#')[0].strip())


def test_pyproject_pins_exactly_the_requirements():
    with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
        project = tomllib.load(f)['project']
    with open(os.path.join(ROOT, 'requirements.txt')) as f:
        requirements = requirement_pins(f)
    assert sorted(project['dependencies']) == requirements
    assert all(re.fullmatch(r'[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*', pin) for pin in requirements), requirements


def tracked_text_files():
    names = subprocess.run(['git', 'ls-files'], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [n for n in names if n.endswith(('.py', '.md', '.sh', '.toml', '.txt', '.json')) or n.startswith('.ci/')]


def test_no_file_points_outside_the_repository_or_patches_sys_path():
    offenders = []
    for name in tracked_text_files():
        with open(os.path.join(ROOT, name), errors='replace') as f:
            text = f.read()
        # Spelled in two pieces so that this file does not match itself.
        for pattern in ('../' + 'shared', 'sys.path.' + 'insert', 'SP' + 'EC section'):
            if pattern in text:
                offenders.append(f'{name}: {pattern}')
    assert not offenders, offenders
