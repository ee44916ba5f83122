"""main.py's request check, in-process: every rejection it makes before long work (one paragraph naming the problem
and the fix, nothing written), --help, run names, and what a Request is."""

import dataclasses
import os

import pytest

from main import Flags, request_of
from runtime.request import HelpRequested, Request, flag_defaults, resume_may_differ
from utils.errors import ConfigError

BAD_INPUTS = [
    (['--env_name=pointmaze-huge-stitch-v0'], 'Unknown environment'),
    (['--agent.agent_name=nope'], 'Valid agents: byol_gamma'),
    (['--agent.not_a_key=1'], "Unknown config key 'not_a_key'"),
    (['--agent.actor_hidden_dims=abc'], "'actor_hidden_dims' must be a tuple of int"),
    (['--agent.lr=abc'], 'could not convert'),
    (['--agent.lr=nan'], '--agent.lr=0.0003'),
    (['--agent=configs/presets.py:nope'], 'Valid presets'),
    (['--agent=agents/missing.py'], 'not found'),
    (['--eval_tasks=1,x'], '--eval_tasks must be'),
    (['--train_steps=0'], '--train_steps must be positive'),
    (['--train_steps=abc'], "--train_steps=abc: invalid literal for int() with base 10: 'abc'"),
    (['--not_a_flag=1'], "Unknown command line flag 'not_a_flag'"),
    (['--eval_tasks=9'], 'has tasks 1..5, so 9 is out of range'),
    (['--eval_max_steps=-1'], '--eval_max_steps must be 0'),
    (['--time_limit=-5'], '--time_limit must be 0'),
    (['--eval_mode=later'], 'eval_mode'),
    (['--seed=2147483647', '--num_seeds=2'], '--seed must lie in 0..2147483646'),
    (['--run_name=a/b'], "The run directory name 'a/b', made from --run_name='a/b', is not one directory name"),
    (['--run_group=..'], "The run group '..', made from --run_group='..', is not one directory name"),
    (['--run_group='], "The run group '', made from --run_group='', is not one directory name (it is empty)"),
    (['--agent.preset=../../x'], "made from the preset '../../x' of the --agent config, is not one directory name"),
    (['--env_name=pointmaze-medum-stitch-v0'], 'Did you mean pointmaze-medium-stitch-v0'),
    # A field the chosen settings never read: a sweep over it would train one network under several names.
    (['--agent=configs/presets.py:gcbc', '--agent.num_ensemble=5'], 'agent.num_ensemble=5 is read only when use_phi=True'),
    (['--agent=configs/presets.py:byol_nstep3_a', '--agent.discount=0.9', '--agent.value_p_curgoal=0.5',
      '--agent.value_p_trajgoal=0.5'], "agent.discount=0.9 is read only when a goal mixture draws geometric trajectory "
     "offsets (<mixture>_geom_sample=True and <mixture>_p_trajgoal > 0); agent.value_p_curgoal=0.5 is read only when "
     "nstep=0"),
    (['--agent=configs/presets.py:byol_gamma_l2', '--agent.ce_eps=0'], "agent.ce_eps=0.0 is read only when loss_type='ce'"),
    (['--agent=configs/presets.py:qrl', '--agent.discount=0.95'], 'agent.discount=0.95 is read only when a goal mixture'),
    # Environments OGBench has, datasets it does not publish (before: accepted, then "download it from OGBench").
    (['--env_name=pointmaze-medium-play-v0'], "Unknown dataset 'pointmaze-medium-play-v0': OGBench's environment "
     'pointmaze-medium-v0 has no play dataset. Did you mean pointmaze-medium-navigate-v0 or pointmaze-medium-stitch-v0?'),
    (['--env_name=antmaze-giant-explore-v0'], 'Did you mean antmaze-giant-navigate-v0 or antmaze-giant-stitch-v0?'),
    (['--env_name=humanoidmaze-teleport-navigate-v0'], 'has no navigate dataset (OGBench publishes no dataset of it)'),
    (['--env_name=cube-octuple-play-v0'], "Unknown dataset 'cube-octuple-play-v0'"),
    (['--env_name=visual-pointmaze-medium-stitch-v0'], "Unknown environment 'visual-pointmaze-medium-stitch-v0'"),
    (['--eval_episodes=1000000000'], 'does not fit in host memory'),
    (['stray'], "Unexpected argument(s) 'stray'"),
    (['--eval_max_steps=100000000'], 'is 100,000x the episode length of pointmaze-medium-stitch-v0 (1000 steps'),
]


@pytest.mark.parametrize('extra,message', BAD_INPUTS)
def test_bad_input_is_rejected_by_the_request_check(extra, message, tmp_path):
    with pytest.raises(ConfigError) as error:
        request_of(['main.py', f'--save_dir={tmp_path}', *extra])
    assert message in str(error.value) and '\n' not in str(error.value)
    assert not any(tmp_path.iterdir()), 'a rejected request writes nothing'


def test_every_dataset_ogbench_publishes_is_accepted():
    """All 85 (OGBench's README: its dataset table; the ogbench package holds no list), each to its environment."""
    from utils.datasets import env_id_for, ogbench_datasets

    published = ogbench_datasets()
    assert len(published) == 85
    for name in ('visual-antmaze-teleport-explore-v0', 'scene-noisy-v0', 'visual-puzzle-4x6-play-v0',
                 'humanoidmaze-giant-stitch-v0', 'pointmaze-teleport-navigate-v0', 'antsoccer-medium-stitch-v0',
                 'antsoccer-arena-navigate-v0', 'cube-quadruple-noisy-v0', 'powderworld-hard-play-v0',
                 'visual-humanoidmaze-large-navigate-v0', 'antmaze-giant-stitch-v0'):
        assert name in published
    for name, env_id in published.items():
        assert env_id_for(name) == env_id


