r"""Launch a grid of main.py runs: methods x environments x hyperparameters x seeds.

    python scripts/sweep.py --name=state --envs=antmaze-medium-stitch-v0,antmaze-large-stitch-v0 \
        --method=byol_gamma_a:alpha=1,6,40,100 --method=gcbc --seeds=0-9 \
        [--backend=local --workers=2 | --backend=local --gpus=0,1,2,3 --runs_per_gpu=2 |
         --backend=slurm --partition=gpu --time_min=1440] [--dry_run] \
        [--main_flags='--train_steps=500000'] [-- --agent.batch_size=256 --wandb_mode=offline]

Runs land in <save_dir>/<name>/<preset>_<env>[_a<alpha>]..._sd<seed>, each with a <run>.log beside it.
Finished runs (DONE, and a command that would change nothing) are skipped and the rest are passed --resume, so the
same command both starts and continues a sweep (also after a run stopped at main.py's --time_limit: exit status 75 =
rerun to resume), a longer --train_steps extends finished runs, and other changed settings are refused before
launching. Flags after `--` go to every main.py command. Before launching, each dataset is obtained once
here with the dataset flags given to main.py (--dataset_dir, --download/--nodownload, --generate_dataset);
one that cannot be obtained stops the sweep with main.py's message. The local backend (and Slurm with --wait) prints a
line when each job starts and ends, and every --progress_interval seconds (default 60) the step each running job has
reached, read from its train.csv (on Slurm, why a job is pending). See docs/experiments.md.
"""

import argparse
import math
import os
import re
import shlex
import shutil
import sys

from experiments import sweep
from main import request_of
from runtime import exits
from utils.errors import ConfigError, DatasetError


