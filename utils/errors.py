"""Errors that mean "the user asked for something wrong" or "the run cannot go on safely": main.py
prints them as one paragraph (no traceback) and exits with status 1."""


class ConfigError(ValueError):
    """Unknown environment, agent, preset or config key, a config value of the wrong type, or a flag
    out of its range."""


class DatasetError(ValueError):
    """A dataset is missing, unobtainable, not a valid OGBench file, or would have to be overwritten."""


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or inf metric."""


class RunDirError(ConfigError):
    """A run directory cannot be used as asked (holds a finished run, a checkpoint without --resume, ...)."""


class RunLockedError(RunDirError):
    """Another process owns the run directory."""


class ResumeMismatchError(RunDirError):
    """--resume asked for settings that differ from those the run was started with."""


class EvaluationError(RuntimeError):
    """An evaluation failed (after the training it evaluates was checkpointed)."""


class StorageError(RuntimeError):
    """A file could not be written: not a directory, not writable, read-only or full."""


class DeviceMemoryError(RuntimeError):
    """The accelerator (or host) ran out of memory in a compiled step."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether an exception is XLA's out-of-memory (RESOURCE_EXHAUSTED on accelerators, "Out of memory
    allocating ..." on the CPU), which main.py turns into a DeviceMemoryError paragraph."""
    text = str(error)
    return 'RESOURCE_EXHAUSTED' in text or 'out of memory' in text.lower()


# main.py's exit statuses besides 0 (finished) and 1 (a named error above). Each of these means the run stopped
# with a checkpoint of its last step saved, and `--resume` continues it exactly.
EXIT_TIME_LIMIT = 75  # --time_limit reached (75 is EX_TEMPFAIL: "try again later")
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_PREEMPTED = 143  # SIGTERM (e.g. Slurm preemption or a job's time limit)
