"""What a `main.py` command line asks for, checked: `check_request(argv, get_agent_class) -> Request`, or a
named error.

`check_request` is a function of its arguments: it parses them into a fresh flag set, loads the agent config
file, looks the environment up, and judges every flag and config value, but it writes nothing, starts nothing
and opens no run directory. Every rejection main.py makes before long work is made here, so it can be tested,
and a sweep can check all of its commands before launching one, in milliseconds. The agent classes come in as
`get_agent_class` (`agents.get_agent_class`), since this library sits below the agents.
"""

import dataclasses
import functools
import hashlib
import json
import os
import warnings
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import flags
from ml_collections import config_flags

from runtime.loggers import effective_wandb_mode
from utils.config_checks import check_override_keys, check_types, load_config_file, validate_config
from utils.errors import ConfigError, StorageError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_AGENT = 'configs/presets.py:byol_gamma_a'
MAX_SEED = 2**31 - 1  # jax.random.PRNGKey keeps 32 bits: larger seeds would alias smaller ones
EVAL_MODES = ('auto', 'async', 'sync')


def define_flags(flag_values: flags.FlagValues, argv: Sequence[str]):
    """main.py's flags. Defaults follow the paper's protocol: 1M steps, batch 1024, 50 episodes per task."""
    fv = dict(flag_values=flag_values)
    flags.DEFINE_string('env_name', 'pointmaze-medium-stitch-v0', 'OGBench dataset name, e.g. antmaze-medium-stitch-v0.', **fv)
    flags.DEFINE_integer('seed', 0, 'Random seed (network init, sampling, evaluation).', **fv)
    flags.DEFINE_integer('num_seeds', 1, 'Train seeds seed..seed+N-1 in one process, vmapped (one run directory each).', **fv)
    flags.DEFINE_integer('train_steps', 1_000_000, 'Number of gradient steps.', **fv)
    flags.DEFINE_integer('log_interval', 5000, 'Steps between training-metric logs.', **fv)
    flags.DEFINE_integer('eval_interval', 100_000, 'Steps between evaluations (and one at the end).', **fv)
    flags.DEFINE_integer('eval_episodes', 50, 'Evaluation episodes per task.', **fv)
    flags.DEFINE_string('eval_tasks', '1,2,3,4,5', 'Comma-separated OGBench task ids to evaluate on.', **fv)
    flags.DEFINE_integer('eval_max_steps', 0, 'Episode step limit at evaluation; 0 = the environment time limit.', **fv)
    flags.DEFINE_integer('eval_workers', 0, 'Evaluation parallelism: threads stepping the episodes natively (point/ant/'
                         'humanoid mazes), else processes (this one and N-1 workers); 0 = one per usable CPU core, 1 = all '
                         'in this thread.', **fv)
    flags.DEFINE_enum('eval_mode', 'auto', list(EVAL_MODES), 'async: an evaluation runs on the CPU cores from a copy '
                      'of the parameters while training goes on; sync: training waits for it; auto: async when JAX runs '
                      'on an accelerator, sync on the CPU (where both would share the cores). Same numbers either way.', **fv)
    flags.DEFINE_integer('video_episodes', 0, 'Episodes per task rendered to wandb video (needs MUJOCO_GL=egl).', **fv)
    flags.DEFINE_integer('save_interval', 100_000, 'Steps between checkpoints (and one at the end).', **fv)
    flags.DEFINE_integer('steps_per_call', 500, 'Gradient steps fused into one jitted call (lax.scan).', **fv)
    flags.DEFINE_integer('time_limit', 0, 'Seconds after which the run checkpoints and exits with status 75, for '
                         '--resume to continue (a job scheduler\'s time limit); 0 = none.', **fv)
    flags.DEFINE_string('save_dir', 'runs', 'Root directory of run directories.', **fv)
    flags.DEFINE_string('run_group', 'default', 'Group (sub-directory and wandb group) of this run.', **fv)
    flags.DEFINE_string('run_name', '', 'Run directory name; default <preset>_<env>_sd<seed>, where <preset> gains '
                        '-<hash of the config> when --agent.<key> overrides change it (see docs/logging.md).', **fv)
    flags.DEFINE_string('dataset_dir', '~/.ogbench/data', 'Directory of OGBench dataset files.', **fv)
    flags.DEFINE_bool('download', True, "Try OGBench's download when a dataset file is missing.", **fv)
    flags.DEFINE_bool('generate_dataset', False, "When the dataset files are missing, generate them with this project's "
                      "generator (datagen/) instead of downloading. Only pointmaze is generated unasked; generated "
                      "antmaze, scene and visual data are NOT OGBench's.", **fv)
    flags.DEFINE_enum('wandb_mode', 'online', ['online', 'offline', 'disabled'],
                      'wandb mode (online falls back to offline without an API key).', **fv)
    flags.DEFINE_string('wandb_project', 'byol-gamma', 'wandb project.', **fv)
    flags.DEFINE_bool('resume', False, 'Continue from the checkpoint in the run directory if there is one (with the '
                      'settings it was started with; --train_steps may change).', **fv)
    config_flags.DEFINE_config_file(
        'agent', os.path.join(REPO_ROOT, DEFAULT_AGENT),
        'Agent config: a preset, configs/presets.py:<name> (every method of the paper; README lists them), or an agent '
        'file, agents/<name>.py. Any field is overridden with --agent.<key>=<value>.',
        flag_values=flag_values, lock_config=True, sys_argv=list(argv))




