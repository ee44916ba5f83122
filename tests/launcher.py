"""Start `python main.py ...` for a test without paying, every time, for the second of imports each start repeats.

A test that runs main.py the way a user does starts a process, waits for it, signals it, reads its output and
exit code. The suite starts dozens of them, and each spends its first second or so importing jax, flax, MuJoCo
and the project (most of the run, when the request is rejected). `launch` forks them instead from a server
process (one per test worker) that has already imported exactly the modules main.py imports at its top, and
nothing else: no backend is initialised and no Python thread runs, so the fork is clean. The child then runs
main.py as `__main__` with the given arguments, working directory and environment, its stdout and stderr in
files, its stdin /dev/null. It is a real process: its own pid (signals and /proc work as for
`subprocess.Popen`), its own flags and config, its exit code (or -signal) as Popen reports it, atexit handlers
run at exit.

What differs from `subprocess.Popen([sys.executable, 'main.py', ...])` is only what was imported before the
arguments were known. Hence requests the server cannot honour get a real subprocess instead: another program
than main.py, or an environment that changes a variable read at import (JAX, XLA, Python, MuJoCo, OpenGL,
BLAS threads), except the two JAX settings the tests change, which the child applies through `jax.config` as
`with optimized_xla()` does in-process. A test compares both ways on the same run (tests/test_main.py).
"""

import ast
import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, 'main.py')
MESSAGE_BYTES = 1 << 20  # a request: its arguments and environment, as one socket message
# Environment variables read when the server imports its modules: a launch that changes one gets a real
# subprocess, except for these two JAX settings, which the child applies to jax.config.
READ_AT_IMPORT = ('JAX_', 'XLA_', 'PYTHON', 'MUJOCO_', 'PYOPENGL_', 'OPENBLAS_', 'OMP_', 'MKL_')
JAX_SETTINGS = {'JAX_DISABLE_MOST_OPTIMIZATIONS': 'jax_disable_most_optimizations',
                'JAX_COMPILATION_CACHE_DIR': 'jax_compilation_cache_dir'}


def main_imports():
    """The modules main.py imports at its top (from its source, so the list cannot drift)."""
    with open(MAIN) as f:
        tree = ast.parse(f.read())
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module)
            names += [f'{node.module}.{alias.name}' for alias in node.names]
    return names


# ----------------------------------------------------------------------------------------------
# The server.


def _exit_code(exception):
    """The exit status CPython gives a process that ends with this uncaught exception."""
    if isinstance(exception, SystemExit):
        if exception.code is None:
            return 0
        if isinstance(exception.code, int):
            return exception.code
        print(exception.code, file=sys.stderr)
        return 1
    return 1


def _run_child(request, out_fd, err_fd):
    """In the forked child: become `python <script> <args>` and never return."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (null, out_fd, err_fd):
            os.close(fd)
        os.chdir(request['cwd'])
        os.environ.clear()
        os.environ.update(request['env'])
        import jax

        for key, name in JAX_SETTINGS.items():
            if key in request['env']:
                value = request['env'][key]
                jax.config.update(name, value if key.endswith('_DIR') else value.lower() in ('1', 'y', 'yes', 't', 'true', 'on'))
        import runpy
        import traceback

        script = request['script']
        sys.argv = [script, *request['args']]
        # As `python script`: its folder first on the path, not the server's working directory.
        folder = os.path.dirname(os.path.abspath(script))
        sys.path[:] = [folder] + [p for p in sys.path if p not in ('', folder)]
        try:
            runpy.run_path(script, run_name='__main__')
            code = 0
        except KeyboardInterrupt:
            # As CPython does for an uncaught Ctrl-C: the traceback, then death by SIGINT.
            traceback.print_exc()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException as e:  # noqa: B036  (the child reports everything as the interpreter would)
            if not isinstance(e, SystemExit):
                traceback.print_exc()
            code = _exit_code(e)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve(socket_fd):
    """Answer requests on the socket `socket_fd` until it closes: spawn (with the child's stdout/stderr fds) and poll."""
    for name in main_imports():
        try:
            __import__(name)
        except ImportError:
            pass  # `from x import function`: x itself was imported
    if threading.active_count() != 1:
        sys.exit(f'tests/launcher.py: importing main.py\'s modules started threads {threading.enumerate()}: forking is unsafe.')
    connection = socket.socket(fileno=socket_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for pytest must not kill the server
    while True:
        message, fds, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, 2)
        if not message:
            return
        request = json.loads(message)
        if request['op'] == 'spawn':
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                connection.close()
                signal.signal(signal.SIGINT, signal.default_int_handler)
                _run_child(request, *fds)
            for fd in fds:
                os.close(fd)
            reply = {'pid': pid}
        else:
            pid, status = os.waitpid(request['pid'], os.WNOHANG)
            reply = {'returncode': None if pid == 0 else os.waitstatus_to_exitcode(status)}
        connection.send(json.dumps(reply).encode())


# ----------------------------------------------------------------------------------------------
# The client.


class _Server:
    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one message per request
        self.process = subprocess.Popen([sys.executable, '-m', 'tests.launcher', str(theirs.fileno())], cwd=ROOT,
                                        pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        self.connection = ours
        self.env = dict(os.environ)

    def request(self, message, fds=()):
        socket.send_fds(self.connection, [json.dumps(message).encode()], list(fds))
        return json.loads(self.connection.recv(MESSAGE_BYTES))


_server = None


def _get_server():
    global _server
    if _server is None or _server.process.poll() is not None:
        _server = _Server()
    return _server


class Launched:
    """The part of `subprocess.Popen`'s interface the tests use, for a forked main.py. `stdout` and `stderr`
    are text files to read (what was written so far); `communicate` returns their whole text."""

    def __init__(self, server, script, args, cwd, env):
        self._server = server
        self._dir = tempfile.TemporaryDirectory(prefix='launched-')
        paths = [os.path.join(self._dir.name, name) for name in ('stdout', 'stderr')]
        fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for path in paths]
        try:
            self.pid = server.request({'op': 'spawn', 'script': script, 'args': args, 'cwd': cwd, 'env': env}, fds)['pid']
        finally:
            for fd in fds:
                os.close(fd)
        self.stdout, self.stderr = (open(path, encoding='utf-8', errors='replace') for path in paths)
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            self.returncode = self._server.request({'op': 'poll', 'pid': self.pid})['returncode']
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(['main.py'], timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout=None):
        self.wait(timeout)
        self.stdout.seek(0)
        self.stderr.seek(0)
        return self.stdout.read(), self.stderr.read()


def launch(command, cwd=ROOT, env=None):
    """`subprocess.Popen(command, cwd=cwd, env=env, stdout=PIPE, stderr=PIPE, text=True)` for
    `command = [sys.executable, '.../main.py', *args]`, forked from the server when it can honour the request."""
    env = dict(os.environ if env is None else env)
    # Linux only: the server relies on fork and on Unix sockets that keep message boundaries.
    if sys.platform == 'linux' and len(command) >= 2 and command[0] == sys.executable and os.path.abspath(command[1]) == MAIN:
        server = _get_server()
        changed = {k for k in set(env) | set(server.env) if env.get(k) != server.env.get(k)}
        if all(k in JAX_SETTINGS or not k.startswith(READ_AT_IMPORT) for k in changed):
            return Launched(server, command[1], list(command[2:]), os.path.abspath(cwd), env)
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run(command, cwd=ROOT, env=None, timeout=600):
    """`subprocess.run(command, capture_output=True, text=True)` through `launch`."""
    process = launch(command, cwd, env)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


if __name__ == '__main__':
    serve(int(sys.argv[1]))
