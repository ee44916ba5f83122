"""What a `main.py` command line asks for, parsed and checked, or a named error.

main.py declares its flags (a frozen dataclass, `main.Flags`, each field a `flag(default, help)`, and the agent config
flag --agent) and reads its command line in two steps: `parse_command_line` parses argv into a fresh flag set (nothing
global), and `check_request` judges every flag and config value, looking the environment up, and returns the
`Request`. Neither writes, starts or opens anything. Every rejection main.py makes before long work is made here, so
it can be tested, and a sweep can check all of its commands before launching one. The agent classes come in as
`get_agent_class` (`agents.get_agent_class`), since this machinery sits below the agents.
"""

import dataclasses
import functools
import hashlib
import json
import os
import warnings
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import flags

from runtime.errors import StorageError
from runtime.loggers import effective_wandb_mode
from runtime.run_dir import SET_ASIDE_SUFFIXES, name_too_long, not_one_name
from utils.config_checks import (check_override_keys, check_types, check_unread_settings, load_config_file,
                                 validate_config)
from utils.errors import ConfigError
from utils.render_backend import unavailable_message
from utils.training import SamplerConfig

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEED = 2**31 - 1  # jax.random.PRNGKey keeps 32 bits: larger seeds would alias smaller ones
# An --eval_max_steps beyond this many times the environment's own episode length is refused: an episode that never
# reaches its goal would run that long.
MAX_EPISODE_LENGTH_FACTOR = 10


def flag(default, help: str, choices: Sequence[str] = (), resume_may_differ: bool = False):
    """A field of a flags dataclass: its default, its --help text, its allowed values (an enum), and whether
    --resume may change it. Flags that may differ change neither what is computed nor what an evaluation number
    means (paths, how missing data are obtained -- the data themselves are compared through dataset.json --,
    logging, checkpoint interval, wandb, parallelism, scheduling); every other flag must match on --resume."""
    return dataclasses.field(default=default, metadata=dict(help=help, choices=tuple(choices),
                                                            resume_may_differ=resume_may_differ))


def flag_defaults(flags_class) -> Dict[str, object]:
    """{name: default} of every flag: flags.json's keys."""
    return {field.name: field.default for field in dataclasses.fields(flags_class)}


def resume_may_differ(flags_class) -> frozenset:
    return frozenset(field.name for field in dataclasses.fields(flags_class) if field.metadata['resume_may_differ'])


def define_dataclass_flags(flags_class, flag_values: flags.FlagValues):
    """The absl flags of `flags_class`'s fields, in `flag_values`."""
    definers = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, str: flags.DEFINE_string}
    for field in dataclasses.fields(flags_class):
        help, choices = field.metadata['help'], field.metadata['choices']
        if choices:
            flags.DEFINE_enum(field.name, field.default, list(choices), help, flag_values=flag_values)
        else:
            definers[type(field.default)](field.name, field.default, help, flag_values=flag_values)


class HelpRequested(Exception):
    """`--help`: the text to print (exit status 0)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """What the command line asks for, checked."""

    flags: Any  # the flags dataclass (main.Flags) with every value checked; wandb_mode is the one that will be used
    config: Any  # the agent config main.py read from --agent (an ml_collections ConfigDict, overrides applied)
    config_defaults: Mapping[str, object]  # the config file's own values, before --agent.<key> overrides
    agent_class: type
    sampler: SamplerConfig  # what the sampler draws for this agent and config (utils/training.batch_config)
    seeds: Tuple[int, ...]
    eval_tasks: Tuple[int, ...]
    run_names: Tuple[str, ...]  # one run directory name per seed

    def seed_flags(self, seed: int) -> Dict[str, object]:
        """flags.json of seed `seed`'s run: every flag, its seed and resolved run name, and JAX's numeric mode."""
        return dict(dataclasses.asdict(self.flags), seed=seed, run_name=self.run_names[self.seeds.index(seed)],
                    numeric_mode=numeric_mode())

    def config_record(self) -> Dict[str, object]:
        """config.json's content: the agent config, plus the sampler it implies under 'sampler'."""
        return plain(dict(self.config.to_dict(), sampler=dataclasses.asdict(self.sampler)))

    def eval_asynchronously(self, backend: str) -> bool:
        mode = self.flags.eval_mode
        return mode == 'async' or (mode == 'auto' and backend != 'cpu')


