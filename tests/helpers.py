"""What several test modules share: a toy dataset and small agents, the presets that cover every code path, the
recorded per-step metrics, XLA and rendering switches, a pointmaze oracle policy, and the worked example of
docs/adding_a_method.md. Test modules import from here, never from one another."""

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POINTMAZE = 'pointmaze-medium-stitch-v0'

# What a main.py subprocess needs to run with XLA's full optimisations (tests/conftest.py turns most off).
OPTIMIZED_XLA_ENV = {'JAX_DISABLE_MOST_OPTIMIZATIONS': '0'}


# ---------------------------------------------------------------------------------------------
# main.py as a subprocess at toy size (the fault tests).
# ---------------------------------------------------------------------------------------------

MAIN = os.path.join(ROOT, 'main.py')
# main.py's process as the toy runs start it (tests/main_process.py says what it saves). -P: the script's folder is not
# put first on the import path (tests/agents/ would hide agents/); main.py's modules come from the installed checkout.
MAIN_PROCESS = [sys.executable, '-P', os.path.join(ROOT, 'tests', 'main_process.py')]
ENV = POINTMAZE
TINY = ['--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32', '--eval_episodes=2', '--eval_tasks=1',
        '--eval_max_steps=5', '--wandb_mode=disabled', '--nodownload', '--eval_workers=1']
BUDGET = ['--train_steps=40', '--log_interval=20', '--eval_interval=20', '--save_interval=20']
# Runs until stopped: a log row every 20 steps, no evaluation or checkpoint unless stopped.
ENDLESS = ['--train_steps=100000000', '--log_interval=20', '--steps_per_call=20', '--eval_interval=100000000',
           '--save_interval=100000000']


def key_bytes(key):
    """A PRNG key's bits, for comparing keys of either kind (typed or raw uint32)."""
    return np.asarray(jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key).tobytes()


def main_command(data_dir, save_dir, *extra, env=ENV):
    return [*MAIN_PROCESS, f'--env_name={env}', '--agent=agents/gcbc.py', f'--dataset_dir={data_dir}',
            f'--save_dir={save_dir}', *TINY, *extra]


# Every process `start` made in this test process, oldest first: tests/conftest.py ends those still running (with
# everything they started) when the test that started them ends, and the rest when the session ends or is interrupted.
STARTED = []


