"""Correlation of representation distance with maze shortest-path distance (paper appendix "Correlation to Shortest
Path", table tab:shortest-path).

    python scripts/sp_correlation.py --run_dir=runs/default/byol_gamma_a_pointmaze-medium-stitch-v0_sd0
    python scripts/sp_correlation.py --run_dir runs/state/*stitch*_sd{0,1,2,3} --out_dir=runs/state/sp   # table per method

For --num_pairs random (state, goal) pairs of dataset states, the negated cosine similarity between the agent's
prediction for the state (`representations(s, a, g)`, a the dataset action at s) and the goal's representation,
against the BFS distance between their maze cells. Reports the Pearson and the Spearman (rank, ties averaged)
correlation per run, then mean ± std over the runs of each (dataset, method), methods named by their preset. Also
shows each run's last evaluated success, as the paper's table puts both side by side.

Writes <out_dir>/sp_correlation.png (scatter per method), sp_correlation.csv (one row per run) and
sp_correlation.json; <out_dir> defaults to <run_dir>/analysis for one run, else to the runs' common parent/analysis.
"""

import argparse
import csv
import os
import sys

import matplotlib
import numpy as np

matplotlib.use('Agg')  # Files only: no display on clusters.
import matplotlib.pyplot as plt

from experiments import analysis
from runtime.atomic_io import atomic_open, save_figure, write_json
from runtime.exits import script_main
from runtime.run_dir import RunDir
from utils.errors import ConfigError, DatasetError


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--run_dir', nargs='+', action='extend', required=True, help='One or more main.py run directories.')
    parser.add_argument('--num_pairs', type=int, default=10_000, help='(state, goal) pairs per run.')
    parser.add_argument('--scatter_points', type=int, default=500, help='Pairs per run drawn in the scatter plot.')
    parser.add_argument('--seed', type=int, default=0, help='Seed of the pair sampling.')
    parser.add_argument('--dataset_dir', default='', help="Dataset folder (default: each run's --dataset_dir).")
    parser.add_argument('--out_dir', default='', help='Output folder (default: see above).')
    args = parser.parse_args(argv)
    if args.num_pairs < 3:
        parser.error(f'--num_pairs must be at least 3, got {args.num_pairs}.')
    if args.scatter_points < 0:
        parser.error(f'--scatter_points must be non-negative, got {args.scatter_points}.')
    return args