def plain(value):
    """`value` as JSON gives it back (tuples become lists), for comparing with a recorded file."""
    return json.loads(json.dumps(value, default=str))


def numeric_mode() -> str:
    """'float64' when JAX_ENABLE_X64 (jax_enable_x64) is on, else 'float32': a run's numbers depend on it."""
    import jax

    return 'float64' if jax.config.jax_enable_x64 else 'float32'


PRINT_CONFIG = '--print_config'


def parse_command_line(argv: Sequence[str], define_flags: Callable, default_agent: str,
                       describe_config: Callable) -> Tuple[flags.FlagValues, str]:
    """`argv` (main.py's, program name first) parsed into a fresh flag set, and the --agent it names (`default_agent`
    when it names none). The --agent file is read here, once (utils.config_checks.load_config_file: what can go wrong
    in it is one paragraph); `define_flags(flag_values, argv, config)` (main.define_flags) defines the flags, the agent
    config with its --agent.<key> overrides among them. ConfigError for an unknown flag, --agent.<key> or a stray
    argument; HelpRequested for --help, and for --print_config with `describe_config(config, its file)`
    (agents.config_listing: every field, its value and its comment)."""
    try:  # a --flagfile's lines read where it stands, so that its --agent and overrides are checked as any others
        argv = flags.FlagValues().read_flags_from_files(list(argv), force_gnu=False)
    except flags.Error as e:
        raise ConfigError(f'--flagfile: {str(e).removeprefix("ERROR:: ")}.') from None
    argv = resolve_agent_path(argv)
    flag_values = flags.FlagValues()
    if any(arg in ('-h', '--help', '--helpshort', '--helpfull', '-?') for arg in argv[1:]):
        define_flags(flag_values, argv[:1], load_config_file(default_agent))
        raise HelpRequested(f'python main.py [--flag=value ...]: train and evaluate one agent on one OGBench dataset.\n'
                            f'{PRINT_CONFIG}: list every field of the --agent config (overrides applied) with its value '
                            f'and what it sets, then exit.\n{flag_values.get_help()}')
    print_config = PRINT_CONFIG in argv[1:]
    spec, argv = agent_spec([arg for arg in argv if arg != PRINT_CONFIG], default_agent)
    config = load_config_file(spec)
    check_override_keys(argv[1:], spec, config)
    define_flags(flag_values, argv, config)
    try:
        rest = flag_values(argv)
    except flags.Error as e:
        raise ConfigError(f'{e}. `python main.py --help` lists every flag.') from None
    if len(rest) > 1:
        raise ConfigError(f'Unexpected argument(s) {" ".join(rest[1:])!r}: every setting is a flag, --name=value.')
    if print_config:
        raise HelpRequested(describe_config(flag_values.agent, spec))
    return flag_values, spec


def check_request(flags_class, flag_values: flags.FlagValues, spec: str,
                  get_agent_class: Callable[[str], type]) -> Request:
    """The Request of the parsed flags `flag_values` of the flags dataclass `flags_class`, the agent config among them
    read from --agent=`spec` (overrides applied), or ConfigError / StorageError naming the problem and its fix.
    `get_agent_class(agent_name)` finds an agent's class (or raises ConfigError)."""
    config = flag_values.agent
    values = {name: flag_values[name].value for name in flag_defaults(flags_class)}
    eval_tasks = check_flags(values)
    check_folders(values, flag_defaults(flags_class))
    check_rendering(values)
    values['wandb_mode'] = effective_wandb_mode(values['wandb_mode'], flag_given=bool(flag_values['wandb_mode'].present))
    defaults = load_config_file(spec)
    check_types(config, defaults)
    agent_class = get_agent_class(config.agent_name)
    validate_config(config, agent_class)
    check_unread_settings(config, defaults, agent_class)
    task_count, observation_bytes, episode_length = environment_facts(values['env_name'])
    check_eval_tasks(values, eval_tasks, task_count)
    check_episode_length(values, episode_length)
    check_evaluation_memory(values, len(eval_tasks), observation_bytes)
    save_dir = os.path.expanduser(values['save_dir'])
    if os.path.exists(save_dir) and not os.path.isdir(save_dir):
        raise StorageError(f'--save_dir={values["save_dir"]} is a file, not a directory: run directories cannot go '
                           f'there (nothing was written). Pass a directory (it is created if missing).')
    seeds = tuple(values['seed'] + k for k in range(values['num_seeds']))
    config_defaults = plain(defaults.to_dict())
    names = run_names(values, config, config_defaults, seeds)
    check_run_names(values, config, save_dir, names)
    return Request(flags_class(**values), config, config_defaults, agent_class,
                   SamplerConfig.for_agent(agent_class, config), seeds, eval_tasks, names)


