"""Run directories -> the paper's numbers: tables (scripts/results.py) and learning curves
(scripts/plot_curves.py).

Protocol (paper, Table "OGBench"): a seed's score is its metric (success, 0..1) averaged over its last
3 evaluations, times 100; a cell is the mean and standard deviation (numpy's, ddof=0) over seeds; for
each dataset and method the hyperparameter setting (alpha, or whatever differs between that method's
runs) with the best mean is reported. In a row, non-RL methods whose mean is within 95% of the best
non-RL mean are bold.

A run directory is any folder holding eval.csv; its flags.json / config.json / DONE are read from it
or the nearest folder above it. Seeds come from a `seed` column of eval.csv when there is one (several
seeds in one file), else from flags.json.
"""

import csv
import dataclasses
import os
import re
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from configs.presets import METHODS, method_of, methods_of_kind
from utils import atomic_io
from utils.rundir import CONFIG_FILE, DONE_FILE, EVAL_LOG, FLAGS_FILE

METRIC = 'evaluation/overall_success'
# Bolding compares non-RL (behavioral cloning) methods only; the offline RL baselines and FB are shown as
# the paper shows OGBench's numbers, for reference.
RL_METHODS = methods_of_kind('rl')


BOLD_FRACTION = 0.95
# Flags that change what a number means; other flags (paths, logging, wandb) do not split groups.
PROTOCOL_FLAGS = ('train_steps', 'eval_interval', 'eval_episodes', 'eval_tasks', 'eval_max_steps')
# Config entries that do not identify a setting: the method itself, and the sampler (derived from the rest).
NON_SETTING_CONFIG = ('preset', 'agent_name', 'sampler')
ENV_ORDER = (
    'antmaze-medium-stitch', 'antmaze-large-stitch', 'humanoidmaze-medium-stitch', 'humanoidmaze-large-stitch',
    'antsoccer-arena-stitch', 'visual-antmaze-medium-stitch', 'visual-antmaze-large-stitch', 'visual-scene-play',
)
SETTING_ABBREVIATIONS = {'alpha': 'α'}


@dataclasses.dataclass
class SeedRun:
    """One seed of one run: where it lives, what it is, and its evaluation curve."""

    run_dir: str
    env: str  # Dataset name without the version suffix, e.g. antmaze-medium-stitch.
    method: str  # Preset name (or agent name for runs started without a preset).
    seed: int
    config: Dict[str, object]  # Flattened agent config and protocol flags, values hashable.
    steps: np.ndarray
    values: np.ndarray  # The metric at each evaluation, as logged (success in 0..1).
    done: bool
    train_steps: Optional[int]
    # Per-task metric at each evaluation: task id -> values (from `evaluation/task<id>_success` columns).
    task_values: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Cell:
    """One (dataset, method, setting): scores of its seeds, in percent."""

    env: str
    method: str
    setting: Tuple[Tuple[str, object], ...]
    runs: List[SeedRun]
    scores: np.ndarray  # One per seed that has at least one evaluation.

    @property
    def n(self) -> int:
        return len(self.scores)

    @property
    def mean(self) -> float:
        return float(np.mean(self.scores)) if self.n else float('nan')

    @property
    def std(self) -> float:
        return float(np.std(self.scores)) if self.n else float('nan')

    @property
    def unfinished(self) -> List[SeedRun]:
        return [run for run in self.runs if not run.done]


def hashable(value):
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, hashable(v)) for k, v in value.items()))
    return value


def flatten(config: dict, prefix: str = '') -> Dict[str, object]:
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f'{prefix}{key}.'))
        else:
            flat[prefix + key] = hashable(value)
    return flat


def find_upward(directory: str, root: str, name: str) -> Optional[str]:
    """`name` in `directory` or its nearest ancestor not above `root`."""
    root = os.path.abspath(root)
    directory = os.path.abspath(directory)
    while True:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return path
        if directory == root or os.path.dirname(directory) == directory:
            return None
        directory = os.path.dirname(directory)


def eval_dirs(root: str) -> List[str]:
    if not os.path.isdir(root):
        raise FileNotFoundError(f'--runs: {root!r} is not a directory.')
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in ('wandb', 'submitit'))
        if EVAL_LOG in files:
            found.append(directory)
    return found


TASK_COLUMN = re.compile(r'^evaluation/task(.+)_success$')


def read_json(path: Optional[str]) -> Optional[dict]:
    return None if path is None else atomic_io.read_json(path)


