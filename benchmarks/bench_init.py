"""Seconds to create an agent in a fresh process: `create` run op by op (eager) against the one
unoptimised program main.py compiles (`main.compiled_create`), side by side.

    python benchmarks/bench_init.py --presets=gcbc,byol_gamma_a --rounds=3

Every measurement is a new Python process (nothing compiled before it, no persistent compilation
cache), at the preset's own network sizes on pointmaze shapes (2-d states and actions); rounds are
interleaved so that background load hits both ways alike, and the median is reported.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

from runtime.exits import parse_absl_flags

FLAGS = flags.FLAGS
flags.DEFINE_list('presets', ['gcbc', 'byol_gamma_a'], 'Presets (configs/presets.py).')
flags.DEFINE_integer('rounds', 3, 'Interleaved rounds (median reported).')
flags.DEFINE_string('mode', '', 'Internal: time one creation in this process ("eager" or "compiled").')
flags.DEFINE_string('preset', '', 'Internal: the preset of --mode.')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ('eager', 'compiled')


def time_one(mode: str, preset: str) -> float:
    import jax
    import numpy as np

    import main
    from agents import get_agent_class
    from configs.presets import get_config

    config = get_config(preset)
    agent_class = get_agent_class(config.agent_name)
    observations, actions = np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32)
    start = time.perf_counter()
    if mode == 'eager':
        agent = agent_class.create(0, observations, actions, config)
    else:
        agent = main.compiled_create(agent_class, observations, actions, config)(0)
    jax.block_until_ready(agent)
    return time.perf_counter() - start


def measure(mode: str, preset: str) -> float:
    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE='false')  # every process compiles from scratch
    result = subprocess.run([sys.executable, '-m', 'benchmarks.bench_init', f'--mode={mode}', f'--preset={preset}'],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f'{mode} {preset} failed:\n{result.stderr[-2000:]}')
    return json.loads(result.stdout.strip().splitlines()[-1])['seconds']


def main(_):
    if FLAGS.mode:
        print(json.dumps({'seconds': time_one(FLAGS.mode, FLAGS.preset)}))
        return
    seconds = {(preset, mode): [] for preset in FLAGS.presets for mode in MODES}
    for _ in range(FLAGS.rounds):
        for preset in FLAGS.presets:
            for mode in MODES:
                seconds[preset, mode].append(measure(mode, preset))
    print('| preset | eager s | compiled s | eager / compiled |')
    print('|---|---|---|---|')
    for preset in FLAGS.presets:
        eager, compiled = (statistics.median(seconds[preset, mode]) for mode in MODES)
        print(f'| {preset} | {eager:.2f} | {compiled:.2f} | {eager / compiled:.1f}x |')


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
