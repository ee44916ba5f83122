"""Sweeps: a grid of main.py runs (methods x environments x hyperparameters x seeds), launched locally
or on Slurm, skipping finished runs and resuming interrupted ones.

A method is a preset plus agent overrides, written `PRESET[:KEY=V1,V2,...]...`, e.g.
`byol_gamma_a:alpha=1,6,40,100:tau=0.99`. A key with several values is a grid axis; `alpha` and every
axis appear in the run name, fixed single-valued keys do not, unless two settings of one preset differ only in
them (`--method=byol_gamma_a:tau=0.99 --method=byol_gamma_a:tau=0.9`), which then name them:

    <sweep>/<preset>_<env>[_a<alpha>][_<key><value>...]_sd<seed>

Every command passes --resume, so relaunching the same sweep continues killed, preempted or
time-limited runs from their checkpoints and skips finished ones (those with a DONE file whose command would change
nothing; a longer --train_steps extends them, and other changes are refused before launching). With
`seeds_per_job > 1` consecutive pending seeds of one setting share a process (main.py --num_seeds),
which writes the same per-seed directories.

Before launching, `prepare_datasets` obtains each dataset once (main.py's own `ensure_dataset`, with the
dataset flags passed through), so jobs never race to generate one. The local backend runs jobs on
`workers` slots, optionally pinned to GPUs (`gpus`, `runs_per_gpu`: CUDA_VISIBLE_DEVICES and a JAX memory
fraction per slot); a job that main.py stops at its --time_limit (exit 75) or by SIGTERM (143) is
resumable, not failed. On Slurm (submitit) both are requeued with the same command; the launcher waits on
submitit's job states (asked of scontrol) and reads each outcome from the job's runs and log, never from submitit's
result pickles.
"""

import dataclasses
import datetime
import itertools
import math
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from runtime.exits import EXIT_INTERRUPTED, EXIT_PREEMPTED, EXIT_TIME_LIMIT
from runtime import atomic_io
from runtime.errors import StorageError
from runtime.run_dir import FLAGS_FILE, SET_ASIDE_SUFFIXES, TRAIN_LOG, RunDir
from runtime.subprocesses import set_up_then_exec
from utils.errors import ConfigError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MAIN = os.path.join(REPO_ROOT, 'main.py')
# Absolute, like the main.py path: a printed command works pasted into any directory.
PRESETS_FILE = os.path.join(REPO_ROOT, 'configs', 'presets.py')

# main.py exit statuses after which the run has a checkpoint of its last step and `--resume` continues it.
RESUMABLE_EXIT_CODES = {EXIT_TIME_LIMIT: 'stopped at its --time_limit', EXIT_PREEMPTED: 'stopped by SIGTERM',
                        EXIT_INTERRUPTED: 'stopped by SIGINT'}