def start(command, env=None, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    """`command` running in a process group of its own: a Ctrl-C at the terminal reaches pytest, never it directly;
    pytest's teardown ends it (`end_started`)."""
    process = subprocess.Popen(command, cwd=cwd, stdout=stdout, stderr=stderr, text=True, env=env, process_group=0)
    STARTED.append(process)
    return process


def process_table():
    """{pid: (parent pid, process group)} of every process /proc lists now."""
    table = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/stat') as f:
                    fields = f.read().rsplit(')', 1)[1].split()
            except (OSError, IndexError):
                continue  # ended meanwhile
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def end_started(since=0):
    """SIGKILL every process `start` made from the `since`-th on that still runs, with every process it started (also
    those in sessions of their own: a sweep's jobs) and every other process in its group, then reap it. (Only a
    running leader's group is ours for sure: the number of one that has ended may be another process's now.)"""
    ending, STARTED[since:] = STARTED[since:], []
    running = [process for process in ending if process.poll() is None]
    table = process_table() if running else {}
    children = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    for process in running:
        doomed, tree = {pid for pid, (_, group) in table.items() if group == process.pid}, [process.pid]
        while tree:
            pid = tree.pop()
            doomed.add(pid)
            tree.extend(children.get(pid, []))
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()
    for process in ending:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def finish(process, timeout=300):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def run(command, **kwargs):
    return finish(start(command, **kwargs))


def error_paragraph(returncode, stderr, expected_code=1):
    """The one paragraph main.py printed for a named error: its last output."""
    assert returncode == expected_code and 'Traceback' not in stderr and '\nError: ' in stderr, stderr[-3000:]
    paragraph = stderr.rstrip().rpartition('\nError: ')[2]
    assert '\n' not in paragraph, stderr[-3000:]
    return paragraph


def wait_until(predicate, process=None, timeout=120):
    deadline = time.time() + timeout
    while not predicate():
        if process is not None and process.poll() is not None:
            raise AssertionError(f'exited early ({process.returncode}): {process.stderr.read()[-3000:]}')
        assert time.time() < deadline, 'timed out'
        time.sleep(0.02)


@contextlib.contextmanager
def optimized_xla():
    """XLA's full optimisations for what is compiled inside (restored afterwards). Only around code that runs
    long: compiling a network's random initialisation with them costs seconds."""
    before = jax.config.read('jax_disable_most_optimizations')
    jax.config.update('jax_disable_most_optimizations', False)
    try:
        yield
    finally:
        jax.config.update('jax_disable_most_optimizations', before)


def skip_without_rendering(reason):
    """Skip a rendering test on a machine that cannot render headless; where a bare MuJoCo renderer works,
    the failure is the code's, so the test fails instead of skipping."""
    import mujoco

    try:
        mujoco.Renderer(mujoco.MjModel.from_xml_string('<mujoco><worldbody/></mujoco>'), 8, 8).close()
    except Exception:  # GL back-ends fail with many different exception types
        pytest.skip(reason)
    pytest.fail(f'Rendering works on this machine, yet: {reason}')


def analysis_run(save_dir, dataset_dir, group='analysis', name='byol'):
    """A BYOL-gamma^a run directory with the files the analyses read (flags.json and config.json as main.py writes
    them for its request, the checkpoint of step 100), its agent as initialised; its path."""
    import main
    from experiments import analysis
    from runtime.checkpoints import save_checkpoint
    from runtime.run_dir import RunDir
    from utils.evaluation import make_env

    request = main.request_of(['main.py', f'--env_name={ENV}', f'--dataset_dir={dataset_dir}', f'--save_dir={save_dir}',
                               '--agent=configs/presets.py:byol_gamma_a', '--agent.actor_hidden_dims=(32,32)',
                               '--train_steps=100', f'--run_group={group}', f'--run_name={name}'])
    run_dir = RunDir.at(save_dir, group, name)
    os.makedirs(run_dir.path)
    run_dir.write_metadata(request.seed_flags(0), request.config_record())
    env = make_env(ENV)
    create = main.compiled_create(request.agent_class, analysis.example_batch(env.observation_space),
                                  analysis.example_batch(env.action_space), request.config)
    save_checkpoint(run_dir.path, create(0), 100)
    return run_dir.path


# ---------------------------------------------------------------------------------------------
# A policy that reaches pointmaze goals, for evaluation tests.
# ---------------------------------------------------------------------------------------------


def pointmaze_oracle_policy(env):
    """Batched BFS oracle for point mazes (observations and goals are xy): a unit vector toward the subgoal of
    OGBench's `get_oracle_subgoal` (the scripted expert behind the pointmaze datasets; tabulated by `MazeOracle`),
    and toward the goal itself once in the goal's cell (the goal carries up to a quarter cell of noise per axis and
    the success radius is a quarter cell).

    It is plain numpy on purpose: numpy applies the same IEEE operations to a row whatever the batch size, so its
    actions (and an evaluation's episodes) are bitwise independent of lockstep batching, which jitted XLA code does
    not promise.
    """
    if env.observation_space.shape != (2,):
        raise ValueError(f'pointmaze_oracle_policy needs xy observations, got shape {env.observation_space.shape}.')
    from utils.maze import MazeOracle

    oracle = MazeOracle(env)

    def policy(observations, goals):
        agent_cells = np.array([oracle.cell(xy) for xy in observations])
        goal_cells = np.array([oracle.cell(xy) for xy in goals])
        subgoals = oracle.subgoal_xy[goal_cells[:, 0], goal_cells[:, 1], agent_cells[:, 0], agent_cells[:, 1]]
        in_goal_cell = np.all(agent_cells == goal_cells, axis=1)[:, None]
        direction = np.where(in_goal_cell, goals, subgoals) - observations
        return direction / np.maximum(np.linalg.norm(direction, axis=-1, keepdims=True), 1e-6)

    return policy


# ---------------------------------------------------------------------------------------------
# A child bound by file modes although the tests run as root.
# ---------------------------------------------------------------------------------------------

# A set-up for runtime.subprocesses.set_up_then_exec: it drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
# bounding set (prctl PR_CAPBSET_DROP; root's capabilities after exec come from it), so the command keeps uid 0 but is
# bound by file modes as any user is: chmod 000 makes a file unreadable even to root.
DROP_FILE_PERMISSION_BYPASS = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        raise OSError(ctypes.get_errno(), 'prctl(PR_CAPBSET_DROP)')
'''


def bound_by_file_modes(unreadable_path):
    """The set_up_then_exec set-up that makes a child bound by file modes (None when this process is not root: its
    children are already), checked on `unreadable_path`, a file chmod 000; skips the test where it cannot be."""
    import subprocess
    import sys

    from runtime.subprocesses import set_up_then_exec

    if os.geteuid() != 0:
        return None
    probe = subprocess.run(set_up_then_exec(DROP_FILE_PERMISSION_BYPASS,
                                            [sys.executable, '-c', f'open({str(unreadable_path)!r}, "rb")']),
                           capture_output=True, text=True, timeout=60)
    if 'PermissionError' not in probe.stderr:
        pytest.skip(f'cannot make a file unreadable for a root child process here: {probe.stderr[-300:]}')
    return DROP_FILE_PERMISSION_BYPASS


# ---------------------------------------------------------------------------------------------
# Small agents on a toy dataset.
# ---------------------------------------------------------------------------------------------

OBS_DIM, ACTION_DIM = 4, 2


def toy_dataset(num_episodes=40, length=30, seed=0):
    """Smooth random walks whose action is the (clipped) direction of motion: learnable BC, and
    temporal structure for the representation losses."""
    from utils.training import DeviceDataset

    rng = np.random.default_rng(seed)
    actions = np.clip(rng.normal(0, 0.5, (num_episodes, length, ACTION_DIM)), -1, 1)
    positions = np.cumsum(0.1 * actions, axis=1)
    velocity = np.concatenate([np.zeros((num_episodes, 1, ACTION_DIM)), actions[:, :-1]], axis=1)
    observations = np.concatenate([positions, velocity], axis=-1).reshape(-1, OBS_DIM).astype(np.float32)
    actions = actions.reshape(-1, ACTION_DIM).astype(np.float32)
    terminals = np.tile(np.arange(length) == length - 1, num_episodes)
    return DeviceDataset.from_numpy(observations, actions, terminals)


def chain_of_directions(num_states, num_episodes, length, seed=0):
    """Random walks on a chain of one-hot states with reflecting ends, whose action, uniform on [-1, 1], steps right
    when positive and left otherwise: a good and a bad direction from every state, and a critic that has seen every
    action it is asked about."""
    from utils.training import DeviceDataset

    rng = np.random.default_rng(seed)
    positions, actions = [], []
    for _ in range(num_episodes):
        x = rng.integers(num_states)
        for _ in range(length):
            action = rng.uniform(-1.0, 1.0)
            positions.append(x)
            actions.append(action)
            x = int(np.clip(x + (1 if action > 0 else -1), 0, num_states - 1))
    observations = np.eye(num_states, dtype=np.float32)[positions]
    terminals = np.tile(np.arange(length) == length - 1, num_episodes)
    return DeviceDataset.from_numpy(observations, np.asarray(actions, np.float32)[:, None], terminals)


def small(config, batch_size=64):
    config.batch_size = batch_size
    config.actor_hidden_dims = (64, 64)
    config.encoder_hidden_dims = (32, 32)
    if 'predictor_hidden_dims' in config:
        config.predictor_hidden_dims = (32, 32)
    if 'high_hidden_dims' in config:
        config.high_hidden_dims = (64, 64)
    config.latent_dim = 8
    return config


def make_agent(config, seed=0):
    from agents import get_agent_class

    ex_obs, ex_act = np.zeros((1, OBS_DIM), np.float32), np.zeros((1, ACTION_DIM), np.float32)
    return get_agent_class(config.agent_name).create(seed, ex_obs, ex_act, config)


def sampler_of(config):
    """What the sampler draws for `config`'s agent (as utils.training.batch_config does for the built agent)."""
    from agents import get_agent_class
    from utils.training import SamplerConfig

    return SamplerConfig.for_agent(get_agent_class(config['agent_name']), config)


def assert_ema_of(targets, online, old_targets, tau):
    """`targets` == tau * online + (1 - tau) * old_targets, leaf by leaf, to float32 rounding: three rounded
    operations (two products and a sum, or fewer with a fused multiply-add) each err by at most u = 2^-24 of their
    result, so |error| <= 3u (tau |online| + (1 - tau) |old|)."""
    def check(new, o, t):
        o, t = np.asarray(o, np.float64), np.asarray(t, np.float64)
        bound = 3 * 2.0 ** -24 * (tau * np.abs(o) + (1 - tau) * np.abs(t))
        assert np.all(np.abs(np.asarray(new, np.float64) - (tau * o + (1 - tau) * t)) <= bound)
    jax.tree_util.tree_map(check, targets, online, old_targets)


# float32's unit roundoff: an operation's float32 result lies within FLOAT32_U of its exact value, relatively.
FLOAT32_U = 2.0 ** -24


def float32_tolerance(operations, magnitude):
    """assert_allclose's tolerance for a float32 result against its exact value (a float64 reference on the same
    inputs): computed through at most `operations` rounded operations in sequence (a float64 input rounded to float32
    counts one, a sum of K terms K: its worst order) on values of magnitude at most `magnitude`, it lies within
    operations * FLOAT32_U * magnitude of the exact value, to first order; so does any machine's float32 result. Two
    float32 computations of one value (another program, another batch): count the operations of both."""
    return dict(rtol=0, atol=operations * FLOAT32_U * magnitude)


def network_operations(fan_ins):
    """The rounded operations in sequence through one evaluation of an MLP whose layers have these fan-ins: each
    layer's K-term sums (K), its layer norm's mean and variance over K (2K) and a few elementwise operations (bias,
    normalisation, activation: 4)."""
    return sum(3 * k + 4 for k in fan_ins)


def numeric_grad(f, x, eps=1e-6):
    """d f / d x by central differences, f a NumPy (float64) function of the array x: within eps^2 |f'''| / 6 (about
    1e-12) plus 2^-53 |f| / eps (about 1e-10 |f|) of the exact derivative where f is smooth within eps of x."""
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (f(up) - f(down)) / (2 * eps)
    return grad


def sampler_config(batch_size, **fields):
    """A SamplerConfig for the sampler's own tests: every goal mixture drawn (actor goals uniform over the trajectory's
    future, value goals geometric, high goals uniform), gamma 0.99, unless `fields` say otherwise."""
    from utils.training import GoalMixture, SamplerConfig

    defaults = dict(gamma=0.99, actor_goals=GoalMixture(0.0, 1.0, 0.0, False), value_goals=GoalMixture(0.0, 1.0, 0.0, True),
                    high_goals=GoalMixture(0.0, 1.0, 0.0, False))
    return SamplerConfig(batch_size=batch_size, **{**defaults, **fields})


def bc_loss_of(agent, batch, params):
    """A BC agent's L_BC alone (its total loss without alpha * L_aux)."""
    from agents.base import bc_loss

    means, log_stds = agent.network(agent.actor_input(batch, agent.encode(batch, params)), name='actor', params=params)
    return bc_loss(means, log_stds, batch['actions'])


