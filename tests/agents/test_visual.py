"""Pixel observations: the IMPALA encoder, frame stacking and random crops in the on-device sampler,
rendered visual-antmaze datasets, and every agent with `encoder=impala_small`."""

import functools
import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from agents import get_agent_class
from configs.presets import PRESETS, get_config
from datagen import visual
from datagen.pointmaze import _save_npz_atomic
from runtime.memory import check_dataset_fits
from tests.helpers import ROOT, optimized_xla, sampler_config, skip_without_rendering
from utils.config_checks import validate_config
from utils.datasets import load_dataset
from utils.errors import ConfigError, DatasetError
from utils.evaluation import FrameStackPolicy, evaluate, evaluation_metrics, make_eval_envs
from utils.image_encoders import visual_encoder
from utils.networks import MLP
from utils.pixel_batches import CROP_PADDING, augment_batch, crop_images, example_observations, stacked_observations
from utils.training import DeviceDataset, sample_batch, train

pytestmark = pytest.mark.xdist_group('test_visual')  # its module fixtures are built once, in one worker

VISUAL_DATASET = 'visual-antmaze-medium-stitch-v0'
OGBENCH_SOURCE = os.environ.get('OGBENCH_SOURCE', '/tmp/ogb_src/ogbench-1.2.2')


def num_params(tree):
    return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(tree))


def abstract_params(module, *inputs):
    """The parameter shapes of `module` on `inputs`, without computing anything."""
    return jax.eval_shape(module.init, jax.random.PRNGKey(0), *inputs)


# --- encoder -----------------------------------------------------------------------------------


