"""What main.py writes for its seeds, behind one context manager, and the checks a run directory passes first.

    with RunSet.open(request) as runs:       # owns (locks) every seed's directory; checks --resume (reads only)
        if runs.already_finished: return    # --resume of a run that reached --train_steps (its data, if there, checked)
        runs.check_dataset(record)           # a resumed run must find the very files it was trained on
        runs.begin(record)                   # the first writes: flags.json, config.json, dataset.json; logs opened
        runs.writers[k].log_train(...), .log_eval(...), .save_checkpoint(...)
        runs.finish()                        # DONE in every directory
    # leaving: wandb runs closed, locks released; a run refused before `begin` leaves the directories as it found them

With --num_seeds N every seed gets its own directory, laid out exactly like a single-seed run (runtime/run_dir.py),
so sweeps, results tables and analyses treat both alike. docs/guarantees.md says what these checks promise.
"""

import contextlib
import datetime
import functools
import json
import logging
import os
import subprocess
from typing import Dict, List, Optional, Tuple

import jax
import numpy as np
import tqdm

from runtime import provenance
from runtime.checkpoints import check_resumable, checkpoint_header, checkpoint_step, save_checkpoint
from runtime.dataset_files import dataset_paths
from runtime.errors import ResumeMismatchError, RunDirError
from runtime.loggers import CsvLogger, WandbLogger
from runtime.request import Request, flag_defaults, numeric_mode, plain, resume_may_differ
from runtime.run_dir import CONFIG_FILE, FLAGS_FILE, OLD_SUFFIX, RunDir, flatten, lock_all
from utils.config_checks import LABELS

_ABSENT = '(absent)'
# Flags of earlier versions that this one no longer has, each with the value under which a run computed what this
# version computes: a run recorded with that value resumes, one recorded with another is refused. (The speed paths
# that lived up to the git tag `speed-paths`: Adam over one vector, the fused kernel of the ensembles.)
RETIRED_FLAGS = {'optimizer_layout': 'per_leaf', 'network_kernel': 'xla'}

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def _code_version() -> Tuple[Optional[str], Optional[bool]]:
    try:
        answers = [subprocess.run(['git', '-C', REPO_ROOT, *command], capture_output=True, text=True, timeout=60)
                   for command in (['rev-parse', 'HEAD'], ['status', '--porcelain'])]
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if any(answer.returncode for answer in answers):
        return None, None
    return answers[0].stdout.strip(), bool(answers[1].stdout.strip())


def code_version() -> Dict[str, object]:
    """The code this process runs: its checkout's git commit and whether the checkout differs from it (`dirty`: a
    changed, added or deleted file git does not ignore), both None outside a git checkout; resumes.json records it
    for each attempt, so the tables can flag a run whose attempts ran different code."""
    return dict(zip(('commit', 'dirty'), _code_version()))


def change(old, new) -> str:
    """`old -> new` for a refused resume; values that print alike (a number recorded as text) show their JSON."""
    if str(old) == str(new):
        return f'{json.dumps(old)} ({type(old).__name__}) -> {json.dumps(new)} ({type(new).__name__})'
    return f'{old} -> {new}'


