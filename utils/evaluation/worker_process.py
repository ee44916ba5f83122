"""One evaluation worker process of an `EnvWorkers` pool (utils/evaluation/workers.py), started as
`python -m utils.evaluation.worker_process <socket fd>`. Nothing imports this module, so runpy runs it once; it loads
no JAX."""

import multiprocessing.connection
import signal
import sys
import traceback

from utils.evaluation.envs import make_env
from utils.evaluation.episodes import GymEpisodes


def serve(fd):
    """A worker's life: build its envs, then answer start / step / results requests until told to close or until
    the main process goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal: main.py checkpoints and ends its workers
    connection = multiprocessing.connection.Connection(fd)
    episodes = None
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return  # the main process closed the socket or died
        kind, args = request[0], request[1:]
        if kind == 'close':
            return
        try:
            if kind == 'make':
                env_name, count = args
                episodes = GymEpisodes([make_env(env_name) for _ in range(count)])
                continue  # no reply: the first 'start' waits for the envs anyway
            # Replies are (True, result) or (False, traceback): plain tuples, since this module is __main__ here.
            if kind == 'start':
                reply = True, episodes.start(*args)
            elif kind == 'step':
                reply = True, (episodes.step(*args), episodes.live)
            else:
                reply = True, episodes.results()
        except Exception:
            reply = False, traceback.format_exc()
        try:
            connection.send(reply)
        except (EOFError, OSError):
            return


if __name__ == '__main__':
    serve(int(sys.argv[1]))
