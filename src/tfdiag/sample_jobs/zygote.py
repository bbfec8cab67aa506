"""Task processes forked from one process that has already imported TensorFlow.

Importing TensorFlow costs several seconds of CPU in every process; a local cluster of
five tasks on a 2-core host spent most of its start-up doing it five times at once. The
launcher instead starts one zygote per cluster (``python -m tfdiag.sample_jobs.zygote
MODULE``), which imports TensorFlow and the job's module once and then forks each task
process on request. A child starts a session of its own (its own process group, as a
task the launcher starts directly), gets ``SIGKILL`` when the zygote dies, writes to its
task log, takes the task's environment and runs ``tfdiag.sample_jobs.task.main`` as a
fresh process would. Forking is safe here because importing TensorFlow starts no
runtime (no eager context, no gRPC server or channel) and the zygote runs one thread
and writes through raw file descriptors, so no lock can be inherited held.

One process keeps one zygote per command, environment and working directory (``shared``)
for all the clusters it starts in turn, so a benchmark or a test session that runs many
jobs imports TensorFlow once per job module, not once per run; ``stop`` of a cluster
leaves it serving, and it ends with the process (its stdin closes).

Protocol, one JSON object a line: the launcher writes ``{"log", "env", "argv"}``; the
zygote answers ``{"pid": PID}`` (or ``{"error": TEXT}``) and, when a child ends,
``{"exit": PID, "code": CODE}`` (negative: the signal, as ``subprocess`` reports it).
The zygote ends when its stdin closes.

Example:
    >>> zygote = shared([sys.executable, "-m", "tfdiag.sample_jobs.zygote", "tfdiag.sample_jobs.ps_ctl"], log)  # doctest: +SKIP
    >>> process = zygote.spawn("logs/run1/tasks/ps-0.log", env, ["--config", config_json])  # doctest: +SKIP
    >>> process.poll()  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1
# How long the zygote waits for a request before it reaps the children that ended.
REAP_EVERY_S = 0.05
# How long ``spawn`` waits for the zygote's answer: a fork takes milliseconds, but the first
# answer comes only once the zygote has imported TensorFlow (a minute on a loaded 2-core
# host). A zygote that has not answered by then is stopped and the tasks start on their own.
SPAWN_TIMEOUT_S = 300.0
# How often a wait for an answer looks whether it was cancelled (the launcher interrupted).
WAIT_SLICE_S = 0.05
# Idle shared zygotes a process keeps (each holds an imported TensorFlow, some 500 MB): one
# per bundled job module, so a session that runs every job starts each zygote once.
MAX_SHARED = 5


class ForkedProcess:
    """A task process forked by the zygote, used as a ``subprocess.Popen``: ``pid``,
    ``returncode``, ``poll()``, ``wait()``."""

    def __init__(self, pid: int, zygote: Zygote):
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None and not self._zygote.alive and not _exists(self.pid):
            # The zygote ended without reporting this child, which its death killed.
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(REAP_EVERY_S)
        return self.returncode


class Zygote:
    """The launcher's side of a zygote process: ``spawn`` forks a task process from it."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.alive = True
        self._children: dict[int, ForkedProcess] = {}
        self._exits: dict[int, int] = {}  # reported before their pid was answered
        self._answers: list[dict] = []
        self._answered = threading.Condition()
        self._lock = threading.Lock()  # one request at a time
        threading.Thread(target=self._read, name="tfdiag-zygote-reader", daemon=True).start()

    @classmethod
    def start(cls, command: list[str], **popen) -> Zygote:
        """Starts the zygote process (``command``) with ``popen``'s other arguments."""
        return cls(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, **popen))

    def spawn(self, log, env: dict, argv: list[str], cancelled=lambda: False, *, program=None,
              stdout=None) -> ForkedProcess | None:
        """Forks a task process that appends its output to ``log``, with environment
        ``env``, running ``task.main(argv)`` (or the Python file ``program`` as ``__main__``
        with ``argv``, its stdout appended to ``stdout``); None when the zygote cannot (ended,
        or refused) or when ``cancelled()`` turns true while it is awaited (the zygote is
        then stopped)."""
        request = {"log": str(log), "env": env, "argv": list(argv)}
        if program is not None:
            request.update(program=str(program), stdout=str(stdout or log))
        request = json.dumps(request) + "\n"
        with self._lock:
            try:
                self.process.stdin.write(request.encode())
                self.process.stdin.flush()
            except (OSError, ValueError):
                return None
            deadline = time.monotonic() + SPAWN_TIMEOUT_S
            with self._answered:
                while not (self._answers or not self.alive or cancelled() or time.monotonic() > deadline):
                    self._answered.wait(WAIT_SLICE_S)
                answer = self._answers.pop(0) if self._answers else None
            if answer is None:  # no answer: a later one would be taken for the next request's
                self.process.kill()
                self.alive = False
                return None
            if "pid" not in answer:
                return None
            child = ForkedProcess(int(answer["pid"]), self)
            with self._answered:
                self._children[child.pid] = child
                if child.pid in self._exits:
                    child.returncode = self._exits.pop(child.pid)
            return child

    @property
    def busy(self) -> bool:
        """Whether a child it forked is still running."""
        with self._answered:
            return any(child.returncode is None for child in self._children.values())

    def close(self, timeout_s: float = 5.0) -> None:
        """Closes the zygote's stdin (it then ends; children still running get SIGKILL)."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._answered:
                if "exit" in message:
                    pid, code = int(message["exit"]), int(message["code"])
                    if pid in self._children:
                        self._children[pid].returncode = code
                    else:
                        self._exits[pid] = code
                else:
                    self._answers.append(message)
                    self._answered.notify_all()
        with self._answered:
            self.alive = False
            self._answered.notify_all()


_SHARED: dict[tuple, Zygote] = {}  # by (command, environment, directory), least recently used first


def shared(command: list[str], log, **popen) -> Zygote:
    """This process's zygote for ``command`` under its current environment and working
    directory, started on first use (its own output appended to ``log``) or again if it
    ended; the least recently used idle ones past ``MAX_SHARED`` are closed."""
    key = (tuple(command), tuple(sorted(os.environ.items())), os.getcwd())
    zygote = _SHARED.pop(key, None)
    if zygote is None or not zygote.alive:
        if not _SHARED:
            atexit.register(close_shared)  # the process leaves none behind, as a cluster's stop did
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with open(log, "ab") as out:
            zygote = Zygote.start(command, stderr=out, env=env, start_new_session=True,
                                  preexec_fn=die_with(os.getpid()), **popen)
    _SHARED[key] = zygote
    idle = [k for k, z in _SHARED.items() if k != key and not z.busy]
    for stale in idle[:max(0, len(_SHARED) - MAX_SHARED)]:
        _SHARED.pop(stale).close()
    return zygote


def close_shared() -> None:
    """Closes this process's shared zygotes (their running children get ``SIGKILL``) and
    waits for them to end."""
    while _SHARED:
        _SHARED.popitem()[1].close()
    atexit.unregister(close_shared)


def shared_pids() -> set[int]:
    """The pids of this process's shared zygotes (alive or not)."""
    return {zygote.process.pid for zygote in _SHARED.values()}