def test_help_lists_every_flag():
    with pytest.raises(HelpRequested) as help_text:
        request_of(['main.py', '--help'])
    for flag in ('--env_name', '--agent', '--eval_mode', '--time_limit', '--resume', '--run_name'):
        assert flag in str(help_text.value)


def test_default_run_names_tell_configs_apart(tmp_path):
    """The run directory names the preset, and a config changed by overrides gets its hash: two methods, or one
    method at two values, never share a directory by default; equal configs do."""
    def names(*extra):
        return request_of(['main.py', f'--save_dir={tmp_path}', *extra]).run_names

    assert names() == ('byol_gamma_a_pointmaze-medium-stitch-v0_sd0',)
    assert names('--agent=configs/presets.py:gcbc') == ('gcbc_pointmaze-medium-stitch-v0_sd0',)
    assert names('--agent=configs/presets.py:gcbc_phi', '--seed=3') == ('gcbc_phi_pointmaze-medium-stitch-v0_sd3',)
    assert names('--agent=agents/gcbc.py') == names('--agent=configs/presets.py:gcbc')  # the same config
    alpha6 = names('--agent.alpha=6')[0]
    assert alpha6.startswith('byol_gamma_a-') and alpha6 != names('--agent.alpha=40')[0] == names('--agent.alpha=40.0')[0]
    assert names('--agent.alpha=1') == names()  # an override to the preset's own value changes nothing
    assert names('--num_seeds=2', '--run_name=x') == ('x_sd0', 'x_sd1')
    assert names('--run_name=x') == ('x',)


def test_agent_files_are_found_from_any_directory(tmp_path):
    request = request_of(['main.py', '--agent=agents/gcbc.py', f'--save_dir={tmp_path}'])
    assert request.config.agent_name == 'gcbc'
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert request_of(['main.py', '--agent=configs/presets.py:tra']).config.agent_name == 'tra'
        with pytest.raises(ConfigError, match="'agents/nope.py' not found"):
            request_of(['main.py', '--agent=agents/nope.py'])
    finally:
        os.chdir(cwd)




def test_the_request_is_a_frozen_dataclass_of_declared_fields(tmp_path, monkeypatch):
    """Flags are read as `request.flags.<name>`, fields main.py declares; nothing is served by attribute lookup."""
    monkeypatch.delenv('WANDB_API_KEY', raising=False)
    monkeypatch.delenv('WANDB_MODE', raising=False)  # the suite's WANDB_MODE=disabled would decide the mode
    monkeypatch.setenv('HOME', str(tmp_path))  # no ~/.netrc: online falls back to offline
    request = request_of(['main.py', f'--save_dir={tmp_path}', '--num_seeds=2', '--seed=3'])
    assert dataclasses.is_dataclass(request) and not hasattr(Request, '__getattr__')
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.flags = None
    assert isinstance(request.flags, Flags) and request.flags.train_steps == 1_000_000
    assert set(flag_defaults(Flags)) == {field.name for field in dataclasses.fields(Flags)}
    assert {'save_dir', 'resume', 'num_seeds'} <= resume_may_differ(Flags) and 'env_name' not in resume_may_differ(Flags)
    # flags.json records what the run uses: its seed, its resolved name, the wandb mode it logs in, its numeric mode.
    recorded = request.seed_flags(4)
    assert (recorded['seed'], recorded['run_name'], recorded['wandb_mode'], recorded['numeric_mode']) == (
        4, 'byol_gamma_a_pointmaze-medium-stitch-v0_sd4', 'offline', 'float32')
    assert not any(tmp_path.iterdir())


def test_the_agent_file_is_read_once_by_one_reader(tmp_path):
    """The --agent file runs once per process, through utils.config_checks.load_config_file: whatever goes wrong in it
    is that reader's one paragraph (tests/e2e/test_faults_env.py tries each way)."""
    marks = tmp_path / 'marks'
    config_file = tmp_path / 'my_gcbc.py'
    config_file.write_text(f'open({str(marks)!r}, "a").write("read\\n")\nfrom agents.gcbc import get_config\n')
    request = request_of(['main.py', f'--agent={config_file}', '--agent.batch_size=16', f'--save_dir={tmp_path}'])
    assert request.config.batch_size == 16 and request.config_defaults['batch_size'] == 1024
    assert marks.read_text() == 'read\n'


def test_a_module_of_agents_that_fails_to_import_is_one_paragraph(tmp_path, monkeypatch):
    """Every module of agents/ is imported to find the agent classes: one that fails is named as an --agent file
    would be, with the line, not a traceback."""
    import agents

    (tmp_path / 'broken_agent_probe.py').write_text('x = 1\nimport no_such_module_here\n')
    monkeypatch.setattr(agents, '__path__', [str(tmp_path)])
    with pytest.raises(ConfigError, match=r'broken_agent_probe\.py raised ModuleNotFoundError at line 2 while it was '
                                          r"read: No module named 'no_such_module_here'\. Fix it, or move it out of agents/"):
        agents.get_agent_class('gcbc')