# A preset name: letters, digits, '_' and '-' (fb_lr1e-5), not starting with '-'; run names stay path-safe.
PRESET_NAME = r'[A-Za-z0-9_][A-Za-z0-9_-]*'
# main.py flags the launcher sets itself; passing them as extra flags would break naming or resuming.
LAUNCHER_FLAGS = ('env_name', 'agent', 'seed', 'num_seeds', 'save_dir', 'run_group', 'run_name', 'resume')
NAME_ABBREVIATIONS = {'alpha': 'a'}


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """A preset and its agent overrides: key -> candidate values (several values = a grid axis)."""

    preset: str
    overrides: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()

    def named_keys(self) -> List[str]:
        return [key for key, values in self.overrides if key == 'alpha' or len(values) > 1]

    def settings(self) -> List[Dict[str, str]]:
        """Every combination of override values, in spec order."""
        keys = [key for key, _ in self.overrides]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(values for _, values in self.overrides))]


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One (method setting, environment, seed): one main.py run directory."""

    sweep: str
    preset: str
    env: str
    seed: int
    overrides: Tuple[Tuple[str, str], ...]  # Agent overrides of this run, in spec order.
    base_name: str  # The run name without the seed suffix.
    save_dir: str

    @property
    def name(self) -> str:
        return f'{self.base_name}_sd{self.seed}'

    @property
    def run_dir(self) -> str:
        return RunDir.at(self.save_dir, self.sweep, self.name).path

    def is_finished(self) -> bool:
        return RunDir(self.run_dir).is_done()


@dataclasses.dataclass(frozen=True)
class Job:
    """One main.py process: one run, or several consecutive seeds of one setting (--num_seeds)."""

    runs: Tuple[SweepRun, ...]
    command: Tuple[str, ...]

    @property
    def name(self) -> str:
        first, last = self.runs[0], self.runs[-1]
        return first.name if len(self.runs) == 1 else f'{first.base_name}_sd{first.seed}-{last.seed}'

    @property
    def log_path(self) -> str:
        first = self.runs[0]
        return os.path.join(first.save_dir, first.sweep, self.name + '.log')

    def shell_command(self) -> str:
        return shlex.join(self.command)


def split_top_level(text: str, separator: str) -> List[str]:
    """Split on `separator` outside parentheses, so tuple values like (256,256) stay whole."""
    parts, depth, current = [], 0, ''
    for char in text:
        depth += {'(': 1, ')': -1}.get(char, 0)
        if char == separator and depth == 0:
            parts.append(current)
            current = ''
        else:
            current += char
    parts.append(current)
    return parts


def parse_method(spec: str) -> MethodSpec:
    """`byol_gamma_a:alpha=1,6:tau=0.99` -> MethodSpec('byol_gamma_a', (('alpha', ('1', '6')), ('tau', ('0.99',))))."""
    preset, *fields = split_top_level(spec.strip(), ':')
    if not re.fullmatch(PRESET_NAME, preset):
        raise ConfigError(f'Method spec {spec!r} must start with a preset name, e.g. byol_gamma_a:alpha=1,6,40,100.')
    overrides, seen = [], set()
    for field in fields:
        key, equals, values_text = field.partition('=')
        values = tuple(v.strip() for v in split_top_level(values_text, ','))
        if not equals or not re.fullmatch(r'[A-Za-z0-9_]+', key) or not all(values):
            raise ConfigError(
                f'Bad override {field!r} in method spec {spec!r}: write KEY=VALUE or KEY=V1,V2,... '
                f'(e.g. {preset}:alpha=1,6,40,100:tau=0.99).'
            )
        if key in seen:
            raise ConfigError(f'Key {key!r} appears twice in method spec {spec!r}.')
        seen.add(key)
        overrides.append((key, values))
    return MethodSpec(preset, tuple(overrides))


# The most seeds --seeds may name: far beyond any seed count a table reports (a larger range is a slip, and would make
# that many runs before anything could check them).
MAX_SEEDS = 10_000


def parse_seeds(text: str) -> List[int]:
    """`0-9` or `0,1,2` or `0-3,7` -> sorted unique seeds, each a seed main.py takes (JAX keeps 32 bits of it), at most
    MAX_SEEDS of them."""
    from runtime.request import MAX_SEED

    ranges = []
    for part in text.split(','):
        match = re.fullmatch(r'\s*(\d+)\s*(?:-\s*(\d+)\s*)?', part)
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise ConfigError(f'Bad --seeds {text!r}: use a range like 0-9, a list like 0,1,2, or both (0-3,7).')
        ranges.append((int(match.group(1)), int(match.group(2) or match.group(1))))
    if max(last for _, last in ranges) > MAX_SEED or sum(last - first + 1 for first, last in ranges) > MAX_SEEDS:
        raise ConfigError(f'Bad --seeds {text!r}: seeds lie in 0..{MAX_SEED} (JAX keeps 32 bits of a seed), and a sweep '
                          f'takes at most {MAX_SEEDS} of them, e.g. --seeds=0-9.')
    return sorted({seed for first, last in ranges for seed in range(first, last + 1)})


def name_value(value: str) -> str:
    """A value as it appears in run names: numbers in shortest form (6.0 -> 6), other text made path-safe."""
    try:
        return format(float(value), 'g')
    except ValueError:
        return re.sub(r'[^A-Za-z0-9.+-]+', '-', value).strip('-')


def base_run_name(preset: str, env: str, setting: Dict[str, str], named_keys: Sequence[str]) -> str:
    parts = [preset, env] + [NAME_ABBREVIATIONS.get(key, key) + name_value(setting[key]) for key in named_keys]
    return '_'.join(parts)


def flag_name(flag: str) -> str:
    """`--agent.alpha=6` -> `agent.alpha`; `--noresume` -> `resume`."""
    name = flag.lstrip('-').split('=', 1)[0]
    return name[2:] if name.startswith('no') and '=' not in flag and name[2:] in LAUNCHER_FLAGS else name


def check_main_flags(main_flags: Sequence[str]):
    for flag in main_flags:
        if not flag.startswith('--'):
            raise ConfigError(f'Extra main.py flags must look like --name=value, got {flag!r}.')
        if flag_name(flag) in LAUNCHER_FLAGS:
            raise ConfigError(
                f'{flag!r}: the sweep sets --{flag_name(flag)} itself (from the grid and the sweep name); '
                f'use --envs / --method / --seeds / --name / --save_dir instead.'
            )


def named_settings(methods: Sequence[MethodSpec]) -> List[Tuple[MethodSpec, Dict[str, str], List[str]]]:
    """(method, setting, the keys its run name shows) of every setting of the grid, in order. A name shows alpha and
    its method's grid axes; settings of one preset whose names would coincide although they differ (in keys fixed by
    separate --method specs) also show the keys they differ in, where they set them."""
    entries = [(method, setting, method.named_keys()) for method in methods for setting in method.settings()]
    while True:
        groups: Dict[str, List[int]] = {}
        for i, (method, setting, keys) in enumerate(entries):
            groups.setdefault(base_run_name(method.preset, '', setting, keys), []).append(i)
        changed = False
        for indices in groups.values():
            settings = [entries[i][1] for i in indices]
            keys_in_order = list(dict.fromkeys(key for setting in settings for key in setting))
            differing = [key for key in keys_in_order if len({setting.get(key) for setting in settings}) > 1]
            for i in indices:
                method, setting, keys = entries[i]
                added = [key for key in differing if key in setting and key not in keys]
                if added:
                    entries[i] = (method, setting, keys + added)
                    changed = True
        if not changed:
            return entries


def build_runs(sweep: str, methods: Sequence[MethodSpec], envs: Sequence[str], seeds: Sequence[int], save_dir: str) -> List[SweepRun]:
    """The whole grid, in a stable order (method, setting, environment, seed); names must be unique."""
    if not re.fullmatch(r'[A-Za-z0-9_.-]+', sweep) or sweep in ('.', '..') or sweep.endswith(SET_ASIDE_SUFFIXES):
        raise ConfigError(f'--name={sweep!r}: a sweep name is one directory name of letters, digits, "_", "-" and ".", '
                          f'neither "." nor "..", nor ending in {" or ".join(SET_ASIDE_SUFFIXES)} (folders the tables '
                          f'skip). Pass another --name.')
    if not methods or not envs or not seeds:
        raise ConfigError('A sweep needs at least one method, one environment and one seed.')
    repeated = sorted({env for env in envs if envs.count(env) > 1})
    if repeated:
        raise ConfigError(f'--envs lists {", ".join(repeated)} twice: a sweep runs each dataset once. Remove the '
                          f'duplicate from --envs.')
    if not save_dir:
        raise ConfigError(f'--save_dir is empty, so the runs would be written into the working directory ({os.getcwd()}), '
                          f'a folder nobody named. Pass the folder, e.g. --save_dir=runs (the default; --save_dir=. '
                          f'names the working directory).')
    save_dir = os.path.abspath(os.path.expanduser(save_dir))
    runs, names = [], {}
    for method, setting, named_keys in named_settings(methods):
        for env in envs:
            base = base_run_name(method.preset, env, setting, named_keys)
            for seed in seeds:
                run = SweepRun(sweep, method.preset, env, seed, tuple(setting.items()), base, save_dir)
                if run.name in names:
                    same = names[run.name] == setting
                    raise ConfigError(
                        f'Run {run.name} appears twice in the grid: '
                        + (f'{method.preset} with {setting or "its preset values"} is listed twice; remove the duplicate '
                           f'method or value.' if same else
                           f'{method.preset} with {names[run.name]} and with {setting} differ only in how their values '
                           f'are written; write each value once.'))
                names[run.name] = setting
                runs.append(run)
    return runs


def job_command(runs: Sequence[SweepRun], main_flags: Sequence[str], python: str, main_path: str) -> Tuple[str, ...]:
    first = runs[0]
    command = [python, main_path, f'--env_name={first.env}', f'--agent={PRESETS_FILE}:{first.preset}']
    command += [f'--agent.{key}={value}' for key, value in first.overrides]
    command.append(f'--seed={first.seed}')
    if len(runs) > 1:
        # main.py names seed directories <run_name>_sd<seed>: exactly our per-seed run names.
        command += [f'--num_seeds={len(runs)}', f'--run_name={first.base_name}']
    else:
        command.append(f'--run_name={first.name}')
    command += [f'--save_dir={first.save_dir}', f'--run_group={first.sweep}', '--resume', *main_flags]
    return tuple(command)


def build_jobs(runs: Sequence[SweepRun], main_flags: Sequence[str] = (), seeds_per_job: int = 1,
               python: str = sys.executable, main_path: str = DEFAULT_MAIN, request_of: Optional[Callable] = None) -> List[Job]:
    """Jobs for the unfinished runs; with seeds_per_job > 1, consecutive seeds of one setting share a job. A run is
    finished when it has DONE and, given `request_of` (main.request_of), when its own command would change nothing
    (`resume_step`): a run whose --train_steps grew is resumed, and one whose --resume main.py would refuse (another
    protocol, config or a shorter budget) is kept, for `check_job_commands` to name the difference."""
    if seeds_per_job < 1:
        raise ConfigError(f'seeds_per_job must be at least 1, got {seeds_per_job}.')
    check_main_flags(main_flags)
    common_keys = {flag_name(f)[len('agent.'):] for f in main_flags if flag_name(f).startswith('agent.')}
    for run in runs:
        clash = common_keys & {key for key, _ in run.overrides}
        if clash:
            raise ConfigError(
                f'--agent.{sorted(clash)[0]} is given for every run and also in the spec of method {run.preset}; '
                f'the run names would not match what runs. Set it in one place.'
            )
    requests = {}

    def finished(run: SweepRun) -> bool:
        if not run.is_finished() or request_of is None:
            return run.is_finished()
        argv = list(job_command([run], main_flags, python, main_path)[1:])
        key = tuple(arg for arg in argv[1:] if not arg.startswith(('--seed=', '--run_name=')))
        try:
            if key not in requests:
                requests[key] = request_of(argv)
            request = for_runs(requests[key], [run])
            step = resume_step(run, request)  # None: DONE without a checkpoint, which no --resume can change
            return step is None or step == request.flags.train_steps
        except (ConfigError, StorageError):  # a command main.py refuses: kept, and named by check_job_commands
            return False

    jobs, chunk = [], []
    for run in (r for r in runs if not finished(r)):
        if chunk and (len(chunk) == seeds_per_job or run.base_name != chunk[-1].base_name or run.env != chunk[-1].env
                      or run.seed != chunk[-1].seed + 1):
            jobs.append(Job(tuple(chunk), job_command(chunk, main_flags, python, main_path)))
            chunk = []
        chunk.append(run)
    if chunk:
        jobs.append(Job(tuple(chunk), job_command(chunk, main_flags, python, main_path)))
    return jobs


def check_job_commands(jobs: Sequence[Job], request_of: Callable) -> Tuple[List[str], list]:
    """main.py's own checks, which start nothing, of every job's command: its request (`request_of`,
    main.request_of; commands that differ only in their seed and run name are checked once) and, for each run that
    has a checkpoint, its --resume (`resume_step`). Returns (the problems that would stop a job at start, one line
    per distinct paragraph; the Requests of the jobs that pass)."""
    from runtime.run_dir import name_too_long

    problems, requests, checked = [], [], {}
    for job in jobs:
        first = job.runs[0]
        sweep_dir = os.path.join(first.save_dir, first.sweep)
        names = [(run.name, 'run directory name') for run in job.runs] + [(os.path.basename(job.log_path), 'log file name')]
        for name, what in names:
            problem = name_too_long(name, sweep_dir, f'{what} of job {job.name[:40]}...', 'pass a shorter --name, '
                                    'fewer settings in one --method, or select runs so that names stay short')
            if problem and problem not in problems:
                problems.append(problem)
        argv = list(job.command[1:])
        key = tuple(arg for arg in argv[1:] if not arg.startswith(('--seed=', '--run_name=')))
        if key not in checked:
            try:
                checked[key] = request_of(argv)
            except (ConfigError, StorageError) as e:
                checked[key] = f'{job.name}: {e}'
        outcome = checked[key]
        if not isinstance(outcome, str):
            try:
                for run in job.runs:
                    resume_step(run, for_runs(outcome, job.runs))
            except ConfigError as e:
                outcome = f'{run.name}: {e}'
        if isinstance(outcome, str):
            if outcome not in problems:
                problems.append(outcome)
        else:
            requests.append(outcome)
    return problems, requests


def for_runs(request, runs: Sequence[SweepRun]):
    """`request`, checked for a command that differs from the command of the job of `runs` only in its seed and run
    name, as that job's own command makes it."""
    name = runs[0].name if len(runs) == 1 else runs[0].base_name
    return dataclasses.replace(request, flags=dataclasses.replace(request.flags, seed=runs[0].seed, run_name=name),
                               seeds=tuple(run.seed for run in runs), run_names=tuple(run.name for run in runs))