def impala_parameter_count(image_shape, stack_sizes, num_blocks, mlp_dims):
    """Parameters of an IMPALA CNN counted layer by layer: per stage a 3x3 conv and 2 * num_blocks
    3x3 convs (kernels + biases), spatial size halved (rounded up) per stage, then the MLP."""
    height, width, channels = image_shape
    total = 0
    for features in stack_sizes:
        total += 9 * channels * features + features
        total += num_blocks * 2 * (9 * features * features + features)
        channels = features
        height, width = -(-height // 2), -(-width // 2)
    inputs = height * width * channels
    for size in mlp_dims:
        total += inputs * size + size
        inputs = size
    return total


def test_impala_small_matches_the_layer_by_layer_count():
    params = abstract_params(visual_encoder('impala_small'), jnp.zeros((1, 64, 64, 3), jnp.uint8))
    assert num_params(params) == impala_parameter_count((64, 64, 3), (16, 32, 32), 1, (512,)) == 1_105_056


def test_impala_small_matches_ogbench():
    """Same parameter count as OGBench's own impala_small, built from its source distribution
    (`pip download --no-binary :all: --no-deps ogbench==1.2.2`, unpacked at $OGBENCH_SOURCE). Its MLP
    import is replaced by this project's MLP, which has the same Dense layers."""
    path = os.path.join(OGBENCH_SOURCE, 'impls', 'utils', 'encoders.py')
    if not os.path.exists(path):
        pytest.skip(f'OGBench source not found at {path} (set OGBENCH_SOURCE to an unpacked ogbench sdist).')
    namespace = {'MLP': MLP}
    source = open(path).read().replace('from utils.networks import MLP', '')
    exec(compile(source, path, 'exec'), namespace)
    theirs = namespace['encoder_modules']['impala_small']()
    image = jnp.zeros((1, 64, 64, 3), jnp.uint8)
    their_params = abstract_params(theirs, image)
    our_params = abstract_params(visual_encoder('impala_small'), image)
    assert num_params(their_params) == num_params(our_params)
    their_shapes = sorted(x.shape for x in jax.tree_util.tree_leaves(their_params))
    assert their_shapes == sorted(x.shape for x in jax.tree_util.tree_leaves(our_params))


def test_impala_reads_uint8_images_as_floats_in_0_255():
    encoder = visual_encoder('impala_debug')
    images = np.random.default_rng(0).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    from_uint8, from_float = jax.jit(lambda images: (
        lambda params: (encoder.apply(params, images), encoder.apply(params, images.astype(jnp.float32))))(
        encoder.init(jax.random.PRNGKey(0), images)))(images)
    # The encoder converts uint8 images to float32 first: from there both run the same operations on the same values.
    np.testing.assert_array_equal(from_uint8, from_float)


# --- sampler: frame stacking and random crops -------------------------------------------------


def coded_dataset(episode_lengths, size=8):
    """Images whose every pixel holds its row index (mod 256) in channel 0 and its (y, x) position in
    channels 1, 2: a crop's offset and a stacked frame's row can be read back exactly."""
    n = sum(episode_lengths)
    rows = np.arange(n)
    images = np.zeros((n, size, size, 3), np.uint8)
    images[..., 0] = (rows % 256)[:, None, None]
    images[..., 1] = np.arange(size)[None, :, None] * 10
    images[..., 2] = np.arange(size)[None, None, :] * 10
    terminals = np.zeros(n, bool)
    terminals[np.cumsum(episode_lengths) - 1] = True
    return DeviceDataset.from_numpy(images, np.zeros((n, 2), np.float32), terminals), terminals


def test_frame_stacking_repeats_the_first_frame_at_episode_starts():
    lengths = [3, 5, 2, 4]
    data, terminals = coded_dataset(lengths)
    starts = np.concatenate([[0], np.flatnonzero(terminals)[:-1] + 1])
    episode_start = np.repeat(starts, lengths)
    rows = np.arange(sum(lengths))
    for frame_stack in (1, 2, 4):
        stacked = np.asarray(stacked_observations(data, jnp.asarray(rows), frame_stack))
        assert stacked.shape == (len(rows), 8, 8, 3 * frame_stack)
        for i in rows:
            for slot in range(frame_stack):  # slot 0 is the oldest frame, the last slot is row i
                expected_row = max(i - (frame_stack - 1 - slot), episode_start[i])
                assert stacked[i, 0, 0, 3 * slot] == expected_row, (frame_stack, i, slot)


def test_sampler_stacks_every_observation_of_the_batch():
    data, _ = coded_dataset([6, 7, 5])
    config = sampler_config(64, frame_stack=3, nstep=2)
    batch = sample_batch(jax.random.PRNGKey(0), data, config)
    plain = sample_batch(jax.random.PRNGKey(0), data, sampler_config(64, frame_stack=1, nstep=2))
    for key in ('observations', 'next_observations', 'actor_goals', 'value_goals', 'nstep_observations'):
        assert batch[key].shape[-1] == 9
        # The newest frame is the unstacked observation of the same row.
        np.testing.assert_array_equal(batch[key][..., 6:], plain[key])


def test_frame_stack_policy_sees_what_the_sampler_stacks():
    """An episode's observations fed step by step through FrameStackPolicy give exactly the sampler's
    stacks of the same episode, and the goal repeated."""
    data, _ = coded_dataset([7])
    seen = []
    policy = FrameStackPolicy(lambda obs, goals: seen.append((obs.copy(), goals)) or np.zeros((1, 2)), frame_stack=3)
    for episode in range(2):  # the second episode checks that reset() clears the history
        policy.reset()
        seen.clear()
        buffer = np.zeros((1, 8, 8, 3), np.uint8)
        for t in range(7):
            buffer[0] = np.asarray(data.observations[t])  # updated in place, as the evaluator does
            policy(buffer, np.asarray(data.observations[6:7]))
        expected = np.asarray(stacked_observations(data, jnp.arange(7), 3))
        np.testing.assert_array_equal(np.concatenate([obs for obs, _ in seen]), expected)
        np.testing.assert_array_equal(seen[0][1], np.concatenate([np.asarray(data.observations[6:7])] * 3, axis=-1))


def test_crop_equals_a_numpy_loop():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 2, 9, 7, 3), dtype=np.uint8)  # [B, n, H, W, C]
    offsets = rng.integers(0, 2 * CROP_PADDING + 1, (5, 2))
    cropped = np.asarray(crop_images(jnp.asarray(images), jnp.asarray(offsets)))
    for b in range(5):
        for k in range(2):
            padded = np.pad(images[b, k], ((CROP_PADDING,) * 2, (CROP_PADDING,) * 2, (0, 0)), mode='edge')
            dy, dx = offsets[b]
            np.testing.assert_array_equal(cropped[b, k], padded[dy : dy + 9, dx : dx + 7])
    identity = np.full((5, 2), CROP_PADDING)
    np.testing.assert_array_equal(np.asarray(crop_images(jnp.asarray(images), jnp.asarray(identity))), images)