def read_eval_rows(path: str, metric: str) -> List[dict]:
    with open(path, newline='') as f:
        rows = list(csv.DictReader(f))
    if rows and metric not in rows[0]:
        columns = ', '.join(c for c in rows[0] if c.startswith('evaluation/'))
        raise ValueError(f'{path} has no column {metric!r}. Its evaluation columns: {columns}.')
    return rows


def load_runs(roots: Sequence[str], metric: str = METRIC, seeds: Optional[Sequence[int]] = None,
              warn=lambda message: None) -> List[SeedRun]:
    """Every seed run under `roots` (optionally only the given seeds), sorted by (env, method, seed)."""
    runs, seen = [], {}
    for root in roots:
        for directory in eval_dirs(root):
            flags = read_json(find_upward(directory, root, FLAGS_FILE))
            config = read_json(find_upward(directory, root, CONFIG_FILE))
            if flags is None or config is None:
                warn(f'skipped {directory}: eval.csv without flags.json / config.json (not a main.py run directory).')
                continue
            rows = read_eval_rows(os.path.join(directory, EVAL_LOG), metric)
            done = find_upward(directory, root, DONE_FILE) is not None
            env = re.sub(r'-v\d+$', '', flags['env_name'])
            method = method_of(config.get('preset') or config['agent_name'])
            setting = {k: v for k, v in flatten(config).items() if k.split('.')[0] not in NON_SETTING_CONFIG}
            setting.update({k: hashable(flags[k]) for k in PROTOCOL_FLAGS if k in flags})
            by_seed = defaultdict(list)
            for row in rows:
                by_seed[int(row['seed']) if 'seed' in row else int(flags['seed'])].append(row)
            if not rows:
                by_seed[int(flags['seed'])] = []
            for seed, seed_rows in sorted(by_seed.items()):
                if seeds is not None and seed not in seeds:
                    continue
                try:
                    seed_rows.sort(key=lambda r: int(r['step']))
                    steps = np.array([int(r['step']) for r in seed_rows], dtype=np.int64)
                    values = np.array([float(r[metric]) for r in seed_rows], dtype=np.float64)
                    task_columns = [(m.group(1), c) for c in (seed_rows[0] if seed_rows else {}) if (m := TASK_COLUMN.match(c))]
                    # A row without a task's value (blank) reads as NaN; per-task means skip it.
                    task_values = {task: np.array([float(r[c]) if r.get(c) not in (None, '') else np.nan for r in seed_rows])
                                   for task, c in task_columns}
                except (KeyError, TypeError, ValueError) as e:
                    raise ValueError(f'{directory}/eval.csv: unreadable row ({type(e).__name__}: {e}); '
                                     f'expected integer `step` and numeric {metric!r} columns.') from e
                run = SeedRun(directory, env, method, seed, setting, steps, values, done, flags.get('train_steps'), task_values)
                key = (env, method, tuple(sorted(setting.items())), seed)
                if key in seen:
                    raise ValueError(
                        f'Seed {seed} of {method} on {env} (same settings) appears twice: {seen[key]} and {directory}. '
                        f'Pass --runs folders that do not overlap, or select seeds with --seeds.'
                    )
                seen[key] = directory
                runs.append(run)
    return sorted(runs, key=lambda r: (r.env, r.method, r.seed, r.run_dir))


def seed_score(run: SeedRun, last_n: int = 3, scale: float = 100.0) -> Optional[float]:
    """Mean of the last `last_n` evaluations, scaled (x100: percent); None before the first evaluation."""
    if len(run.values) == 0:
        return None
    return float(np.mean(run.values[-last_n:])) * scale