def aux_loss_of(agent, batch, params):
    """A BC agent's auxiliary loss L_aux alone."""
    return agent.representation_loss(batch, agent.encode(batch, params), params)[0]


# ---------------------------------------------------------------------------------------------
# Presets: those that between them take every code path, and each one's recorded per-step metrics.
# ---------------------------------------------------------------------------------------------


def branches(config):
    """The code paths a config selects: its enum and switch fields (strings, booleans), whether each count
    field is on (nstep > 0, ...), and whether gamma is 0 (one-step offsets). Float hyperparameters (a
    learning rate, alpha) change numbers, not paths."""
    def path(key, value):
        if isinstance(value, (bool, str, tuple)):
            return value
        if isinstance(value, int):
            return value > 0
        return value == 0.0 if key == 'discount' else None
    return {(config.agent_name, key, path(key, value)) for key, value in config.items() if key != 'preset'}


def covering_presets(names):
    """Few presets, greedily chosen, that between them take every code path any of `names` takes: each
    preset that adds a path nobody chosen takes is kept, in the registry's order."""
    from configs.presets import get_config

    covered, kept = set(), []
    for name in names:
        paths = branches(get_config(name))
        if not paths <= covered:
            covered |= paths
            kept.append(name)
    return kept


def distinct_presets():
    from configs.presets import PRESETS

    return covering_presets(list(PRESETS))