def _flag_defaults():
    flag_values = flags.FlagValues()
    define_flags(flag_values, ['main.py'])
    return {name: flag_values[name].default for name in sorted(flag_values) if name != 'agent'}


FLAG_DEFAULTS = _flag_defaults()  # flags.json's keys, with their default values
RUN_FLAGS = tuple(FLAG_DEFAULTS)

# --resume continues a run only with the settings it was started with. These flags may differ: they change
# neither what is computed nor what an evaluation number means (paths, how missing data are obtained -- the data
# themselves are compared through dataset.json --, logging, checkpoint interval, wandb, parallelism, scheduling).
# --train_steps may change but not fall below the checkpoint's step. Every other flag (env, seed, the evaluation
# protocol, and any flag added later) and every agent config value must match.
RESUME_MAY_DIFFER = frozenset({
    'save_dir', 'run_group', 'run_name', 'dataset_dir', 'download', 'generate_dataset',
    'log_interval', 'video_episodes', 'save_interval', 'wandb_mode', 'wandb_project',
    'num_seeds', 'eval_workers', 'eval_mode', 'steps_per_call', 'time_limit', 'resume',
})


class HelpRequested(Exception):
    """`--help`: the text to print (exit status 0)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """What the command line asks for, checked. Flag values read as attributes: `request.train_steps`."""

    flags: Mapping[str, object]  # every flag of RUN_FLAGS and its value
    config: object  # the agent's ml_collections ConfigDict, overrides applied
    config_defaults: Mapping[str, object]  # the config file's own values, before --agent.<key> overrides
    agent_class: type
    sampler_config: object  # utils.sampler.SamplerConfig
    seeds: Tuple[int, ...]
    eval_tasks: Tuple[int, ...]
    run_names: Tuple[str, ...]  # one run directory name per seed

    def __getattr__(self, name):
        try:
            return self.__dict__['flags'][name]
        except KeyError:
            raise AttributeError(name) from None

    def seed_flags(self, seed: int) -> Dict[str, object]:
        """flags.json of seed `seed`'s run: its seed and resolved run name."""
        return dict(self.flags, seed=seed, run_name=self.run_names[self.seeds.index(seed)])

    def config_record(self) -> Dict[str, object]:
        """config.json's content: the agent config, plus the sampler it implies under 'sampler'."""
        return plain(dict(self.config.to_dict(), sampler=dataclasses.asdict(self.sampler_config)))

    def eval_asynchronously(self, backend: str) -> bool:
        return self.eval_mode == 'async' or (self.eval_mode == 'auto' and backend != 'cpu')


