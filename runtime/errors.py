"""The run machinery's error types: "the run cannot go on safely" (and the run-directory kinds of "the user asked for
something wrong"). Each carries a one-paragraph message that names the problem and its fix; main.py prints it without
a traceback and exits with status 1 (runtime/exits.py). The research library's own are in utils/errors.py."""

from utils.errors import ConfigError


class RunDirError(ConfigError):
    """A run directory cannot be used as asked (holds a finished run, a checkpoint without --resume, ...)."""


class RunLockedError(RunDirError):
    """Another process owns the run directory."""


class ResumeMismatchError(RunDirError):
    """--resume asked for settings that differ from those the run was started with."""


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or inf metric."""


class EvaluationError(RuntimeError):
    """An evaluation failed (after the training it evaluates was checkpointed)."""


class StorageError(RuntimeError):
    """A file could not be written: not a directory, not writable, read-only or full."""


class DeviceMemoryError(RuntimeError):
    """The accelerator (or host) ran out of memory in a compiled step, or the host's limits leave a run too little."""
