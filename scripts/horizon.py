"""Horizon generalization (paper section "Evaluating generalization with increasing horizon"): success rate as the
goal moves away from the start, along the BFS shortest path of each evaluation task.

    python scripts/horizon.py --run_dir=runs/default/byol_gamma_a_pointmaze-medium-stitch-v0_sd0
    python scripts/horizon.py --run_dir=... --episodes=5 --max_distance=12 --bucket_size=2 --max_steps=500   # giant, on CPU

For each of the env's evaluation tasks, the goals are the cells 1, 2, ..., L steps along the task's shortest path
from its start cell (L: the path's length; cell L is the task's own goal). Every (task, distance) goal is
evaluated like an OGBench task (lockstep, deterministic actions, start and goal positions noised as usual), and
success is averaged per distance bucket over the tasks whose path reaches it. In the stitch datasets every
trajectory spans 4 cells, so goals beyond `--stitch_threshold` need stitching; the chart marks that line.

Writes <out_dir>/horizon.png (maze with the goals, and the bar chart), horizon.csv (one row per bucket) and
horizon.json (buckets and every goal's success); <out_dir> defaults to <run_dir>/analysis.
"""

import argparse
import csv
import os
import sys

import matplotlib
import numpy as np

matplotlib.use('Agg')  # Files only: no display on clusters.
import matplotlib.pyplot as plt

from datagen.pointmaze import STITCH_GOAL_DISTANCE
from experiments import analysis
from runtime.atomic_io import atomic_open, save_figure, write_json
from runtime.exits import script_main
from utils.errors import ConfigError
from utils.evaluation import evaluate, evaluation_metrics, make_eval_envs


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--run_dir', required=True, help='A main.py run directory with a checkpoint.')
    parser.add_argument('--episodes', type=int, default=20, help='Episodes per (task, distance) goal.')
    parser.add_argument('--max_distance', type=int, default=0, help='Skip goals farther than this many cells (0: none).')
    parser.add_argument('--tasks', default='1,2,3,4,5', help='Comma-separated evaluation task ids.')
    parser.add_argument('--max_steps', type=int, default=0, help='Episode step limit; 0: the env time limit.')
    parser.add_argument('--bucket_size', type=int, default=1, help='Distances per bar; must divide --stitch_threshold.')
    parser.add_argument('--stitch_threshold', type=int, default=STITCH_GOAL_DISTANCE,
                        help='Longest distance that needs no stitching (cells per dataset trajectory; 4 in stitch data).')
    parser.add_argument('--seed', type=int, default=0, help='Evaluation seed.')
    parser.add_argument('--out_dir', default='', help='Output folder (default: <run_dir>/analysis).')
    args = parser.parse_args(argv)
    for name in ('episodes', 'bucket_size', 'stitch_threshold'):
        if getattr(args, name) < 1:
            parser.error(f'--{name} must be positive, got {getattr(args, name)}.')
    if args.max_distance < 0 or args.max_steps < 0:
        parser.error('--max_distance and --max_steps must be 0 (no limit) or positive.')
    if args.stitch_threshold % args.bucket_size:
        parser.error(f'--bucket_size ({args.bucket_size}) must divide --stitch_threshold ({args.stitch_threshold}), '
                     'so that no bar mixes goals below and above the threshold.')
    try:
        args.tasks = [int(t) for t in args.tasks.split(',')]
    except ValueError:
        parser.error(f'--tasks must be comma-separated integers like 1,2,3,4,5, got {args.tasks!r}.')
    return args


def horizon_goals(oracle, init_ij, goal_ij, max_distance=0):
    """[(distance, goal cell)] for the cells 1, 2, ... steps along the shortest path from `init_ij` to `goal_ij`."""
    path = analysis.shortest_path(oracle, init_ij, goal_ij)
    last = len(path) - 1 if not max_distance else min(len(path) - 1, max_distance)
    return [(d, path[d]) for d in range(1, last + 1)]


def bucket_of(distance, bucket_size):
    """(low, high) of the bucket holding `distance`: (1, b), (b + 1, 2b), ..."""
    low = (distance - 1) // bucket_size * bucket_size + 1
    return low, low + bucket_size - 1


def aggregate(goal_results, bucket_size):
    """Success per bucket: the mean over all episodes of the bucket's goals (every goal has as many episodes)."""
    buckets = {}
    for result in goal_results:
        buckets.setdefault(bucket_of(result['distance'], bucket_size), []).append(result)
    rows = []
    for (low, high), results in sorted(buckets.items()):
        rows.append(dict(
            low=low, high=high, success=float(np.mean([r['success'] for r in results])),
            tasks=len({r['task'] for r in results}), goals=len(results), episodes=sum(r['episodes'] for r in results),
        ))
    return rows


def bucket_label(row):
    return str(row['low']) if row['low'] == row['high'] else f'{row["low"]}-{row["high"]}'