def resume_step(run: SweepRun, request) -> Optional[int]:
    """main.py's own --resume check of `run` against `request` (its job's, `for_runs`), reading its records only: the
    step it resumes from (a finished run's recorded --train_steps, where its checkpoint is; 0 for an unfinished one,
    whose checkpoint main.py reads at start), None without a checkpoint; or main.py's ConfigError (the recorded flags
    or config differ, the budget falls below a finished run's) before anything is launched."""
    from runtime.run_writer import RunWriter

    writer = RunWriter(request, run.seed, run.name)
    if not writer.run_dir.has_checkpoint():
        return None
    writer.start_step = writer.run_dir.read_flags()['train_steps'] if writer.run_dir.is_done() else 0
    writer.check_same_run()
    return writer.start_step


def prepare_datasets(requests, log=print) -> Dict[str, Tuple[str, str]]:
    """Obtain every dataset the jobs train on, once, before any job starts (so jobs never race to generate one):
    main.py's own `runtime.dataset_files.ensure_dataset` with each job's dataset flags (`requests`: their checked
    Requests). Returns {env: (train_path, val_path)}; raises what main.py would report (DatasetError, ConfigError,
    or an OSError), before anything is launched."""
    import jax

    from runtime.dataset_files import ensure_dataset

    # Generation that runs a network (the antmaze expert) must not open the GPUs in this long-lived launcher
    # process: JAX would hold 75% of a GPU's memory for the whole sweep. This process's setting only; jobs
    # inherit the environment, not it.
    jax.config.update('jax_platforms', 'cpu')
    paths = {}
    for request in requests:
        flags = request.flags
        key = (flags.env_name, flags.dataset_dir, flags.download, flags.generate_dataset)
        if key not in paths:
            paths[key] = ensure_dataset(flags.env_name, flags.dataset_dir, download=flags.download,
                                        generator='datagen', generate=flags.generate_dataset, log=log)
    return {key[0]: value for key, value in paths.items()}


def describe(runs: Sequence[SweepRun], jobs: Sequence[Job]) -> str:
    pending = sum(len(job.runs) for job in jobs)
    return f'{len(runs)} runs: {len(runs) - pending} finished (skipped), {pending} to run in {len(jobs)} jobs.'


# ----------------------------------------------------------------------------------------------
# Local backend: a pool of worker threads, each running one main.py process at a time.


@dataclasses.dataclass
class JobOutcome:
    job: Job
    # 'ok', 'failed', 'stopped' (interrupted: SIGTERM/SIGINT; resumable), 'time limit' (main.py's --time_limit;
    # resumable) or 'not started'.
    status: str
    returncode: Optional[int] = None
    log_start: int = 0  # Byte offset of this attempt's header in the job's log (several attempts share the file).
    log_end: Optional[int] = None  # The log's size when the process exited.
    gpu: Optional[str] = None
    error: Optional[str] = None  # A submitit job's error, with the job's traceback.
    ended_as: Optional[str] = None  # A submitit job that ended without a result: how its scheduler last saw it.


def default_mem_fraction(runs_per_gpu: int) -> float:
    """The JAX memory fraction of each of `runs_per_gpu` processes sharing a GPU: 90% of the memory split
    evenly, less 2% each for what lies outside JAX's pool (the CUDA context, ~0.3-0.5 GB)."""
    return math.floor((0.9 / runs_per_gpu - 0.02) * 1000 + 1e-6) / 1000


