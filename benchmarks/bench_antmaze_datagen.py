"""Benchmark: antmaze episode generation with 1 and more worker processes (datagen/antmaze.py).

    python benchmarks/bench_antmaze_datagen.py [--num_episodes=40] [--lockstep_envs=20] [--workers=1,2]

Runs the same generation (same seed, episodes and lockstep batch size) once per worker count, in
the order given, and prints wall-clock time (worker start-up included), env steps/s, the speedup
over the first count, whether the arrays are identical, and the 1-minute load average before and
after each run (other jobs on the machine slow runs down). `--lockstep_envs` below the default
(100) lets a small episode count split into several batches, the unit a worker takes.
"""

import os
import time

import numpy as np
from absl import app, flags

from datagen.antmaze import generate_antmaze_dataset
from runtime.exits import parse_absl_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('dataset_name', 'antmaze-medium-stitch-v0', 'A generatable antmaze stitch dataset.')
flags.DEFINE_integer('num_episodes', 40, 'Episodes per run.')
flags.DEFINE_integer('lockstep_envs', 20, 'Episodes per lockstep batch (the unit of work of a worker).')
flags.DEFINE_list('workers', ['1', '2'], 'Worker counts, one run each.')
flags.DEFINE_integer('seed', 0, 'Seed (the same for every run).')


def main(_):
    reference, first_seconds = None, None
    print(f'{FLAGS.dataset_name}: {FLAGS.num_episodes} episodes, lockstep batches of {FLAGS.lockstep_envs}, seed {FLAGS.seed}')
    print(f'{"workers":>7s} {"wall s":>8s} {"env steps/s":>12s} {"speedup":>8s} {"identical":>9s} {"load before/after":>18s}')
    for workers in map(int, FLAGS.workers):
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        dataset = generate_antmaze_dataset(FLAGS.dataset_name, FLAGS.num_episodes, FLAGS.seed, progress=False,
                                           num_workers=workers, lockstep_envs=FLAGS.lockstep_envs)
        seconds = time.perf_counter() - start
        reference = dataset if reference is None else reference
        first_seconds = first_seconds or seconds
        identical = all(np.array_equal(dataset[key], reference[key]) for key in reference)
        print(f'{workers:7d} {seconds:8.1f} {len(dataset["actions"]) / seconds:12.0f} {first_seconds / seconds:7.2f}x '
              f'{str(identical):>9s} {load_before:8.2f} / {os.getloadavg()[0]:.2f}', flush=True)


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