def plot_horizon(env, oracle, paths, buckets, stitch_threshold, title):
    """Left: the maze with each task's path, start and goals. Right: success per bucket, the bar of bucket (lo, hi)
    drawn within x in [lo - 1, hi] so that the stitching line sits exactly at x = stitch_threshold."""
    figure, (maze_ax, bar_ax) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw=dict(width_ratios=[1, 1.4]))
    analysis.draw_maze(maze_ax, env, oracle)
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    unit = analysis.cell_centre(env, (0, 1))[0] - analysis.cell_centre(env, (0, 0))[0]
    for k, (task, path) in enumerate(sorted(paths.items())):
        # Tasks share corridors: shift each path a little so that overlapping ones stay apart.
        shift = (k - (len(paths) - 1) / 2) * 0.08 * unit
        xy = np.array([analysis.cell_centre(env, cell) for cell in path]) + shift
        color = colors[k % len(colors)]
        maze_ax.plot(xy[:, 0], xy[:, 1], '-', color=color, lw=2, alpha=0.8, label=f'task {task}')
        maze_ax.plot(xy[1:-1, 0], xy[1:-1, 1], 'o', color=color, ms=4)
        maze_ax.plot(xy[0, 0], xy[0, 1], 's', color=color, ms=9, mec='k')
        maze_ax.plot(xy[-1, 0], xy[-1, 1], '*', color=color, ms=14, mec='k')
    maze_ax.legend(loc='upper left', bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    maze_ax.set_title('Goals along the BFS paths (square: start, star: farthest)', fontsize=10)

    lows = np.array([row['low'] for row in buckets])
    widths = np.array([row['high'] - row['low'] + 1 for row in buckets])
    success = np.array([row['success'] for row in buckets]) * 100
    gap = 0.1  # on each side of a bar, inside its span
    bar_ax.bar(lows - 1 + gap, success, width=widths - 2 * gap, align='edge', color='tab:blue')
    for row, x, height in zip(buckets, lows - 1 + widths / 2, success):
        bar_ax.text(x, height + 1.5, f'n={row["tasks"]}', ha='center', va='bottom', fontsize=7, color='0.35')
    bar_ax.axvline(stitch_threshold, color='red', linestyle='--', lw=1.5,
                   label=f'stitching needed beyond {stitch_threshold} cells')
    crowded = len(buckets) > 12 or (len(buckets) > 8 and max(widths) > 1)
    bar_ax.set_xticks(lows - 1 + widths / 2, [bucket_label(row) for row in buckets], rotation=45 if crowded else 0,
                      ha='right' if crowded else 'center', rotation_mode='anchor')
    bar_ax.set_xlim(0, max(row['high'] for row in buckets))
    bar_ax.set_ylim(0, 110)
    bar_ax.set_xlabel('goal distance from the start (BFS cells)')
    bar_ax.set_ylabel('success rate (%)')
    bar_ax.legend(loc='upper right', fontsize=8)
    bar_ax.set_title('Success per distance (n: tasks whose path reaches it)', fontsize=10)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    return figure


def horizon(args):
    run = analysis.load_run(args.run_dir)
    oracle = analysis.maze_oracle(run.env)
    task_infos = run.env.unwrapped.task_infos
    bad = [t for t in args.tasks if not 1 <= t <= len(task_infos)]
    if bad:
        raise ConfigError(f'--tasks {bad} out of range: {run.env_name} has tasks 1..{len(task_infos)}.')
    envs = make_eval_envs(run.env_name, args.episodes)
    agent = run.agent

    def policy(observations, goals):
        return np.asarray(agent.sample_actions(observations, goals, temperature=0.0))

    goal_results, paths = [], {}
    for task in args.tasks:
        init_ij, goal_ij = task_infos[task - 1]['init_ij'], task_infos[task - 1]['goal_ij']
        goals = horizon_goals(oracle, init_ij, goal_ij, args.max_distance)
        paths[task] = [tuple(init_ij)] + [cell for _, cell in goals]
        # One evaluate call per task: a goal's episodes then depend on (seed, task, distance) only, not on the
        # other tasks or on --max_distance.
        task_seed = int(np.random.SeedSequence([args.seed, task]).generate_state(1)[0])
        metrics = evaluation_metrics(evaluate(
            policy, envs, task_ids=[dict(init_ij=tuple(init_ij), goal_ij=cell) for _, cell in goals],
            episodes_per_task=args.episodes, seed=task_seed, max_steps=args.max_steps or None,
        ))
        task_results = [
            dict(task=task, distance=distance, init_ij=list(init_ij), goal_ij=list(cell),
                 success=metrics[f'evaluation/taskinfo{k}_success'], episodes=args.episodes)
            for k, (distance, cell) in enumerate(goals)
        ]
        print(f'task {task}: ' + ' '.join(f'd{r["distance"]}={r["success"]:.2f}' for r in task_results))
        goal_results += task_results
    buckets = aggregate(goal_results, args.bucket_size)

    out_dir = analysis.make_output_dir(args.out_dir or os.path.join(run.run_dir, 'analysis'))
    title = f'{run.env_name}, {run.method}, step {run.step}: {args.episodes} episodes per goal'
    figure = plot_horizon(run.env, oracle, paths, buckets, args.stitch_threshold, title)
    png_path = os.path.join(out_dir, 'horizon.png')
    save_figure(figure, png_path)
    plt.close(figure)
    with atomic_open(os.path.join(out_dir, 'horizon.csv'), 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(buckets[0]))
        writer.writeheader()
        writer.writerows(buckets)
    summary = dict(
        run_dir=run.run_dir, env_name=run.env_name, method=run.method, step=run.step, episodes=args.episodes,
        max_steps=args.max_steps or run.env.spec.max_episode_steps, stitch_threshold=args.stitch_threshold,
        bucket_size=args.bucket_size, buckets=buckets, goals=goal_results,
    )
    write_json(os.path.join(out_dir, 'horizon.json'), summary)

    print(f'\n{title}')
    for row in buckets:
        marker = '  (stitching)' if row['low'] > args.stitch_threshold else ''
        print(f'  distance {bucket_label(row):>5}: success {row["success"]:.2f} over {row["tasks"]} tasks{marker}')
    print(f'Wrote {png_path}, horizon.csv and horizon.json')
    return summary


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return horizon(args)
    except ConfigError as e:
        sys.exit(f'Error: {e}')


if __name__ == '__main__':
    sys.exit(script_main(main))