def read_offsets(cropped, size=8):
    """The crop offset of each image of a coded batch, from its centre pixel's position channels."""
    centre = size // 2
    y = cropped[:, centre, centre, 1].astype(int) // 10
    x = cropped[:, centre, centre, 2].astype(int) // 10
    return y - centre + CROP_PADDING, x - centre + CROP_PADDING


def test_every_crop_offset_is_equally_likely_and_shared_by_a_samples_images():
    data, _ = coded_dataset([50, 50])
    config = sampler_config(500, p_aug=1.0)
    sample = jax.jit(lambda key: sample_batch(key, data, config))
    counts = np.zeros((2 * CROP_PADDING + 1,) * 2)
    for seed in range(10):
        batch = jax.device_get(sample(jax.random.PRNGKey(seed)))
        dy, dx = read_offsets(batch['observations'])
        for key in ('next_observations', 'actor_goals', 'value_goals'):
            np.testing.assert_array_equal(read_offsets(batch[key]), (dy, dx))
        np.add.at(counts, (dy, dx), 1)
    assert counts.sum() == 5000 and counts.min() > 0
    assert stats.chisquare(counts.ravel()).pvalue > 1e-3


def test_no_augmentation_at_p_aug_0_and_one_coin_per_batch():
    data, _ = coded_dataset([50, 50])
    plain = sample_batch(jax.random.PRNGKey(3), data, sampler_config(64, p_aug=0.0))
    for key in ('observations', 'next_observations', 'actor_goals', 'value_goals'):
        rows = np.asarray(plain[key])[:, 0, 0, 0]  # channel 0 codes the row (all rows < 256)
        np.testing.assert_array_equal(plain[key], np.asarray(data.observations)[rows])

    batch = {'observations': jnp.asarray(np.asarray(plain['observations']))}
    augment = jax.jit(lambda key: augment_batch(key, batch, 0.3)['observations'])
    augmented = [not np.array_equal(augment(jax.random.PRNGKey(k)), batch['observations']) for k in range(400)]
    # A batch of 64 left unchanged by an applied crop has probability 49^-64: the rate is the coin's.
    assert stats.binomtest(sum(augmented), 400, 0.3).pvalue > 1e-3


# --- agents --------------------------------------------------------------------------------------


# One preset per distinct way of wiring the encoder (byol_visual and tdsr_visual differ from
# byol_gamma_a_visual and tdsr_a_visual only in loss settings).
VISUAL_PRESETS = sorted(name for name in PRESETS if name.endswith('_visual') and name not in ('byol_visual', 'tdsr_visual'))


