"""N seeds in one process: seed k of a vmapped run equals a single run with that seed."""

import os
import subprocess

import jax
import numpy as np
import pytest

from configs.presets import get_config as preset_config
from tests.helpers import (MAIN_PROCESS, assert_float64_trees_agree, make_agent, moved_metrics, small, toy_dataset,
                           train_in_float64)
from utils.training import stack_trees

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize('preset', ['gcbc', 'byol_gamma_a', 'tdsr_a'])
def test_vmapped_seeds_match_single_runs(preset):
    """In float64 (tests/helpers.py `train_in_float64`), where the vmapped and the single programs differ only in how
    they round, by less than the records' tolerance (RECORD_TOLERANCE)."""
    data = toy_dataset()
    config = small(preset_config(preset))
    seeds = [3, 4]
    keys = [jax.random.PRNGKey(100 + s) for s in seeds]
    singles = [train_in_float64(make_agent(config, seed), data, 50, key) for seed, key in zip(seeds, keys)]
    agents, infos = train_in_float64(stack_trees([make_agent(config, s) for s in seeds]), data, 50, np.stack(keys))
    with jax.enable_x64(True):
        for k, (agent, info) in enumerate(singles):
            assert not moved_metrics({key: values[k] for key, values in infos.items()}, info)
            assert_float64_trees_agree(jax.tree_util.tree_map(lambda x: x[k], agents), agent)
    # Seeds really differ from each other.
    assert not np.allclose(infos['total_loss'][0], infos['total_loss'][1])


def test_main_num_seeds_writes_one_run_dir_per_seed(tmp_path, pointmaze_data_dir):
    env = 'pointmaze-medium-stitch-v0'
    common = [*MAIN_PROCESS, f'--env_name={env}', '--agent=agents/gcbc.py', f'--dataset_dir={pointmaze_data_dir}', '--nodownload', '--wandb_mode=disabled',
              '--agent.actor_hidden_dims=(32,32)', '--agent.batch_size=32', '--train_steps=60', '--log_interval=20',
              '--eval_interval=60', '--save_interval=60', '--eval_episodes=2', '--eval_max_steps=5', '--run_name=r']
    for extra in ([f'--save_dir={tmp_path / "multi"}', '--num_seeds=2', '--seed=7'], [f'--save_dir={tmp_path / "single"}', '--seed=8']):
        result = subprocess.run(common + extra, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    run = 'r_sd{}'
    for seed in (7, 8):
        run_dir = tmp_path / 'multi' / 'default' / run.format(seed)
        assert (run_dir / 'DONE').exists() and (run_dir / 'checkpoint.msgpack').exists()
        # Both seeds' episodes ran in one evaluation batch; each seed logs its own evaluation.
        evaluation = np.genfromtxt(run_dir / 'eval.csv', delimiter=',', names=True)
        assert int(evaluation['step']) == 60 and float(evaluation['evaluationoverall_length']) == 5.0
    multi = np.genfromtxt(tmp_path / 'multi' / 'default' / run.format(8) / 'train.csv', delimiter=',', names=True)
    single = np.genfromtxt(tmp_path / 'single' / 'default' / 'r' / 'train.csv', delimiter=',', names=True)
    # float32 programs (main.py's), vmapped and single, which round differently; GCBC's updates carry that with little
    # gain: seed 8's rows differed by at most 8e-8 of their value (one float32 unit, under AVX-512 and SSE4.2 alike),
    # while seed 7's rows differ from seed 8's by 3e-4 of their value or more. 1e-5 lies between, 100 times the first.
    for name in multi.dtype.names:
        if not name.startswith('time'):
            np.testing.assert_allclose(multi[name], single[name], rtol=1e-5, atol=0, err_msg=name)
