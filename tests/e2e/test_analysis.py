"""The paper's analyses (scripts/horizon.py, rep_heatmap.py, sp_correlation.py) on a tiny run directory, their maths
on hand-made inputs, and their errors on bad inputs."""

import csv
import json
import os
import re

import numpy as np
import pytest

from experiments import analysis
from scripts import horizon, rep_heatmap, sp_correlation
from utils.evaluation import evaluate, evaluation_metrics, make_env, make_eval_envs, one_env
from tests.helpers import analysis_run, pointmaze_oracle_policy

pytestmark = pytest.mark.xdist_group('test_analysis')  # its module fixtures are built once, in one worker

ENV = 'pointmaze-medium-stitch-v0'
# Shortest-path lengths of pointmaze-medium's evaluation tasks 1..5 (from their start to their goal cell).
MEDIUM_TASK_LENGTHS = (10, 10, 6, 10, 8)


@pytest.fixture(scope='module')
def dataset_dir(pointmaze_data_dir):
    return pointmaze_data_dir


@pytest.fixture(scope='module')
def tiny_run(dataset_dir, tmp_path_factory):
    """A BYOL-gamma^a run directory with the files the analyses read (flags.json and config.json as main.py writes
    them for its request, the checkpoint of step 100), its agent as initialised: the scripts' outputs are checked
    here, not what a trained agent gives (tests/e2e/test_docs.py runs the scripts on runs main.py trained)."""
    return analysis_run(str(tmp_path_factory.mktemp('runs')), dataset_dir)


@pytest.fixture(scope='module')
def medium_env():
    return make_env(ENV)


@pytest.fixture(scope='module')
def medium_oracle(medium_env):
    return analysis.maze_oracle(medium_env)


def test_evaluate_accepts_task_info():
    envs = make_eval_envs(ENV, 3)
    oracle = pointmaze_oracle_policy(one_env(envs))
    info = dict(init_ij=(1, 1), goal_ij=(2, 2))  # two cells apart
    first_calls = []

    def recording_oracle(observations, goals):
        if not first_calls:
            first_calls.append((observations.copy(), goals.copy()))
        return oracle(observations, goals)

    episodes = evaluate(recording_oracle, envs, task_ids=[info, 3], episodes_per_task=3, max_steps=200)
    maze_oracle = analysis.maze_oracle(one_env(envs))
    observations, goals = (rows[:3] for rows in first_calls[0])  # the batch's first task: rows 0-2
    assert all(maze_oracle.cell(xy) == (1, 1) for xy in observations)
    assert all(maze_oracle.cell(xy) == (2, 2) for xy in goals)
    assert [(record.task, record.success) for record in episodes[:3]] == [('info0', 1.0)] * 3
    metrics = evaluation_metrics(episodes)
    assert metrics['evaluation/taskinfo0_success'] == 1.0
    # An integer task next to a dict task runs exactly as it does alone.
    alone = evaluate(oracle, envs, task_ids=[3], episodes_per_task=3, max_steps=200)
    for a, b in zip(episodes[3:], alone, strict=True):
        assert a.task == b.task == 3
        np.testing.assert_array_equal(a.final_observation, b.final_observation)
    assert metrics['evaluation/task3_success'] == evaluation_metrics(alone)['evaluation/task3_success']


def test_horizon_goals_lie_on_the_bfs_path(medium_env, medium_oracle):
    for task, length in zip(medium_env.unwrapped.task_infos, MEDIUM_TASK_LENGTHS):
        start, goal = tuple(task['init_ij']), tuple(task['goal_ij'])
        goals = horizon.horizon_goals(medium_oracle, start, goal)
        assert [d for d, _ in goals] == list(range(1, length + 1))
        assert goals[-1][1] == goal
        previous = start
        for distance, cell in goals:
            assert medium_oracle.maze_map[cell] == 0
            assert medium_oracle.distances[start][cell] == distance  # `distance` cells from the start...
            assert medium_oracle.distances[goal][cell] == length - distance  # ... and on a shortest path to the goal
            assert abs(cell[0] - previous[0]) + abs(cell[1] - previous[1]) == 1
            previous = cell
        assert horizon.horizon_goals(medium_oracle, start, goal, max_distance=4) == goals[:4]