# Every agent's numbers stay what they were: the per-step metrics (losses, gradient norms, ...) of the first
# RECORDED_STEPS fused updates at seed 0 (main.py's streams: `sampling_key`) of a preset of each code path, trained in
# float64 (`train_in_float64`) and recorded in tests/data/agent_metrics.json. They are the same on every machine
# (RECORD_TOLERANCE says why), so record again only for a change that is meant to change the numbers, and say so in
# its commit:
#     JAX_PLATFORMS=cpu python -m tests.agents.test_regression --record --all
RECORD = os.path.join(ROOT, 'tests', 'data', 'agent_metrics.json')
RECORDED_STEPS = 10

# RECORD_TOLERANCE: what two machines may differ by in a recorded metric, and why a changed computation still fails.
#
# Two machines running one float64 program differ only in how they round: the order of the additions inside matrix
# products and reductions (vector width, blocking), fused multiply-adds, their exp/log/tanh code. Each such
# operation's result moves by a few units of u = 2^-53 (1.1e-16) of the values it combines (a sum of K terms by at
# most 2 K u of their absolute sum), and the recorded updates carry these moves forward with the training's own gain
# (Adam divides by each gradient's scale). The gain shows where rounding is visible, in float32 (u = 2^-24): on one
# AVX-512 machine, XLA limited to AVX2 or to SSE4.2 moved the float32 records by up to 1.6e-4 of their value, a gain
# of 2.6e3 u. In float64 the same gain moves a metric by 2.6e3 u = 3e-13 of its scale; measured, for every recorded
# preset under AVX-512, AVX2 and SSE4.2: the trained parameters differ by at most 3.6e-12 of their leaf's largest
# value after the recorded updates (1.1e-14 after the 200 of tests/agents/test_agents.py), and the metrics not at all
# once rounded to float32. FLOAT64_DRIFT = 1e-9 of a metric's scale (a gain of 9e6 u) bounds that 280 times over.
#
# The training loop rounds each metric to float32 for its rows (utils/training.py `scan_updates`): two float64 values
# that close round to the same float32 or to neighbours. So a recomputed value lies within one float32 unit in the last
# place of the recorded one (np.spacing(|value|), at most 2^-23 |value|), plus FLOAT64_DRIFT of the metric's largest
# magnitude over the recorded steps, for a value that passes near zero (a mean of signed logits, where cancellation
# makes the drift large against the value). A change of 1e-6 relative in a loss term moves that term's metric by at
# least 1e-6 / 2^-23 = 8.4 float32 units (7.4 after rounding), over 7 times the tolerance at the metric's largest value
# (1 unit + FLOAT64_DRIFT), and the tolerance is itself over 10^4 times what rounding on another machine can do.
FLOAT64_DRIFT = 1e-9