def parse_args(argv):
    # Everything after the first `--` is main.py's; later bare `--` (from wrapper scripts passing
    # "$@" through) only separate groups of those flags.
    own, main_flags = (argv[:argv.index('--')], [a for a in argv[argv.index('--') + 1:] if a != '--']) if '--' in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument('--name', required=True, help='Sweep name: the run group (directory under --save_dir).')
    parser.add_argument('--envs', required=True, help='Comma-separated OGBench dataset names.')
    parser.add_argument('--method', action='append', required=True,
                        help='PRESET[:KEY=V1,V2,...]...; repeat for several methods. Several values = a grid axis.')
    parser.add_argument('--seeds', default='0', help='Seeds: 0-9, 0,1,2 or 0-3,7.')
    parser.add_argument('--save_dir', default='runs', help='Root of run directories (main.py --save_dir).')
    parser.add_argument('--backend', choices=['local', 'slurm', 'submitit_local'], default='local',
                        help='local: a process pool here; slurm: submitit job array; submitit_local: submitit on this machine.')
    parser.add_argument('--workers', type=int, default=None,
                        help='local: parallel main.py processes (default 1; with --gpus: GPUs x --runs_per_gpu).')
    parser.add_argument('--runs_per_gpu', type=int, default=1,
                        help='local with --gpus: jobs sharing each GPU, each with its share of the GPU memory.')
    parser.add_argument('--gpu_mem_fraction', type=float, default=None,
                        help='local with --runs_per_gpu > 1: the memory fraction each job preallocates '
                             '(default 0.9 / runs_per_gpu - 0.02).')
    parser.add_argument('--progress_interval', type=float, default=sweep.PROGRESS_INTERVAL_S,
                        help='Seconds between the lines that give the step each running job has reached, or why a '
                             'Slurm job is pending (--wait) (0: none); a line also marks each job\'s start and end.')
    parser.add_argument('--prepare_datasets', action=argparse.BooleanOptionalAction, default=True,
                        help='Obtain each dataset here, once, before launching (default). --no-prepare_datasets: '
                             'this machine cannot see the jobs\' --dataset_dir; each job then obtains it itself.')
    parser.add_argument('--seeds_per_job', type=seeds_per_job, default=1,
                        help='Consecutive seeds trained in one process (main.py --num_seeds); "all": every seed of a '
                             'setting in one process.')
    parser.add_argument('--dry_run', action='store_true', help='Print the commands of unfinished runs; launch nothing.')
    parser.add_argument('--main_flags', action='append', default=[], type=shlex.split,
                        help='main.py flags for every run, as one string split as a shell would; repeatable, later ones '
                             'win, and flags after `--` come last and win over all.')
    parser.add_argument('--main_flag', action='append', dest='main_flags', type=lambda flag: [flag],
                        help='One main.py flag for every run, passed as given, never split (wrapper scripts pass '
                             'values this way: a path may hold spaces); repeatable, in order with --main_flags.')
    parser.add_argument('--main', default=sweep.DEFAULT_MAIN, help='Training script (tests substitute a stub).')
    slurm = parser.add_argument_group('slurm (and submitit_local)')
    defaults = sweep.SlurmOptions()
    slurm.add_argument('--partition', default=defaults.partition)
    slurm.add_argument('--account', default=defaults.account)
    slurm.add_argument('--qos', default=defaults.qos)
    slurm.add_argument('--time_min', type=int, default=defaults.time_min, help='Time limit per job; jobs past it are requeued and resume.')
    parser.add_argument('--gpus', default=None,
                        help='local: GPU ids to run on, e.g. 0,1,2,3 (each job sees one: CUDA_VISIBLE_DEVICES); '
                             f'slurm and submitit_local: GPUs per job (default {defaults.gpus}).')
    slurm.add_argument('--cpus', type=int, default=defaults.cpus, help='CPUs per job.')
    slurm.add_argument('--mem_gb', type=float, default=defaults.mem_gb, help='Memory per job.')
    slurm.add_argument('--array_parallelism', type=int, default=defaults.array_parallelism, help='Array tasks running at once.')
    slurm.add_argument('--max_timeouts', type=int, default=defaults.max_timeouts,
                       help="Requeues of a job after Slurm's time limit, and separately after main.py's --time_limit, "
                            'before the job is reported instead.')
    slurm.add_argument('--slurm_setup', action='append', default=[], help='Shell line run before each job; repeatable.')
    slurm.add_argument('--wait', action='store_true',
                       help='slurm: wait for the jobs, report each as it ends and exit as the local backend does '
                            '(always on for submitit_local).')
    args = parser.parse_args(own)
    if not (math.isfinite(args.progress_interval) and args.progress_interval >= 0):
        parser.error(f'--progress_interval must be a number of seconds, 0 (no progress lines) or more, got '
                     f'{args.progress_interval:g}.')
    for name, least in (('time_min', 1), ('cpus', 1), ('array_parallelism', 1), ('max_timeouts', 0)):
        if getattr(args, name) < least:
            parser.error(f'--{name} must be at least {least}, got {getattr(args, name)}.')
    if not (math.isfinite(args.mem_gb) and args.mem_gb > 0):
        parser.error(f'--mem_gb must be a positive number of GB, got {args.mem_gb:g}.')
    try:
        if args.backend == 'local':
            args.gpu_ids = sweep.parse_gpus(args.gpus) if args.gpus is not None else None
            args.slots = sweep.worker_slots(args.workers, args.gpu_ids, args.runs_per_gpu, args.gpu_mem_fraction)
        else:
            if args.workers is not None or args.runs_per_gpu != 1 or args.gpu_mem_fraction is not None:
                raise ConfigError(f'--workers, --runs_per_gpu and --gpu_mem_fraction apply to --backend=local; with '
                                  f'--backend={args.backend} each job gets --gpus GPUs and Slurm places it.')
            if args.gpus is None:
                args.gpus = defaults.gpus
            elif not re.fullmatch(r'\d+', args.gpus.strip()):
                raise ConfigError(f'--gpus={args.gpus}: with --backend={args.backend} it is the number of GPUs per job '
                                  f'(e.g. --gpus=1); GPU ids (--gpus=0,1) are for --backend=local.')
            args.gpus = int(args.gpus)
    except ConfigError as e:
        parser.error(str(e))
    return args, [flag for flags in args.main_flags for flag in flags] + main_flags


def seeds_per_job(text: str):
    """--seeds_per_job: a positive count, or "all" (None: every seed of a setting in one job)."""
    if text == 'all':
        return None
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is neither a number of seeds nor "all"') from None
    if count < 1:
        raise argparse.ArgumentTypeError(f'{count} is not a positive number of seeds: give 1 or more, or "all"')
    return count