@pytest.mark.parametrize('preset', VISUAL_PRESETS)
def test_every_visual_preset_builds_and_traces_an_update(preset):
    """Create (abstractly: shapes only, nothing compiled) and trace one fused update on 16x16 images
    with frame stacking and crops: the encoder meets every loss with consistent shapes."""
    config = get_config(preset)
    config.batch_size, config.frame_stack, config.p_aug = 4, 2, 0.5
    data, _ = coded_dataset([6, 6], size=16)
    agent_class = get_agent_class(config.agent_name)
    ex_actions = np.zeros((1, 2), np.float32)
    ex_observations = example_observations(np.asarray(data.observations), 2)
    agent = jax.eval_shape(lambda: agent_class.create(0, ex_observations, ex_actions, config))
    # A conv kernel reads 2 stacked RGB frames (GCBC's: of the state and of the goal).
    assert any(len(x.shape) == 4 and x.shape[-2] in (6, 12) for x in jax.tree_util.tree_leaves(agent))
    step = functools.partial(train, num_steps=1)
    new_agent, info = jax.eval_shape(step, agent, data, jax.random.PRNGKey(0), 0)
    assert info['total_loss'].shape == (1,)
    assert jax.tree_util.tree_structure(new_agent) == jax.tree_util.tree_structure(agent)


def test_image_encoder_and_observations_must_match():
    images, states, actions = np.zeros((1, 16, 16, 3), np.uint8), np.zeros((1, 29), np.float32), np.zeros((1, 8))
    with pytest.raises(ConfigError, match='--agent.encoder=impala_small'):
        get_agent_class('byol_gamma').create(0, images, actions, get_config('byol_gamma_a'))
    with pytest.raises(ConfigError, match='state vectors'):
        get_agent_class('tra').create(0, states, actions, get_config('tra_visual'))
    config = get_config('hgcbc')
    config.encoder = 'impala_small'
    with pytest.raises(ConfigError, match='hgcbc_phi'):
        validate_config(config, get_agent_class('hgcbc'))
    # An agent without an image encoder (the offline RL baselines) says so, instead of failing in its networks.
    with pytest.raises(ConfigError, match='reads state vectors only'):
        get_agent_class('gcivl').create(0, images, actions, get_config('gcivl'))
    # GCBC-phi on pixels: the CNN is phi's first stage (use_phi), the image encoder named as for every agent.
    config = get_config('gcbc_phi_visual')
    assert (config.encoder, config.use_phi) == ('impala_small', True)


def test_the_encoder_meets_the_observations_in_one_place():
    """Which encoder names exist is a config rule; whether the encoder fits the observations is one function,
    called from one place (agents.base.Agent.create, which every agent's creation goes through)."""
    root = ROOT
    calls = []
    for folder in ('agents', 'utils', 'configs'):
        for path in sorted(glob.glob(os.path.join(root, folder, '**', '*.py'), recursive=True)):
            for number, line in enumerate(open(path).read().splitlines(), 1):
                if 'check_encoder_fits_observations(' in line and not line.lstrip().startswith('def '):
                    calls.append(f'{os.path.relpath(path, root)}:{number}')
    assert len(calls) == 1 and calls[0].startswith('agents/base.py:'), calls


# --- rendered datasets, training and evaluation -----------------------------------------------


@pytest.fixture(scope='module')
def visual_data_dir(tmp_path_factory):
    """A tiny visual-antmaze-medium-stitch dataset rendered by the project: one train and one val
    episode of the antmaze generator (the committed expert), each cut to its first 12 rows (two
    6-row episodes) so that rendering takes about a second."""
    from datagen import antmaze

    directory = str(tmp_path_factory.mktemp('visual-data'))
    state_name = visual.state_dataset_name(VISUAL_DATASET)
    train_path, val_path = antmaze.write_dataset(state_name, directory, seed=0, num_train_episodes=1, num_val_episodes=1, progress=False)
    for path in (train_path, val_path):
        with np.load(path) as file:
            arrays = {key: file[key][:12] for key in file.files}
        arrays['terminals'][:] = False
        arrays['terminals'][[5, 11]] = True
        _save_npz_atomic(path, arrays)
    try:
        visual.write_dataset(VISUAL_DATASET, directory, progress=False)
    except DatasetError as e:
        skip_without_rendering(f'No headless MuJoCo rendering here: {e}')
    return directory