def plain(value):
    """`value` as JSON gives it back (tuples become lists), for comparing with a recorded file."""
    return json.loads(json.dumps(value, default=str))


def check_request(argv: Sequence[str], get_agent_class: Callable[[str], type]) -> Request:
    """The Request of `argv` (main.py's argv, program name first), or ConfigError / StorageError naming the
    problem and its fix; HelpRequested for --help. `get_agent_class(agent_name)` finds an agent's class (or
    raises ConfigError)."""
    argv = resolve_agent_path(list(argv))
    if any(arg in ('-h', '--help', '--helpshort', '--helpfull', '-?') for arg in argv[1:]):
        flag_values = flags.FlagValues()
        define_flags(flag_values, argv[:1])
        raise HelpRequested(f'python main.py [--flag=value ...]: train and evaluate one agent on one OGBench dataset.\n'
                            f'{flag_values.get_help()}')
    check_override_keys(argv[1:], os.path.join(REPO_ROOT, DEFAULT_AGENT))
    flag_values = flags.FlagValues()
    define_flags(flag_values, argv)
    try:
        rest = flag_values(argv)
    except flags.Error as e:
        raise ConfigError(f'{e}. `python main.py --help` lists every flag.') from None
    if len(rest) > 1:
        raise ConfigError(f'Unexpected argument(s) {" ".join(rest[1:])!r}: every setting is a flag, --name=value.')
    values = {name: flag_values[name].value for name in RUN_FLAGS}
    eval_tasks = check_flags(values)
    values['wandb_mode'] = effective_wandb_mode(values['wandb_mode'])
    config = flag_values.agent
    defaults = load_config_file(config_flags.get_config_filename(flag_values['agent']))
    check_types(config, defaults)
    from utils.sampler import SamplerConfig

    agent_class = get_agent_class(config.agent_name)
    validate_config(config, getattr(agent_class, 'CONFIG_RULES', None))
    task_count, observation_bytes = environment_facts(values['env_name'])
    check_eval_tasks(values, eval_tasks, task_count)
    check_evaluation_memory(values, len(eval_tasks), observation_bytes)
    save_dir = os.path.expanduser(values['save_dir'])
    if os.path.exists(save_dir) and not os.path.isdir(save_dir):
        raise StorageError(f'--save_dir={values["save_dir"]} is a file, not a directory: run directories cannot go '
                           f'there (nothing was written). Pass a directory (it is created if missing).')
    seeds = tuple(values['seed'] + k for k in range(values['num_seeds']))
    config_defaults = plain(defaults.to_dict())
    return Request(values, config, config_defaults, agent_class, SamplerConfig.from_config(config), seeds, eval_tasks,
                   run_names(values, config, config_defaults, seeds))


def resolve_agent_path(argv):
    """`--agent=<relative path>` that does not exist from the working directory but does in this checkout is read
    from the checkout, so main.py runs alike from any directory (README's commands name agents/... and configs/...)."""
    resolved = []
    for arg in argv:
        if arg.startswith('--agent='):
            path, colon, rest = arg[len('--agent='):].partition(':')
            candidate = os.path.join(REPO_ROOT, path)
            if path and not os.path.isabs(path) and not os.path.exists(path) and os.path.exists(candidate):
                arg = f'--agent={candidate}{colon}{rest}'
        resolved.append(arg)
    return resolved