def check_jax_backend():
    """ConfigError if JAX cannot start the backend JAX_PLATFORMS asks for (jax raises a bare AssertionError). Called
    by main.py itself, not by the request check, which a sweep's launcher also runs and which must not open GPUs."""
    import jax

    platforms = os.environ.get('JAX_PLATFORMS', '').strip()
    try:
        jax.default_backend()
    except Exception as e:  # AssertionError or RuntimeError, by jax version
        wants_gpu = any(p in platforms.lower() for p in ('cuda', 'gpu', 'rocm'))
        fix = (f'this JAX (jaxlib {jax.__version__}) has no GPU backend: install JAX\'s CUDA build (README.md, '
               f'"Install": pip install "jax[cuda12]==..." in the same environment), or unset JAX_PLATFORMS to run on '
               f'the CPU' if wants_gpu else 'unset JAX_PLATFORMS, or name a platform this JAX has (cpu)')
        raise ConfigError(f'JAX cannot start the backend JAX_PLATFORMS={platforms or "(unset)"} asks for '
                          f'({type(e).__name__}{": " + str(e) if str(e) else ""}): {fix}.') from None


def check_rendering(values):
    """ConfigError if the run renders (videos, pixel observations) and MUJOCO_GL names a backend this machine lacks."""
    problem = unavailable_message()
    renders = [what for what, applies in (
        (f'--video_episodes={values["video_episodes"]} renders evaluation videos', values['video_episodes'] > 0),
        (f'{values["env_name"]} observes rendered frames', values['env_name'].startswith('visual-'))) if applies]
    if problem and renders:
        raise ConfigError(f'{"; ".join(renders)}, but {problem}')


def agent_spec(argv, default_agent: str) -> Tuple[str, list]:
    """(the --agent of `argv`, or `default_agent`; `argv` without it). ConfigError if --agent is given more than once:
    its --agent.<key> overrides would apply to which config?"""
    values, rest, args = [], [], iter(argv)
    for arg in args:
        if arg.startswith('--agent='):
            values.append(arg.partition('=')[2])
        elif arg == '--agent':
            values.append(next(args, ''))
        else:
            rest.append(arg)
    if len(values) > 1:
        shown = ', then '.join(os.path.relpath(v, REPO_ROOT) if os.path.isabs(v) else v for v in values)
        raise ConfigError(f'--agent is given {len(values)} times ({shown}): a run has one agent config. Keep one '
                          f'--agent and change its fields with --agent.<key>=<value>.')
    return (values[0] if values else default_agent), rest


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
    try:
        tasks = tuple(int(t) for t in values['eval_tasks'].split(','))
    except ValueError:
        raise ConfigError(f'--eval_tasks must be comma-separated integers like 1,2,3,4,5, got {values["eval_tasks"]!r}.') from None
    if len(set(tasks)) != len(tasks):
        raise ConfigError(f'--eval_tasks lists a task twice: {values["eval_tasks"]!r}.')
    return tasks


def check_folders(values, defaults):
    """ConfigError for an empty --save_dir or --dataset_dir: joined to a file name, '' is the working directory, where
    the run (or the data) would land without the user having named it."""
    for name, what in (('save_dir', 'the run directories'), ('dataset_dir', 'the dataset files')):
        if name in values and not values[name]:
            raise ConfigError(f'--{name} is empty, so {what} would be written into the working directory '
                              f'({os.getcwd()}), a folder nobody named. Nothing was written. Pass the folder, e.g. '
                              f'--{name}={defaults[name]} (the default; --{name}=. names the working directory).')


def check_eval_tasks(values, tasks: Tuple[int, ...], count: int):
    bad = [t for t in tasks if not 1 <= t <= count]
    if bad:
        raise ConfigError(f'--eval_tasks={values["eval_tasks"]}: {values["env_name"]} has tasks 1..{count}, so '
                          f'{", ".join(map(str, bad))} {"is" if len(bad) == 1 else "are"} out of range.')