def child_environment(workers: int, gpu: Optional[str] = None, runs_per_gpu: int = 1,
                      mem_fraction: Optional[float] = None) -> Dict[str, str]:
    """The environment of a job's main.py. With `gpu`: that GPU only (CUDA_VISIBLE_DEVICES) and, when
    `runs_per_gpu` > 1, a preallocated share of its memory: JAX's documented XLA_PYTHON_CLIENT_MEM_FRACTION is
    the fraction it preallocates, so preallocation is on and each process owns its share from the start (none
    can grow into another's). Without: several workers share whatever GPU there is, allocating on demand."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    if gpu is not None:
        env['CUDA_VISIBLE_DEVICES'] = str(gpu)
        if runs_per_gpu > 1:
            env['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'true'
            env['XLA_PYTHON_CLIENT_MEM_FRACTION'] = f'{mem_fraction or default_mem_fraction(runs_per_gpu):g}'
            env.pop('XLA_CLIENT_MEM_FRACTION', None)  # JAX refuses both names at once
        return env
    if workers > 1:
        # Several JAX processes may share one GPU: each would otherwise grab 75% of its memory up front.
        env.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
    return env


def parse_gpus(text: str) -> List[str]:
    """`0,1,3` -> ['0', '1', '3'] (ids as CUDA_VISIBLE_DEVICES takes them: indices, or GPU-/MIG- UUIDs)."""
    gpus = [part.strip() for part in text.split(',')]
    bad = [g for g in gpus if not re.fullmatch(r'\d+|(?:GPU|MIG)-[A-Za-z0-9/-]+', g)]
    if not text.strip() or bad:
        raise ConfigError(f'Bad --gpus={text!r}: list GPU ids separated by commas, e.g. --gpus=0,1,2,3 (as nvidia-smi '
                          f'numbers them, or GPU-<uuid>).')
    duplicates = sorted({g for g in gpus if gpus.count(g) > 1})
    if duplicates:
        raise ConfigError(f'--gpus={text} lists GPU {", ".join(duplicates)} twice: to run several jobs per GPU, list each '
                          f'once and pass --runs_per_gpu=K.')
    return gpus


@dataclasses.dataclass(frozen=True)
class GpuInventory:
    """What this machine offers jobs pinned to GPUs, found without starting JAX's GPU backend in the launcher.

    `gpus`: the NVIDIA GPUs the driver lists, as (index, UUID or None), with `source` naming where they were found;
    `cuda_jax`: the installed package that gives JAX CUDA (a jax-cudaNN-plugin, or a CUDA build of jaxlib), or None."""

    gpus: Tuple[Tuple[str, Optional[str]], ...]
    source: str
    cuda_jax: Optional[str]

    def knows(self, gpu: str) -> bool:
        """Whether `gpu` (an index, or a GPU-/MIG- UUID) is one of these GPUs. A UUID is taken on trust where the
        source lists none (/proc/driver/nvidia), and a MIG UUID always (MIG devices are not listed here)."""
        if re.fullmatch(r'\d+', gpu):
            return int(gpu) < len(self.gpus)
        uuids = [uuid for _, uuid in self.gpus if uuid]
        return gpu.startswith('MIG-') or not uuids or gpu in uuids


def gpu_inventory() -> GpuInventory:
    """The NVIDIA GPUs of this machine (`nvidia-smi -L`, else the driver's /proc/driver/nvidia/gpus) and whether the
    installed JAX has CUDA (its package metadata: nothing is imported)."""
    import importlib.metadata

    gpus, source = (), 'nvidia-smi -L'
    try:
        listed = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True, timeout=60)
        if listed.returncode == 0:
            gpus = tuple(re.findall(r'^GPU (\d+):.*?(?:\(UUID: (GPU-[^)\s]+)\))?\s*$', listed.stdout, re.M))
            gpus = tuple((index, uuid or None) for index, uuid in gpus)
        else:
            source = f'nvidia-smi -L failed: {(listed.stderr or listed.stdout).strip()[:200] or f"exit {listed.returncode}"}'
    except (OSError, subprocess.TimeoutExpired) as e:
        source = f'nvidia-smi: {e.strerror if isinstance(e, OSError) else "no answer in 60 s"}'
    if not gpus:
        folder = '/proc/driver/nvidia/gpus'
        try:
            gpus = tuple((str(k), None) for k in range(len(os.listdir(folder))))
        except OSError:
            pass
        source = f'{folder}' if gpus else f'{source}; no {folder}'
    cuda_jax = None
    for distribution in importlib.metadata.distributions():
        name = (distribution.metadata['Name'] or '').lower().replace('_', '-')
        if re.fullmatch(r'jax-cuda\d+-(plugin|pjrt)', name) or (name == 'jaxlib' and '+cuda' in distribution.version):
            cuda_jax = f'{name} {distribution.version}'
            break
    return GpuInventory(gpus, source, cuda_jax)


def gpu_problem(gpus: Sequence[str], inventory: Optional[GpuInventory] = None, environ=None) -> Optional[str]:
    """Why jobs pinned to `gpus` (--gpus of the local backend) would not train on them here, or None. Each such job
    would otherwise start, find no GPU, and train on the CPU without a word."""
    inventory = inventory or gpu_inventory()
    environ = os.environ if environ is None else environ
    listed = ','.join(gpus)
    cpu_instead = ('Drop --gpus to run the jobs on the CPU (--workers=N for N at once), or run the sweep where the GPUs '
                   'are (--backend=slurm submits it to a cluster\'s).')
    if not inventory.gpus:
        return (f'--gpus={listed} pins jobs to GPUs, but this machine has no NVIDIA GPU ({inventory.source}), so every '
                f'job would train on the CPU. {cpu_instead}')
    unknown = [gpu for gpu in gpus if not inventory.knows(gpu)]
    if unknown:
        have = ', '.join(index for index, _ in inventory.gpus)
        return (f'--gpus={listed} lists GPU {", ".join(unknown)}, which this machine does not have (it has '
                f'{len(inventory.gpus)}: {have}, from {inventory.source}); a job pinned there would see no GPU and train '
                f'on the CPU. List GPUs this machine has, e.g. --gpus={",".join(index for index, _ in inventory.gpus)}.')
    if inventory.cuda_jax is None:
        return (f'--gpus={listed}: this machine has {len(inventory.gpus)} GPU(s), but the installed JAX has no CUDA '
                f'support (no jax-cuda12-plugin or jax-cuda13-plugin in this Python\'s packages), so every job would '
                f'train on the CPU. Install JAX\'s CUDA build (README.md, Install: GPU), or drop --gpus to run on the '
                f'CPU.')
    platforms = environ.get('JAX_PLATFORMS', '').strip()
    if platforms and not {'cuda', 'gpu'} & {p.strip().lower() for p in platforms.split(',')}:
        return (f'--gpus={listed}, but JAX_PLATFORMS={platforms} is set in this environment, which every job inherits: '
                f'JAX would not use the GPUs and every job would train on the CPU. Unset JAX_PLATFORMS (or include '
                f'cuda in it), or drop --gpus to run on the CPU.')
    return None


def worker_slots(workers: Optional[int], gpus: Optional[Sequence[str]], runs_per_gpu: int = 1,
                 mem_fraction: Optional[float] = None) -> List[Optional[str]]:
    """One entry per parallel job: its GPU (None: no GPU assignment). `workers` and `gpus` must agree."""
    if runs_per_gpu < 1:
        raise ConfigError(f'--runs_per_gpu must be at least 1, got {runs_per_gpu}.')
    if not gpus:
        if runs_per_gpu != 1 or mem_fraction is not None:
            raise ConfigError('--runs_per_gpu and --gpu_mem_fraction apply to GPUs listed with --gpus (e.g. --gpus=0,1 '
                              '--runs_per_gpu=2); without --gpus, --workers sets the number of parallel jobs.')
        workers = 1 if workers is None else workers
        if workers < 1:
            raise ConfigError(f'--workers must be at least 1, got {workers}.')
        return [None] * workers
    slots = len(gpus) * runs_per_gpu
    if workers is not None and workers != slots:
        raise ConfigError(
            f'--workers={workers} does not match --gpus={",".join(gpus)} with --runs_per_gpu={runs_per_gpu}, which make '
            f'{slots} parallel jobs ({len(gpus)} GPUs x {runs_per_gpu}). Drop --workers (it follows from --gpus and '
            f'--runs_per_gpu), or make them agree.')
    if mem_fraction is not None and not (0 < mem_fraction <= 1 and mem_fraction * runs_per_gpu <= 1):
        raise ConfigError(f'--gpu_mem_fraction={mem_fraction:g} with --runs_per_gpu={runs_per_gpu}: each run\'s share must '
                          f'be in (0, 1] and all {runs_per_gpu} shares together at most 1, e.g. '
                          f'{default_mem_fraction(runs_per_gpu):g}.')
    # Spread first: the first len(gpus) jobs land on distinct GPUs.
    return [gpu for _ in range(runs_per_gpu) for gpu in gpus]


def attempt_excerpt(path: str, start: int = 0, end: Optional[int] = None, lines: int = 5, indent: str = '    ') -> str:
    """What one attempt wrote to a shared log: bytes [start, end) only (another sweep, or an earlier attempt,
    may write the same file): main.py's `Error: ...` paragraph when there is one (it names the problem and
    the fix; lines around it may be another process's), else the attempt's last lines."""
    try:
        with open(path, 'rb') as f:
            f.seek(start)
            data = f.read(None if end is None else max(0, end - start))
    except OSError:
        return f'{indent}(no log at {path})'
    text = [line.rstrip() for line in data.decode(errors='replace').replace('\r', '\n').splitlines() if line.strip()]
    errors = [line for line in text if line.startswith('Error: ')]
    if errors:
        return indent + errors[-1]
    return '\n'.join(indent + line for line in text[-lines:]) or f'{indent}(this attempt wrote nothing to {path})'


# How often the local backend prints the steps its running jobs have reached (--progress_interval).
PROGRESS_INTERVAL_S = 60.0

def last_logged_step(run_dir: str, tail_bytes: int = 8192) -> Optional[int]:
    """The step of the last whole row of a run's train.csv, read from the file's header and its last few KB however
    long the run (a line cut off by either end is not read); None before its first row."""
    try:
        with open(os.path.join(run_dir, TRAIN_LOG), 'rb') as f:
            header = f.readline().decode(errors='replace').rstrip('\r\n').split(',')
            rows = f.tell()
            begin = f.seek(max(rows, f.seek(0, os.SEEK_END) - tail_bytes))
            tail = f.read().rpartition(b'\n')[0]
    except OSError:
        return None
    if begin > rows:  # it starts mid-line
        tail = tail.partition(b'\n')[2]
    if 'step' not in header or not tail:
        return None
    column = header.index('step')
    for line in reversed(tail.splitlines()):
        fields = line.decode(errors='replace').split(',')
        if len(fields) == len(header) and fields[column].isdigit():
            return int(fields[column])
    return None


def job_progress(job: Job) -> str:
    """'<job>: step <s>/<total> (<p>%)', the last step its run logged (train.csv), or '<job>: starting' before its first
    row (loading data, compiling). The seeds of one job train in one process, in step, so its first run stands for
    all of them."""
    step = last_logged_step(job.runs[0].run_dir)
    if step is None:
        return f'{job.name}: starting'
    total = atomic_io.read_json(os.path.join(job.runs[0].run_dir, FLAGS_FILE))['train_steps']  # written before train.csv
    return f'{job.name}: step {step}/{total} ({100 * step / total:.0f}%)'


def elapsed_text(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f'{minutes // 60}h{minutes % 60:02d}m{seconds:02d}s' if minutes >= 60 else f'{minutes}m{seconds:02d}s'


def launch_local(jobs: Sequence[Job], workers: Optional[int] = None, out=None, gpus: Optional[Sequence[str]] = None,
                 runs_per_gpu: int = 1, mem_fraction: Optional[float] = None,
                 progress_interval: float = PROGRESS_INTERVAL_S) -> List[JobOutcome]:
    """Run jobs on parallel slots; a failure is reported and the others go on.

    Slots: `workers` of them, or with `gpus` `runs_per_gpu` per GPU (`worker_slots`), each job then seeing
    only its slot's GPU (`child_environment`). Each job's stdout and stderr are appended to its `<run>.log`,
    after a `=== <time> <command>` header. On SIGINT or SIGTERM the running jobs get SIGTERM (main.py then
    saves a checkpoint and exits 143) and no new job starts; a job main.py stopped at its --time_limit
    (exit 75) is 'time limit'. Rerunning the sweep resumes both.

    Printed to `out` as it happens: a line when a job starts (`[started k/N] <job>, log <path>`) and when it ends
    (`[k/N] <job>: <outcome>`), and every `progress_interval` seconds (0: never) one line with the step each running
    job has reached (`job_progress`: its train.csv), so a sweep of long jobs is never
    silent for long.
    """
    slots = worker_slots(workers, gpus, runs_per_gpu, mem_fraction)
    out = out or sys.stdout
    stopping, lock, live = threading.Event(), threading.Lock(), set()
    done_count, started_count, running = [0], [0], []  # running: in start order
    launched = time.monotonic()
    free_slots = queue.Queue()
    for slot in slots:
        free_slots.put(slot)

    def run_job(job: Job) -> JobOutcome:
        if stopping.is_set():
            return JobOutcome(job, 'not started')
        gpu = free_slots.get()  # the pool runs len(slots) jobs at a time: one is always free here
        try:
            return run_on(job, gpu)
        finally:
            free_slots.put(gpu)

    def run_on(job: Job, gpu: Optional[str]) -> JobOutcome:
        env = child_environment(len(slots), gpu, runs_per_gpu, mem_fraction)
        os.makedirs(os.path.dirname(job.log_path), exist_ok=True)
        with open(job.log_path, 'a') as log:
            on_gpu = f' [CUDA_VISIBLE_DEVICES={gpu}]' if gpu is not None else ''
            log.write(f'\n=== {datetime.datetime.now().isoformat(timespec="seconds")}{on_gpu} {job.shell_command()}\n')
            log.flush()
            log_start = log.tell()
            # A new session: a Ctrl-C in the terminal reaches only the launcher, which turns it into
            # the SIGTERM that makes main.py checkpoint.
            process = subprocess.Popen(job.command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True)
            with lock:
                live.add(process)
                running.append(job)
                started_count[0] += 1
                print(f'[started {started_count[0]}/{len(jobs)}] {job.name}{on_gpu}, log {job.log_path}', file=out,
                      flush=True)
            if stopping.is_set():
                process.terminate()
            returncode = process.wait()
        log_end = os.path.getsize(job.log_path) if os.path.exists(job.log_path) else None
        if returncode == EXIT_TIME_LIMIT:
            status = 'time limit'
        # A job we stopped may die before main.py installs its SIGTERM handler (exit -15): still resumable.
        elif returncode in (EXIT_PREEMPTED, EXIT_INTERRUPTED) or (stopping.is_set() and returncode != 0):
            status = 'stopped'
        else:
            status = 'ok' if returncode == 0 else 'failed'
        outcome = JobOutcome(job, status, returncode, log_start, log_end, gpu)
        with lock:
            live.discard(process)
            running.remove(job)
            done_count[0] += 1
            if status == 'time limit':
                label = f'{RESUMABLE_EXIT_CODES[EXIT_TIME_LIMIT]} (exit {returncode}: checkpoint saved; rerun the sweep to resume)'
            else:
                label = status + (f' (exit {returncode})' if returncode else '')
            print(f'[{done_count[0]}/{len(jobs)}] {job.name}: {label}' + (f', log: {job.log_path}' if returncode else ''),
                  file=out, flush=True)
        return outcome

    def stop(signum, _frame):
        stopping.set()
        with lock:
            for process in live:
                process.terminate()
        print(f'{signal.Signals(signum).name}: stopping; running jobs save a checkpoint. '
              f'Rerun the same command to resume.', file=out, flush=True)

    finished = threading.Event()

    def report_progress():
        while not finished.wait(progress_interval):
            with lock:
                jobs_now, done = list(running), done_count[0]
            if jobs_now:  # read outside the lock: a slow disk must not hold up a job's start or end
                print(f'[progress {elapsed_text(time.monotonic() - launched)}, {done}/{len(jobs)} done] '
                      + '; '.join(job_progress(job) for job in jobs_now), file=out, flush=True)

    reporter = threading.Thread(target=report_progress, daemon=True) if progress_interval > 0 else None
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if reporter is not None:
            reporter.start()
        with ThreadPoolExecutor(max_workers=len(slots)) as pool:
            return list(pool.map(run_job, jobs))
    finally:
        finished.set()
        if reporter is not None:
            reporter.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def summarize_local(outcomes: Sequence[JobOutcome]) -> Tuple[str, int]:
    """A report of failures (each with this attempt's part of its log, main.py's error first) and the exit
    status for the CLI: 1 if a job failed, else 130 if jobs were stopped or not started, else 75
    (EXIT_TIME_LIMIT: "try again later") if jobs stopped at their --time_limit, else 0."""
    failed = [o for o in outcomes if o.status == 'failed']
    stopped = [o for o in outcomes if o.status in ('stopped', 'not started')]
    timed = [o for o in outcomes if o.status == 'time limit']
    lines = [f'{len(outcomes) - len(failed) - len(stopped) - len(timed)} jobs finished, {len(failed)} failed, '
             f'{len(stopped)} stopped or not started' + (f', {len(timed)} stopped at their time limit.' if timed else '.')]
    for outcome in failed:
        lines.append(f'FAILED {outcome.job.name} (exit {outcome.returncode}); log {outcome.job.log_path}:')
        lines.append(attempt_excerpt(outcome.job.log_path, outcome.log_start, outcome.log_end))
    if timed:
        lines.append(f'{len(timed)} job(s) reached main.py\'s --time_limit and saved a checkpoint '
                     f'({", ".join(o.job.name for o in timed)}): rerunning the same sweep command resumes them.')
    if stopped:
        lines.append('Stopped runs resume from their checkpoints when the same sweep command runs again.')
    return '\n'.join(lines), (1 if failed else EXIT_INTERRUPTED if stopped else EXIT_TIME_LIMIT if timed else 0)


# ----------------------------------------------------------------------------------------------
# Slurm backend: submitit job arrays (cluster='local' runs the same path on this machine, for tests).


# Slurm signals every process of a job step. Its timeout warning (SIGUSR2, which submitit handles in
# the job's process) would kill main.py outright; the job turns it into a SIGTERM instead. So main.py
# starts with SIGUSR2 ignored (an ignored signal stays ignored across exec).
IGNORE_SIGUSR2 = 'import signal; signal.signal(signal.SIGUSR2, signal.SIG_IGN)'


# The line MainCommand appends to a job's log when its main.py ends: how the attempt ended. The launcher reads it,
# with the runs' own DONE files, once the job's state says it ended (it never unpickles submitit's result file).
OUTCOME = '=== outcome: '
SLURM_MAX_REQUEUES = 20


def _submitit_requeue_signal():
    """The signal on which submitit's handler in this job checkpoints and requeues it (its preemption
    signal, SUBMITIT_PREEMPT_SIGNAL, USR2 by default), or None outside a submitit job."""
    import submitit

    sig = getattr(signal, 'SIG' + submitit.JobEnvironment.USR_SIG, None)
    if sig is None or not callable(signal.getsignal(sig)):  # SIG_DFL / SIG_IGN: no submitit handler installed
        return None
    return sig


class MainCommand:
    """Runs one main.py command inside a submitit job. Checkpointable: on timeout or preemption
    submitit calls `checkpoint`, which has main.py save (SIGTERM) and requeues the same command,
    and --resume continues it. When main.py itself stops at its --time_limit (exit 75, checkpoint saved),
    the job requeues itself the same way: it raises submitit's preemption signal in its own process, so
    submitit's handler calls `checkpoint` (main.py has exited: nothing to stop), saves the same command and
    requeues the job (`scontrol requeue` on Slurm, a restart on the local executor).

    Those self-requeues are counted here, against `max_requeues` (the sweep's --max_timeouts): submitit counts
    a requeue only when the job used up most of its Slurm time, so a main.py that reaches its --time_limit
    without getting any further (a limit shorter than its start-up) would otherwise be requeued forever."""

    # How long `checkpoint` waits for main.py to save; Slurm's default warning comes 90 s before the kill.
    save_timeout_s = 60

    def __init__(self, max_requeues: int = SLURM_MAX_REQUEUES, requeues: int = 0):
        self.max_requeues, self.requeues = max_requeues, requeues
        self._process = None
        self._at_time_limit = False

    def __call__(self, command: Sequence[str], log_path: str) -> str:
        from submitit.core.utils import UncompletedJobError

        try:
            message = self.run(command, log_path)
        except UncompletedJobError as e:  # submitit's handler, raised in this thread: main.py saved, no requeue
            message = str(e)
        with open(log_path, 'a') as log:
            log.write(f'{OUTCOME}{message}\n')
        if message != 'main.py exited with status 0':
            raise RuntimeError(f'{message} Log: {log_path}')
        return log_path

    def run(self, command: Sequence[str], log_path: str) -> str:
        """main.py's run of `command`, its output appended to `log_path`: how it ended, in one sentence."""
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, 'a') as log:
            log.write(f'\n=== {datetime.datetime.now().isoformat(timespec="seconds")} {shlex.join(command)}\n')
            log.flush()
            self._process = subprocess.Popen(set_up_then_exec(IGNORE_SIGUSR2, command), cwd=REPO_ROOT, stdout=log,
                                             stderr=subprocess.STDOUT, env=child_environment(1))
            # Poll rather than wait(): wait() would hold the lock that `checkpoint` (a signal handler
            # running in this thread) needs to see the process exit.
            while self._process.poll() is None:
                time.sleep(0.25)
        returncode = self._process.returncode
        if returncode == EXIT_TIME_LIMIT:
            sig = _submitit_requeue_signal()
            if sig is not None and self.requeues < self.max_requeues:
                with open(log_path, 'a') as log:
                    log.write(f'=== main.py stopped at its --time_limit (exit {returncode}, checkpoint saved): '
                              f'requeueing the same command ({self.requeues + 1} of at most {self.max_requeues})\n')
                self._at_time_limit = True
                signal.raise_signal(sig)  # submitit's handler: checkpoint(), requeue, exit this process
            why = (f'after {self.requeues} requeues (--max_timeouts={self.max_requeues})' if sig is not None
                   else 'and the job could not requeue itself')
            return f'main.py stopped at its --time_limit (exit {returncode}, checkpoint saved) {why}; relaunch the sweep to resume.'
        if returncode == EXIT_PREEMPTED:
            return 'main.py was stopped by SIGTERM (checkpoint saved); relaunch the sweep to resume.'
        return f'main.py exited with status {returncode}'

    def checkpoint(self, command: Sequence[str], log_path: str):
        import submitit

        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            deadline = time.monotonic() + self.save_timeout_s
            while self._process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        requeues = self.requeues + int(self._at_time_limit)
        return submitit.helpers.DelayedSubmission(MainCommand(self.max_requeues, requeues), command, log_path)

    def __getstate__(self):
        return dict(self.__dict__, _process=None)  # A running process cannot be pickled; a requeued job starts its own.