class RunWriter:
    """What one seed writes: its run directory, CSV logs, wandb run and its last evaluations."""

    def __init__(self, request: Request, seed: int, name: str):
        self.request, self.seed = request, seed
        self.run_dir = RunDir.at(request.flags.save_dir, request.flags.run_group, name)
        self.dir = self.run_dir.path
        self.checkpoint_path = self.run_dir.checkpoint_path
        self.recorded_flags: Optional[Dict] = None  # flags.json of the run being resumed
        self.start_step = 0
        self.lock = None  # the RunLock held while this process lives
        self.wandb = None  # this seed's wandb run, once the logs are open

    # --- check_runs: reads only ---

    def check(self) -> int:
        """The step this seed starts from (its checkpoint's when resuming), or a RunDirError."""
        run_dir, resume = self.run_dir, self.request.flags.resume
        if run_dir.is_done() and not run_dir.has_checkpoint():
            raise RunDirError(
                f'{self.dir} is marked DONE but has no checkpoint, so nothing can continue it. Move the directory away '
                f'(mv {self.dir} {self.dir}{OLD_SUFFIX}) and run the same command without --resume to start the run '
                f'over, or choose another --run_name.'
            )
        if not resume:
            if run_dir.has_checkpoint():
                checkpoint_step(self.checkpoint_path)  # a damaged or unreadable one is named now, not after --resume
            if run_dir.has_checkpoint() or run_dir.is_done():
                raise RunDirError(
                    f'Run directory {self.dir} already holds a {"finished run" if run_dir.is_done() else "checkpoint"}. '
                    f'Pass --resume to continue it, or choose another --run_name / --run_group (nothing was overwritten).'
                )
            return 0
        if not run_dir.has_checkpoint():
            logging.warning(f'--resume: {self.dir} has no checkpoint, so this starts a new run there.')
            return 0
        self.start_step, version = checkpoint_header(self.checkpoint_path)
        self.check_same_run()
        if self.request.flags.train_steps > self.start_step:  # a finished run is read, not continued
            check_resumable(self.checkpoint_path, version)
        return self.start_step

    def check_same_run(self):
        missing = self.run_dir.missing((FLAGS_FILE, CONFIG_FILE))
        if missing:
            raise RunDirError(f'{self.dir} has a checkpoint but no {" or ".join(missing)}, so --resume cannot check '
                              f'that it continues the same run. Restore the file(s), or start a new --run_name.')
        self.recorded_flags = self.run_dir.read_flags()
        self.run_dir.read_resume_records()  # a damaged record is named now, before this process writes anything
        recorded_mode = self.recorded_flags.get('numeric_mode', 'float32')  # runs before the record: float32
        if recorded_mode != numeric_mode():
            raise ResumeMismatchError(
                f'--resume would continue {self.dir}, trained in {recorded_mode}, in {numeric_mode()}: its logs would '
                f'change precision mid-run. Resume it with JAX_ENABLE_X64 '
                f'{"set (JAX_ENABLE_X64=1)" if recorded_mode == "float64" else "unset"}, as it was started, or start '
                f'a new run with another --run_name.'
            )
        retired = [f'--{name}={self.recorded_flags[name]}' for name, value in RETIRED_FLAGS.items()
                   if self.recorded_flags.get(name, value) != value]
        if retired:
            raise ResumeMismatchError(
                f'--resume would continue {self.dir}, trained with {" and ".join(retired)}, which this version no '
                f'longer has (the git tag speed-paths is the last version with it): continue the run with that '
                f'version, or start a new run with another --run_name.'
            )
        differences = self.flag_differences() + self.config_differences()
        if differences:
            raise ResumeMismatchError(
                f'--resume would continue {self.dir} with settings it was not started with, mixing two runs in one '
                f'directory. Differences (recorded -> requested): {"; ".join(differences)}. Pass the recorded values '
                f'(or drop those flags) to continue this run, or start a new run with another --run_name (or '
                f'--run_group). Paths, logging, checkpoint, wandb and parallelism flags may differ; --train_steps may '
                f'change but not fall below the checkpoint\'s step.'
            )
        if self.request.flags.train_steps < self.start_step:
            raise ResumeMismatchError(
                f'--train_steps={self.request.flags.train_steps} is below the step of the checkpoint in {self.dir} '
                f'({self.start_step}; the run was started with --train_steps={self.recorded_flags.get("train_steps")}). '
                f'Pass --train_steps={self.start_step} or more to continue or extend it, or start a new --run_name for '
                f'a shorter run.'
            )

    def flag_differences(self) -> List[str]:
        """Flags that must match and do not. A flag the run predates matches at its default value."""
        recorded, requested = plain(self.recorded_flags), plain(self.request.seed_flags(self.seed))
        flags_class = type(self.request.flags)
        may_differ, defaults = resume_may_differ(flags_class) | {'run_name'}, flag_defaults(flags_class)
        differences = []
        for name in sorted(set(recorded) | set(requested)):
            if name in may_differ or name in ('train_steps', 'numeric_mode') or name in RETIRED_FLAGS:
                continue
            old, new = recorded.get(name, _ABSENT), requested.get(name, _ABSENT)
            if old is _ABSENT and new == plain(defaults.get(name, _ABSENT)):
                continue
            if name == 'eval_tasks' and _ABSENT not in (old, new):
                same = [t.strip() for t in str(old).split(',')] == [t.strip() for t in str(new).split(',')]
            else:
                same = old == new
            if not same:
                differences.append(f'--{name}: {change(old, new)}')
        return differences

    def config_differences(self) -> List[str]:
        """Config values (and the sampler derived from them) that differ. A key the run predates matches at the
        config file's default; a key this version's config no longer has is left out (what it set is compared
        through the derived sampler); a derived sampler field the run predates is not compared."""
        recorded, requested = flatten(plain(self.run_dir.read_config())), flatten(self.request.config_record())
        defaults = flatten(dict(self.request.config_defaults))
        differences = []
        for key in sorted(set(recorded) | set(requested)):
            if key in LABELS:
                continue
            old, new = recorded.get(key, _ABSENT), requested.get(key, _ABSENT)
            if old is _ABSENT and (key.startswith('sampler.') or (key in defaults and new == defaults[key])):
                continue
            if new is _ABSENT and not key.startswith('sampler.') and key not in defaults:
                continue
            if old != new:
                name = f'{key} (derived from the agent config)' if key.startswith('sampler.') else f'--agent.{key}'
                differences.append(f'{name}: {change(old, new)}')
        return differences

    def check_dataset(self, record: Dict):
        recorded = self.run_dir.read_dataset_record() if self.recorded_flags is not None else None
        differences = provenance.record_differences(recorded, record) if recorded else []
        if differences:
            raise ResumeMismatchError(
                f'--resume would continue {self.dir} on other data than it was trained on: {"; ".join(differences)}. '
                f'Point --dataset_dir at the files the run used, or start a new --run_name.'
            )

    # --- begin_runs: the first writes ---

    def begin(self, dataset: Dict):
        """Record what this run is before it loads anything: a new run's flags.json, config.json and
        dataset.json; for a resumed one, only a changed --train_steps (and DONE goes, if it grows past
        the checkpoint). Every attempt adds an entry to resumes.json, the run's attempt log: when, from which step,
        the code it runs (`code_version`) and, when resumed, the flags that differ."""
        request, train_steps = self.request, self.request.flags.train_steps
        self.lock.mark_owner()
        self.dataset_record = (self.run_dir.read_dataset_record() if self.recorded_flags is not None else None) or dataset
        attempt = dict(at=datetime.datetime.now().astimezone().isoformat(timespec='seconds'), from_step=self.start_step,
                       train_steps=train_steps, code=code_version())
        if self.recorded_flags is None:
            self.flags = request.seed_flags(self.seed)
            self.run_dir.write_metadata(self.flags, request.config_record())
            self.run_dir.write_dataset_record(dataset)
            self.run_dir.add_resume_record(attempt)
            return
        self.flags = dict(self.recorded_flags, train_steps=train_steps)
        if train_steps > self.start_step:
            self.run_dir.clear_done()
        if self.recorded_flags.get('train_steps') != train_steps:
            self.run_dir.write_metadata(self.flags, self.run_dir.read_config())
        if self.run_dir.read_dataset_record() is None:
            self.run_dir.write_dataset_record(dict(dataset, recorded_at_step=self.start_step))
        requested = plain(request.seed_flags(self.seed))
        changed = {name: [self.recorded_flags.get(name), requested[name]]
                   for name in sorted(resume_may_differ(type(request.flags)) | {'train_steps'})
                   if name in requested and plain(self.recorded_flags.get(name)) != requested[name]}
        self.run_dir.add_resume_record(dict(attempt, changed_flags=changed))

    # --- logs ---

    def open_logs(self, start_step: int):
        self.train_log = CsvLogger(self.run_dir.train_log_path)
        self.eval_log = CsvLogger(self.run_dir.eval_log_path)
        self.train_log.truncate_after(start_step)
        self.eval_log.truncate_after(start_step)
        rows = self.eval_log.rows()
        self.evaluated_steps = {int(r['step']) for r in rows}
        self.recent_success = [float(r['evaluation/overall_success']) for r in rows][-2:]
        self.wandb = WandbLogger(**self.wandb_run())
        if start_step:
            self.replay_to_wandb()

    def replay_to_wandb(self):
        """A resumed run's wandb history made whole: every CSV row up to the resume step is logged again into this
        attempt. A killed attempt's wandb writer loses what it buffered (up to 32 KB) and an offline attempt's sync
        replaces the history of the attempts before it, so the CSV rows, written row by row, are the record. Online,
        rows up to the last step the resumed wandb run holds are not logged twice."""
        after = self.wandb.last_step() if self.request.flags.wandb_mode == 'online' else None
        rows = sorted([(int(r['step']), 0, r) for r in self.train_log.rows()] +
                      [(int(r['step']), 1, r) for r in self.eval_log.rows()], key=lambda item: item[:2])
        for step, _, row in rows:
            if after is not None and step <= after:
                continue  # online, the wandb run already holds it
            metrics = {}
            for key, value in row.items():
                if key != 'step' and value not in (None, ''):
                    try:
                        metrics[key] = float(value)
                    except ValueError:
                        pass  # a non-numeric cell (none is written today)
            self.wandb.log(metrics, step)

    def wandb_run(self) -> Dict:
        """This seed's wandb run: named as its directory, grouped with the other seeds of its setting, tagged with
        its preset, environment, seed and run group (a sweep's name), configured with its flags, agent config and
        the data it trains on."""
        request, name = self.request, self.run_dir.name
        setting = name[: -len(f'_sd{self.seed}')] if name.endswith(f'_sd{self.seed}') else name
        preset = request.config.get('preset') or request.config.agent_name
        flags = request.flags
        config = dict(self.flags, wandb_mode=flags.wandb_mode, agent=request.config.to_dict(),
                      data=self.dataset_record.get('label', ''),
                      data_files={split: f.get('path') for split, f in self.dataset_record.get('files', {}).items()})
        return dict(mode=flags.wandb_mode, project=flags.wandb_project, run_dir=self.dir, name=name,
                    id_group=flags.run_group, group=f'{flags.run_group}/{setting}',
                    tags=[preset, flags.env_name, f'sd{self.seed}', flags.run_group], config=config, resume=flags.resume)

    def log_train(self, metrics, step):
        self.lock.verify()
        self.train_log.log(metrics, step)
        self.wandb.log(metrics, step)

    def log_eval(self, metrics, step):
        self.lock.verify()
        self.recent_success = (self.recent_success + [metrics['evaluation/overall_success']])[-3:]
        metrics['evaluation/overall_success_last3'] = float(np.mean(self.recent_success))
        self.eval_log.log(metrics, step)
        self.evaluated_steps.add(step)
        self.wandb.log(metrics, step)

    def save_checkpoint(self, agent, step: int, extra=None):
        self.lock.verify()
        save_checkpoint(self.dir, agent, step, extra)

    def close(self):
        """End this seed's wandb run (its CSV logs are written row by row)."""
        if self.wandb is not None:
            self.wandb.finish()

    def mark_done(self):
        self.lock.verify()
        self.run_dir.mark_done()


