r"""One figure of a method's gain over a baseline on every dataset measured: the difference of means over seeds (each
seed's score as scripts/results.py computes it) with its Welch t-interval, one row per (run set, dataset).

    python scripts/plot_difference.py --runs="CPU=results/cpu_stitch_6k" --runs="H200=results/h200_headline_200k" \
        --method=byol_gamma_a --baseline=gcbc --out=docs/figures/byol_gamma_a_minus_gcbc.png

Each --runs is LABEL=FOLDERS (folders comma-separated, as scripts/results.py's --runs); a row's label adds the
dataset, the budget (gradient steps) and the seeds of each side. The method is shown at its best setting per dataset
(the cell scripts/results.py reports); the row names that setting. An interval that excludes 0 separates the two.
"""

import argparse
import sys

import matplotlib

matplotlib.use('Agg')  # Files only: no display on clusters.
import matplotlib.pyplot as plt
import numpy as np

from experiments import results as R
from runtime.atomic_io import save_figure
from runtime.checkout import require_own_checkout
from utils.errors import ConfigError


def differences(labelled_runs, method, baseline, confidence, last_n=3):
    """[(row label, difference, low, high)] for every dataset of every run set that has both methods."""
    rows = []
    for label, folders in labelled_runs:
        runs = R.load_runs(folders, warn=lambda m: print(f'Warning: {m}', file=sys.stderr))
        if not runs:
            raise ValueError(f'{label}: no run directories (folders with eval.csv) under {",".join(folders)}.')
        best = R.best_cells(R.group_cells(runs, last_n))
        envs = R.ordered({env for env, m in best if m == method} & {env for env, m in best if m == baseline}, R.ENV_ORDER)
        if not envs:
            raise ValueError(f'{label}: no dataset has runs of both {method} and {baseline}.')
        for env in envs:
            cell, reference = best[(env, method)], best[(env, baseline)]
            low, high = R.welch_interval(cell.scores, reference.scores, confidence)
            steps = dict(cell.runs[0].protocol).get('train_steps')
            setting = R.setting_label(cell.setting)
            rows.append((f'{label}: {env}\n{steps / 1000:g}k steps, {setting + ", " if setting else ""}'
                         f'n = {cell.n} vs {reference.n}', cell.mean - reference.mean, low, high))
    return rows


def plot(rows, method, baseline, confidence, path):
    figure, axes = plt.subplots(figsize=(7.0, 1.0 + 0.75 * len(rows)))
    positions = np.arange(len(rows))[::-1]
    for y, (_, difference, low, high) in zip(positions, rows):
        color = 'tab:blue' if low > 0 else 'tab:red' if high < 0 else 'tab:gray'
        axes.errorbar(difference, y, xerr=[[difference - low], [high - difference]], fmt='o', color=color, capsize=4)
        text = f'{R._signed(difference, 0)} [{R._signed(low, 0)}, {R._signed(high, 0)}]'
        axes.annotate(text, (difference, y), textcoords='offset points',
                      xytext=(0, 8), ha='center', fontsize='small')
    axes.axvline(0.0, color='black', linewidth=0.8)
    axes.set_yticks(positions, [label for label, *_ in rows], fontsize='small')
    axes.set_ylim(-0.7, len(rows) - 0.3)
    name, reference = (R.METHODS[m].latex if m in R.METHODS else m for m in (method, baseline))
    axes.set_xlabel(f'success of {name} minus {reference} (points)\n{confidence:.0%} Welch t-interval over seeds',
                    fontsize='small')
    axes.grid(axis='x', alpha=0.3)
    figure.tight_layout()
    save_figure(figure, path)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--runs', action='append', required=True, help='LABEL=FOLDERS; repeat for each run set.')
    parser.add_argument('--method', default='byol_gamma_a')
    parser.add_argument('--baseline', default='gcbc')
    parser.add_argument('--confidence', type=float, default=0.95)
    parser.add_argument('--out', required=True, help='PNG path.')
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    labelled = []
    for item in args.runs:
        label, equals, folders = item.partition('=')
        if not equals or not label.strip() or not folders.strip():
            parser.error(f'--runs={item!r}: write LABEL=FOLDERS, e.g. --runs="CPU=results/cpu_stitch_6k".')
        labelled.append((label.strip(), [f.strip() for f in folders.split(',') if f.strip()]))
    try:
        rows = differences(labelled, args.method, args.baseline, args.confidence)
    except (ValueError, FileNotFoundError, ConfigError) as e:
        sys.exit(f'Error: {e}')
    plot(rows, args.method, args.baseline, args.confidence, args.out)
    for label, difference, low, high in rows:
        print(f'{label.replace(chr(10), "; ")}: {R._signed(difference, 1)} [{R._signed(low, 1)}, {R._signed(high, 1)}]')
    print(args.out)
    return 0


if __name__ == '__main__':
    require_own_checkout(__file__)
    sys.exit(main())
