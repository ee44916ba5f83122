"""Seconds of a main.py run as it is (Python's garbage-collector settings) against the same run with the imports frozen
out of the collector's reach (runtime/garbage_collection.py, which the test workers apply), side by side.

    python benchmarks/bench_startup.py --presets=gcbc,byol_gamma_a --rounds=6
    python benchmarks/bench_startup.py --run=readme --presets=byol_gamma_a --rounds=3

--run=toy (the test suite's size): 40 updates at batch 16 and one evaluation of 2 episodes on a small generated
pointmaze-medium-stitch dataset, wandb off, warm persistent compilation cache. --run=readme: README's command 1 (10,000
updates at batch 256, evaluations at 5,000 and 10,000 steps of 20 episodes per task, wandb as the command leaves it) on
the full generated dataset, made once first if it is not in ~/.ogbench/data (main.py's default --dataset_dir). Every
measurement is a new process; rounds are interleaved so that background load hits both variants alike; the medians of
the child's user + system time and of its wall time are reported.
"""

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from runtime.exits import parse_absl_flags

FLAGS = flags.FLAGS
flags.DEFINE_list('presets', ['gcbc', 'byol_gamma_a'], 'Presets (configs/presets.py).')
flags.DEFINE_integer('rounds', 6, 'Interleaved rounds (median reported).')
flags.DEFINE_enum('run', 'toy', ['toy', 'readme'], "The run measured: the test suite's size or README's command 1.")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, 'main.py')
ENV_NAME = 'pointmaze-medium-stitch-v0'
RUN_FLAGS = {
    'toy': ['--train_steps=40', '--log_interval=20', '--eval_interval=40', '--save_interval=40', '--eval_episodes=2',
            '--eval_tasks=1', '--eval_max_steps=20', '--agent.batch_size=16', '--wandb_mode=disabled'],
    'readme': ['--train_steps=10000', '--agent.batch_size=256', '--eval_interval=5000', '--eval_episodes=20',
               '--log_interval=1000', '--save_interval=5000'],
}
# main.py with its imports frozen: nothing collected while they run, then freeze_imported_objects, then main.py's
# __main__ block run on the imported module (as `python main.py` would run it).
FROZEN_LAUNCHER = ('import gc, runpy, sys\n'
                   'gc.disable()\n'
                   'sys.argv = sys.argv[1:]\n'
                   'import main\n'
                   'from runtime.garbage_collection import freeze_imported_objects\n'
                   'freeze_imported_objects()\n'
                   'runpy.run_path(sys.argv[0], run_name="__main__")\n')
VARIANTS = {'main.py': [], 'frozen': ['-c', FROZEN_LAUNCHER]}


def child_seconds(command, env) -> tuple[float, float]:
    """(user + system seconds, wall seconds) of the process `command` (and anything it waited for)."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f'{" ".join(command)} failed:\n{result.stderr[-3000:]}')
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(_):
    from datagen.pointmaze import write_dataset

    work = tempfile.mkdtemp(prefix='bench-startup-')
    try:
        env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(work, 'xla'),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0', JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
        if FLAGS.run == 'toy':
            data_flags = [f'--dataset_dir={work}/data']
            write_dataset(ENV_NAME, f'{work}/data', seed=0, num_train_episodes=20, num_val_episodes=2, progress=False)
        else:
            data_flags = []  # main.py's default dataset folder; generated there by the first run if absent
        runs = 0

        def measure(variant, preset):
            nonlocal runs
            runs += 1
            command = [sys.executable, *VARIANTS[variant], MAIN, f'--agent={ROOT}/configs/presets.py:{preset}',
                       f'--env_name={ENV_NAME}', *data_flags, f'--save_dir={work}/runs{runs}', *RUN_FLAGS[FLAGS.run]]
            seconds = child_seconds(command, env)
            shutil.rmtree(f'{work}/runs{runs}')
            return seconds

        for preset in FLAGS.presets:  # fills the compilation cache (and, for --run=readme, makes the dataset)
            measure('main.py', preset)
        seconds = {(preset, variant): [] for preset in FLAGS.presets for variant in VARIANTS}
        started = time.time()
        for _ in range(FLAGS.rounds):
            for preset in FLAGS.presets:
                for variant in VARIANTS:
                    seconds[preset, variant].append(measure(variant, preset))
        print(f'Seconds per {FLAGS.run} main.py run (CPU = user + system), median of {FLAGS.rounds} interleaved rounds '
              f'({time.time() - started:.0f} s):')
        print('| preset | CPU: main.py | CPU: imports frozen | wall: main.py | wall: imports frozen | frozen / main.py |')
        print('|---|---|---|---|---|---|')
        for preset in FLAGS.presets:
            (cpu, wall), (frozen_cpu, frozen_wall) = (
                [statistics.median(measured[i] for measured in seconds[preset, variant]) for i in (0, 1)]
                for variant in VARIANTS)
            print(f'| {preset} | {cpu:.2f} | {frozen_cpu:.2f} | {wall:.2f} | {frozen_wall:.2f} | '
                  f'CPU {frozen_cpu / cpu:.3f}, wall {frozen_wall / wall:.3f} |')
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