def check_flags(values) -> Tuple[int, ...]:
    """Every flag in its range; the parsed --eval_tasks."""
    for name in ('num_seeds', 'train_steps', 'log_interval', 'eval_interval', 'eval_episodes', 'save_interval', 'steps_per_call'):
        if values[name] <= 0:
            raise ConfigError(f'--{name} must be positive, got {values[name]}.')
    for name, meaning in (('eval_workers', 'one per usable core'), ('eval_max_steps', "the environment's time limit"),
                          ('video_episodes', 'none'), ('time_limit', 'none')):
        if values[name] < 0:
            raise ConfigError(f'--{name} must be 0 ({meaning}) or positive, got {values[name]}.')
    if not 0 <= values['seed'] <= MAX_SEED - values['num_seeds'] + 1:
        raise ConfigError(f'--seed must lie in 0..{MAX_SEED - values["num_seeds"] + 1} (with --num_seeds='
                          f'{values["num_seeds"]}; JAX keys keep 32 bits), got {values["seed"]}.')
    for name in ('run_group', 'run_name'):
        value = values[name]
        if os.sep in value or value in ('.', '..') or (name == 'run_group' and not value):
            raise ConfigError(f'--{name} must be one directory name (no "{os.sep}", not "." or ".."), got {value!r}.')
    try:
        tasks = tuple(int(t) for t in values['eval_tasks'].split(','))
    except ValueError:
        raise ConfigError(f'--eval_tasks must be comma-separated integers like 1,2,3,4,5, got {values["eval_tasks"]!r}.') from None
    if len(set(tasks)) != len(tasks):
        raise ConfigError(f'--eval_tasks lists a task twice: {values["eval_tasks"]!r}.')
    return tasks


def check_eval_tasks(values, tasks: Tuple[int, ...], count: int):
    bad = [t for t in tasks if not 1 <= t <= count]
    if bad:
        raise ConfigError(f'--eval_tasks={values["eval_tasks"]}: {values["env_name"]} has tasks 1..{count}, so '
                          f'{", ".join(map(str, bad))} {"is" if len(bad) == 1 else "are"} out of range.')


@functools.lru_cache(maxsize=None)
def environment_facts(env_name: str) -> Tuple[int, int]:
    """(how many evaluation tasks, bytes of one observation) of a dataset's environment, made once per process;
    ConfigError (with "Did you mean ...") for an unknown one."""
    import gymnasium

    from utils.datasets import env_id_for, num_tasks

    env_id = env_id_for(env_name)
    with warnings.catch_warnings():  # gymnasium's notes on the env's own spaces concern nobody here
        warnings.simplefilter('ignore')
        tasks = num_tasks(env_name)
        if env_id.startswith('visual-'):
            return tasks, 64 * 64 * 3  # OGBench's rendered frames, uint8
        env = gymnasium.make(env_id, disable_env_checker=True)
        observation_bytes = 8 * int(np.prod(env.observation_space.shape))
        env.close()
    return tasks, observation_bytes


def check_evaluation_memory(values, num_tasks_evaluated: int, observation_bytes: int):
    """ConfigError if one evaluation of this request would not fit in the host's available memory."""
    from utils.datasets import _host_available_bytes
    from utils.evaluation.episodes import check_memory

    check_memory(values['num_seeds'], num_tasks_evaluated, values['eval_episodes'], observation_bytes, _host_available_bytes())


def config_label(config, config_defaults: Optional[Mapping] = None) -> str:
    """The method part of a default run name: the preset's name (else the agent's), followed by -<6 hex digits of
    the config's hash> when the config is not the preset's (or agent file's) own, so that two configs never share
    a run directory by default."""
    values = plain({k: v for k, v in config.to_dict().items() if k != 'preset'})
    own = None if config_defaults is None else {k: v for k, v in config_defaults.items() if k != 'preset'}
    name = config.get('preset') or config.agent_name
    if values == own:
        return name
    digest = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).hexdigest()[:6]
    return f'{name}-{digest}'


def run_names(values, config, config_defaults, seeds) -> Tuple[str, ...]:
    if values['run_name']:
        return tuple(values['run_name'] if len(seeds) == 1 else f'{values["run_name"]}_sd{seed}' for seed in seeds)
    label = config_label(config, config_defaults)
    return tuple(f'{label}_{values["env_name"]}_sd{seed}' for seed in seeds)