def test_buckets_and_stitching_line(medium_env, medium_oracle):
    assert [horizon.bucket_of(d, 2) for d in (1, 2, 3, 4, 5)] == [(1, 2), (1, 2), (3, 4), (3, 4), (5, 6)]
    goal_results = [dict(task=t, distance=d, success=s, episodes=4)
                    for t, d, s in [(1, 1, 1.0), (2, 1, 0.5), (1, 2, 0.5), (1, 5, 0.25), (2, 6, 0.0)]]
    buckets = horizon.aggregate(goal_results, bucket_size=2)
    assert [(b['low'], b['high'], b['success'], b['tasks']) for b in buckets] == [(1, 2, 2 / 3, 2), (5, 6, 0.125, 2)]

    figure = horizon.plot_horizon(medium_env, medium_oracle, {1: [(1, 1), (2, 1)]}, buckets, 4, 'test')
    bar_axes = figure.axes[1]
    (stitch_line,) = [line for line in bar_axes.lines if line.get_color() == 'red']
    np.testing.assert_array_equal(stitch_line.get_xdata(), [4, 4])
    # Bar (lo, hi) lies within x in [lo - 1, hi]: the bars of distances <= 4 end before the line, the others after.
    spans = [(bar.get_x(), bar.get_x() + bar.get_width()) for bar in bar_axes.patches]
    assert len(spans) == 2 and 0 <= spans[0][0] < spans[0][1] <= 2 and 4 <= spans[1][0] < spans[1][1] <= 6


def test_horizon_script(tiny_run, tmp_path):
    summary = horizon.main(['--run_dir', tiny_run, '--episodes=2', '--max_steps=5', f'--out_dir={tmp_path}'])
    for name in ('horizon.png', 'horizon.csv', 'horizon.json'):
        assert (tmp_path / name).stat().st_size > 0
    assert summary['step'] == 100
    assert len(summary['goals']) == sum(MEDIUM_TASK_LENGTHS)
    assert [b['low'] for b in summary['buckets']] == list(range(1, max(MEDIUM_TASK_LENGTHS) + 1))
    assert [b['tasks'] for b in summary['buckets']] == [sum(length >= d for length in MEDIUM_TASK_LENGTHS)
                                                         for d in range(1, 11)]
    assert all(0.0 <= b['success'] <= 1.0 and b['episodes'] == 2 * b['goals'] for b in summary['buckets'])
    with open(tmp_path / 'horizon.json') as f:
        assert json.load(f)['stitch_threshold'] == 4
    with open(tmp_path / 'horizon.csv', newline='') as f:
        assert len(list(csv.DictReader(f))) == 10


def test_rankdata_and_correlations():
    np.testing.assert_array_equal(sp_correlation.rankdata([10, 30, 20, 20, 10, 40]), [1.5, 5, 3.5, 3.5, 1.5, 6])
    rng = np.random.default_rng(0)
    x = rng.normal(size=500)
    # float64 correlations of 500 values round within 2000 u = 4.4e-13 (u = 2^-53): far inside pytest.approx's rel 1e-6.
    assert sp_correlation.spearman(x, np.exp(3 * x)) == pytest.approx(1.0)  # monotone, far from linear
    assert sp_correlation.pearson(x, np.exp(3 * x)) < 0.9
    y = x + rng.normal(size=500)
    assert sp_correlation.pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert np.isnan(sp_correlation.pearson(x, np.ones(500)))


def _dataset_states(dataset_dir, env):
    from utils.datasets import load_dataset

    data = load_dataset(os.path.join(dataset_dir, f'{ENV}.npz'), env.observation_space, env.action_space)
    return dict(data, xy=data['observations'].astype(np.float64))


