"""Total seed-steps per second when N seeds train in one process (vmapped), side by side.

    python benchmarks/bench_seeds.py --preset=byol_gamma_a --batch_size=256 --num_seeds=1,2,4,8

N = 1 uses the plain fused step (what `main.py --num_seeds=1` runs); N > 1 the vmapped one. Rounds
are interleaved across N so background load hits every N alike; the median is reported.
"""

import time

import jax
import numpy as np
from absl import app, flags

import datagen
from agents import get_agent_class
from configs.presets import get_config as preset_config
from runtime.dataset_files import ensure_dataset
from runtime.exits import parse_absl_flags
from utils.datasets import load_dataset
from utils.evaluation import make_env
from utils.training import DeviceDataset
from utils.training import stack_trees, train

FLAGS = flags.FLAGS
flags.DEFINE_string('preset', 'byol_gamma_a', 'Preset (configs/presets.py).')
flags.DEFINE_integer('batch_size', 256, 'Batch size per seed.')
flags.DEFINE_list('num_seeds', ['1', '2', '4', '8'], 'Seed counts to compare.')
flags.DEFINE_integer('steps', 50, 'Gradient steps per timed round.')
flags.DEFINE_integer('rounds', 3, 'Interleaved rounds (median reported).')
flags.DEFINE_string('env_name', 'pointmaze-medium-stitch-v0', 'Dataset.')
flags.DEFINE_string('dataset_dir', '~/.ogbench/data', 'Dataset directory.')


def main(_):
    train_path, _ = ensure_dataset(FLAGS.env_name, FLAGS.dataset_dir, generator=datagen)
    env = make_env(FLAGS.env_name)
    raw = load_dataset(train_path, env.observation_space, env.action_space)
    data = DeviceDataset.from_numpy(**raw)
    config = preset_config(FLAGS.preset)
    config.batch_size = FLAGS.batch_size
    agent_class = get_agent_class(config.agent_name)

    def run(state, keys, n):
        if n == 1:
            return train(state, data, keys[0], 0, FLAGS.steps)
        return train(state, data, keys, 0, FLAGS.steps)

    states, speeds = {}, {}
    for n in map(int, FLAGS.num_seeds):
        agents = [agent_class.create(s, raw['observations'][:1], raw['actions'][:1], config) for s in range(n)]
        keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in range(n)])
        state = agents[0] if n == 1 else stack_trees(agents)
        state, info = run(state, keys, n)  # compile
        jax.block_until_ready(info)
        states[n], speeds[n] = (state, keys), []
    for _ in range(FLAGS.rounds):
        for n, (state, keys) in states.items():
            start = time.perf_counter()
            state, info = run(state, keys, n)
            jax.block_until_ready(info)
            speeds[n].append(n * FLAGS.steps / (time.perf_counter() - start))
            states[n] = (state, keys)
    print(f'{FLAGS.preset}, batch {FLAGS.batch_size} per seed, jax on {jax.devices()[0].platform}')
    base = float(np.median(speeds[min(speeds)]))
    for n, values in speeds.items():
        total = float(np.median(values))
        print(f'N={n:<3} seed-steps/s {total:8.1f}   per seed {total / n:7.1f}   vs N=1 total {total / base:5.2f}x')


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
