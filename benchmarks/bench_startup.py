"""CPU seconds of a toy main.py run (imports, tracing, a few updates, one short evaluation) with main.py's garbage
collector settings (runtime/garbage_collection.py) against Python's defaults, side by side.

    python benchmarks/bench_startup.py --presets=gcbc,byol_gamma_a --rounds=6

Each measurement is a new main.py process on a small generated pointmaze-medium-stitch dataset (40 updates at batch
16, one evaluation of 2 episodes, wandb off) with a warm persistent compilation cache, as the test suite's runs are;
"defaults" starts the same main.py through a launcher that leaves the collector as Python sets it. Rounds are
interleaved so that background load hits both ways alike; the median of the child's user + system time is reported.
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

from runtime.checkout import require_own_checkout
from runtime.exits import parse_absl_flags

FLAGS = flags.FLAGS
flags.DEFINE_list('presets', ['gcbc', 'byol_gamma_a'], 'Presets (configs/presets.py).')
flags.DEFINE_integer('rounds', 6, 'Interleaved rounds (median reported).')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, 'main.py')
ENV_NAME = 'pointmaze-medium-stitch-v0'
TOY_RUN = ['--train_steps=40', '--log_interval=20', '--eval_interval=40', '--save_interval=40', '--eval_episodes=2',
           '--eval_tasks=1', '--eval_max_steps=20', '--agent.batch_size=16', '--wandb_mode=disabled']
# main.py as `python main.py` runs it, but with the collector left at Python's defaults throughout.
DEFAULTS_LAUNCHER = ('import gc, runpy, sys\n'
                     'gc.disable = gc.freeze = gc.set_threshold = lambda *args: None\n'
                     'sys.argv = sys.argv[1:]\n'
                     'runpy.run_path(sys.argv[0], run_name="__main__")\n')
VARIANTS = {'main.py': [], 'defaults': ['-c', DEFAULTS_LAUNCHER]}


def child_cpu_seconds(command, env) -> float:
    """User + system seconds of the process `command` (and anything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f'{" ".join(command)} failed:\n{result.stderr[-3000:]}')
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(_):
    from datagen.pointmaze import write_dataset

    work = tempfile.mkdtemp(prefix='bench-startup-')
    try:
        data_dir = os.path.join(work, 'data')
        write_dataset(ENV_NAME, data_dir, seed=0, num_train_episodes=20, num_val_episodes=2, progress=False)
        env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(work, 'xla'),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0', JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
        runs = 0

        def measure(variant, preset):
            nonlocal runs
            runs += 1
            command = [sys.executable, *VARIANTS[variant], MAIN, f'--agent={ROOT}/configs/presets.py:{preset}',
                       f'--env_name={ENV_NAME}', f'--dataset_dir={data_dir}', f'--save_dir={work}/runs{runs}', *TOY_RUN]
            return child_cpu_seconds(command, env)

        for preset in FLAGS.presets:  # fills the compilation cache
            measure('main.py', preset)
        seconds = {(preset, variant): [] for preset in FLAGS.presets for variant in VARIANTS}
        started = time.time()
        for _ in range(FLAGS.rounds):
            for preset in FLAGS.presets:
                for variant in VARIANTS:
                    seconds[preset, variant].append(measure(variant, preset))
        print(f'CPU seconds per toy main.py run, median of {FLAGS.rounds} interleaved rounds '
              f'({time.time() - started:.0f} s):')
        print('| preset | Python defaults | main.py (imports frozen) | saved |')
        print('|---|---|---|---|')
        for preset in FLAGS.presets:
            default, tuned = (statistics.median(seconds[preset, variant]) for variant in ('defaults', 'main.py'))
            print(f'| {preset} | {default:.2f} | {tuned:.2f} | {default - tuned:.2f} s ({1 - tuned / default:.0%}) |')
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    require_own_checkout(__file__)
    app.run(main, flags_parser=parse_absl_flags)
