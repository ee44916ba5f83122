"""Throughput of the visual pipeline: rendering dataset frames, and training on 64x64x3 pixels.

    MUJOCO_GL=egl python benchmarks/bench_visual.py [--presets=gcbc_visual,byol_gamma_a_visual] [--steps=20]

Rendering: frames/s of `datagen.visual.FrameRenderer` (set qpos/qvel, render 64x64 with the
visual env's camera) on states of a random-action antmaze rollout, i.e. what building a visual
dataset costs per row. Training: gradient steps/s of `utils.training.train` (fused, on-device
sampling) for each preset at batch 256 on random uint8 frames (speed does not depend on the
pixels), after a compile-and-warm-up call. Every figure comes from this one process.
"""

import os
import time

import jax
import numpy as np
from absl import app, flags

from runtime.exits import parse_absl_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('presets', 'gcbc_visual,byol_gamma_a_visual,tra_visual,tdsr_a_visual', 'Visual presets to time.')
flags.DEFINE_integer('batch_size', 256, 'Batch size (paper, visual: 256).')
flags.DEFINE_integer('steps', 20, 'Gradient steps per timed call.')
flags.DEFINE_integer('rounds', 2, 'Timed calls per preset (the median is reported).')
flags.DEFINE_integer('rows', 20_000, 'Rows of the random dataset kept on device.')
flags.DEFINE_integer('frames', 300, 'Frames rendered for the rendering figure (0: skip it).')


def rendering_frames_per_second(num_frames):
    import gymnasium
    import ogbench.locomaze  # noqa: F401

    from datagen.visual import FrameRenderer

    env = gymnasium.make('antmaze-medium-v0').unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    states = []
    for _ in range(num_frames):
        env.step(rng.uniform(-1, 1, env.action_space.shape))
        states.append((env.data.qpos.copy(), env.data.qvel.copy()))
    renderer = FrameRenderer('visual-antmaze-medium-v0')
    renderer.render(*states[0])
    start = time.perf_counter()
    for qpos, qvel in states:
        renderer.render(qpos, qvel)
    return num_frames / (time.perf_counter() - start)


def training_steps_per_second(preset):
    from agents import get_agent_class
    from configs.presets import get_config
    from utils.pixel_batches import example_observations
    from utils.training import DeviceDataset, SamplerConfig
    from utils.training import train

    config = get_config(preset)
    config.batch_size = FLAGS.batch_size
    rng = np.random.default_rng(0)
    observations = rng.integers(0, 256, (FLAGS.rows, 64, 64, 3), dtype=np.uint8)
    actions = rng.uniform(-1, 1, (FLAGS.rows, 8)).astype(np.float32)
    terminals = np.zeros(FLAGS.rows, bool)
    terminals[200::201] = True
    terminals[-1] = True
    data = DeviceDataset.from_numpy(observations, actions, terminals)
    sampler_config = SamplerConfig.for_agent(get_agent_class(config.agent_name), config)
    agent = get_agent_class(config.agent_name).create(0, example_observations(observations, sampler_config.frame_stack), actions[:1], config)
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    agent, info = train(agent, data, key, 0, FLAGS.steps)
    jax.block_until_ready(info)
    compile_seconds = time.perf_counter() - start
    rates = []
    for r in range(FLAGS.rounds):
        start = time.perf_counter()
        agent, info = train(agent, data, key, (r + 1) * FLAGS.steps, FLAGS.steps)
        jax.block_until_ready(info)
        rates.append(FLAGS.steps / (time.perf_counter() - start))
    return float(np.median(rates)), compile_seconds


def main(_):
    print(f'device: {jax.devices()[0].device_kind} ({jax.default_backend()}); MUJOCO_GL={os.environ.get("MUJOCO_GL", "unset")}', flush=True)
    if FLAGS.frames > 0:
        print(f'rendering: {rendering_frames_per_second(FLAGS.frames):.1f} frames/s (64x64, set_state + render)', flush=True)
    for preset in FLAGS.presets.split(','):
        rate, compile_seconds = training_steps_per_second(preset)
        print(f'training {preset}: {rate:.2f} steps/s at batch {FLAGS.batch_size} (first call incl. compile {compile_seconds:.1f} s)', flush=True)


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