def record_tolerance(recorded):
    """How far a recomputed value of a metric may lie from each of its `recorded` per-step values (RECORD_TOLERANCE):
    one float32 unit in the last place of the value, plus FLOAT64_DRIFT of the metric's largest magnitude."""
    magnitude = np.abs(np.asarray(recorded, np.float64))
    return np.spacing(magnitude.astype(np.float32)).astype(np.float64) + FLOAT64_DRIFT * magnitude.max()


def sampling_key(seed=0):
    """The batch stream of the run seeded `seed`, as main.py derives it."""
    from utils.random_streams import stream_key

    return stream_key(seed, 'sampling')


def regression_config(preset):
    from configs.presets import get_config

    config = small(get_config(preset))
    if config.get('stage1_steps', 0) > 0:
        config.stage1_steps = RECORDED_STEPS // 2  # both stages of a two-stage hierarchy within the run
    return config


def as_float64(tree):
    """`tree` with every floating-point leaf cast to float64 (integers and PRNG keys as they are). Only under
    `jax.enable_x64(True)`, where float64 exists."""
    import jax.numpy as jnp

    return jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, jnp.float64) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, tree)


# The one place a float64 training run may narrow a value: the loop's float32 rows of each step's metrics.
METRIC_ROWS = re.compile(r'utils/training\.py:\d+:\d+ \(scan_updates\.<locals>\.one_step\b')


def float64_narrowings(jaxpr):
    """'primitive at file:line (function)' for each operation of `jaxpr`, or of a jaxpr inside it (scan, jit, cond),
    that turns a float64 value into a narrower float."""
    from jax.extend.core import jaxprs_in_params
    from jax.extend.source_info_util import summarize

    found = []
    for eqn in jaxpr.eqns:
        inner = list(jaxprs_in_params(eqn.params))
        if inner:  # what runs is inside
            found += [narrowing for sub in inner for narrowing in float64_narrowings(sub)]
            continue
        dtypes = lambda variables: [getattr(v.aval, 'dtype', None) for v in variables]  # noqa: E731
        if (np.dtype('float64') in dtypes(eqn.invars)
                and any(d is not None and np.issubdtype(d, np.floating) and d.itemsize < 8 for d in dtypes(eqn.outvars))):
            found.append(f'{eqn.primitive.name} at {summarize(eqn.source_info)}')
    return found


def train_in_float64(agent, data, num_steps, data_keys=None):
    """utils.training.train of `agent` for `num_steps` updates (on seed 0's batch stream, or `data_keys`: one seed's
    key, or N stacked seeds' keys for N stacked agents), every floating-point leaf of `agent` and `data` (parameters,
    optimizer states, targets, observations) cast to float64 and x64 on, so that every operation runs in float64: (the
    trained agent, in float64: use it under `jax.enable_x64(True)`, {metric: its per-step values}). The traced program
    is checked first: no operation narrows a float64 value but the loop's float32 metric rows, so float32 rounding,
    which differs between machines, reaches no number of the run."""
    from utils.training import train

    data_keys = sampling_key(0) if data_keys is None else data_keys
    with jax.enable_x64(True):
        args = (as_float64(agent), as_float64(data), data_keys, 0)
        traced = train.trace(*args, num_steps)
        narrowed = [n for n in float64_narrowings(traced.jaxpr.jaxpr) if not METRIC_ROWS.search(n)]
        assert not narrowed, ('the float64 run rounds to float32 (the records would then depend on the machine): '
                              + '; '.join(dict.fromkeys(narrowed)))
        agent, infos = traced.lower().compile()(*args)
        return agent, {name: np.asarray(values) for name, values in infos.items()}


def moved_metrics(infos, reference):
    """'metric at updates [...] is [...], against [...]' for each per-step metric of the float64 run `infos` further
    from the same metric of `reference` (recorded, or another float64 run of the same computation) than rounding on
    any machine can move it (`record_tolerance`); a NaN is always moved."""
    moved = []
    for key, values in reference.items():
        values, new = np.asarray(values, np.float64), np.asarray(infos[key], np.float64)
        off = ~(np.abs(new - values) <= record_tolerance(values))
        if off.any():
            moved.append(f'{key} at updates {np.flatnonzero(off).tolist()} is {new[off].tolist()}, against '
                         f'{values[off].tolist()}')
    return moved


def assert_float64_trees_agree(tree, reference):
    """Two float64 computations of the same agent (or any tree) that round differently: integer leaves equal, each
    floating-point leaf within FLOAT64_DRIFT of its largest magnitude (RECORD_TOLERANCE: rounding moves them less)."""
    paths, leaves = zip(*jax.tree_util.tree_leaves_with_path(tree))
    reference_paths, reference_leaves = zip(*jax.tree_util.tree_leaves_with_path(reference))
    assert paths == reference_paths
    for path, a, b in zip(paths, leaves, reference_leaves):
        a, b = np.asarray(a), np.asarray(b)
        if np.issubdtype(b.dtype, np.floating):
            assert np.all(np.abs(a - b) <= FLOAT64_DRIFT * np.max(np.abs(b))), jax.tree_util.keystr(path)
        else:
            np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))