def test_correlation_of_handmade_representations(dataset_dir, medium_env, medium_oracle):
    states = _dataset_states(dataset_dir, medium_env)
    max_distance = medium_oracle.distances.max()

    def bfs_representations(observations, actions, goals):
        # cos(prediction, goal representation) = 1 - 2 d / max_distance: a representation that is the BFS distance.
        distance = analysis.cell_distances(medium_oracle, analysis.cells_of(medium_oracle, observations),
                                           analysis.cells_of(medium_oracle, goals))
        cosine = 1 - 2 * distance / max_distance
        prediction = np.stack([cosine, np.sqrt(1 - cosine**2)], axis=-1)
        return prediction, np.tile([1.0, 0.0], (len(observations), 1))

    def random_representations(observations, actions, goals):
        rng = np.random.default_rng(len(observations))
        return rng.normal(size=(len(observations), 8)), rng.normal(size=(len(observations), 8))

    rng = np.random.default_rng(0)
    negated, distances, dropped = sp_correlation.pair_samples(bfs_representations, medium_oracle, states, 10_000, rng)
    assert dropped == 0 and len(distances) == 10_000
    assert len(np.unique(distances)) > 8  # the pairs span the maze
    # 10,000 pairs in float64: their correlations round within 4e4 u = 4.4e-12, far inside 1e-9.
    assert sp_correlation.pearson(negated, distances) == pytest.approx(1.0, abs=1e-9)
    assert sp_correlation.spearman(negated, distances) == pytest.approx(1.0, abs=1e-9)
    negated, distances, _ = sp_correlation.pair_samples(random_representations, medium_oracle, states, 10_000, rng)
    assert abs(sp_correlation.pearson(negated, distances)) < 0.05
    assert abs(sp_correlation.spearman(negated, distances)) < 0.05


def test_rep_heatmap_script(tiny_run, tmp_path):
    result = rep_heatmap.main(['--run_dir', tiny_run, '--max_states=5000', f'--out_dir={tmp_path}'])
    assert result['goal_ij'] == (6, 6)  # the goal of task 1
    assert os.path.getsize(result['png']) > 0 and result['png'].endswith('rep_heatmap_6_6.png')
    assert result['similarity'].shape == (5000,)
    assert np.all(np.abs(result['similarity']) <= 1 + 1e-6)
    assert np.std(result['similarity']) > 0
    result = rep_heatmap.main(['--run_dir', tiny_run, '--goal_ij=1,1', '--max_states=500', f'--out_dir={tmp_path}'])
    assert result['png'].endswith('rep_heatmap_1_1.png')
    with pytest.raises(SystemExit, match=r'Cell \(0, 0\) is not a free cell'):
        rep_heatmap.main(['--run_dir', tiny_run, '--goal_ij=0,0', f'--out_dir={tmp_path}'])


def test_sp_correlation_script(tiny_run, tmp_path, capsys):
    # The same run twice stands in for two seeds of one method.
    result = sp_correlation.main(['--run_dir', tiny_run, tiny_run, '--num_pairs=2000', f'--out_dir={tmp_path}'])
    for name in ('sp_correlation.png', 'sp_correlation.csv', 'sp_correlation.json'):
        assert (tmp_path / name).stat().st_size > 0
    runs, (method,) = result['runs'], result['methods']
    assert len(runs) == 2 and method['method'] == 'byol_gamma_a' and method['runs'] == 2
    for run in runs:
        assert -1 <= run['pearson'] <= 1 and -1 <= run['spearman'] <= 1
        assert run['pairs'] + run['dropped_pairs'] == 2000 and run['step'] == 100
        assert np.all((run['negated_cosine'] >= -1 - 1e-6) & (run['negated_cosine'] <= 1 + 1e-6))
    assert runs[0]['pearson'] == runs[1]['pearson']  # same pairs for every run of a dataset
    assert method['pearson'] == dict(mean=runs[0]['pearson'], std=0.0)
    assert 'Per method' in capsys.readouterr().out


