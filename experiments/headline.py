"""The paper's headline row, trained in chunks that each fit one short GPU call (scripts/gpu_headline.sh).

GCBC vs BYOL-γ^a (one alpha of the paper's grid 1, 6, 40, 100) on antmaze-medium-stitch at the paper's
budget: 1M steps at batch 1024, an evaluation (5 tasks x 50 episodes) every 100k steps, a seed's score the
mean of its last 3 evaluations, 10 seeds. The seeds go in groups small enough that the state a group
leaves between calls (its checkpoints, about 6.7 MB per GCBC seed and 7.6 MB per BYOL-γ^a seed) can be
carried to the next machine. Each invocation:

1. unpacks the state a previous call packed (`--state_in`), unless the run directories are already here;
2. trains the first group with unfinished runs, both methods at once (one main.py process per method,
   the group's seeds vmapped), then the next group while at least `--min_group_seconds` are left;
3. stops training with SIGTERM at `--chunk_seconds` after the invocation started (`--started_at`), or
   once every run of the group logged `--chunk_steps` more steps: main.py saves a checkpoint and exits,
   and `--resume` continues exactly where it stopped (rows logged after a checkpoint are dropped on
   resume and rewritten identically). A process still alive at `--kill_seconds` is killed; its last
   periodic checkpoint (`--save_interval`) then holds, so steps are lost but never rows;
4. prints each run's step, the chunks left and an ETA from this invocation's rate;
5. packs what the next call needs into `--state_out`: the sweep folder (run directories and job logs)
   without the checkpoints of finished runs, in tar parts of at most 15 MiB and a manifest with their
   sha256 (`unpack_state` refuses an incomplete or damaged set);
6. once every run is done, prints the results table with bootstrap CIs, per-task success, and each
   seed's score.

Run directories are those of experiments/sweep.py (`<save_dir>/gpu_headline/<preset>_<env>[_a<alpha>]_sd<seed>`).
"""

import argparse
import hashlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import time
from typing import Dict, List, Optional, Sequence

import msgpack

from experiments import sweep
from utils.atomic_io import atomic_write_bytes, read_json, write_json
from utils.checkpoints import CHECKPOINT_NAME
from utils.rundir import RunDir

SWEEP_NAME = 'gpu_headline'
ALPHAS = ('1', '6', '40', '100')
MANIFEST = 'headline_state.json'
PART_PREFIX = 'headline_state.tar.'
PART_BYTES = 15 << 20  # The device tool returns files of up to 16 MiB, 8 of them, 64 MiB in all.
CARRY_LIMIT_BYTES = 64 << 20
STOPPED_CODES = (sweep.PREEMPTED_EXIT_CODE, 130, -signal.SIGTERM, -signal.SIGKILL)


def parse_args(argv):
    own, main_flags = (argv[:argv.index('--')], [a for a in argv[argv.index('--') + 1:] if a != '--']) if '--' in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--env', default='antmaze-medium-stitch-v0')
    parser.add_argument('--dataset_dir', required=True)
    parser.add_argument('--save_dir', default='runs')
    parser.add_argument('--alpha', default='1', choices=ALPHAS, help="BYOL-γ^a's alpha, from the paper's grid.")
    parser.add_argument('--seeds', default='0-9')
    parser.add_argument('--group_seeds', type=int, default=2, help='Seeds per method trained (and carried) at once.')
    parser.add_argument('--train_steps', type=int, default=1_000_000)
    parser.add_argument('--eval_interval', type=int, default=100_000)
    parser.add_argument('--eval_episodes', type=int, default=50)
    parser.add_argument('--save_interval', type=int, default=25_000, help='Periodic checkpoints (what a kill falls back to).')
    parser.add_argument('--started_at', type=float, default=None, help='Unix time the invocation started (default: now).')
    parser.add_argument('--chunk_seconds', type=float, default=420, help='SIGTERM to training this long after the start.')
    parser.add_argument('--kill_seconds', type=float, default=540, help='SIGKILL to training still alive this long after the start.')
    parser.add_argument('--chunk_steps', type=int, default=0, help='Also stop once every run gained this many steps (0: no step budget).')
    parser.add_argument('--min_group_seconds', type=float, default=150,
                        help='After a group finished, start the next one only with this much time left.')
    parser.add_argument('--state_in', default='', help='Folder holding the parts a previous call packed.')
    parser.add_argument('--state_out', default='', help='Folder to pack the state into for the next call.')
    args = parser.parse_args(own)
    if args.group_seeds < 1:
        parser.error('--group_seeds must be at least 1.')
    if not args.chunk_seconds < args.kill_seconds:
        parser.error('--chunk_seconds must be below --kill_seconds.')
    return args, main_flags