def recorded_metrics():
    with open(RECORD) as f:
        return json.load(f)


def assert_recorded_metrics(preset, infos):
    """The first RECORDED_STEPS values of each per-step metric in `infos` (of a float64 run: `train_in_float64`) equal
    the recorded ones within `record_tolerance` (a preset added since the last recording has none yet:
    `python -m tests.agents.test_regression --record` adds it)."""
    recorded = recorded_metrics().get(preset)
    if recorded is None:
        return
    assert sorted(infos) == sorted(recorded), f'{preset}: metric names changed: {sorted(infos)}, recorded {sorted(recorded)}'
    moved = moved_metrics({key: np.asarray(values)[:RECORDED_STEPS] for key, values in infos.items()}, recorded)
    assert not moved, (
        f'{preset} against its record: ' + '; '.join(moved) + '. That is further than float64 rounding on any machine '
        'can move a metric (tests/helpers.py, RECORD_TOLERANCE): what the agent computes changed (or the installed jax is not the pinned '
        'one). If the change is meant (a loss changed on purpose), record again with JAX_PLATFORMS=cpu '
        '.venv/bin/python -m tests.agents.test_regression --record --all and say in the commit which numbers moved '
        'and why; else the change broke this agent.')


# ---------------------------------------------------------------------------------------------
# docs/adding_a_method.md's worked example.
# ---------------------------------------------------------------------------------------------

ADDING_A_METHOD = os.path.join(ROOT, 'docs', 'adding_a_method.md')
# The files one BYOL-gamma^a update reads from main.py's loop (its section "One update, file by file").
READING_PATH = ['agents/base.py', 'agents/byol_gamma.py', 'main.py', 'utils/networks.py', 'utils/training.py']
# Its sections that change the repository, as the reader applies them.
ENCODER_SETTING = 'Adding an encoder setting for every method'
SPR_EXAMPLE = 'Worked example 1: SPR-cos'
TD_VALUE_EXAMPLE = 'Worked example 2: TD-value'
KSTEP_EXAMPLE = 'Worked example 3: K-step SPR'


def guide_section(title):
    """The text of the section of docs/adding_a_method.md titled `title` (up to the next section)."""
    with open(ADDING_A_METHOD) as f:
        text = f.read()
    start = text.index(f'\n## {title}')
    end = text.find('\n## ', start + 1)
    return text[start:end if end > 0 else None]


def example_blocks(title):
    """{file the block belongs in: its code}, for the numbered blocks '**N. `path`**' of a worked example."""
    return dict(re.findall(r'\*\*\d+\. `([^`]+)`\*\*.*?```python\n(.*?)```', guide_section(title), flags=re.S))


def placed_blocks(title):
    """[(file, the place in it, code)] for the numbered blocks '**N. `path`, `place`**' of a guide section."""
    return re.findall(r'\*\*\d+\. `([^`]+)`, `([^`]+)`\*\*.*?```python\n(.*?)```', guide_section(title), flags=re.S)


def module_from_source(name, source, path):
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=path))
    module.__file__ = path
    exec(compile(source, path, 'exec'), module.__dict__)
    return module


def presets_source_with_entry(entry, presets_path=os.path.join(ROOT, 'configs', 'presets.py')):
    """configs/presets.py's source with `entry` added at the end of METHODS (the document: one entry in METHODS)."""
    with open(presets_path) as f:
        source = f.read()
    start = source.index('METHODS: Dict[str, Method] = {')
    end = source.index('\n}\n', start)
    return source[:end] + '\n' + entry.rstrip() + source[end:]


# ---------------------------------------------------------------------------------------------
# A stand-in for main.py in sweep tests.
# ---------------------------------------------------------------------------------------------

