"""Benchmark: cached-oracle pointmaze generator vs. OGBench's per-step-BFS collection loop.

Both run on the same datasets, episode count and seed in one process, and their arrays are
checked for equality. Usage:

    python benchmarks/bench_datagen.py [--dataset_names=pointmaze-medium-stitch-v0,...] [--num_episodes=50]
"""

import time

import numpy as np
from absl import app, flags

from datagen.pointmaze import generate_pointmaze_dataset, generate_pointmaze_dataset_reference
from runtime.exits import parse_absl_flags

FLAGS = flags.FLAGS
flags.DEFINE_list(
    'dataset_names',
    [f'pointmaze-{maze}-stitch-v0' for maze in ('medium', 'large', 'giant', 'teleport')],
    'Datasets to benchmark.',
)
flags.DEFINE_integer('num_episodes', 50, 'Episodes per generator and dataset.')
flags.DEFINE_integer('seed', 0, 'Seed (the same for both generators).')
flags.DEFINE_integer('repeats', 3, 'Runs per generator; the fastest counts (other load only slows runs down).')


def _timed(generate, dataset_name):
    """(dataset, best wall-clock seconds over FLAGS.repeats runs)."""
    best = float('inf')
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        dataset = generate(dataset_name, FLAGS.num_episodes, FLAGS.seed, progress=False)
        best = min(best, time.perf_counter() - start)
    return dataset, best


def main(_):
    # Import and first-call costs (MuJoCo, gymnasium registration) stay out of the timings.
    generate_pointmaze_dataset(FLAGS.dataset_names[0], 1, FLAGS.seed, progress=False)
    generate_pointmaze_dataset_reference(FLAGS.dataset_names[0], 1, FLAGS.seed, progress=False)

    print(f'{FLAGS.num_episodes} episodes per run, seed {FLAGS.seed}, best of {FLAGS.repeats} runs')
    print(f'{"dataset":32s} {"cached ep/s":>12s} {"per-step BFS ep/s":>18s} {"speedup":>8s}  identical')
    for dataset_name in FLAGS.dataset_names:
        fast, fast_seconds = _timed(generate_pointmaze_dataset, dataset_name)
        reference, reference_seconds = _timed(generate_pointmaze_dataset_reference, dataset_name)
        identical = fast.keys() == reference.keys() and all(np.array_equal(fast[k], reference[k]) for k in fast)
        print(
            f'{dataset_name:32s} {FLAGS.num_episodes / fast_seconds:12.1f} '
            f'{FLAGS.num_episodes / reference_seconds:18.1f} {reference_seconds / fast_seconds:7.2f}x  {identical}'
        )


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
