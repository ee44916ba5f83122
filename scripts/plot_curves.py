"""Learning curves: one PNG per dataset, one line per method (mean over seeds, shaded ± std or a
Student-t confidence interval of the mean with --band=ci) vs gradient steps.

    python scripts/plot_curves.py --runs=runs/state --out=runs/state/curves.png   # runs/state/curves_<dataset>.png
    python scripts/plot_curves.py --runs=runs/state --out='runs/state/{env}.png' --all_settings
    python scripts/plot_curves.py --runs=runs/stitch --out=runs/stitch/curves.png --band=ci   # 95% t-interval bands

Each method is drawn at its best setting (the one scripts/results.py reports: highest mean of the
last 3 evaluations); --all_settings draws every setting (alpha, ...) instead: a method's settings share its colour,
each with its own line style and band hatching.
"""

import argparse
import math
import os
import re
import sys

import matplotlib

matplotlib.use('Agg')  # Files only: no display on clusters.
import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from experiments import results as R
from experiments.sweep import parse_seeds
from runtime.atomic_io import figure_format, save_figure
from runtime.exits import script_main
from utils.errors import ConfigError

LINE_STYLES = ('-', '--', ':', '-.')
# The bands of a method's second, third, ... setting (--all_settings) are hatched, so each setting's band is told apart
# from the others of its method, which share its colour; the first is plain.
BAND_HATCHES = (None, '///', '\\\\\\', '...')


def output_path(template: str, env: str) -> str:
    """The figure of dataset `env`: --out with {env} replaced by it, else with _<env> before its extension."""
    if '{env}' in template:
        return template.replace('{env}', env)
    stem, extension = os.path.splitext(template)
    return f'{stem}_{env}{extension or ".png"}'


def check_dataset_names(runs):
    """Figures are named after the datasets the runs record: a recorded name that is not a dataset name (a path, as in
    `../../x`) is refused, naming the run, before any figure is written, so no figure lands outside --out."""
    for run in runs:
        if not re.fullmatch(r'[A-Za-z0-9_-]+', run.env):
            raise ValueError(f'{run.run_dir}: the env_name its flags.json records ({run.env!r}, less its version) is '
                             f'not a dataset name (letters, digits, "-" and "_"), and figures are named after it. '
                             f'Restore its flags.json, or move the run out of --runs.')