# Stands in for main.py: creates the run directory, then fails for seed 13, waits for SIGTERM when
# STUB_WAIT is set (exit 143 like main.py; with STUB_WAIT=once, only until a SIGTERM has stopped it once), stops at its "time limit" (exit 75, like main.py --time_limit)
# on its first attempt when STUB_TIME_LIMIT is set (on every attempt when it is `always`), and otherwise
# finishes (DONE). STUB_RECORD: a file to which it appends its GPU environment, whether the dataset files existed,
# and its start and end times.
STUB_MAIN = textwrap.dedent('''
    import json, os, signal, sys, time
    started = time.time()
    args = dict(a[2:].split('=', 1) for a in sys.argv[1:] if '=' in a)
    run_dir = os.path.join(args['save_dir'], args['run_group'], args['run_name'])
    os.makedirs(run_dir, exist_ok=True)
    print('stub started', run_dir, flush=True)
    if args['seed'] == '13':
        sys.exit('stub failure for seed 13')
    if os.environ.get('STUB_LOCK'):  # main.py's run-directory lock, its "in use" paragraph, and a chatty run
        import fcntl
        lock = open(os.path.join(run_dir, 'run.lock'), 'a')
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print('\\nError: Run directory ' + run_dir + ' is in use by another process (pid ...).', file=sys.stderr)
            sys.exit(1)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        open(os.path.join(run_dir, 'STARTED'), 'w').close()
        for step in range(10 ** 9):
            print('Finished: chunk', step, 'of the first sweep', flush=True)
            time.sleep(0.01)
    if os.environ.get('STUB_WAIT') and not (os.environ['STUB_WAIT'] == 'once' and os.path.exists(os.path.join(run_dir, 'TERMINATED'))):
        signal.signal(signal.SIGTERM, lambda *_: (open(os.path.join(run_dir, 'TERMINATED'), 'w').close(), sys.exit(143)))
        open(os.path.join(run_dir, 'STARTED'), 'w').close()
        while True:
            time.sleep(0.05)
    if os.environ.get('STUB_PROGRESS'):  # main.py's flags.json, then train.csv rows as training goes on
        pause = float(os.environ['STUB_PROGRESS'])
        with open(os.path.join(run_dir, 'flags.json'), 'w') as f:
            json.dump(dict(train_steps=int(args['train_steps'])), f)
        print(args['env_name'] + ': 1530/5500 (28%) in 0m30s, 51 ep/s', flush=True)  # a dataset's progress, not training's
        time.sleep(pause)  # loading and compiling: no row yet
        with open(os.path.join(run_dir, 'train.csv'), 'w') as f:
            f.write('step,training/total_loss\\n' + str(int(args['train_steps']) // 2) + ',0.5\\n999')  # 999: cut off
        time.sleep(2 * pause)
    if os.environ.get('STUB_TIME_LIMIT') and (os.environ['STUB_TIME_LIMIT'] == 'always'
                                              or not os.path.exists(os.path.join(run_dir, 'checkpoint'))):
        open(os.path.join(run_dir, 'checkpoint'), 'w').close()
        print('stub: time limit reached, checkpoint saved', flush=True)
        sys.exit(75)
    if os.environ.get('STUB_RECORD'):
        data = os.path.expanduser(args.get('dataset_dir', '~/.ogbench/data'))
        time.sleep(float(os.environ.get('STUB_SLEEP', '0')))
        record = dict(run=args['run_name'], start=started, end=time.time(),
                      data=[os.path.exists(os.path.join(data, args['env_name'] + s)) for s in ('.npz', '-val.npz')],
                      **{k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'XLA_PYTHON_CLIENT_MEM_FRACTION',
                                                         'XLA_PYTHON_CLIENT_PREALLOCATE', 'XLA_CLIENT_MEM_FRACTION')})
        with open(os.environ['STUB_RECORD'], 'a') as f:
            f.write(json.dumps(record) + '\\n')
    open(os.path.join(run_dir, 'DONE'), 'w').close()
''')


# ---------------------------------------------------------------------------------------------
# Agents of random parameters, and one update written out as OGBench's agents make it (test_agent_wiring.py,
# test_target_update.py).
# ---------------------------------------------------------------------------------------------


def random_like(shapes, rng, scale=0.5):
    """Random arrays shaped like `shapes` (a tree of jax.ShapeDtypeStructs): normal floats (std `scale`), zero
    integers and keys."""
    import jax.numpy as jnp

    def fill(s):
        if jnp.issubdtype(s.dtype, jnp.floating):
            return jnp.asarray(scale * rng.normal(size=s.shape), s.dtype)
        return jnp.zeros(s.shape, s.dtype)
    return jax.tree_util.tree_map(fill, shapes)


def random_agent(config, rng):
    """An agent of `config` for OBS_DIM-dimensional observations and ACTION_DIM-dimensional actions with random
    parameters and targets and a fresh Adam state: the agent's structure without compiling its initialisation."""
    from agents import get_agent_class
    from agents.base import TrainState

    agent_class = get_agent_class(config['agent_name'])
    ex_obs, ex_act = np.zeros((1, OBS_DIM), np.float32), np.zeros((1, ACTION_DIM), np.float32)
    agent = random_like(jax.eval_shape(lambda: agent_class.create(0, ex_obs, ex_act, config)), rng)
    is_state = lambda x: isinstance(x, TrainState)  # noqa: E731  (a hierarchy holds one per level)
    return jax.tree_util.tree_map(lambda x: x.replace(opt_state=x.tx.init(x.params)) if is_state(x) else x, agent,
                                  is_leaf=is_state)


def random_batch(config, rng):
    """A batch of the entries the sampler draws for `config`'s agent, each standard normal."""
    from utils.training import sample_batch

    data = toy_dataset(2, 10)
    return random_like(jax.eval_shape(lambda key: sample_batch(key, data, sampler_of(config)), jax.random.PRNGKey(0)),
                       rng, scale=1.0)