def test_rendered_dataset_is_the_visual_envs_view_of_each_row(visual_data_dir):
    env = make_eval_envs(VISUAL_DATASET, 1)[0]
    path = os.path.join(visual_data_dir, f'{VISUAL_DATASET}.npz')
    data = load_dataset(path, env.observation_space, env.action_space)
    assert data['observations'].dtype == np.uint8 and data['observations'].shape == (12, 64, 64, 3)
    with np.load(os.path.join(visual_data_dir, f'{visual.state_dataset_name(VISUAL_DATASET)}.npz')) as state:
        np.testing.assert_array_equal(data['actions'], state['actions'])
        qpos, qvel = state['qpos'], state['qvel']
    raw = env.unwrapped
    for i in (0, 7):
        raw.set_state(qpos[i].astype(np.float64), qvel[i].astype(np.float64))
        np.testing.assert_array_equal(raw.get_ob(), data['observations'][i])
    assert len({data['observations'][i].tobytes() for i in range(12)}) > 6  # the ant moves: frames differ


def test_rendering_matches_the_live_env(visual_data_dir):
    """A reset observation (set by set_state, like the renderer) is reproduced exactly; after a step
    the live env renders kinematics one physics substep old, so frames differ only slightly."""
    renderer = visual.FrameRenderer('visual-antmaze-medium-v0')
    env = make_eval_envs(VISUAL_DATASET, 1)[0].unwrapped
    observation, _ = env.reset(seed=0, options=dict(task_id=1))
    np.testing.assert_array_equal(renderer.render(env.data.qpos, env.data.qvel), observation)
    rng = np.random.default_rng(0)
    for _ in range(3):
        observation, *_ = env.step(rng.uniform(-1, 1, 8))
        frame = renderer.render(env.data.qpos.copy(), env.data.qvel.copy())
        assert np.mean(np.abs(frame.astype(int) - observation)) < 2.0


def test_rendering_resumes_where_it_stopped(tmp_path, monkeypatch):
    """Killed after its first batch, a rerun renders only the remaining rows and gives the same frames."""
    monkeypatch.setattr(visual, 'RENDER_BATCH_ROWS', 3)

    class CountingRenderer:
        def __init__(self, fail_at=None):
            self.calls, self.fail_at = 0, fail_at

        def render(self, qpos, qvel, button_states=None):
            self.calls += 1
            if self.calls == self.fail_at:
                raise KeyboardInterrupt
            return np.full(visual.IMAGE_SHAPE, int(qpos[0]), np.uint8)

    rows = dict(qpos=np.arange(8, dtype=np.float64)[:, None], qvel=np.zeros((8, 1)))
    paths = str(tmp_path / 'f.npy'), str(tmp_path / 'p.json')
    with pytest.raises(KeyboardInterrupt):
        visual.render_rows(CountingRenderer(fail_at=5), rows, *paths, progress=False)
    resumed = CountingRenderer()
    frames = visual.render_rows(resumed, rows, *paths, progress=False)
    assert resumed.calls == 5  # rows 3..7: the first batch of 3 was kept
    np.testing.assert_array_equal(frames[:, 0, 0, 0], np.arange(8))


def test_memory_check_fails_early_with_what_fits_where(visual_data_dir):
    paths = [os.path.join(visual_data_dir, f'{VISUAL_DATASET}{suffix}.npz') for suffix in ('', '-val')]
    needed = check_dataset_fits(paths, host_bytes=10**12)
    assert needed == 24 * 64 * 64 * 3
    with pytest.raises(DatasetError, match='host memory'):
        check_dataset_fits(paths, host_bytes=needed)