@dataclasses.dataclass
class SlurmOptions:
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_min: int = 24 * 60
    gpus: int = 1
    cpus: int = 8
    mem_gb: float = 32
    array_parallelism: int = 64
    # Requeues after Slurm's time limit (counted by submitit) and, separately, after main.py's own --time_limit
    # (counted by MainCommand), before a job is reported instead of requeued.
    max_timeouts: int = SLURM_MAX_REQUEUES
    setup: Tuple[str, ...] = ()  # Shell lines run before the job (e.g. `module load cuda`).


def launch_submitit(jobs: Sequence[Job], folder: str, name: str, options: SlurmOptions, cluster: str = 'slurm'):
    """Submit jobs as one submitit job array (cluster='slurm', or 'local' for a test); returns submitit jobs."""
    import submitit

    executor = submitit.AutoExecutor(folder=folder, cluster=cluster, slurm_max_num_timeout=options.max_timeouts)
    parameters = dict(name=name, timeout_min=options.time_min, gpus_per_node=options.gpus, cpus_per_task=options.cpus,
                      mem_gb=options.mem_gb, tasks_per_node=1)
    if cluster == 'slurm':
        slurm = dict(partition=options.partition, account=options.account, qos=options.qos,
                     array_parallelism=options.array_parallelism, setup=list(options.setup))
        parameters.update({f'slurm_{key}': value for key, value in slurm.items() if value})
    executor.update_parameters(**parameters)
    handles = executor.map_array(MainCommand(options.max_timeouts), [job.command for job in jobs],
                                 [job.log_path for job in jobs])
    if cluster == 'slurm':
        watcher = slurm_states()
        for handle in handles:
            handle.watcher = watcher
            watcher.register_job(handle.job_id)
    return handles


