"""The repository installs as one package and stands alone."""

import ast
import os
import re
import subprocess
import tokenize
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


# The layers, bottom up: utils/ (the research library) may import only itself; agents/ (the methods) the library;
# runtime/ (the run machinery) the library, never a method (a method never the run machinery: agents and runtime
# share a level); the layers above anything below them, never above.
LAYERS = {'utils': 0, 'runtime': 1, 'agents': 1, 'configs': 2, 'datagen': 2, 'experiments': 3, 'main': 4, 'scripts': 5,
          'benchmarks': 5}


def top_level_imports(path):
    """Top-level package names imported anywhere in a Python file (module level or inside functions)."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split('.')[0])
    return names


def test_each_layer_imports_only_layers_below_it():
    """utils/ is a leaf: it imports nothing from runtime/, agents/, configs/, datagen/, experiments/ or main;
    runtime/ and agents/ import only utils/ (neither the other); and so on up."""
    offenders = []
    for name in tracked_text_files():
        layer = name.split('/')[0].removesuffix('.py')
        if not name.endswith('.py') or layer not in LAYERS:
            continue
        for imported in top_level_imports(os.path.join(ROOT, name)) & set(LAYERS):
            if imported != layer and LAYERS[imported] >= LAYERS[layer]:
                offenders.append(f'{name} imports {imported}')
    assert not offenders, offenders


def test_no_test_imports_the_benchmarks():
    """benchmarks/ times the code and the tests check it: a test that imports a benchmark checks the benchmark, and a
    benchmark's shortcut would pass for the library. The documented benchmark commands run as commands
    (tests/e2e/test_docs.py)."""
    offenders = [name for name in tracked_text_files() if name.startswith('tests/') and name.endswith('.py')
                 and 'benchmarks' in top_level_imports(os.path.join(ROOT, name))]
    assert not offenders, offenders


# What runs a run, not what it computes: run-directory errors and the other errors only the run machinery raises, when
# evaluations run, and whether a run fits the machine's memory. They live in runtime/.
RUN_MACHINERY = {'RunDirError', 'RunLockedError', 'ResumeMismatchError', 'NonFiniteLossError', 'EvaluationError',
                 'StorageError', 'DeviceMemoryError', 'Evaluations', 'EvaluationFailed', 'check_evaluation_fits',
                 'check_dataset_fits', 'host_available_bytes'}


def test_the_library_defines_no_run_machinery():
    offenders = []
    for name in tracked_text_files():
        if name.startswith('utils/') and name.endswith('.py'):
            with open(os.path.join(ROOT, name)) as f:
                tree = ast.parse(f.read(), filename=name)
            offenders += [f'{name}: {node.name}' for node in ast.walk(tree)
                          if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in RUN_MACHINERY]
    defined = set()
    for name in tracked_text_files():
        if name.startswith('runtime/') and name.endswith('.py'):
            with open(os.path.join(ROOT, name)) as f:
                defined |= {node.name for node in ast.walk(ast.parse(f.read(), filename=name))
                            if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    assert not offenders, offenders
    assert RUN_MACHINERY <= defined, RUN_MACHINERY - defined  # the names still say what runtime/ holds


def test_test_modules_import_helpers_not_each_other():
    """Shared test code lives in tests/helpers.py: a test module that imports another would run that module's tests'
    import-time work, and hide a dependency between tiers."""
    offenders = []
    for name in tracked_text_files():
        if name.startswith('tests/') and name.endswith('.py'):
            with open(os.path.join(ROOT, name)) as f:
                tree = ast.parse(f.read(), filename=name)
            for node in ast.walk(tree):
                module = node.module if isinstance(node, ast.ImportFrom) and node.module else ''
                names = [alias.name for alias in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
                imported = [module] + [f'{module}.{n}' if module else n for n in names]
                if any(re.search(r'(^|\.)(test_\w+|conftest)$', m) for m in imported if m.startswith('tests')):
                    offenders.append(name)
    assert not offenders, offenders


def test_command_examples_in_strings_keep_their_line_continuations():
    """A backslash at the end of a line inside a plain string joins the lines: a script's docstring, printed by
    --help, showed its multi-line example command as one line with runs of spaces where the breaks were. A string
    that spans lines with a backslash must be raw (an r before its quotes), so the example prints as written (an
    escaped backslash, two of them before the line break, is a character and continues nothing)."""
    offenders = []
    for name in tracked_text_files():
        if name.endswith('.py'):
            with open(os.path.join(ROOT, name)) as f:
                for token in tokenize.generate_tokens(f.readline):
                    prefix = re.match(r'[A-Za-z]*', token.string).group().lower()
                    continued = re.search(r'(?<!\\)(\\\\)*\\\n', token.string)
                    if token.type == tokenize.STRING and 'r' not in prefix and continued:
                        offenders.append(f'{name}:{token.start[0]}')
    assert not offenders, offenders


def test_every_absl_script_parses_its_flags_with_parse_absl_flags():
    """runtime.exits.parse_absl_flags makes an absl script's --help exit 0 (tests/unit/test_exits.py); main.py parses
    its own flags (runtime/request.py), --help included."""
    offenders = []
    for name in tracked_text_files():
        if name.endswith('.py'):
            with open(os.path.join(ROOT, name)) as f:
                tree = ast.parse(f.read(), filename=name)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == 'run'
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == 'app'):
                    parser = next((k.value for k in node.keywords if k.arg == 'flags_parser'), None)
                    if not (isinstance(parser, ast.Name) and parser.id in ('parse_absl_flags', 'keep_argv')):
                        offenders.append(f'{name}:{node.lineno}')
    assert not offenders, offenders


def test_no_folder_outside_tests_holds_more_than_20_python_files():
    counts = {}
    for name in tracked_text_files():
        if name.endswith('.py') and not name.startswith('tests/'):
            counts[os.path.dirname(name)] = counts.get(os.path.dirname(name), 0) + 1
    assert max(counts.values()) <= 20, {folder: n for folder, n in counts.items() if n > 20}


def test_license_and_citation_agree_with_the_package():
    with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
        project = tomllib.load(f)['project']
    with open(os.path.join(ROOT, 'LICENSE')) as f:
        license_text = f.read()
    with open(os.path.join(ROOT, 'CITATION.cff')) as f:
        citation = f.read()
    assert project['license'] == 'MIT' and project['license-files'] == ['LICENSE']
    assert license_text.startswith('MIT License\n') and 'Permission is hereby granted, free of charge' in license_text
    assert re.search(r'^license: MIT$', citation, re.M), 'CITATION.cff: license'
    assert re.search(rf'^version: {re.escape(project["version"])}$', citation, re.M), 'CITATION.cff: version'
    assert re.search(r'^date-released: "\d{4}-\d{2}-\d{2}"$', citation, re.M), 'CITATION.cff: date-released'
    # OGBench is an ICLR paper, not an article; each cited work names its code.
    ogbench = citation[citation.index('OGBench: Benchmarking'):]
    assert re.search(r'- type: conference-paper\n    title: "OGBench', citation) and 'conference:' in ogbench
    assert citation.count('repository-code: "https://github.com/') == 2
    with open(os.path.join(ROOT, 'README.md')) as f:
        readme = f.read()
    for needle in ('arXiv:2506.10137', '@inproceedings{park2025ogbench', 'MIT ([LICENSE](LICENSE))', '## Credits'):
        assert needle in readme, needle