def test_gcbc_trains_on_rendered_pixels_and_evaluates_on_the_visual_env(visual_data_dir):
    """Visual GCBC (small CNN, 2 stacked frames, crops) fits its rendered data (loss falls), and acts
    in the pixel env through the frame-stacking evaluation policy."""
    env = make_eval_envs(VISUAL_DATASET, 2)
    raw = load_dataset(os.path.join(visual_data_dir, f'{VISUAL_DATASET}.npz'), env[0].observation_space, env[0].action_space)
    data = DeviceDataset.from_numpy(**raw)
    config = get_config('gcbc_visual')
    config.encoder, config.batch_size, config.frame_stack, config.p_aug = 'impala_debug', 16, 2, 0.5
    config.actor_hidden_dims = (64, 64)
    agent = get_agent_class('gcbc').create(0, example_observations(raw['observations'], 2), raw['actions'][:1], config)
    with optimized_xla():
        agent, info = train(agent, data, jax.random.PRNGKey(0), 0, 60)
    errors = np.asarray(info['actor/mse'])  # the BC loss minus its constant (fixed-std Gaussian) part, / 4
    assert np.all(np.isfinite(errors)) and errors[-10:].mean() < 0.8 * errors[:10].mean()

    policy = FrameStackPolicy(lambda obs, goals: np.asarray(agent.sample_actions(obs, goals, temperature=0.0)), 2)
    episodes = evaluate(policy, env, task_ids=(1,), episodes_per_task=2, max_steps=3, num_video_episodes=1)
    assert evaluation_metrics(episodes)['evaluation/overall_length'] == 3
    assert [record.final_observation.shape for record in episodes] == [(64, 64, 3)] * 2
    videos = [record.video for record in episodes if record.video is not None]
    assert len(videos) == 1 and videos[0].shape[1:] == (64, 64, 3)


def test_visual_sweep_launches_the_visual_presets(tmp_path):
    """scripts/sweep_visual.sh launches the paper's grid over the visual presets."""
    import subprocess
    import sys

    result = subprocess.run(['bash', 'scripts/sweep_visual.sh', '--dry_run', f'--save_dir={tmp_path}'], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHON=sys.executable))
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if 'main.py' in line]
    assert len(commands) == 3 * (4 + 4 + 4 + 4 + 1) * 4  # envs x (BYOL-gamma^a alphas, BYOL, TRA, TD-SR^a, GCBC) x seeds
    assert sum('byol_gamma_a_visual --agent.alpha=20 ' in c for c in commands) == 12
    assert all('--agent.p_aug=0.5' in c for c in commands if 'visual-scene-play' in c)
    assert not any('--agent.p_aug' in c for c in commands if 'visual-antmaze' in c)


def test_scene_play_generated_then_rendered_equals_the_live_visual_scene(tmp_path):
    """scene-play-v0 from OGBench's scripted oracles (short episodes), rendered into visual-scene-play-v0,
    has exactly the frames a live visual-scene env shows when the same seed collects the same episodes
    (OGBench's own way of making the visual dataset), up to the rounding of the rows' float32 qpos:
    rendered from the exact float64 state the frames are identical; from the stored float32 one, a few
    percent of pixels move by a few intensity levels."""
    from datagen import scene

    directory = str(tmp_path)
    scene.write_dataset('scene-play-v0', directory, seed=0, num_train_episodes=1, num_val_episodes=1, progress=False, episode_length=4)
    try:
        train_path, val_path = visual.write_dataset('visual-scene-play-v0', directory, progress=False)
    except DatasetError as e:
        skip_without_rendering(f'No headless MuJoCo rendering here: {e}')
    live = scene.generate_scene_dataset(2, 0, episode_length=4, progress=False, env_id='visual-scene-v0')
    with np.load(train_path) as train, np.load(val_path) as val:
        for key in ('actions', 'button_states', 'qpos'):  # the same episodes
            np.testing.assert_array_equal(np.concatenate([train[key], val[key]]), live[key])
        frames = np.concatenate([train['observations'], val['observations']]).astype(int)
    assert frames.shape == live['observations'].shape == (8, 64, 64, 3)
    difference = np.abs(frames - live['observations'])
    assert difference.max() <= 8 and np.mean(difference > 0) < 0.05
    # Distinct states give distinct frames: the comparison is not between near-constant images.
    assert np.abs(np.diff(frames, axis=0)).sum() > 100 * difference.sum()