def plot_environment(env, method_cells, path, metric, scale, intervals=None):
    """method_cells: [(method, [Cell, ...])] in legend order; writes one PNG. Bands: ± std over seeds,
    or with `intervals` (R.Intervals) the t-interval of the mean over seeds at each step."""
    lines = sum(len(cells) for _, cells in method_cells)
    outside = lines > 4  # a legend inside the axes would cover the bands
    figure, axes = plt.subplots(figsize=(8.6 if outside else 6.4, 4.2))
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for index, (method, cells) in enumerate(method_cells):
        color = colors[index % len(colors)]
        for style_index, cell in enumerate(cells):
            steps, mean, std, counts = R.mean_curve(cell.runs, scale)
            # The LaTeX names are valid matplotlib mathtext (gamma^a, psi_b, ...).
            label = R.METHODS[method].latex if method in R.METHODS else method
            setting = R.setting_label(cell.setting)
            label += f' ({setting}, n={cell.n})' if setting else f' (n={cell.n})'
            style = LINE_STYLES[style_index % len(LINE_STYLES)]
            axes.plot(steps, mean, style, color=color, label=label, marker='o' if len(steps) <= 10 else None)
            if intervals is None:
                low, high = mean - std, mean + std
            else:
                _, low, high = R.curve_interval(cell.runs, scale, intervals)
            hatch = BAND_HATCHES[style_index % len(BAND_HATCHES)]
            if hatch is None:
                axes.fill_between(steps, low, high, color=color, alpha=0.15, linewidth=0)
            else:  # the hatch is drawn in the edge colour, which a band without edges still has
                axes.fill_between(steps, low, high, facecolor=mcolors.to_rgba(color, 0.06),
                                  edgecolor=mcolors.to_rgba(color, 0.5), hatch=hatch, linewidth=0)
    band = 'shaded: ± std over seeds' if intervals is None else f'shaded: {intervals.confidence:.0%} t-interval of the mean'
    axes.set_title(f'{env} ({band})', fontsize='medium')
    axes.set_xlabel('gradient steps')
    axes.set_ylabel(f'{metric.split("/")[-1].replace("_", " ")}' + (' (%)' if scale == 100 else ''))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f'{x / 1e6:g}M' if x >= 1e6 else f'{x / 1e3:g}k' if x else '0'))
    if scale == 100:  # success in percent: the bands of few seeds may reach past 0 and 100
        axes.set_ylim(0, min(axes.get_ylim()[1], 100))
    axes.grid(alpha=0.3)
    if outside:
        axes.legend(fontsize='small', loc='upper left', bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        axes.legend(fontsize='small', loc='best')
    figure.tight_layout()
    save_figure(figure, path)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--runs', required=True, action='append',
                        help='Comma-separated folders searched for run directories; repeatable.')
    parser.add_argument('--out', required=True, help='PNG path: {env} is replaced by the dataset, else _<dataset> is appended.')
    parser.add_argument('--metric', default=R.METRIC)
    parser.add_argument('--scale', type=float, default=100.0)
    parser.add_argument('--last_n', type=int, default=3, help='Evaluations averaged to pick the best setting.')
    parser.add_argument('--methods', default='', help='Comma-separated presets to draw, in legend order (default: all).')
    parser.add_argument('--seeds', default='', help='Only these seeds, e.g. 0-3.')
    parser.add_argument('--all_settings', action='store_true', help='Draw every setting, not only the best.')
    parser.add_argument('--band', choices=['std', 'ci'], default='std', help='Shaded band: ± std over seeds, or the t-interval of the mean.')
    parser.add_argument('--confidence', type=float, default=0.95, help='--band=ci: confidence level.')
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.runs = ','.join(args.runs)  # every --runs given, not the last one only
    if not 0.0 < args.confidence < 1.0:
        parser.error(f'--confidence must lie in (0, 1), got {args.confidence}.')
    if args.last_n < 1 or not (math.isfinite(args.scale) and args.scale > 0):
        parser.error(f'--last_n must be at least 1 and --scale a positive number, got {args.last_n} and {args.scale:g}.')
    try:
        figure_format(output_path(args.out, 'dataset'))
    except ValueError as e:
        parser.error(f'--out={args.out}: {e}')
    intervals = R.Intervals(args.confidence) if args.band == 'ci' else None
    try:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        runs = R.load_runs([r.strip() for r in args.runs.split(',') if r.strip()], args.metric, seeds,
                           warn=lambda m: print(f'Warning: {m}', file=sys.stderr))
        if not runs:
            raise ValueError(f'No run directories (folders with eval.csv) under {args.runs}.')
        check_dataset_names(runs)
        cells = R.group_cells(runs, args.last_n, args.scale)
    except (ValueError, FileNotFoundError, ConfigError) as e:
        sys.exit(f'Error: {e}')
    best = R.best_cells(cells)
    wanted = [m.strip() for m in args.methods.split(',') if m.strip()]
    for env in R.ordered({env for env, _ in cells}, R.ENV_ORDER):
        methods = wanted or R.ordered({m for e, m in cells if e == env}, list(R.METHODS))
        method_cells = []
        for method in methods:
            if args.all_settings:
                chosen = [c for c in cells.get((env, method), []) if c.n]
            else:
                chosen = [best[(env, method)]] if (env, method) in best else []
            if chosen:
                method_cells.append((method, chosen))
        if not method_cells:
            print(f'Warning: nothing to draw for {env}.', file=sys.stderr)
            continue
        path = output_path(args.out, env)
        plot_environment(env, method_cells, path, args.metric, args.scale, intervals)
        print(path)
    return 0


if __name__ == '__main__':
    sys.exit(script_main(main))
