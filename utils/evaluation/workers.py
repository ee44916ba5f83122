"""A pool of processes stepping gym envs, for the envs the native stepper does not support: `EnvWorkers`, and `serve`,
the life of each of its worker processes.

A worker process runs WORKER_COMMAND, which imports this module and calls `serve`; it loads no JAX. (Run as
`python -m utils.evaluation.workers`, this module would execute twice in the worker: once imported by the package,
once as __main__.)
"""

import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import traceback
import weakref

import numpy as np

from utils.evaluation.envs import GymEpisodes, make_env

WORKER_COMMAND = 'import sys; from utils.evaluation.workers import serve; serve(int(sys.argv[1]))'


class EnvWorkers:
    """`num_envs` copies of an env stepped by `num_workers` processes in parallel: this one and `num_workers - 1`
    worker processes.

    A pool splits the rows of a batch into contiguous slices, one per process; every step this process makes the one
    batched policy call for all rows, sends each worker its rows of actions, steps its own (last) slice meanwhile,
    and gathers the workers' observations back. Workers are separate interpreters started once (they import no JAX)
    and reused by every evaluation; they stop when `close()` is called, when this object is garbage-collected, at
    interpreter exit, or on their own when this process dies (their socket closes). They ignore SIGINT/SIGTERM, so a
    preemption signal sent to the whole process group lets the running evaluation finish before main.py checkpoints
    and exits.

    Every step is a hand-off between processes, so on an oversubscribed machine (more busy processes than cores) the
    waits for the scheduler can cost more than the parallel stepping saves; evaluate in-process there. Where the env
    supports it, the native stepper (`utils.evaluation.native`) avoids the hand-off altogether.
    """

    def __init__(self, env_name, num_envs, num_workers):
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f'EnvWorkers needs 1 <= num_workers <= num_envs, got {num_workers} and {num_envs}.')
        self.env_name, self.num_envs, self.num_workers = env_name, num_envs, num_workers
        self.capacity = num_envs
        counts = _split(num_envs, num_workers)
        self._processes, self._connections = [], []
        self._finalizer = weakref.finalize(self, _stop_workers, self._processes, self._connections)
        for count in counts[:-1]:
            process, connection = _start_worker()
            self._processes.append(process)
            self._connections.append(connection)
            connection.send(('make', env_name, count))  # workers build their envs while this process goes on
        self._local = GymEpisodes([make_env(env_name) for _ in range(counts[-1])])
        # Spaces and spec for the caller (`one_env`).
        self.local_env = self._local.envs[0]
        self.observation_space, self.action_space = self.local_env.observation_space, self.local_env.action_space
        self.spec = self.local_env.spec
        self.live = np.zeros(0, dtype=bool)

    def __len__(self):
        return self.num_envs

    def close(self):
        """Stop the workers (idempotent)."""
        self._finalizer()

    abort = close  # a worker may be mid-episode after an error: the pool cannot be trusted with another evaluation

    @property
    def closed(self):
        return not self._finalizer.alive

    def start(self, tasks, seeds, record, max_steps, frame_skip):
        if self.closed:
            raise RuntimeError('This EnvWorkers pool is closed (stopped, or broken by an earlier error); make a new one.')
        sizes = _split(len(seeds), self.num_workers)
        bounds = np.cumsum([0] + sizes)
        self._slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]  # the last one is this process's
        self._remote = [w for w in range(self.num_workers - 1) if sizes[w] > 0]
        self._local_rows = self._slices[-1] if sizes[-1] > 0 else None
        for w in self._remote:
            rows = self._slices[w]
            self._send(w, ('start', tasks[rows], seeds[rows], record[rows], max_steps, frame_skip))
        local = []
        if self._local_rows is not None:
            rows = self._local_rows
            local = [self._local.start(tasks[rows], seeds[rows], record[rows], max_steps, frame_skip)]
        replies = [self._receive(w) for w in self._remote] + local
        self.observations = np.concatenate([observations for observations, _ in replies])
        self.live = np.ones(len(seeds), dtype=bool)
        return self.observations, np.concatenate([goals for _, goals in replies])

    def step(self, actions):
        busy = [w for w in self._remote if self.live[self._slices[w]].any()]
        for w in busy:
            self._send(w, ('step', actions[self._slices[w]]))
        rows = self._local_rows
        if rows is not None and self.live[rows].any():
            self.observations[rows] = self._local.step(actions[rows])
            self.live[rows] = self._local.live
        for w in busy:
            self.observations[self._slices[w]], self.live[self._slices[w]] = self._receive(w)
        return self.observations

    def results(self):
        for w in self._remote:
            self._send(w, ('results',))
        parts = [self._receive(w) for w in self._remote]
        if self._local_rows is not None:
            parts.append(self._local.results())
        merged = {key: np.concatenate([p[key] for p in parts]) for key in ('success', 'return', 'length')}
        merged['final_observation'] = self.observations.copy()
        merged['frames'] = [f for p in parts for f in p['frames']]
        merged['render_ok'] = all(p['render_ok'] for p in parts)
        return merged

    def _send(self, w, message):
        try:
            self._connections[w].send(message)
        except OSError:
            self._died(w)

    def _receive(self, w):
        try:
            reply = self._connections[w].recv()
        except (EOFError, OSError):
            self._died(w)
        ok, payload = reply
        if not ok:
            pid = self._processes[w].pid
            self.close()
            error = payload.strip().splitlines()[-1] if payload.strip() else 'no traceback'
            raise RuntimeError(f'Evaluation worker {w} (pid {pid}) of {self.env_name} failed: {error}\n{payload}')
        return payload

    def _died(self, w):
        """RuntimeError saying what is known of a worker whose connection broke: its pid and how it ended."""
        process = self._processes[w]
        try:
            code = process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.close()
        if code is None:
            how = 'stopped answering: its connection broke while it still ran (it was then stopped)'
        elif -code in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            how = (f'was killed by {signal.Signals(-code).name}, which leaves no error message: another '
                   'process or the kernel killed it (the kernel\'s out-of-memory killer logs its kills: dmesg)')
        elif code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f'signal {-code}'
            how = f'crashed with {name} (in the simulator or a library it uses; no Python error to show)'
        else:
            how = f'exited with status {code} (anything it printed went to this run\'s output)'
        raise RuntimeError(
            f'Evaluation worker {w} (pid {process.pid}) of {self.env_name} {how}. Rerun, or evaluate in-process with '
            f'--eval_workers=1.'
        ) from None


def _split(total, parts):
    """`total` items in `parts` contiguous chunks whose sizes differ by at most one."""
    return [total // parts + (k < total % parts) for k in range(parts)]


def _start_worker():
    parent_socket, child_socket = socket.socketpair()
    fd = child_socket.fileno()
    # The package root on the path, so the worker imports this same code even where it is not pip-installed.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get('PYTHONPATH')])))
    process = subprocess.Popen(
        [sys.executable, '-c', WORKER_COMMAND, str(fd)], pass_fds=(fd,), stdin=subprocess.DEVNULL, env=env
    )
    child_socket.close()
    return process, multiprocessing.connection.Connection(parent_socket.detach())


def _stop_workers(processes, connections):
    for connection in connections:
        try:
            connection.send(('close',))
        except OSError:
            pass  # already gone
        connection.close()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
            # Replies are (True, result) or (False, traceback).
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