@jax.jit
def ogbench_update(agent, batch):
    """One update of a flat agent as OGBench's agents make it, written out here rather than through `Agent.update`:
    the gradient of the agent's loss at its weights theta_t (its own loss function, with the noise key of the agent's
    next update), one step of optax's Adam on it at the agent's learning rate, and each target network moved to
    tau * theta_t + (1 - tau) * target. Returns (params, opt_state, targets, metrics, next rng).

    It also returns what the update logs (the loss's metrics and the gradient norm): XLA fuses a program, and so
    rounds its sums, by what the program computes, so the same outputs are what makes the two programs the same
    operations, and their results comparable bit for bit."""
    import optax

    next_rng, noise_key = jax.random.split(agent.rng)
    params, tau = agent.network.params, agent.config.get('tau')
    grads, metrics = jax.grad(agent.loss_fn(batch, noise_key), has_aux=True)(params)
    metrics['grad_norm'] = optax.tree.norm(grads)
    updates, opt_state = optax.adam(agent.config['lr']).update(grads, agent.network.opt_state, params)
    targets = {name: jax.tree_util.tree_map(lambda online, old: tau * online + (1.0 - tau) * old, params[f'modules_{name}'], target)
               for name, target in agent.targets.items()}
    return optax.apply_updates(params, updates), opt_state, targets, metrics, next_rng


def assert_one_update(agent, batch, updated, metrics=None):
    """`updated, metrics = agent.update(batch)` is one update as OGBench's agents make it (`ogbench_update`): the
    parameters, Adam state, targets (from the online weights before the step), metrics (unless None) and RNG bit for
    bit, the step counter advanced once; and the targets are not those of the weights after the step (tau times one
    Adam step away)."""
    params, opt_state, targets, expected_metrics, next_rng = ogbench_update(agent, batch)
    assert int(updated.network.step) == int(agent.network.step) + 1
    assert_same_leaves(updated.network.params, params, 'parameters')
    assert_same_leaves(updated.network.opt_state, opt_state, 'Adam state')
    assert sorted(updated.targets) == sorted(targets)
    if targets:
        assert_same_leaves(updated.targets, targets, 'targets')
    if metrics is not None:
        assert_same_leaves(metrics, expected_metrics, 'metrics')
    np.testing.assert_array_equal(updated.rng, next_rng)
    tau = agent.config.get('tau')
    for name, old in agent.targets.items():
        post_step = jax.tree_util.tree_map(lambda online, old: tau * online + (1.0 - tau) * old,
                                           updated.network.params[f'modules_{name}'], old)
        assert not all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(post_step),
                                                            jax.tree_util.tree_leaves(updated.targets[name])))


def assert_same_leaves(got, expected, what=''):
    """The same tree structure, and every leaf bit for bit (`what` names the trees in the failure message)."""
    got_paths, got_leaves = zip(*jax.tree_util.tree_leaves_with_path(got))
    expected_paths, expected_leaves = zip(*jax.tree_util.tree_leaves_with_path(expected))
    assert got_paths == expected_paths, what
    for path, a, b in zip(got_paths, got_leaves, expected_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f'{what}{jax.tree_util.keystr(path)}')


# ---------------------------------------------------------------------------------------------
# Slurm's commands as stand-ins, for the Slurm backend's faults on a machine without Slurm.
# ---------------------------------------------------------------------------------------------

FAKE_JOB = '4242'  # the id the stand-in sbatch gives every submission
SCONTROL = '''#!{python}
import json, os, sys
calls_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'scontrol_calls')
calls = int(open(calls_file).read()) if os.path.exists(calls_file) else 0
open(calls_file, 'w').write(str(calls + 1))
answer = {answers!r}[min(calls, {count} - 1)]
if answer.get('touch'):
    open(answer['touch'], 'w').close()
sys.stdout.write(answer.get('out', ''))
sys.stderr.write(answer.get('err', ''))
sys.exit(answer.get('code', 0))
'''


def fake_slurm(folder, *answers):
    """The environment of a process that finds stand-ins for Slurm's commands in `folder` first on its PATH: sbatch
    takes any job as job FAKE_JOB and runs nothing, srun is there, and scontrol gives `answers[k]` at its k-th call
    (the last one from then on). An answer is a dict: `out`, `err`, `code` (its exit status), and `touch`, a file
    it creates first (a run's DONE, as if the job had run)."""
    folder.mkdir()
    (folder / 'sbatch').write_text(f'#!/bin/sh\necho "Submitted batch job {FAKE_JOB}"\n')
    (folder / 'srun').write_text('#!/bin/sh\nexit 1\n')
    (folder / 'scontrol').write_text(SCONTROL.format(python=sys.executable, answers=list(answers), count=len(answers)))
    for tool in ('sbatch', 'srun', 'scontrol'):
        (folder / tool).chmod(0o755)
    return dict(os.environ, PATH=f'{folder}{os.pathsep}{os.environ["PATH"]}')


def job_record(state):
    """scontrol's one-line record of the stand-in job, in `state`."""
    return dict(out=f'JobId={FAKE_JOB} JobName=s UserId=me(1) JobState={state} Reason=None Dependency=(null) '
                    f'Restarts=0 BatchFlag=1\n')
