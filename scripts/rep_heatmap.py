"""Representation heatmap (paper section "Qualitative analysis of representations"): for every dataset state s, the
cosine similarity between the agent's prediction for s and the representation of one fixed goal g, drawn over the
maze.

    python scripts/rep_heatmap.py --run_dir=runs/default/byol_gamma_a_pointmaze-medium-stitch-v0_sd0 [--goal_ij=6,6]

The prediction is the agent's `representations(s, a, g)` with a the dataset action at s: psi_f(phi(s), a) for
BYOL-gamma, psi(s[, a]) for TRA / TD-SR, phi(s) for GCBC-phi (docs/method.md, section 5). g is the goal observation of cell
--goal_ij at its centre (default: the goal cell of evaluation task 1). Brighter is more similar.

Writes <out_dir>/rep_heatmap_<i>_<j>.png; <out_dir> defaults to <run_dir>/analysis.
"""

import argparse
import os
import sys

import matplotlib
import numpy as np

matplotlib.use('Agg')  # Files only: no display on clusters.
import matplotlib.pyplot as plt
from mpl_toolkits.axes_grid1 import make_axes_locatable

from experiments import analysis
from runtime.atomic_io import save_figure
from runtime.exits import script_main
from utils.errors import ConfigError, DatasetError


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--run_dir', required=True, help='A main.py run directory with a checkpoint.')
    parser.add_argument('--goal_ij', default='', help='Goal cell i,j (row, column of the maze map); default: task 1 goal.')
    parser.add_argument('--max_states', type=int, default=100_000, help='Draw at most this many dataset states (random subset).')
    parser.add_argument('--seed', type=int, default=0, help='Seed of the state subset and of the goal observation.')
    parser.add_argument('--dataset_dir', default='', help="Dataset folder (default: the run's --dataset_dir).")
    parser.add_argument('--out_dir', default='', help='Output folder (default: <run_dir>/analysis).')
    args = parser.parse_args(argv)
    if args.max_states < 1:
        parser.error(f'--max_states must be positive, got {args.max_states}.')
    return args


def plot_heatmap(env, oracle, xy, similarity, goal_xy, title):
    height, width = oracle.maze_map.shape
    figure, ax = plt.subplots(figsize=(1.6 + 5 * width / height, 5.6))
    analysis.draw_maze(ax, env, oracle)
    # Most similar states last, so that they are not hidden under the others.
    order = np.argsort(similarity)
    # A few outlying states would otherwise squeeze everyone else into a sliver of the colour map.
    low = np.percentile(similarity, 1)
    points = ax.scatter(xy[order, 0], xy[order, 1], c=similarity[order], s=2, cmap='viridis', vmin=low,
                        vmax=similarity.max(), linewidths=0, zorder=1)
    ax.plot(*goal_xy, marker='*', color='red', ms=18, mec='white', mew=1.2, zorder=2, label='goal g')
    ax.legend(loc='upper left', bbox_to_anchor=(0.0, -0.01), fontsize=8, frameon=False)
    # A colour bar axis cut from the maze's own: as tall as the maze whatever its aspect ratio.
    colorbar_ax = make_axes_locatable(ax).append_axes('right', size='4%', pad=0.1)
    figure.colorbar(points, cax=colorbar_ax, extend='min' if similarity.min() < low else 'neither',
                    label='cos(prediction(s), phi(g))')
    ax.set_title(title, fontsize=10)
    figure.tight_layout()
    return figure


def rep_heatmap(args):
    run = analysis.load_run(args.run_dir)
    representations = analysis.representation_fn(run)
    oracle = analysis.maze_oracle(run.env)
    goal_ij = analysis.parse_cell(args.goal_ij) if args.goal_ij else tuple(run.env.unwrapped.task_infos[0]['goal_ij'])
    goal = analysis.goal_observation(run.env_name, goal_ij, args.seed)

    states = analysis.load_states(run, args.dataset_dir)
    rows = np.arange(len(states['xy']))
    if len(rows) > args.max_states:
        rows = np.sort(np.random.default_rng(args.seed).choice(rows, args.max_states, replace=False))
    observations = states['observations'][rows]
    goals = np.broadcast_to(goal, observations.shape)
    similarity = analysis.representation_similarities(representations, observations, states['actions'][rows], goals)

    out_dir = analysis.make_output_dir(args.out_dir or os.path.join(run.run_dir, 'analysis'))
    title = f'{run.env_name}, {run.method}, step {run.step}\ngoal cell {goal_ij}, {len(rows)} dataset states'
    figure = plot_heatmap(run.env, oracle, states['xy'][rows], similarity, analysis.cell_centre(run.env, goal_ij), title)
    png_path = os.path.join(out_dir, f'rep_heatmap_{goal_ij[0]}_{goal_ij[1]}.png')
    save_figure(figure, png_path)
    plt.close(figure)
    print(f'{title}: cosine similarity min {similarity.min():.3f}, median {np.median(similarity):.3f}, '
          f'max {similarity.max():.3f}\nWrote {png_path}')
    return dict(png=png_path, goal_ij=goal_ij, rows=rows, similarity=similarity, step=run.step)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return rep_heatmap(args)
    except (ConfigError, DatasetError) as e:
        sys.exit(f'Error: {e}')


if __name__ == '__main__':
    sys.exit(script_main(main))