def die_with(parent_pid: int):
    """A ``preexec_fn`` (or a call in a forked child): the process is killed (``SIGKILL``)
    when ``parent_pid`` dies, even if that happened before the request was made (then it
    exits at once). Not ``SIGTERM``: a MultiWorkerMirroredStrategy worker catches it
    (TensorFlow's preemption notifier, for its coordination service) and trains on, so
    the workers of a benchmark that was killed kept stepping beside the next one."""

    def preexec() -> None:  # runs in the child between fork and exec
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        pass
    return True


# -- the zygote process --------------------------------------------------------------------
def _send(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def serve() -> dict | None:
    """Answers requests until stdin closes (returns None), forking a child for each; in a
    child, returns its request."""
    zygote = os.getpid()
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], REAP_EVERY_S)
        _reap()
        if not readable:
            continue
        data = os.read(0, 65536)
        if not data:
            return None
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            request = json.loads(line)
            try:  # opened before the fork: the task's log exists once its pid is answered
                outputs = _open_outputs(request)
            except OSError as error:
                _send({"error": repr(error)})
                continue
            try:
                pid = os.fork()
            except OSError as error:
                _send({"error": repr(error)})
                pid = None
            if pid == 0:
                _become_task(request, outputs, zygote)
                return request
            for out in outputs:
                os.close(out)
            if pid is not None:
                _send({"pid": pid})


def _open_outputs(request: dict) -> tuple[int, int]:
    """The task's stdout and stderr, opened for appending (created if need be)."""
    opened = []
    try:
        for path in (request.get("stdout", request["log"]), request["log"]):
            opened.append(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    except OSError:
        for out in opened:
            os.close(out)
        raise
    return tuple(opened)


def _become_task(request: dict, outputs: tuple[int, int], zygote: int) -> None:
    """In the child: a session of its own, dead with the zygote, output to the task's log
    (``outputs``: stdout and stderr), the task's environment and arguments."""
    os.setsid()
    die_with(zygote)()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, out in zip((1, 2), outputs):
        os.dup2(out, fd)
    for out in outputs:
        os.close(out)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["tfdiag.sample_jobs.task", *request["argv"]]


def main() -> int:
    """Imports TensorFlow and the modules named on the command line, then serves; in a
    forked child, runs the task and returns its exit code."""
    from tfdiag.sample_jobs import task

    task.configure_logging()  # as the task would, before TensorFlow is imported
    import tensorflow  # noqa: F401 - the import every child shares

    for module in sys.argv[1:]:
        importlib.import_module(module)

    request = serve()
    if request is None:
        os._exit(0)  # without the interpreter's finalisation, which with TensorFlow takes seconds
    if "program" in request:
        return _run_program(request["program"], request["argv"])
    return task.main(sys.argv[1:])


def _run_program(path: str, argv: list[str]):
    """Runs the Python file ``path`` as ``python path *argv`` would; returns its exit status."""
    sys.argv = [path, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        return exit_.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
