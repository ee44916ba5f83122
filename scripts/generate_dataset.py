r"""Generate an OGBench dataset offline (train `<name>.npz` and val `<name>-val.npz`).

    python scripts/generate_dataset.py --env_name=pointmaze-medium-stitch-v0 --dataset_dir=~/.ogbench/data \
        [--num_episodes=N] [--num_val_episodes=M] [--seed=S] [--workers=W]

Defaults are OGBench's sizes (e.g. 5000 + 500 episodes of 201 rows for stitch). Each file gets a
provenance sidecar (`<file>.provenance.json`: generator, project version, seed, episode counts,
sha256); only pointmaze follows the very procedure OGBench's own data were collected with, so the
other generated datasets are this project's, not OGBench's. Existing files are never replaced: a
file already there is kept if it is exactly what this command would write (so a missing val file is
written alone), and the command stops otherwise. The folder's writability and free space are
checked before generating. A second process generating (or main.py obtaining) the same dataset into the
same folder waits for the first (it says for whom) and then uses its files. Ctrl-C stops with exit
status 130 and says which files, if any, were completed (none is ever left partly written); SIGTERM (143)
and SIGHUP (129, a closed terminal) stop it the same way, with the same message. A write that fails (a full disk,
a quota, a file-size limit, a read-only folder) ends in one paragraph saying what was kept (exit status 1); the
same command then completes the pair. Antmaze stitch
datasets are simulated by --workers processes (default: one per usable core); the files are
byte-identical for any number of workers.
"""
import os
import signal
import sys

from absl import app, flags

from datagen import GENERATABLE_DATASETS, describe, is_faithful, write_dataset
from runtime.dataset_files import dataset_paths
from runtime.exits import EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_PREEMPTED, parse_absl_flags, storage_failure
from utils.errors import DatasetError

FLAGS = flags.FLAGS
flags.DEFINE_enum('env_name', None, GENERATABLE_DATASETS, 'OGBench dataset name to generate.')
flags.DEFINE_string('dataset_dir', '~/.ogbench/data', 'Output folder.')
flags.DEFINE_integer('num_episodes', None, "Train episodes (default: OGBench's count).", lower_bound=1)
flags.DEFINE_integer('num_val_episodes', None, 'Val episodes (default: a tenth of the train episodes).', lower_bound=1)
flags.DEFINE_integer('seed', 0, 'Random seed; the same seed gives the same files.', lower_bound=0, upper_bound=2**32 - 1)
flags.DEFINE_integer('workers', None, 'Antmaze: processes simulating episodes (default: one per usable core).',
                     lower_bound=1)
flags.mark_flag_as_required('env_name')

RERUN = 'a file already complete is checked against it, never replaced.'
STOP_SIGNALS = {signal.SIGTERM: ('SIGTERM', EXIT_PREEMPTED), signal.SIGHUP: ('SIGHUP', EXIT_HANGUP)}


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stops generation as Ctrl-C does (the same clean-up), with its own exit status."""

    def __init__(self, signum):
        super().__init__(signum)
        self.name, self.code = STOP_SIGNALS[signum]


def raise_stop_signal(signum, _frame):
    raise StopSignal(signum)


def main(_):
    if not is_faithful(FLAGS.env_name):
        print(f'Generating {FLAGS.env_name} with {describe(FLAGS.env_name)}: these are NOT OGBench\'s data '
              f'(recorded in the provenance sidecars and shown by scripts/results.py).', flush=True)
    extra = {}
    if FLAGS.workers is not None:
        if not FLAGS.env_name.startswith('antmaze-'):
            sys.exit('Error: --workers applies to antmaze datasets only.')
        extra['num_workers'] = FLAGS.workers
    paths = dataset_paths(FLAGS.env_name, FLAGS.dataset_dir)
    present_before = {path for path in paths if os.path.lexists(path)}
    for signum in STOP_SIGNALS:
        signal.signal(signum, raise_stop_signal)
    try:
        train_path, val_path = write_dataset(
            FLAGS.env_name,
            FLAGS.dataset_dir,
            log=lambda message: print(message, flush=True),
            seed=FLAGS.seed,
            num_train_episodes=FLAGS.num_episodes,
            num_val_episodes=FLAGS.num_val_episodes,
            **extra,
        )
    except DatasetError as e:
        sys.exit(f'Error: {e}')
    except OSError as e:
        failure = storage_failure(e)
        if failure is None:  # not a failed write this project names: a bug, whose traceback is wanted
            raise
        cause, fix = failure
        sys.stdout.flush()
        sys.exit(f'\nError: Cannot write {e.filename or "a dataset file"}: {cause} ({e.strerror}). '
                 f'{what_was_written(FLAGS.env_name, paths, present_before)} {fix[0].upper() + fix[1:]}, then rerun the '
                 f'same command to write the rest: {RERUN}')
    except KeyboardInterrupt as stop:
        sys.stdout.flush()
        cause = stop.name if isinstance(stop, StopSignal) else 'Ctrl-C'
        print(f'\nInterrupted ({cause}): generation of {FLAGS.env_name} stopped. '
              f'{what_was_written(FLAGS.env_name, paths, present_before)} Rerun the same command to finish it: {RERUN}',
              file=sys.stderr, flush=True)
        sys.exit(stop.code if isinstance(stop, StopSignal) else EXIT_INTERRUPTED)
    print(f'Wrote {train_path} and {val_path}')


def what_was_written(dataset_name, paths, present_before):
    """What a stopped or failed generation left, in one sentence: files are published whole (val first, then train)
    or not at all."""
    completed = [path for path in paths if os.path.exists(path) and path not in present_before]
    missing = [path for path in paths if not os.path.exists(path)]
    if not completed:
        return (f'Nothing of {dataset_name} was written (files appear only when complete; no partial or temporary file '
                f'is left).')
    return (f'{", ".join(completed)} was written whole and is kept; {", ".join(missing) or "nothing else"} was not '
            f'(no partial or temporary file is left).')


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