# ----------------------------------------------------------------------------------------------
# The grid and where each run stands.


def build_runs(args) -> List[sweep.SweepRun]:
    methods = [sweep.parse_method('gcbc'), sweep.parse_method(f'byol_gamma_a:alpha={args.alpha}')]
    return sweep.build_runs(SWEEP_NAME, methods, [args.env], sweep.parse_seeds(args.seeds), args.save_dir)


def main_flags_for(args, extra: Sequence[str]) -> List[str]:
    return [f'--dataset_dir={args.dataset_dir}', '--nodownload', f'--train_steps={args.train_steps}',
            f'--eval_interval={args.eval_interval}', f'--eval_episodes={args.eval_episodes}',
            f'--save_interval={args.save_interval}', '--wandb_mode=disabled', *extra]


def seed_groups(seeds: Sequence[int], size: int) -> List[List[int]]:
    seeds = sorted(seeds)
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]


def checkpoint_step(run_dir: RunDir) -> Optional[int]:
    if not run_dir.has_checkpoint():
        return None
    with open(run_dir.checkpoint_path, 'rb') as f:
        return int(msgpack.unpackb(f.read(), raw=False, strict_map_key=False)['step'])


def run_step(run: sweep.SweepRun, train_steps: int) -> int:
    """Where `run` resumes from: its checkpoint's step, `train_steps` once done, 0 before it started."""
    run_dir = RunDir(run.run_dir)
    step = checkpoint_step(run_dir)
    if step is not None:
        return step
    return train_steps if run_dir.is_done() else 0


def logged_step(run: sweep.SweepRun, since: float) -> int:
    """The step of the last train.csv row written after `since` (Unix time), else -1."""
    path = RunDir(run.run_dir).train_log_path
    try:
        if os.path.getmtime(path) < since:
            return -1
        with open(path) as f:
            last = f.read().rstrip('\n').rsplit('\n', 1)[-1]
        return int(last.split(',', 1)[0])
    except (OSError, ValueError):
        return -1


def method_label(run: sweep.SweepRun) -> str:
    return run.preset + ''.join(f' a={value}' for key, value in run.overrides if key == 'alpha')


def format_steps(runs: Sequence[sweep.SweepRun], steps: Dict[str, int]) -> str:
    methods = list(dict.fromkeys(method_label(run) for run in runs))
    seeds = sorted({run.seed for run in runs})
    lines = [f'  {"seed":>4s}  ' + '  '.join(f'{m:>18s}' for m in methods)]
    for seed in seeds:
        cells = [next((f'{steps[r.name]:>18d}' for r in runs if r.seed == seed and method_label(r) == m), f'{"":>18s}') for m in methods]
        lines.append(f'  {seed:>4d}  ' + '  '.join(cells))
    return '\n'.join(lines)


# ----------------------------------------------------------------------------------------------
# Training one group until the deadline.


def train_group(jobs: Sequence[sweep.Job], start_steps: Dict[str, int], train_steps: int, term_at: float, kill_at: float,
                chunk_steps: int, stop_requested, out=sys.stdout) -> Dict[str, int]:
    """Runs the jobs (one main.py process each, at once) until they finish, or a job's runs all gained
    `chunk_steps` (that job alone is stopped), or the deadline; returns each job's exit status."""
    env = sweep.child_environment(len(jobs))
    launched, processes = time.time(), {}
    for job in jobs:
        os.makedirs(os.path.dirname(job.log_path), exist_ok=True)
        with open(job.log_path, 'a') as log:
            log.write(f'\n=== {time.strftime("%Y-%m-%dT%H:%M:%S")} {job.shell_command()}\n')
            log.flush()
            # Its own session: SIGTERM reaches main.py alone (its evaluation workers finish the episodes
            # in flight), SIGKILL the whole process group.
            processes[job.name] = subprocess.Popen(job.command, cwd=sweep.REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                                   env=env, start_new_session=True)
    print(f'started {", ".join(processes)}; logs next to the run directories', file=out, flush=True)

    def reached_step_budget(job):
        # A run at its last step is left to finish (final evaluation, DONE) rather than stopped.
        steps = [logged_step(run, launched) for run in job.runs]
        return chunk_steps > 0 and all(start_steps[run.name] + chunk_steps <= step < train_steps for run, step in zip(job.runs, steps))

    terminated = set()
    killed = False
    while any(p.poll() is None for p in processes.values()):
        now = time.time()
        for job in jobs:
            process = processes[job.name]
            if job.name in terminated or process.poll() is not None:
                continue
            reason = ('stop requested' if stop_requested() else 'time budget reached' if now >= term_at
                      else 'step budget reached' if reached_step_budget(job) else None)
            if reason:
                print(f'{job.name}: {reason}: SIGTERM (checkpoint, then exit)', file=out, flush=True)
                process.terminate()
                terminated.add(job.name)
        if not killed and now >= kill_at:
            print('still running at the kill deadline: SIGKILL (the last periodic checkpoint holds)', file=out, flush=True)
            for process in processes.values():
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
            killed = True
        time.sleep(0.2)
    return {name: process.returncode for name, process in processes.items()}