# Slurm job states after which a job will not run again unless someone acts (scontrol's names), and FORGOTTEN, the
# state of a job Slurm no longer knows (it forgets an ended job MinJobAge after its end, 300 s by default). A job in
# any other state (PENDING, RUNNING, REQUEUED, COMPLETING, ...) may still run or write to its runs.
FORGOTTEN = 'FORGOTTEN'
SLURM_ENDED_STATES = {'BOOT_FAIL', 'CANCELLED', 'COMPLETED', 'DEADLINE', 'FAILED', 'NODE_FAIL', 'OUT_OF_MEMORY',
                      'PREEMPTED', 'TIMEOUT', 'REQUEUE_HOLD', 'SPECIAL_EXIT', FORGOTTEN}
# Why Slurm holds a job PENDING that cannot start as submitted: it asks for more than its partition or any node has
# (CPUs, memory, GPUs, nodes, time), or for a constraint, account, QOS or dependency that cannot be met.
NEVER_STARTS = {'PartitionConfig', 'PartitionNodeLimit', 'PartitionTimeLimit', 'BadConstraints', 'InvalidAccount',
                'InvalidQOS', 'DependencyNeverSatisfied'}


def scontrol_records(text: str) -> Dict[str, Dict[str, str]]:
    """{job id: {'State', 'Reason', 'Restarts'}} of `scontrol show job --oneliner` output, array tasks named
    `<array>_<task>` as submitit names them (the one record of a range of tasks still pending, e.g. ArrayTaskId=2-7%4,
    stands for each of them)."""
    records = {}
    for line in text.splitlines():
        fields = dict(re.findall(r'(\w+)=(\S*)', line))
        if 'JobId' not in fields:
            continue
        record = dict(State=fields.get('JobState', 'UNKNOWN'), Reason=fields.get('Reason', ''),
                      Restarts=fields.get('Restarts', '0'))
        array, tasks = fields.get('ArrayJobId'), fields.get('ArrayTaskId')
        if not (array and tasks):
            records[fields['JobId']] = record
            continue
        for part in tasks.split('%')[0].split(','):
            first, _, last = part.partition('-')
            records.update({f'{array}_{task}': record for task in range(int(first), int(last or first) + 1)})
    return records


