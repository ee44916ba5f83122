"""The research library's error types: "the user asked for something wrong". Each carries a one-paragraph message that
names the problem and its fix; main.py prints it without a traceback and exits with status 1 (runtime/exits.py). The
run machinery's own errors (run directories, failed writes and evaluations, memory) are in runtime/errors.py."""


class ConfigError(ValueError):
    """Unknown environment, agent, preset or config key, a config value of the wrong type, or a flag
    out of its range."""


class DatasetError(ValueError):
    """A dataset is missing, unobtainable, not a valid OGBench file, or would have to be overwritten."""