def _resampled_means(scores: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Means of `resamples` resamples of the seeds, drawn with replacement."""
    return scores[rng.integers(0, scores.size, size=(resamples, scores.size))].mean(axis=1)


def _percentile_interval(samples: np.ndarray, confidence: float) -> Tuple[float, float]:
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_ci(scores, confidence: float = 0.95, resamples: int = 10000, seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean over seeds: resample the seeds with
    replacement `resamples` times (seeded, so a table is reproducible), take each resample's mean, and
    return the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles. NaN without scores; a single
    seed gives the degenerate interval (score, score), which says nothing about seed variance."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return float('nan'), float('nan')
    return _percentile_interval(_resampled_means(scores, np.random.default_rng(seed), resamples), confidence)


def bootstrap_difference_ci(scores, baseline, confidence: float = 0.95, resamples: int = 10000,
                            seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap confidence interval of mean(scores) - mean(baseline). The two groups are
    resampled independently (seeds of two methods are independent runs, so nothing pairs them); an
    interval that excludes 0 is the evidence that one method beats the other at this budget."""
    scores, baseline = (np.asarray(x, dtype=np.float64) for x in (scores, baseline))
    if scores.size == 0 or baseline.size == 0:
        return float('nan'), float('nan')
    rng = np.random.default_rng(seed)
    differences = _resampled_means(scores, rng, resamples) - _resampled_means(baseline, rng, resamples)
    return _percentile_interval(differences, confidence)


def task_scores(runs: Sequence[SeedRun], last_n: int = 3, scale: float = 100.0) -> Dict[str, np.ndarray]:
    """task id -> one score per seed (mean of its last `last_n` evaluations of that task, scaled), for
    the tasks every seed logged; seeds without evaluations are left out."""
    tasks = set.intersection(*(set(run.task_values) for run in runs)) if runs else set()
    scores = {}
    for task in sorted(tasks, key=lambda t: (not t.isdigit(), int(t) if t.isdigit() else 0, t)):
        per_seed = [np.nanmean(run.task_values[task][-last_n:]) * scale for run in runs if len(run.task_values[task])]
        scores[task] = np.array(per_seed, dtype=np.float64)
    return scores


def setting_sort_key(setting):
    """Numbers in numeric order (alpha 6 before 10), anything else by its text."""
    return tuple((k, (0, v, '') if isinstance(v, (int, float)) else (1, 0, repr(v))) for k, v in setting)


def group_cells(runs: Sequence[SeedRun], last_n: int = 3, scale: float = 100.0) -> Dict[Tuple[str, str], List[Cell]]:
    """(env, method) -> one Cell per setting. A setting is alpha (when the config has one) plus every
    config entry or protocol flag that differs between that method's runs on that dataset."""
    by_method = defaultdict(list)
    for run in runs:
        by_method[(run.env, run.method)].append(run)
    cells = {}
    for key, method_runs in by_method.items():
        keys = sorted({k for run in method_runs for k in run.config})
        shows_alpha = key[1] not in METHODS or METHODS[key[1]].alpha_applies
        varying = [k for k in keys if (k == 'alpha' and shows_alpha) or len({run.config.get(k) for run in method_runs}) > 1]
        by_setting = defaultdict(list)
        for run in method_runs:
            by_setting[tuple((k, run.config.get(k)) for k in varying if k in run.config)].append(run)
        cells[key] = []
        for setting, setting_runs in sorted(by_setting.items(), key=lambda item: setting_sort_key(item[0])):
            scores = [seed_score(run, last_n, scale) for run in setting_runs]
            cells[key].append(Cell(key[0], key[1], setting, setting_runs,
                                   np.array([s for s in scores if s is not None], dtype=np.float64)))
    return cells


def best_cells(cells: Dict[Tuple[str, str], List[Cell]]) -> Dict[Tuple[str, str], Cell]:
    """The setting with the highest mean per (env, method); ties go to the first in sorted order."""
    best = {}
    for key, candidates in cells.items():
        scored = [cell for cell in candidates if cell.n]
        if scored:
            best[key] = max(scored, key=lambda cell: cell.mean)  # max keeps the first of equal means.
    return best


def setting_label(setting: Sequence[Tuple[str, object]]) -> str:
    def value(v):
        return format(v, 'g') if isinstance(v, float) else str(v)
    return ', '.join(f'{SETTING_ABBREVIATIONS.get(k, k)}={value(v)}' for k, v in setting)


def method_label(method: str, latex: bool = False) -> str:
    if method in METHODS:
        return METHODS[method].latex if latex else METHODS[method].label
    return method.replace('_', r'\_') if latex else method


def ordered(names, preferred: Sequence[str]) -> List[str]:
    names = set(names)
    return [n for n in preferred if n in names] + sorted(names - set(preferred))


def row_marks(means: Dict[str, float], rl_methods=RL_METHODS, fraction: float = BOLD_FRACTION) -> Dict[str, str]:
    """method -> 'best' (highest non-RL mean), 'bold' (non-RL, >= fraction x best) or ''."""
    non_rl = {m: v for m, v in means.items() if m not in rl_methods and np.isfinite(v)}
    if not non_rl:
        return {m: '' for m in means}
    best_method = max(non_rl, key=non_rl.get)
    threshold = fraction * non_rl[best_method]
    return {m: 'best' if m == best_method else 'bold' if m in non_rl and means[m] >= threshold else '' for m in means}


@dataclasses.dataclass
class Table:
    """The paper's layout: rows = datasets (+ averages), columns = methods, best setting per cell."""

    envs: List[str]
    methods: List[str]
    cells: Dict[Tuple[str, str], Cell]  # (env, method) -> the chosen cell.
    averages: List[Tuple[str, Dict[str, float]]]  # (row name, method -> mean over its datasets).
    rl_methods: frozenset
    seed_count: int  # The most seeds in any cell; cells with fewer are marked.


def build_table(best: Dict[Tuple[str, str], Cell], methods: Optional[Sequence[str]] = None,
                rl_methods=RL_METHODS) -> Table:
    envs = ordered({env for env, _ in best}, ENV_ORDER)
    present = {method for _, method in best}
    if methods:
        missing = [m for m in methods if m not in present]
        if missing:
            raise ValueError(f'No results for method(s) {", ".join(missing)}; found: {", ".join(sorted(present))}.')
        columns = list(methods)
    else:
        columns = ordered(present, list(METHODS))
    groups = [('state', [e for e in envs if not e.startswith('visual-')]), ('visual', [e for e in envs if e.startswith('visual-')])]
    groups = [(name, group) for name, group in groups if group]
    if len(groups) > 1:
        groups.append(('all', envs))
    averages = []
    if len(envs) > 1:
        for name, group in groups:
            row = {}
            for method in columns:
                means = [best[(env, method)].mean for env in group if (env, method) in best]
                row[method] = float(np.mean(means)) if len(means) == len(group) else float('nan')
            averages.append(('average' if len(groups) == 1 else f'average-{name}', row))
    seed_count = max((cell.n for cell in best.values()), default=0)
    return Table(envs, columns, dict(best), averages, frozenset(rl_methods), seed_count)


def _number(value: float, decimals: int) -> str:
    return f'{value:.{decimals}f}'


@dataclasses.dataclass(frozen=True)
class BootstrapOptions:
    """How `bootstrap_ci` is called for tables: confidence level, resamples, RNG seed."""

    confidence: float = 0.95
    resamples: int = 10000
    seed: int = 0

    def interval(self, scores) -> Tuple[float, float]:
        return bootstrap_ci(scores, self.confidence, self.resamples, self.seed)

    def difference_interval(self, scores, baseline) -> Tuple[float, float]:
        return bootstrap_difference_ci(scores, baseline, self.confidence, self.resamples, self.seed)


def format_interval(low: float, high: float, decimals: int) -> str:
    return f'[{_number(low, decimals)}, {_number(high, decimals)}]'


def _signed(value: float, decimals: int) -> str:
    text = _number(value, decimals)
    if float(text) == 0:
        return _number(0.0, decimals)  # neither '+0' nor '-0' for a difference that rounds to zero
    return ('+' if value > 0 else '') + text


def format_comparison(cells: Dict[Tuple[str, str], List[Cell]], baseline: str, decimals: int = 0,
                      ci: Optional[BootstrapOptions] = None, methods: Optional[Sequence[str]] = None) -> str:
    """Every setting of every method against `baseline` on each dataset that has it (at the baseline's
    best setting): seeds, mean and bootstrap CI, then the difference of means and its bootstrap CI.
    Listing every setting, not only the best, keeps the choice of alpha visible."""
    ci = ci or BootstrapOptions()
    if not any(method == baseline for _, method in cells):
        found = sorted({method for _, method in cells})
        raise ValueError(f'Baseline {baseline!r} has no runs here; methods found: {", ".join(found)}.')
    level = f'{ci.confidence:.0%} CI'
    lines = [f'| dataset | method | setting | seeds | mean | {level} | − {method_label(baseline)} | {level} of the difference |',
             '|---|---|---|---|---|---|---|---|']
    for env in sorted({env for env, _ in cells}):
        if (env, baseline) not in cells:
            continue
        reference = best_cells({(env, baseline): cells[(env, baseline)]}).get((env, baseline))
        if reference is None:
            continue
        present = [m for m in (methods or ordered({m for e, m in cells if e == env}, list(METHODS))) if (env, m) in cells]
        for method in present:
            for cell in cells[(env, method)]:
                if not cell.n or (method == baseline and cell is not reference):
                    continue
                row = (f'| {env} | {method_label(method)} | {setting_label(cell.setting) or "-"} | {cell.n} | '
                       f'{_number(cell.mean, decimals)} | {format_interval(*ci.interval(cell.scores), decimals)} | ')
                if method == baseline:
                    row += '(baseline) | |'
                else:
                    low, high = ci.difference_interval(cell.scores, reference.scores)
                    row += (f'{_signed(cell.mean - reference.mean, decimals)} | '
                            f'[{_signed(low, decimals)}, {_signed(high, decimals)}] |')
                lines.append(row)
    return '\n'.join(lines)


def format_markdown(table: Table, decimals: int = 0, ci: Optional[BootstrapOptions] = None) -> str:
    """The paper's table; cells are mean ± std over seeds, or mean [bootstrap CI] with `ci`."""
    lines = ['| dataset | ' + ' | '.join(method_label(m) for m in table.methods) + ' |',
             '|---|' + '---|' * len(table.methods)]
    for env in table.envs:
        present = {m: table.cells[(env, m)] for m in table.methods if (env, m) in table.cells}
        marks = row_marks({m: c.mean for m, c in present.items()}, table.rl_methods)
        entries = []
        for method in table.methods:
            cell = present.get(method)
            if cell is None:
                entries.append('·')
                continue
            mean = _number(cell.mean, decimals)
            spread = format_interval(*ci.interval(cell.scores), decimals) if ci else f'± {_number(cell.std, decimals)}'
            entry = f'**{mean}** {spread}' if marks[method] else f'{mean} {spread}'
            if cell.n < table.seed_count:
                entry += f' (n={cell.n})'
            if cell.unfinished:
                entry += ' †'
            entries.append(entry)
        lines.append(f'| {env} | ' + ' | '.join(entries) + ' |')
    for name, row in table.averages:
        marks = row_marks(row, table.rl_methods)
        entries = ['·' if not np.isfinite(row[m]) else f'**{_number(row[m], decimals)}**' if marks[m] else _number(row[m], decimals)
                   for m in table.methods]
        lines.append(f'| {name} | ' + ' | '.join(entries) + ' |')
    return '\n'.join(lines)


def format_latex(table: Table, decimals: int = 0) -> str:
    lines = [r'% Needs \usepackage{booktabs} and \usepackage{xcolor}.',
             r'\begin{tabular}{l' + 'l' * len(table.methods) + r'}\toprule',
             r'\textbf{Dataset} & ' + ' & '.join(rf'\textbf{{{method_label(m, latex=True)}}}' for m in table.methods) + r' \\\midrule']

    def entry(method, mean, std, mark, notes=''):
        value = rf'\mathbf{{{_number(mean, decimals)}}}' if mark else _number(mean, decimals)
        text = f'${value}' + (rf' \pm {_number(std, decimals)}' if std is not None else '') + f'{notes}$'
        if mark == 'best':
            return rf'\textcolor{{brown}}{{{text}}}'
        return rf'\textcolor{{gray}}{{{text}}}' if method in table.rl_methods else text

    previous_visual = None
    for env in table.envs:
        if previous_visual is False and env.startswith('visual-'):
            lines.append(r'\midrule')
        previous_visual = env.startswith('visual-')
        present = {m: table.cells[(env, m)] for m in table.methods if (env, m) in table.cells}
        marks = row_marks({m: c.mean for m, c in present.items()}, table.rl_methods)
        entries = []
        for method in table.methods:
            cell = present.get(method)
            if cell is None:
                entries.append(r'$\cdot$')
                continue
            superscripts = ([f'n={cell.n}'] if cell.n < table.seed_count else []) + ([r'\dagger'] if cell.unfinished else [])
            notes = '^{' + ','.join(superscripts) + '}' if superscripts else ''
            entries.append(entry(method, cell.mean, cell.std, marks[method], notes))
        lines.append(rf'\texttt{{{env}}} & ' + ' & '.join(entries) + r' \\')
    if table.averages:
        lines.append(r'\midrule')
    for name, row in table.averages:
        marks = row_marks(row, table.rl_methods)
        entries = [r'$\cdot$' if not np.isfinite(row[m]) else entry(m, row[m], None, marks[m]) for m in table.methods]
        lines.append(rf'\texttt{{{name}}} & ' + ' & '.join(entries) + r' \\')
    lines.append(r'\bottomrule')
    lines.append(r'\end{tabular}')
    return '\n'.join(lines)


def format_task_table(table: Table, last_n: int = 3, scale: float = 100.0, decimals: int = 0,
                      ci: Optional[BootstrapOptions] = None) -> str:
    """Long form, one row per (dataset, method) at the table's chosen setting: seeds, mean, bootstrap
    CI of the mean over seeds, then each task's mean over seeds (its last `last_n` evaluations)."""
    ci = ci or BootstrapOptions()
    rows = []
    for env in table.envs:
        for method in table.methods:
            if (env, method) in table.cells:
                cell = table.cells[(env, method)]
                rows.append((env, method, cell, task_scores(cell.runs, last_n, scale)))
    tasks = ordered({t for *_, per_task in rows for t in per_task}, [str(i) for i in range(1, 100)])
    level = f'{ci.confidence:.0%} CI'
    lines = ['| dataset | method | setting | seeds | mean | ' + level + ' | ' + ' | '.join(f'task {t}' for t in tasks) + ' |',
             '|---|---|---|---|---|---|' + '---|' * len(tasks)]
    for env, method, cell, per_task in rows:
        task_entries = [_number(float(np.mean(per_task[t])), decimals) if t in per_task and per_task[t].size else '·'
                        for t in tasks]
        lines.append(f'| {env} | {method_label(method)} | {setting_label(cell.setting) or "-"} | {cell.n} | '
                     f'{_number(cell.mean, decimals)} | {format_interval(*ci.interval(cell.scores), decimals)} | '
                     + ' | '.join(task_entries) + ' |')
    return '\n'.join(lines)


def curve_interval(runs: Sequence[SeedRun], scale: float = 100.0, ci: Optional[BootstrapOptions] = None):
    """Steps (union over seeds) and the bootstrap CI of the mean over the seeds evaluated at each step."""
    ci = ci or BootstrapOptions()
    steps = np.unique(np.concatenate([run.steps for run in runs])) if runs else np.zeros(0, dtype=np.int64)
    lows, highs = [], []
    for step in steps:
        values = [run.values[run.steps == step][-1] * scale for run in runs if np.any(run.steps == step)]
        low, high = ci.interval(values)
        lows.append(low)
        highs.append(high)
    return steps, np.array(lows), np.array(highs)


def format_settings(table: Table, latex: bool = False) -> str:
    """The chosen hyperparameters per cell, in the same layout (Markdown, or LaTeX comments)."""
    rows = [['dataset'] + [method_label(m) for m in table.methods]]
    for env in table.envs:
        rows.append([env] + [setting_label(table.cells[(env, m)].setting) or '-' if (env, m) in table.cells else '·'
                             for m in table.methods])
    if latex:
        return '\n'.join('% ' + ' | '.join(row) for row in rows)
    lines = ['| ' + ' | '.join(rows[0]) + ' |', '|---|' + '---|' * len(table.methods)]
    return '\n'.join(lines + ['| ' + ' | '.join(row) + ' |' for row in rows[1:]])


def unfinished_report(cells: Dict[Tuple[str, str], List[Cell]], last_n: int = 3) -> List[str]:
    """One line per seed run without DONE (or with fewer than last_n evaluations)."""
    lines = []
    for key in sorted(cells):
        for cell in cells[key]:
            for run in cell.runs:
                short = len(run.values) < last_n
                if run.done and not short:
                    continue
                last_step = int(run.steps[-1]) if len(run.steps) else 0
                state = 'running or stopped' if not run.done else 'finished'
                lines.append(f'{run.run_dir} (seed {run.seed}): {state}, last evaluation at step {last_step}'
                             f' of {run.train_steps}, {len(run.values)} evaluation(s)'
                             + (f' (fewer than {last_n})' if short else ''))
    return lines


def mean_curve(runs: Sequence[SeedRun], scale: float = 100.0):
    """Steps (union over seeds) and the mean, std and seed count at each; seeds without a step are left out there."""
    steps = np.unique(np.concatenate([run.steps for run in runs])) if runs else np.zeros(0, dtype=np.int64)
    means, stds, counts = [], [], []
    for step in steps:
        values = [run.values[run.steps == step][-1] * scale for run in runs if np.any(run.steps == step)]
        means.append(np.mean(values))
        stds.append(np.std(values))
        counts.append(len(values))
    return steps, np.array(means), np.array(stds), np.array(counts)