def rankdata(x):
    """Ranks 1..n of x, tied values sharing the mean of their ranks (scipy.stats.rankdata's default)."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts + 1
    return (first_rank + (counts - 1) / 2)[inverse.reshape(-1)]


def pearson(x, y):
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if np.std(x) == 0 or np.std(y) == 0:
        return float('nan')  # undefined for a constant input
    return float(np.corrcoef(x, y)[0, 1])


def spearman(x, y):
    return pearson(rankdata(x), rankdata(y))


def pair_samples(representations, oracle, states, num_pairs, rng):
    """Random (state, goal) pairs of dataset rows: their negated cosine similarity and BFS cell distance.

    Pairs with a position outside every free cell (possible for bodies leaning over a wall) are dropped; returns
    (negated cosine [n], distance [n], dropped count).
    """
    size = len(states['xy'])
    state_rows, goal_rows = rng.integers(size, size=num_pairs), rng.integers(size, size=num_pairs)
    cells = analysis.cells_of(oracle, states['xy'][np.concatenate([state_rows, goal_rows])])
    distances = analysis.cell_distances(oracle, cells[:num_pairs], cells[num_pairs:])
    keep = distances >= 0
    state_rows, goal_rows = state_rows[keep], goal_rows[keep]
    observations = states['observations']
    similarity = analysis.representation_similarities(
        representations, observations[state_rows], states['actions'][state_rows], observations[goal_rows]
    )
    return -similarity, distances[keep], int(np.sum(~keep))


def last_success(run):
    """The run's evaluated success at its checkpoint's step (from eval.csv), or None."""
    rows = [r for r in RunDir(run.run_dir).eval_rows() if int(r['step']) == run.step and r.get('evaluation/overall_success')]
    return float(rows[-1]['evaluation/overall_success']) if rows else None


def summarize(values):
    """Mean and std over the values; std is None for a single value."""
    values = np.asarray(values, dtype=np.float64)
    return dict(mean=float(np.mean(values)), std=float(np.std(values)) if len(values) > 1 else None)


def mean_std_text(summary):
    if summary is None:
        return ''
    return f'{summary["mean"]:.2f}' + ('' if summary['std'] is None else f' ± {summary["std"]:.2f}')


def plot_scatter(groups, scatter_points, rng):
    """One panel per (dataset, method): up to `scatter_points` pairs of each of its runs, x jittered within the
    integer distance, and the mean negated cosine per distance."""
    figure, axes = plt.subplots(1, len(groups), figsize=(4.6 * len(groups), 4.0), squeeze=False)
    for ax, ((env_name, method), results) in zip(axes[0], groups.items()):
        shown = [rng.permutation(len(r['distances']))[:scatter_points] for r in results]
        shown_distances = np.concatenate([r['distances'][rows] for r, rows in zip(results, shown)])
        shown_negated = np.concatenate([r['negated_cosine'][rows] for r, rows in zip(results, shown)])
        jitter = rng.uniform(-0.25, 0.25, size=len(shown_distances))
        ax.scatter(shown_distances + jitter, shown_negated, s=5, alpha=0.4, color='tab:blue', linewidths=0)
        distances = np.concatenate([r['distances'] for r in results])
        negated = np.concatenate([r['negated_cosine'] for r in results])
        levels = np.unique(distances)
        ax.plot(levels, [negated[distances == d].mean() for d in levels], '-o', color='tab:red', ms=3, lw=1.5,
                label='mean per distance (all pairs)')
        ax.set_title(f'{method} on {env_name} ({len(results)} run{"s" * (len(results) > 1)})\n'
                     f'Pearson {mean_std_text(summarize([r["pearson"] for r in results]))}, '
                     f'Spearman {mean_std_text(summarize([r["spearman"] for r in results]))}', fontsize=9)
        ax.set_xlabel('shortest-path distance (BFS cells)')
        ax.set_ylabel('negated cosine similarity')
        ax.legend(loc='lower right', fontsize=8)
    figure.tight_layout()
    return figure


def default_out_dir(run_dirs):
    if len(run_dirs) == 1:
        return os.path.join(run_dirs[0], 'analysis')
    return os.path.join(os.path.commonpath([os.path.abspath(d) for d in run_dirs]), 'analysis')


def sp_correlation(args):
    results, groups, datasets = [], {}, {}
    for k, run_dir in enumerate(args.run_dir):
        run = analysis.load_run(run_dir)
        representations = analysis.representation_fn(run)
        oracle = analysis.maze_oracle(run.env)
        # Runs of one dataset (seeds, methods) share its states: load them once.
        dataset_key = (run.env_name, args.dataset_dir or run.flags['dataset_dir'])
        if dataset_key not in datasets:
            datasets[dataset_key] = analysis.load_states(run, args.dataset_dir)
        states = datasets[dataset_key]
        # The same pairs for every run of one dataset: differences between methods are not sampling noise.
        negated, distances, dropped = pair_samples(representations, oracle, states, args.num_pairs,
                                                   np.random.default_rng(args.seed))
        result = dict(
            run_dir=run.run_dir, env_name=run.env_name, method=run.method, seed=run.flags.get('seed'), step=run.step,
            pearson=pearson(negated, distances), spearman=spearman(negated, distances), pairs=len(distances),
            dropped_pairs=dropped, success=last_success(run), negated_cosine=negated, distances=distances,
        )
        results.append(result)
        groups.setdefault((run.env_name, run.method), []).append(result)
        print(f'[{k + 1}/{len(args.run_dir)}] {run.run_dir}: Pearson {result["pearson"]:.3f}, '
              f'Spearman {result["spearman"]:.3f} ({result["pairs"]} pairs)')

    print('\nPer run:')
    print(f'  {"dataset":<32} {"method":<22} {"seed":>4} {"step":>8} {"pearson":>8} {"spearman":>9} {"success":>8}')
    for r in results:
        success = '' if r['success'] is None else f'{r["success"]:.2f}'
        print(f'  {r["env_name"]:<32} {r["method"]:<22} {r["seed"]!s:>4} {r["step"]:>8} {r["pearson"]:>8.3f} '
              f'{r["spearman"]:>9.3f} {success:>8}')
    method_rows = []
    for (env_name, method), members in groups.items():
        successes = [r['success'] for r in members if r['success'] is not None]
        method_rows.append(dict(
            env_name=env_name, method=method, runs=len(members),
            pearson=summarize([r['pearson'] for r in members]), spearman=summarize([r['spearman'] for r in members]),
            success=summarize(successes) if successes else None,
        ))
    print('\nPer method (mean ± std over runs):')
    print(f'  {"dataset":<32} {"method":<22} {"runs":>4} {"pearson":>13} {"spearman":>13} {"success":>13}')
    for row in method_rows:
        pearson_, spearman_, success = (mean_std_text(row[key]) for key in ('pearson', 'spearman', 'success'))
        print(f'  {row["env_name"]:<32} {row["method"]:<22} {row["runs"]:>4} {pearson_:>13} {spearman_:>13} {success:>13}')

    out_dir = analysis.make_output_dir(args.out_dir or default_out_dir(args.run_dir))
    figure = plot_scatter(groups, args.scatter_points, np.random.default_rng(args.seed))
    png_path = os.path.join(out_dir, 'sp_correlation.png')
    save_figure(figure, png_path)
    plt.close(figure)
    scalar_keys = ('run_dir', 'env_name', 'method', 'seed', 'step', 'pearson', 'spearman', 'pairs', 'dropped_pairs', 'success')
    run_rows = [{key: r[key] for key in scalar_keys} for r in results]
    with atomic_open(os.path.join(out_dir, 'sp_correlation.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=scalar_keys)
        writer.writeheader()
        writer.writerows(run_rows)
    write_json(os.path.join(out_dir, 'sp_correlation.json'), dict(num_pairs=args.num_pairs, seed=args.seed, runs=run_rows, methods=method_rows))
    print(f'\nWrote {png_path}, sp_correlation.csv and sp_correlation.json')
    return dict(runs=results, methods=method_rows, png=png_path)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return sp_correlation(args)
    except (ConfigError, DatasetError) as e:
        sys.exit(f'Error: {e}')


if __name__ == '__main__':
    sys.exit(script_main(main))