def main(argv=None):
    args, main_flags = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        methods = [sweep.parse_method(spec) for spec in args.method]
        envs = [env.strip() for env in args.envs.split(',') if env.strip()]
        seeds = sweep.parse_seeds(args.seeds)
        runs = sweep.build_runs(args.name, methods, envs, seeds, args.save_dir)
        jobs = sweep.build_jobs(runs, main_flags, len(seeds) if args.seeds_per_job is None else args.seeds_per_job,
                                main_path=os.path.abspath(args.main), request_of=request_of)
        problems, requests = sweep.check_job_commands(jobs, request_of)
    except ConfigError as e:
        sys.exit(f'Error: {e}')
    if problems and not args.dry_run:
        sys.exit('Error: this sweep would fail at start:\n  ' + '\n  '.join(problems))
    # Jobs pinned to GPUs this machine cannot give them would train on the CPU without a word.
    gpus = sweep.gpu_problem(args.gpu_ids) if args.backend == 'local' and args.gpu_ids and jobs else None
    if gpus and not args.dry_run:
        sys.exit(f'Error: {gpus} Nothing was launched.')
    for problem in problems + ([gpus] if gpus else []):
        print(f'Warning: {problem}', file=sys.stderr)

    print(f'# sweep {args.name}: {sweep.describe(runs, jobs)}', flush=True)
    if args.dry_run:
        try:
            for job in jobs:
                print(job.shell_command())
            sys.stdout.flush()
        except BrokenPipeError:  # `--dry_run | head`: the reader has seen enough.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if not jobs:
        return 0
    if args.prepare_datasets:
        prepare(args, requests)
    if args.backend == 'local':
        outcomes = sweep.launch_local(jobs, args.workers, gpus=args.gpu_ids, runs_per_gpu=args.runs_per_gpu,
                                      mem_fraction=args.gpu_mem_fraction, progress_interval=args.progress_interval)
        report, status = sweep.summarize_local(outcomes)
        print(report)
        return status
    return submit(args, jobs)


def prepare(args, requests):
    """Each dataset of the pending jobs obtained once, here, before any job starts; a dataset that cannot be
    obtained stops the sweep with the paragraph main.py would print."""
    try:
        paths = sweep.prepare_datasets(requests, log=lambda message: print(f'# {message}', flush=True))
    except (ConfigError, DatasetError, OSError) as e:
        error = exits.named_error(e)
        if error is None:  # not a failure main.py names: a bug, whose traceback is wanted
            raise
        sys.exit(f'Error: {error} No job of sweep {args.name} was launched.')
    for env, (train_path, _) in paths.items():
        print(f'# dataset {env}: {train_path} (and its -val file) ready', flush=True)


def submit(args, jobs):
    options = sweep.SlurmOptions(
        partition=args.partition, account=args.account, qos=args.qos, time_min=args.time_min, gpus=args.gpus,
        cpus=args.cpus, mem_gb=args.mem_gb, array_parallelism=args.array_parallelism, max_timeouts=args.max_timeouts,
        setup=tuple(args.slurm_setup),
    )
    folder = os.path.join(jobs[0].runs[0].save_dir, args.name, 'submitit')
    cluster = 'slurm' if args.backend == 'slurm' else 'local'
    before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    made = [path for path in (os.path.dirname(os.path.dirname(folder)), os.path.dirname(folder), folder)
            if not os.path.exists(path)]
    log_starts = [os.path.getsize(job.log_path) if os.path.exists(job.log_path) else 0 for job in jobs]
    try:
        submitted = sweep.launch_submitit(jobs, folder, args.name, options, cluster=cluster)
    except Exception as e:  # submitit wraps sbatch's refusal in several types
        for name in set(os.listdir(folder)) - before if os.path.isdir(folder) else ():
            path = os.path.join(folder, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        for path in reversed(made):  # the folders it made, when nothing else came into them
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
        reason = next((line.strip() for line in str(e).splitlines() if 'error' in line.lower()), str(e).strip()[:300])
        sys.exit(f'Error: Slurm refused the job array ({type(e).__name__}: {reason}). Nothing was submitted and '
                 f'nothing was left in {folder}. Check --partition, --account, --qos and the resources asked for.')
    print(f'Submitted {len(submitted)} jobs (first id {submitted[0].job_id}); submitit logs in {folder}, '
          f'main.py logs next to each run directory.', flush=True)
    if not (args.wait or cluster == 'local'):
        return 0
    array = submitted[0].job_id.split('_')[0]
    try:
        outcomes = sweep.wait_submitit(jobs, submitted, log_starts, cluster, progress_interval=args.progress_interval)
    except KeyboardInterrupt:
        print(f'\nInterrupted: stopped waiting for job array {array}' + (', whose jobs go on in Slurm' * (cluster == 'slurm'))
              + '. Rerun the sweep once they have ended: it resumes what did not finish.', flush=True)
        return exits.EXIT_INTERRUPTED
    except ConfigError as e:
        sys.exit(f'Error: {e}')
    report, status = sweep.summarize_submitit(outcomes, submitted)
    print(report, flush=True)
    return status


if __name__ == '__main__':
    sys.exit(main())