def slurm_states(delay_s: float = 30.0):
    """A submitit watcher of Slurm job states (what `job.state` and `job.get_info()` read) that asks `scontrol show
    job`: submitit's own asks sacct, which needs accounting storage, which many clusters lack. It asks on submitit's
    schedule (2, 4, 8, ... s after a submission, then every `delay_s`); a job Slurm no longer knows is FORGOTTEN, and
    `error` says why the last question got no answer (None when it was answered). submitit is imported here, on
    first use: the tables import this module for its seed ranges."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SlurmStates(SlurmInfoWatcher):
        error = None

        def update(self):
            self._num_calls += 1
            self._last_status_check, self.error = time.time(), None
            for array in sorted({job.split('_')[0] for job in self._registered - self._finished}):
                try:
                    answer = subprocess.run(['scontrol', 'show', 'job', '--oneliner', array], capture_output=True,
                                            text=True, timeout=60)
                except (OSError, subprocess.TimeoutExpired) as e:
                    self.error = f'scontrol: {e.strerror if isinstance(e, OSError) else "no answer within 60 s"}'
                    return
                if answer.returncode == 0:
                    self._info_dict.update(scontrol_records(answer.stdout))
                elif 'Invalid job id' in answer.stderr:
                    self._info_dict.update({job: dict(State=FORGOTTEN) for job in self._registered
                                            if job.split('_')[0] == array})
                else:
                    self.error = 'scontrol: ' + (' '.join(answer.stderr.split())[-200:] or f'exit status {answer.returncode}')
                    return

    return SlurmStates(delay_s)


def last_attempt(log_path: str, start: int = 0) -> Tuple[Optional[str], int, int]:
    """(how main.py ended, as the OUTCOME line MainCommand wrote says, or None; the byte offsets where that attempt
    begins and where its outcome line begins) of the last attempt a job's log holds after byte `start`."""
    try:
        with open(log_path, 'rb') as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return None, start, start
    begin = max([m.end() for m in re.finditer(rb'^=== \d{4}-\d\d-\d\dT\S* .*\n', data, re.M)], default=0)
    outcomes = list(re.finditer(rb'^' + re.escape(OUTCOME.encode()) + rb'(.*)$', data[begin:], re.M))
    if not outcomes:
        return None, start + begin, start + len(data)
    return outcomes[-1].group(1).decode(errors='replace'), start + begin, start + begin + outcomes[-1].start()