def _gcbc_run_dir(path, dataset_dir, medium_env):
    """A GCBC run directory as main.py leaves it, written directly: GCBC has no representation to analyse."""
    import jax

    from agents.gcbc import GCBCAgent, get_config
    from runtime.checkpoints import save_checkpoint

    os.makedirs(path)
    config = get_config()
    # All-zero weights: only the checkpoint's structure matters here, and tracing `create` skips compiling its init.
    shapes = jax.eval_shape(lambda: GCBCAgent.create(0, analysis.example_batch(medium_env.observation_space),
                                                     analysis.example_batch(medium_env.action_space), config))
    save_checkpoint(path, jax.tree_util.tree_map(lambda leaf: np.zeros(leaf.shape, leaf.dtype), shapes), 0)
    from main import Flags
    from runtime.request import flag_defaults, plain

    with open(os.path.join(path, 'flags.json'), 'w') as f:
        json.dump(plain(dict(flag_defaults(Flags), env_name=ENV, seed=0, dataset_dir=dataset_dir, run_name='gcbc')), f)
    with open(os.path.join(path, 'config.json'), 'w') as f:
        json.dump(dict(config.to_dict(), sampler={}), f)
    return path


def test_bad_inputs(tmp_path, dataset_dir, medium_env):
    gcbc_dir = _gcbc_run_dir(str(tmp_path / 'gcbc'), dataset_dir, medium_env)
    assert analysis.load_run(gcbc_dir).method == 'gcbc'  # restores fine: only its representation is missing
    with pytest.raises(SystemExit, match='no learned representation'):
        rep_heatmap.main(['--run_dir', gcbc_dir, f'--out_dir={tmp_path}'])
    with pytest.raises(SystemExit, match='no learned representation'):
        sp_correlation.main(['--run_dir', gcbc_dir, f'--out_dir={tmp_path}'])

    os.remove(os.path.join(gcbc_dir, 'checkpoint.msgpack'))
    with pytest.raises(SystemExit, match='lacks checkpoint.msgpack'):
        horizon.main(['--run_dir', gcbc_dir])
    with pytest.raises(SystemExit, match='does not exist'):
        rep_heatmap.main(['--run_dir', str(tmp_path / 'missing')])
    with pytest.raises(SystemExit):  # argparse: the threshold must fall between two bars
        horizon.main(['--run_dir', gcbc_dir, '--bucket_size=3'])


def test_help_examples_name_a_run_directory_main_makes_and_write_under_runs():
    """Each analysis's --help example reads the run directory main.py makes without flags (runs/default/<its run
    name>), and any output folder it names lies under runs/, which .gitignore keeps out of the repository."""
    from main import request_of

    made = 'runs/default/' + request_of(['main.py']).run_names[0]
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           '.gitignore')) as f:
        assert 'runs/' in f.read().split()
    for script in (horizon, rep_heatmap, sp_correlation):
        examples = [line.strip() for line in script.__doc__.splitlines() if line.strip().startswith('python scripts/')]
        named = [path for line in examples for path in re.findall(r'--run_dir=(runs/default/\S+)', line)]
        assert named == [made], (script.__name__, named, made)
        assert all(path.startswith('runs/') for line in examples for path in re.findall(r'--out_dir=(\S+)', line))


def test_ctrl_c_to_an_analysis_is_interrupted_not_a_traceback(tiny_run, tmp_path):
    """Ctrl-C to a table, figure or analysis script ended in a traceback: it ends in one line, exit 130, having written
    nothing. (The analysis is stopped once it works: past its imports, when JAX has started its threads.)"""
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import ROOT, wait_until

    def threads(pid):
        with open(f'/proc/{pid}/status') as f:
            return int(next(line for line in f if line.startswith('Threads:')).split()[1])

    process = subprocess.Popen([sys.executable, os.path.join(ROOT, 'scripts', 'horizon.py'), f'--run_dir={tiny_run}',
                                '--episodes=50', f'--out_dir={tmp_path / "out"}'], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_until(lambda: threads(process.pid) >= 5, process)  # two while importing
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and 'Traceback' not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == 'Interrupted (Ctrl-C): stopped; no file was left half-written.'
    assert not (tmp_path / 'out').exists()
