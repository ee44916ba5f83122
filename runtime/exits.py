"""How main.py ends: its exit statuses, and the one-paragraph message it prints for an error that is not a bug (a
named error type of utils/errors.py or runtime/errors.py, a failed write, an out-of-memory error), where a traceback
would only hide the fix. And how the absl scripts end when asked for help."""

import errno

from runtime.errors import DeviceMemoryError, EvaluationError, NonFiniteLossError, StorageError
from utils.errors import ConfigError, DatasetError

NAMED_ERRORS = (ConfigError, DatasetError, NonFiniteLossError, EvaluationError, StorageError, DeviceMemoryError)

# What a failed write means and what to do, by errno.
STORAGE_ERRNOS = {
    errno.ENOSPC: ('the disk is full', 'free space'),
    errno.EDQUOT: ('the disk quota is exhausted', 'free space or raise the quota'),
    errno.EFBIG: ('the file-size limit was reached', 'raise the limit (ulimit -f)'),
    errno.EROFS: ('the file system is read-only', 'use a folder you can write (--save_dir; --dataset_dir for data)'),
    errno.EACCES: ('permission denied', 'use a folder you can write (--save_dir; --dataset_dir for data)'),
    errno.EPERM: ('the operation is not permitted', 'use a folder you can write (--save_dir; --dataset_dir for data)'),
    errno.ENOTDIR: ('a part of the path is a file, not a directory', 'pass folders that are directories'),
}


def storage_failure(error: BaseException):
    """(what happened, what to do) for a failed write whose errno STORAGE_ERRNOS names, else None."""
    return STORAGE_ERRNOS.get(error.errno) if isinstance(error, OSError) else None


def named_error(error: BaseException, request=None):
    """The one-paragraph error main.py prints for `error`, or None if it is a bug (a traceback is then right)."""
    if isinstance(error, NAMED_ERRORS):
        return error
    if storage_failure(error) is not None:
        cause, fix = storage_failure(error)
        return StorageError(
            f'Cannot write {error.filename or "a file"}: {cause} ({error.strerror}). Files are written atomically, so '
            f'nothing was left half-written: any checkpoint already saved, and the logs up to it, are intact. '
            f'{fix[0].upper() + fix[1:]}, then rerun (with --resume to continue from the last checkpoint).'
        )
    return out_of_memory_error(error, request)


def out_of_memory_error(error: BaseException, request=None):
    """A DeviceMemoryError paragraph if `error` is XLA's out-of-memory, else None."""
    if not is_out_of_memory(error):
        return None
    import jax

    device = jax.devices()[0]
    first_line = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
    sizes = f' with --agent.batch_size={request.config.batch_size} and --num_seeds={request.flags.num_seeds}' if request else ''
    return DeviceMemoryError(
        f'Out of memory on the {device.platform.upper()} ({device.device_kind}){sizes} (XLA: {first_line[:300]}). '
        f'Nothing computed was lost: the last checkpoint, if any, is kept. Use a smaller --agent.batch_size or '
        f'--num_seeds (or smaller networks), or a device with more memory.'
    )


def is_out_of_memory(error: BaseException) -> bool:
    """Whether an exception is XLA's out-of-memory (RESOURCE_EXHAUSTED on accelerators, "Out of memory
    allocating ..." on the CPU), which main.py turns into a DeviceMemoryError paragraph."""
    text = str(error)
    return 'RESOURCE_EXHAUSTED' in text or 'out of memory' in text.lower()


# main.py's exit statuses besides 0 (finished) and 1 (a named error above). Each of these means the run stopped
# with a checkpoint of its last step saved, and `--resume` continues it exactly.
EXIT_TIME_LIMIT = 75  # --time_limit reached (75 is EX_TEMPFAIL: "try again later")
EXIT_HANGUP = 129  # SIGHUP (the terminal closed, an ssh connection dropped): handled as SIGTERM
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_PREEMPTED = 143  # SIGTERM (e.g. Slurm preemption or a job's time limit)


def script_main(main) -> int:
    """How a table, figure or analysis script ends, run as `sys.exit(script_main(main))`: `main()`'s status (0 when it
    returns something else); Ctrl-C, a clean "Interrupted" (130); a write that fails as STORAGE_ERRNOS names (a full
    disk, a read-only folder), one paragraph (1). Every file they write is written atomically: none is left half-written."""
    import sys

    try:
        status = main()
    except KeyboardInterrupt:
        print('\nInterrupted (Ctrl-C): stopped; no file was left half-written.', file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as e:
        if storage_failure(e) is None:
            raise
        sys.exit(f'Error: Cannot write {e.filename or "a file"}: {storage_failure(e)[0]} ({e.strerror}); no file was left '
                 f'half-written. Free space, or pass an output folder you can write (--out, --out_dir), then rerun.')
    return status if isinstance(status, int) else 0


def parse_absl_flags(argv):
    """The flag parser of every absl script: `app.run(main, flags_parser=parse_absl_flags)`. absl's own parser, except
    that a request for help (--help, --helpshort, --helpfull, and -h, which absl alone does not know) prints the usage
    and exits with status 0, as main.py's and the argparse scripts' do. absl's help flags exit with status 1, which a
    shell (`&&`, `set -e`) or a job scheduler reads as a failure. A flag error still exits 1 with absl's message."""
    from absl import app, flags

    options = argv[1:argv.index('--')] if '--' in argv else argv[1:]
    argv = [argv[0]] + ['--help' if arg == '-h' else arg for arg in options] + argv[1 + len(options):]
    try:
        return flags.FLAGS(argv)
    except flags.Error:
        return app.parse_flags_with_usage(argv)  # the same error again: absl's message, exit 1
    except SystemExit as end:  # only absl's help flags exit while parsing, once the usage is printed
        raise SystemExit(0 if end.code == 1 else end.code) from None
