"""Results table in the paper's layout from run directories.

    python scripts/results.py --runs=runs/state [--format=markdown|latex] [--metric=evaluation/overall_success]
    python scripts/results.py --runs=runs/state,runs/ablations --seeds=0-3 --methods=byol_gamma_a,byol_gamma_no_a
    python scripts/results.py --runs=runs/stitch --ci --per_task     # bootstrap 95% CIs, per-task success
    python scripts/results.py --runs=runs/stitch --baseline=gcbc     # every setting minus GCBC, with a CI

Each seed scores the mean of its last 3 evaluations x 100; cells are mean ± std over seeds at the best
setting (alpha, ...) per dataset and method; non-RL methods within 95% of the row's best non-RL mean
are bold. Cells with fewer seeds than the most in the table show (n=k); cells with unfinished runs
(no DONE) show a dagger, and those runs are listed below the table. --ci shows mean [low, high], a
percentile bootstrap confidence interval of the mean over seeds (seeds resampled with replacement,
--ci_resamples times, RNG seed --ci_seed), instead of ± std; --per_task adds a long-form table with
each task's success at the chosen settings; --baseline=<preset> adds every setting of every method with
its difference from that preset's best setting and a bootstrap CI of the difference (several baselines:
--baseline=gcbc,gcbc_phi).
"""

import argparse
import sys


from experiments import results as R
from utils.errors import ConfigError
from experiments.sweep import parse_seeds


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--runs', required=True, help='Comma-separated folders searched for run directories (e.g. runs/state).')
    parser.add_argument('--format', choices=['markdown', 'latex'], default='markdown')
    parser.add_argument('--metric', default=R.METRIC, help='eval.csv column to report.')
    parser.add_argument('--scale', type=float, default=100.0, help='Multiplier of the metric (100: success in percent).')
    parser.add_argument('--last_n', type=int, default=3, help='Evaluations averaged per seed (the last ones).')
    parser.add_argument('--methods', default='', help='Comma-separated presets: the columns and their order (default: all found).')
    parser.add_argument('--seeds', default='', help='Only these seeds, e.g. 0-3 (default: all).')
    parser.add_argument('--rl_methods', default=','.join(sorted(R.RL_METHODS)), help='Methods left out of the bolding comparison.')
    parser.add_argument('--decimals', type=int, default=0)
    parser.add_argument('--details', action='store_true', help='Also list every setting of every method, not only the best.')
    parser.add_argument('--ci', action='store_true', help='Cells show mean [bootstrap CI over seeds] instead of mean ± std (markdown).')
    parser.add_argument('--per_task', action='store_true', help='Also print per-task success with the mean and CI per (dataset, method).')
    parser.add_argument('--baseline', default='', help='Comma-separated presets (e.g. gcbc,gcbc_phi): for each, also list '
                        'every setting of every method with its difference from it and a bootstrap CI of the difference.')
    parser.add_argument('--confidence', type=float, default=0.95, help='Confidence level of the bootstrap intervals.')
    parser.add_argument('--ci_resamples', type=int, default=10000, help='Bootstrap resamples of the seeds.')
    parser.add_argument('--ci_seed', type=int, default=0, help='RNG seed of the bootstrap (tables are reproducible).')
    args = parser.parse_args(argv)
    if args.last_n < 1:
        parser.error(f'--last_n must be at least 1, got {args.last_n}.')
    if not 0.0 < args.confidence < 1.0:
        parser.error(f'--confidence must lie in (0, 1), got {args.confidence}.')
    if args.ci_resamples < 1:
        parser.error(f'--ci_resamples must be at least 1, got {args.ci_resamples}.')
    if args.ci and args.format == 'latex':
        parser.error('--ci is for --format=markdown; the LaTeX table reports mean ± std.')
    if args.baseline and args.format == 'latex':
        parser.error('--baseline is for --format=markdown.')
    return args


def split_list(text):
    return [item.strip() for item in text.split(',') if item.strip()]


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    latex = args.format == 'latex'
    comment = '% ' if latex else ''
    try:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        runs = R.load_runs(split_list(args.runs), args.metric, seeds, warn=lambda m: print(f'Warning: {m}', file=sys.stderr))
        if not runs:
            raise ValueError(f'No run directories (folders with eval.csv) under {args.runs}'
                             + (f' for seeds {args.seeds}.' if seeds else '.'))
        cells = R.group_cells(runs, args.last_n, args.scale)
        table = R.build_table(R.best_cells(cells), split_list(args.methods) or None, frozenset(split_list(args.rl_methods)))
    except (ValueError, FileNotFoundError, ConfigError) as e:
        sys.exit(f'Error: {e}')

    bootstrap = R.BootstrapOptions(args.confidence, args.ci_resamples, args.ci_seed)
    print(R.format_latex(table, args.decimals) if latex else R.format_markdown(table, args.decimals, bootstrap if args.ci else None))
    print()
    rl = ', '.join(sorted(table.rl_methods)) or 'none'
    spread = (f'mean [{args.confidence:.0%} bootstrap CI: {args.ci_resamples} resamples of the seeds, seed {args.ci_seed}]'
              if args.ci else 'mean ± std')
    print(f'{comment}{args.metric} x {args.scale:g}, mean of the last {args.last_n} evaluations per seed; {spread} over '
          f'{table.seed_count} seeds (fewer where marked n=k); best setting per dataset and method. Bold: within '
          f'{R.BOLD_FRACTION:.0%} of the best non-RL method in the row (RL: {rl}). †: includes unfinished runs.')
    if args.per_task:
        print(f'\n{comment}Per task (success x {args.scale:g}, mean over seeds of the last {args.last_n} evaluations):')
        print(R.format_task_table(table, args.last_n, args.scale, args.decimals, bootstrap))
    for baseline in split_list(args.baseline):
        print(f'\nAgainst {R.method_label(baseline)} (every setting; differences of means over seeds with a '
              f'{args.confidence:.0%} bootstrap CI, the two methods\' seeds resampled independently; an interval that '
              f'excludes 0 separates the two methods at this budget):')
        try:
            print(R.format_comparison(cells, baseline, args.decimals, bootstrap, split_list(args.methods) or None))
        except ValueError as e:
            sys.exit(f'Error: {e}')
    print()
    print(f'{comment}Chosen settings:')
    print(R.format_settings(table, latex))
    if args.details:
        print(f'\n{comment}All settings (mean ± std, seeds):')
        for (env, method), candidates in sorted(cells.items()):
            for cell in candidates:
                print(f'{comment}  {env} {method} [{R.setting_label(cell.setting) or "-"}]: '
                      f'{cell.mean:.{args.decimals}f} ± {cell.std:.{args.decimals}f} (n={cell.n}, unfinished {len(cell.unfinished)})')
    unfinished = R.unfinished_report(cells, args.last_n)
    if unfinished:
        print(f'\n{comment}Unfinished runs, or runs with fewer than {args.last_n} evaluations ({len(unfinished)}):')
        for line in unfinished:
            print(f'{comment}  {line}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
