"""Gradient steps per second of any agent, three ways, side by side in one process:

  fused     K updates per jitted call (lax.scan), batches sampled on device   (what main.py does)
  per-call  one update per jitted call, batches sampled on device
  host      one update per call, batches sampled on the host with NumPy and copied in
            (the OGBench reference loop's structure)

    python benchmarks/bench_train.py --presets=gcbc,gcbc_phi,byol_gamma_a,tra,tdsr_a --batch_sizes=256,1024

Uses a generated pointmaze-medium-stitch dataset (created in --dataset_dir if missing). Rounds of
every (preset, mode) pair are interleaved and the median is reported, so background load hits all
of them alike.
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
from utils.training import DeviceDataset, SamplerConfig, train

FLAGS = flags.FLAGS
flags.DEFINE_list('presets', ['gcbc', 'gcbc_phi', 'byol_gamma_a', 'tra', 'tdsr_a'], 'Presets (configs/presets.py) to time.')
flags.DEFINE_list('batch_sizes', ['256', '1024'], 'Batch sizes.')
flags.DEFINE_integer('steps', 200, 'Gradient steps per timed round.')
flags.DEFINE_integer('rounds', 3, 'Interleaved rounds per mode (median reported).')
flags.DEFINE_string('env_name', 'pointmaze-medium-stitch-v0', 'Dataset.')
flags.DEFINE_string('dataset_dir', '~/.ogbench/data', 'Dataset directory.')
flags.DEFINE_list('modes', ['fused', 'per-call', 'host'], 'Which loops to time.')


class HostSampler:
    """NumPy sampler with OGBench GCDataset's structure: uniform trajectory actor goals and
    geometric representation goals, drawn on the host each step."""

    def __init__(self, raw, config: SamplerConfig, seed=0):
        terminals = raw['terminals']
        ends = np.nonzero(terminals)[0]
        self.episode_end = ends[np.searchsorted(ends, np.arange(len(terminals)))]
        self.sample_idxs = np.nonzero(~terminals)[0]
        self.obs, self.actions = raw['observations'], raw['actions']
        self.config, self.rng = config, np.random.default_rng(seed)

    def sample(self):
        b, rng = self.config.batch_size, self.rng
        idxs = self.sample_idxs[rng.integers(len(self.sample_idxs), size=b)]
        ends = self.episode_end[idxs]
        actor_goals = rng.integers(np.minimum(idxs + 1, ends), ends + 1)
        value_goals = np.minimum(idxs + rng.geometric(1 - self.config.gamma, size=b), ends) if self.config.gamma > 0 else idxs + 1
        batch = dict(
            observations=self.obs[idxs], actions=self.actions[idxs], next_observations=self.obs[idxs + 1],
            next_actions=self.actions[idxs + 1], actor_goals=self.obs[actor_goals], value_goals=self.obs[value_goals],
        )
        if self.config.nstep:
            steps = np.minimum(idxs[:, None] + np.arange(1, self.config.nstep + 1), ends[:, None])
            batch.update(nstep_observations=self.obs[steps], nstep_actions=self.actions[steps - 1],
                         nstep_mask=(idxs[:, None] + np.arange(1, self.config.nstep + 1) <= ends[:, None]).astype(np.float32))
        return batch


def time_mode(mode, agent, data, sampler, sampler_config, steps):
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    if mode == 'fused':
        agent, info = train(agent, data, key, 0, steps)
    elif mode == 'per-call':
        for step in range(steps):
            agent, info = train(agent, data, key, step, 1)
    else:
        for _ in range(steps):
            agent, info = agent.update(sampler.sample())
    jax.block_until_ready(info)
    return agent, steps / (time.perf_counter() - start)


def main(_):
    train_path, _ = ensure_dataset(FLAGS.env_name, FLAGS.dataset_dir, generator=datagen)
    env = make_env(FLAGS.env_name)
    raw = load_dataset(train_path, env.observation_space, env.action_space)
    data = DeviceDataset.from_numpy(**raw)
    print(f'jax {jax.__version__} on {jax.devices()[0].platform}; {FLAGS.steps} steps x {FLAGS.rounds} rounds per mode')
    print(f'{"preset":<16}{"batch":>6}' + ''.join(f'{m:>12}' for m in FLAGS.modes) + f'{"fused/host":>12}{"fused/per-call":>16}')
    results = {}
    for batch_size in map(int, FLAGS.batch_sizes):
        # Every (preset, mode) is timed in each round, so load changes hit all of them alike.
        setups = {}
        for preset in FLAGS.presets:
            config = preset_config(preset)
            config.batch_size = batch_size
            sampler_config = SamplerConfig.for_agent(get_agent_class(config.agent_name), config)
            sampler = HostSampler(raw, sampler_config)
            for mode in FLAGS.modes:  # compile outside the timed rounds (fused compiles per chunk length)
                agent = get_agent_class(config.agent_name).create(0, raw['observations'][:1], raw['actions'][:1], config)
                agent, _ = time_mode(mode, agent, data, sampler, sampler_config, FLAGS.steps if mode == 'fused' else 2)
                setups[(preset, mode)] = dict(agent=agent, sampler=sampler, sampler_config=sampler_config, speeds=[])
        for _ in range(FLAGS.rounds):
            for (preset, mode), setup in setups.items():
                setup['agent'], speed = time_mode(
                    mode, setup['agent'], data, setup['sampler'], setup['sampler_config'], FLAGS.steps
                )
                setup['speeds'].append(speed)
        for preset in FLAGS.presets:
            median = {mode: float(np.median(setups[(preset, mode)]['speeds'])) for mode in FLAGS.modes}
            results[(preset, batch_size)] = median
            ratios = ''
            if 'fused' in median and 'host' in median:
                ratios += f'{median["fused"] / median["host"]:>11.2f}x'
            if 'fused' in median and 'per-call' in median:
                ratios += f'{median["fused"] / median["per-call"]:>15.2f}x'
            print(f'{preset:<16}{batch_size:>6}' + ''.join(f'{median[m]:>12.1f}' for m in FLAGS.modes) + ratios, flush=True)
    if 'fused' in FLAGS.modes:
        for batch_size in map(int, FLAGS.batch_sizes):
            base = results.get(('gcbc_phi', batch_size))
            if base:
                costs = ', '.join(f'{p} {base["fused"] / results[(p, batch_size)]["fused"]:.2f}x'
                                  for p in FLAGS.presets if (p, batch_size) in results and p != 'gcbc_phi')
                print(f'cost per update relative to gcbc_phi at batch {batch_size} (fused): {costs}')


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