# ----------------------------------------------------------------------------------------------
# Carrying the state between machines.


def state_files(sweep_dir: str) -> List[str]:
    """Every file of the sweep folder but the checkpoints of finished runs, relative to its parent."""
    files = []
    for root, dirs, names in os.walk(sweep_dir):
        dirs.sort()
        done = RunDir(root).is_done()
        for name in sorted(names):
            if (name == CHECKPOINT_NAME and done) or name.endswith('.tmp'):
                continue
            files.append(os.path.relpath(os.path.join(root, name), os.path.dirname(sweep_dir)))
    return files


def pack_state(sweep_dir: str, out_dir: str, out=sys.stdout) -> int:
    """Tar parts of the sweep folder and their manifest in `out_dir`; returns the total bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode='w') as archive:
        for name in state_files(sweep_dir):
            archive.add(os.path.join(os.path.dirname(sweep_dir), name), arcname=name)
    data = buffer.getvalue()
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):
        if name.startswith(PART_PREFIX) or name == MANIFEST:
            os.remove(os.path.join(out_dir, name))
    parts = []
    for index, offset in enumerate(range(0, len(data), PART_BYTES)):
        part = data[offset:offset + PART_BYTES]
        name = f'{PART_PREFIX}{index:02d}'
        atomic_write_bytes(os.path.join(out_dir, name), part)
        parts.append(dict(name=name, bytes=len(part), sha256=hashlib.sha256(part).hexdigest()))
    write_json(os.path.join(out_dir, MANIFEST), dict(sweep=os.path.basename(sweep_dir), bytes=len(data), parts=parts))
    print(f'packed the state for the next call: {len(data) / 2**20:.1f} MiB in {len(parts)} part(s) + {MANIFEST} in {out_dir}',
          file=out, flush=True)
    if len(data) > CARRY_LIMIT_BYTES:
        print(f'WARNING: the state exceeds {CARRY_LIMIT_BYTES >> 20} MiB: lower --group_seeds (HEADLINE_GROUP_SEEDS).', file=out, flush=True)
    return len(data)


def unpack_state(in_dir: str, save_dir: str, out=sys.stdout) -> bool:
    """Restores a packed sweep folder into `save_dir` unless it is already there; False if there is nothing to unpack."""
    manifest_path = os.path.join(in_dir, MANIFEST)
    if not os.path.exists(manifest_path):
        print(f'no packed state in {in_dir}: starting from what {save_dir} holds', file=out, flush=True)
        return False
    manifest = read_json(manifest_path)
    target = os.path.join(save_dir, manifest['sweep'])
    if os.path.exists(target):
        print(f'{target} is already here (a warm machine, or a local run): not unpacking {in_dir}', file=out, flush=True)
        return False
    chunks = []
    for part in manifest['parts']:
        path = os.path.join(in_dir, part['name'])
        data = open(path, 'rb').read() if os.path.exists(path) else b''
        if len(data) != part['bytes'] or hashlib.sha256(data).hexdigest() != part['sha256']:
            raise SystemExit(f'Error: {path} is missing or damaged (the manifest lists {len(manifest["parts"])} parts); '
                             f'carry every {PART_PREFIX}* file and {MANIFEST} from the previous call.')
        chunks.append(data)
    os.makedirs(save_dir, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(b''.join(chunks))) as archive:
        archive.extractall(save_dir, filter='data')
    print(f'unpacked the state of the previous call ({manifest["bytes"] / 2**20:.1f} MiB) into {target}', file=out, flush=True)
    return True


# ----------------------------------------------------------------------------------------------
# Results.


def print_results(sweep_dir: str):
    """scripts/results.py's table (bootstrap CIs, per-task success), then every seed's score and curve."""
    from experiments import results as R

    sys.stdout.flush()
    subprocess.run([sys.executable, os.path.join(sweep.REPO_ROOT, 'scripts', 'results.py'), f'--runs={sweep_dir}',
                    '--format=markdown', '--ci', '--per_task'], check=False)
    print('\nPer-seed scores (mean of the last 3 evaluations x 100), then every evaluation:')
    for run in R.load_runs([sweep_dir]):
        alpha = f'alpha={run.config["alpha"]}' if run.method != 'gcbc' and 'alpha' in run.config else ''
        score = R.seed_score(run)
        curve = ' '.join(f'{100 * v:.0f}' for v in run.values)
        print(f'  {run.method:>14s} {alpha:>9s} seed {run.seed}: {"-" if score is None else f"{score:5.1f}":>5s}   [{curve}]')
    sys.stdout.flush()


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args, extra_flags = parse_args(sys.argv[1:] if argv is None else argv)
    started = args.started_at or time.time()
    term_at, kill_at = started + args.chunk_seconds, started + args.kill_seconds
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))

    if args.state_in:
        unpack_state(args.state_in, args.save_dir)
    runs = build_runs(args)
    main_flags = main_flags_for(args, extra_flags)
    sweep_dir = os.path.join(os.path.abspath(os.path.expanduser(args.save_dir)), SWEEP_NAME)
    groups = seed_groups(sorted({run.seed for run in runs}), args.group_seeds)
    before = {run.name: run_step(run, args.train_steps) for run in runs}
    print(f'== {SWEEP_NAME}: gcbc vs byol_gamma_a (alpha {args.alpha}) on {args.env}, seeds {args.seeds} in groups of '
          f'{args.group_seeds}, {args.train_steps} steps; step of each run at the start:\n{format_steps(runs, before)}', flush=True)

    trained = {}  # group index -> steps its slowest run advanced in this invocation
    failed = False
    for index, group in enumerate(groups):
        group_runs = [run for run in runs if run.seed in group]
        jobs = sweep.build_jobs(group_runs, main_flags, seeds_per_job=len(group))
        if not jobs:
            continue
        left = term_at - time.time()
        if stop or left <= 0 or (trained and left < args.min_group_seconds):
            break  # The first group starts whenever time is left; another only with --min_group_seconds left.
        start = {run.name: run_step(run, args.train_steps) for run in group_runs}
        print(f'-- group {index + 1}/{len(groups)} (seeds {group[0]}-{group[-1]}) from step '
              f'{min(start.values())}: until {time.strftime("%H:%M:%S", time.localtime(term_at))} '
              f'or {args.chunk_steps or "any number of"} steps', flush=True)
        codes = train_group(jobs, start, args.train_steps, term_at, kill_at, args.chunk_steps, lambda: bool(stop))
        after = {run.name: run_step(run, args.train_steps) for run in group_runs}
        trained[index] = min(after.values()) - min(start.values())  # the group's slowest run
        before.update(after)
        for job in jobs:
            if codes[job.name] not in (0,) + STOPPED_CODES:
                failed = True
                print(f'FAILED {job.name} (exit {codes[job.name]}); log {job.log_path}:\n{sweep.log_tail(job.log_path)}', flush=True)
        if failed or not all(run.is_finished() for run in group_runs):
            break  # A failure, or stopped by the deadline: the next call continues this group.

    elapsed = time.time() - started
    done = all(run.is_finished() for run in runs)
    print(f'== after {elapsed:.0f} s: step of each run\n{format_steps(runs, before)}', flush=True)
    if not done:
        print(progress_report(groups, runs, before, trained, args.train_steps, elapsed), flush=True)
    if args.state_out:
        pack_state(sweep_dir, args.state_out)
    if done:
        print('== all runs done:', flush=True)
        print_results(sweep_dir)
    elif not failed:
        print('NOT FINISHED: run the same command again (with this call\'s state) to continue.', flush=True)
    return 1 if failed else 0


def progress_report(groups, runs, steps, trained, train_steps, elapsed) -> str:
    """Chunks left and an ETA, from the steps the slowest run of each group gained in this invocation."""
    left = [train_steps - min(steps[run.name] for run in runs if run.seed in group) for group in groups]
    lines = [f'groups left: {sum(1 for n in left if n > 0)} of {len(groups)}; steps left (slowest run of each group): '
             + ', '.join(str(n) for n in left)]
    gained = sum(trained.values())
    if gained <= 0:
        lines.append('no steps gained in this call: no rate to estimate from (is the budget shorter than the start-up? '
                     'raise HEADLINE_CHUNK_SECONDS)' if trained else 'no group trained in this call: no time was left (data generation?)')
        return '\n'.join(lines)
    chunks = max(1, math.ceil(sum(left) / gained))  # at least one: runs at their last step still finish
    lines.append(f'rate: the slowest runs advanced {gained} steps in this call of {elapsed:.0f} s ({gained / elapsed:.1f} steps/s, '
                 f'start-up included); chunks left: about {chunks} like this one, ETA {chunks * elapsed / 60:.0f} min')
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