def ended_outcome(job: Job, log_start: int, ended_as: str) -> JobOutcome:
    """The outcome of a job that has ended, from its runs and its log after `log_start`: 'ok' when every run has DONE;
    else how its last main.py ended (OUTCOME: 'stopped' by SIGTERM, 'time limit', or 'failed'); else, when no main.py
    of it ended, 'stopped', ended as `ended_as` says."""
    if all(run.is_finished() for run in job.runs):
        return JobOutcome(job, 'ok')
    message, begin, end = last_attempt(job.log_path, log_start)
    if message is None:
        return JobOutcome(job, 'stopped', ended_as=ended_as)
    status = ('stopped' if message.startswith('main.py was stopped by SIGTERM') else
              'time limit' if message.startswith(('main.py stopped at its --time_limit', 'Job not requeued')) else 'failed')
    return JobOutcome(job, status, log_start=begin, log_end=end, error=message)


def wait_submitit(jobs: Sequence[Job], handles: Sequence, log_starts: Sequence[int], cluster: str, out=None,
                  poll_s: float = 0.25, result_grace_s: float = 15.0,
                  progress_interval: float = PROGRESS_INTERVAL_S) -> List[JobOutcome]:
    """Wait for every submitted job: a line as each ends (`summarize_submitit` adds the details) and as Slurm requeues
    one, and every `progress_interval` seconds (0: never) where the others are: pending and why, or their step
    (`job_progress`). A job has ended when its submitit state says it will not run again (SLURM_ENDED_STATES; the
    local executor: its process ended); its outcome then comes from its runs and its log after `log_starts`
    (`ended_outcome`), never from submitit's result file, a pickle anyone who can write the sweep's folder could fill
    with code; one that ended before its main.py did gets `result_grace_s` for its files to appear (a network file
    system's delay). A job pending for a reason it can never start for (NEVER_STARTS) ends the wait with a ConfigError;
    while Slurm does not answer, a line says so and the states stay as last answered."""
    out = out or sys.stdout
    outcomes: Dict[int, JobOutcome] = {}
    ended_since: Dict[int, float] = {}
    restarts: Dict[int, int] = {}
    labels = {'ok': 'ok', 'failed': 'FAILED', 'stopped': 'stopped', 'time limit': 'stopped at its time limit'}
    started = reported = time.monotonic()
    silence = None
    while True:
        pending = [i for i in range(len(jobs)) if i not in outcomes]
        if not pending:
            return [outcomes[i] for i in range(len(jobs))]
        now, states = time.monotonic(), {}
        for i in pending:
            job, handle = jobs[i], handles[i]
            if cluster == 'slurm':
                info = handle.get_info(mode='standard')
                state, reason, restarts_now = info.get('State', 'UNKNOWN'), info.get('Reason', ''), int(info.get('Restarts') or 0)
                ended = state in SLURM_ENDED_STATES
            else:
                state, reason, restarts_now, ended = handle.state, '', 0, handle.done()
            states[i] = (state, reason)
            if state == 'PENDING' and reason in NEVER_STARTS:
                raise ConfigError(
                    f'Slurm holds job {handle.job_id} ({job.name}) PENDING with reason {reason}: it cannot start as '
                    f'submitted (it asks for more than its partition or any node has: --cpus, --mem_gb, --gpus, '
                    f'--time_min; or for an account, QOS or constraint the cluster refuses). The jobs were left as they '
                    f'are: cancel them (scancel {handle.job_id.split("_")[0]}) and submit again with what the partition '
                    f'offers (scontrol show partition).')
            if restarts_now > restarts.setdefault(i, restarts_now):
                print(f'[requeued] {job.name}: Slurm requeued job {handle.job_id} (restart {restarts_now}); waiting '
                      f'for it to run again.', file=out, flush=True)
            restarts[i] = restarts_now
            if not ended:
                ended_since.pop(i, None)
                continue
            outcome = ended_outcome(job, log_starts[i], f'{"Slurm" if cluster == "slurm" else "process"} state {state}')
            if outcome.ended_as and now - ended_since.setdefault(i, now) < result_grace_s:
                continue
            outcomes[i] = outcome
            state_note = f' ({outcome.ended_as}, before its main.py ended)' if outcome.ended_as else ''
            print(f'[{len(outcomes)}/{len(jobs)}] {job.name}: {labels[outcome.status]}{state_note} (job {handle.job_id})',
                  file=out, flush=True)
        error = getattr(handles[0].watcher, 'error', None) if cluster == 'slurm' else None
        if error != silence:
            print(f'Slurm does not answer ({error}); still waiting, with the jobs as Slurm last gave them.' if error
                  else 'Slurm answers again.', file=out, flush=True)
            silence = error
        if progress_interval and now - reported >= progress_interval and len(outcomes) < len(jobs):
            reported = now
            where = [f'{jobs[i].name}: pending' + (f' ({reason})' if reason not in ('', 'None') else '') if state == 'PENDING'
                     else job_progress(jobs[i]) if state in ('RUNNING', 'COMPLETING') or cluster != 'slurm'
                     else f'{jobs[i].name}: {state.lower()}' for i, (state, reason) in states.items() if i not in outcomes]
            print(f'[progress {elapsed_text(now - started)}, {len(outcomes)}/{len(jobs)} done] ' + '; '.join(where),
                  file=out, flush=True)
        time.sleep(poll_s)


def summarize_submitit(outcomes: Sequence[JobOutcome], handles: Sequence) -> Tuple[str, int]:
    """A report of the jobs that did not finish (a failure with this attempt's part of its log, main.py's error
    first) and the exit status, as `summarize_local`: 1 if a job failed, else 130 if jobs were stopped, else 75
    if jobs stopped at their time limit, else 0."""
    failed = [o for o in outcomes if o.status == 'failed']
    stopped = [o for o in outcomes if o.status == 'stopped']
    timed = [o for o in outcomes if o.status == 'time limit']
    lines = [f'{len(outcomes) - len(failed) - len(stopped) - len(timed)} jobs finished, {len(failed)} failed'
             + (f', {len(stopped)} stopped' if stopped else '')
             + (f', {len(timed)} stopped at their time limit' if timed else '') + '.']
    for outcome, handle in zip(outcomes, handles):
        if outcome.status == 'failed':
            lines.append(f'FAILED {outcome.job.name}: {outcome.error}; log {outcome.job.log_path} (submitit log '
                         f'{handle.paths.stderr}):')
            lines.append(attempt_excerpt(outcome.job.log_path, outcome.log_start, outcome.log_end))
    for outcome, handle in zip(outcomes, handles):
        if outcome.status in ('stopped', 'time limit'):
            why = (f'it ended before its main.py did ({outcome.ended_as}; submitit log {handle.paths.stderr})'
                   if outcome.ended_as else outcome.error.split(';')[0].rstrip('.'))
            lines.append(f'STOPPED {outcome.job.name}: {why}; log {outcome.job.log_path}.')
    if stopped or timed:
        lines.append('Stopped runs resume from their last checkpoints when the same sweep command runs again.')
    return '\n'.join(lines), (1 if failed else EXIT_INTERRUPTED if stopped else EXIT_TIME_LIMIT if timed else 0)
