"""Errors that mean "the user asked for something wrong": main.py prints them as one paragraph
(no traceback) and exits with status 1."""


class ConfigError(ValueError):
    """Unknown environment, agent, preset or config key, or a config value of the wrong type."""


class DatasetError(ValueError):
    """A dataset is missing, unobtainable, or not a valid OGBench file."""


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or inf metric."""