@functools.lru_cache(maxsize=None)
def environment_facts(env_name: str) -> Tuple[int, int, int]:
    """(how many evaluation tasks, bytes of one observation, episode length) of a dataset's environment, made once
    per process; ConfigError (with "Did you mean ...") for an unknown one."""
    import gymnasium

    from utils.datasets import env_id_for, num_tasks

    env_id = env_id_for(env_name)
    with warnings.catch_warnings():  # gymnasium's notes on the env's own spaces concern nobody here
        warnings.simplefilter('ignore')
        tasks = num_tasks(env_name)
        episode_length = gymnasium.spec(env_id).max_episode_steps
        if env_id.startswith('visual-'):
            return tasks, 64 * 64 * 3, episode_length  # OGBench's rendered frames, uint8
        env = gymnasium.make(env_id, disable_env_checker=True)
        observation_bytes = 8 * int(np.prod(env.observation_space.shape))
        env.close()
    return tasks, observation_bytes, episode_length


def check_episode_length(values, episode_length: int):
    """ConfigError for an --eval_max_steps far beyond the environment's own episode length."""
    limit = MAX_EPISODE_LENGTH_FACTOR * episode_length
    if values['eval_max_steps'] > limit:
        raise ConfigError(
            f'--eval_max_steps={values["eval_max_steps"]} is {values["eval_max_steps"] / episode_length:,.0f}x the episode '
            f'length of {values["env_name"]} ({episode_length} steps, the horizon OGBench evaluates at): an episode that '
            f'never reaches its goal would run that long. Pass 0 for the environment\'s own length, or at most {limit} '
            f'({MAX_EPISODE_LENGTH_FACTOR}x).'
        )


def check_evaluation_memory(values, num_tasks_evaluated: int, observation_bytes: int):
    """ConfigError if one evaluation of this request would not fit in the host's available memory."""
    from runtime.memory import check_evaluation_fits, host_available_bytes

    check_evaluation_fits(values['num_seeds'], num_tasks_evaluated, values['eval_episodes'], observation_bytes,
                          host_available_bytes())


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


def check_run_names(values, config, save_dir: str, names: Sequence[str]):
    """ConfigError unless the run group and every run directory name are each one directory name, so that every
    file of the run lands inside <save_dir>/<run_group>/; StorageError for a name the file system cannot hold. A
    default name is made from the config's preset label (or agent name), which a config file sets: it is checked
    here, where names are made, whatever made it."""
    plain_name = 'one directory name (letters, digits, "_", "-", ".")'
    if values['run_name']:
        origin, fix = f'--run_name={values["run_name"]!r}', f'pass a --run_name that is {plain_name}'
    else:
        field = 'preset' if config.get('preset') else 'agent_name'
        origin = f'the {field} {config.get(field)!r} of the --agent config'
        fix = f'set the config\'s {field} to {plain_name}, or pass --run_name'
    group = values['run_group']
    entries = [('run group', group, save_dir, f'--run_group={group!r}', f'pass a --run_group that is {plain_name}')]
    entries += [('run directory name', name, os.path.join(save_dir, group), origin, fix) for name in names]
    for what, name, directory, origin, fix in entries:
        problem = not_one_name(name)
        if problem:
            raise ConfigError(f'The {what} {name!r}, made from {origin}, is not one directory name ({problem}): the '
                              f'run would be written outside {directory}. Nothing was written; {fix}.')
        if name.endswith(SET_ASIDE_SUFFIXES):
            raise ConfigError(f'The {what} {name!r}, made from {origin}, ends in {name[name.rindex("."):]}, which marks a '
                              f'folder set aside (the results tables skip it). Nothing was written; use another name.')
        problem = name_too_long(name, directory, what, 'pass a shorter --run_name (or --run_group)')
        if problem:
            raise StorageError(problem)


def run_names(values, config, config_defaults, seeds) -> Tuple[str, ...]:
    if values['run_name']:
        return tuple(values['run_name'] if len(seeds) == 1 else f'{values["run_name"]}_sd{seed}' for seed in seeds)
    label = config_label(config, config_defaults)
    return tuple(f'{label}_{values["env_name"]}_sd{seed}' for seed in seeds)