class RunSet:
    """The run directories of one request, one per seed, owned by this process for the life of the context (see the
    module docstring). `start_step` is where every seed starts (its checkpoint's step when resuming)."""

    def __init__(self, request: Request, writers: List[RunWriter], start_step: int):
        self.request, self.writers, self.start_step = request, writers, start_step

    @classmethod
    @contextlib.contextmanager
    def open(cls, request: Request):
        """Lock every seed's directory (RunLockedError naming the holder if another process owns one), check what
        --resume asks against what they record, yield the RunSet; close and release them however the block ends."""
        writers = [RunWriter(request, seed, name) for seed, name in zip(request.seeds, request.run_names)]
        locks = lock_all([w.run_dir for w in writers])
        for writer, lock in zip(writers, locks):
            writer.lock = lock
        try:
            steps = [writer.check() for writer in writers]
            if len(set(steps)) > 1:
                raise RunDirError(
                    f'Seeds {list(request.seeds)} have checkpoints at different steps {steps}; resume them as separate '
                    f'runs (--num_seeds=1 --seed=...), or move the lagging run directories away.'
                )
            runs = cls(request, writers, steps[0])
            if runs.already_finished:
                runs.check_present_dataset()
            else:
                for writer in writers:
                    writer.run_dir.check_logs()  # the run rewrites them: one it cannot read stops it now
            yield runs
        finally:
            for writer in writers:
                writer.close()
            for lock in locks:
                lock.release()

    @property
    def already_finished(self) -> bool:
        flags = self.request.flags
        return flags.resume and self.start_step == flags.train_steps and all(w.run_dir.is_done() for w in self.writers)

    def check_dataset(self, record: Dict):
        for writer in self.writers:
            writer.check_dataset(record)

    def check_present_dataset(self):
        """For a finished run's --resume, which trains nothing and so obtains no data: the files at --dataset_dir, when
        both are there, must be those the run trained on, as for any --resume (ResumeMismatchError naming the change)."""
        flags = self.request.flags
        paths = dataset_paths(flags.env_name, flags.dataset_dir)
        if all(os.path.isfile(path) for path in paths):
            self.check_dataset(provenance.dataset_record(flags.env_name, *paths))

    def begin(self, dataset: Dict):
        """The first writes (each seed's metadata, see RunWriter.begin), then the logs, truncated to the start step."""
        for writer in self.writers:
            writer.begin(dataset)
            writer.open_logs(self.start_step)

    def seed_agent(self, state, k: int):
        """Seed k's agent of `state` (stacked along a leading seed axis when there are several seeds)."""
        return jax.tree_util.tree_map(lambda x: x[k], state) if len(self.writers) > 1 else state

    def save_checkpoints(self, state, step: int, extras=None):
        """Each seed's checkpoint of `step`, with its entry of `extras` (one dict per seed) beside the agent."""
        for k, writer in enumerate(self.writers):
            writer.save_checkpoint(self.seed_agent(state, k), step, extras[k] if extras else None)

    def log_evaluation(self, step: int, per_seed, seconds: float):
        """Each seed's evaluation metrics of `step` (a seed that logged that step already, when a resumed run owed
        the evaluation to only some of its seeds, keeps its row), and one line per seed on the console."""
        for writer, metrics in zip(self.writers, per_seed):
            if step in writer.evaluated_steps:
                continue
            writer.log_eval(dict(metrics, **{'time/evaluation_seconds': seconds}), step)
            tasks = ' '.join(f'{key.split("/")[-1]}={v:.2f}' for key, v in metrics.items() if '/task' in key)
            tqdm.tqdm.write(f'seed {writer.seed} step {step}: success {metrics["evaluation/overall_success"]:.3f} {tasks}')

    def finish(self):
        """Every seed reached --train_steps: DONE in each directory."""
        for writer in self.writers:
            writer.mark_done()
