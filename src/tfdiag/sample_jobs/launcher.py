"""A local cluster of processes on 127.0.0.1 for the sample jobs.

Every task is its own process running ``tfdiag.sample_jobs.task`` with its own
``TF_CONFIG``, forked from one process that imported TensorFlow once (``zygote``); its
stdout and stderr go to ``LOGDIR/tasks/<job>-<index>.log``. The
launcher waits for the tasks that run the job, then terminates the servers. Children
run in their own process groups (a terminal's Ctrl-C reaches only the launcher, which
then stops them) and get ``SIGKILL`` from the kernel if the launcher dies
(``PR_SET_PDEATHSIG``, ``zygote.die_with``); ``stop()`` sends ``SIGTERM`` to each group, then ``SIGKILL``
after ``STOP_GRACE_S``.

Interruption: while ``launch`` runs, ``SIGINT`` and ``SIGTERM`` only record that the
cluster must stop (``LocalCluster.interrupt``); nothing is raised in the middle of
starting, restarting or stopping a task, so every child is recorded before it can be
missed, no task starts once stopping began, and every wait is a short poll that looks
at the flag. A second signal skips the grace period (``SIGKILL`` at once).

Injections that act from outside TensorFlow live here: ``slow-ps=I:MS`` starts a
delaying TCP proxy (``tfdiag.sample_jobs.proxy``) in front of ps I and gives every
other task the proxy's port as ps I's address; ``kill-worker=I@STEP[+restart]`` sends
``SIGKILL`` to worker I once the summary task reports reaching STEP (through the file
named by ``TFDIAG_SAMPLE_PROGRESS``) and, with ``+restart``, starts it again on the
same port ``RESTART_PAUSE_S`` later. A synchronous job (``JobSpec.synchronous``:
MultiWorkerMirroredStrategy) cannot go on without the killed worker — the others' collectives
fail — so after a ``+restart`` kill every job task that fails is restarted as well, as an
orchestrator restarts a failed job, and the job resumes from its ``BackupAndRestore`` backup.

While the job runs, the lines tfdiag announces in its summary task's log (live findings:
``tfdiag: ...``) are relayed to the launcher's stderr as they come.

Example:
    >>> result = launch(JobConfig("ps_ctl", "logs/run1", steps=50))  # doctest: +SKIP
    >>> result.returncode, result.summary_line  # doctest: +SKIP
    (0, 'tfdiag-sample: steps=50 wall_s=3.1 examples_per_s=1032.3')
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfdiag.events import parse_task, task_name
from tfdiag.sample_jobs.common import PROGRESS_ENV, read_progress
from tfdiag.sample_jobs.inject import KillWorker, SlowPs
from tfdiag.sample_jobs.jobs import JobConfig, parse_summary
from tfdiag.sample_jobs.log_follower import LogFollower
from tfdiag.sample_jobs.zygote import ForkedProcess, Zygote, die_with, shared as shared_zygote

HOST = "127.0.0.1"
# The lines of the summary task's log relayed while the job runs: tfdiag's live announcements.
ANNOUNCEMENT_PREFIX = "tfdiag: "
STOP_GRACE_S = 5.0
POLL_S = 0.2
# How often ``stop()`` looks whether the tasks have exited.
STOP_POLL_S = 0.05
# While a kill is pending the launcher looks at the progress file this often.
KILL_POLL_S = 0.02
# How long a killed worker stays down before ``+restart`` starts it again: long enough
# for the coordinator to notice (its RPCs fail at once on a refused connection).
RESTART_PAUSE_S = 1.0
TAIL_LINES = 25


def pick_free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct free TCP ports on ``host`` (bound to port 0, then released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as error:
        return f"(cannot read {path}: {error})"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class TaskProcess:
    task: str
    log: Path
    process: subprocess.Popen | ForkedProcess
    reported: bool = False
    killed: bool = False  # by a kill-worker injection: its death is not a failure

    @property
    def job(self) -> str:
        return parse_task(self.task)[0]


@dataclass
class LaunchResult:
    """The outcome of a local run: exit code, the summary line, the per-task logs."""

    returncode: int
    logdir: Path
    summary_line: str | None = None
    task_logs: dict[str, Path] = field(default_factory=dict)
    failed_tasks: list[str] = field(default_factory=list)


class LocalCluster:
    """The processes of one sample job on this host. Use as a context manager."""

    def __init__(self, config: JobConfig, *, python: str = sys.executable, stderr=None,
                 task_command: list[str] | None = None):
        self.config = config
        self.spec = config.spec  # after --tune strategy=
        self.plan = config.plan
        self.python = python
        # What each task runs, followed by ``--config JSON``: the sample job's task, or a
        # program of the caller's that plays the tasks' part (benchmarks/overhead_ab.py).
        self.task_command = task_command or [python, "-u", "-m", "tfdiag.sample_jobs.task"]
        # The sample job's tasks are forked from one process that imported TensorFlow once
        # (``zygote``), started with the first task; a caller's own program is started as is.
        self._forks = task_command is None
        self._zygote: Zygote | None = None
        self.stderr = stderr or sys.stderr
        self.logdir = Path(config.logdir)
        self.tasks: dict[str, TaskProcess] = {}
        self.cluster: dict[str, list[str]] = {}  # where each task listens
        self.advertised: dict[str, list[str]] = {}  # what the other tasks dial (proxies)
        self.progress_file = self.logdir / "tasks" / "progress"
        self._kills = list(self.plan.of(KillWorker))
        self._restarts: list[tuple[float, str, int]] = []  # (due, job, index)
        # Job tasks a synchronous job may still restart after a ``+restart`` kill.
        self._restartable: set[str] = set()
        self.interrupted: int | None = None  # the first SIGINT/SIGTERM received
        self._hurry = False  # a second signal: SIGKILL without a grace period
        self._stopping = False
        # What tfdiag announces in the job (live findings, on the summary task's stderr),
        # relayed to ``stderr`` while the job runs.
        self._announcements = LogFollower(self.logdir / "tasks" / f"{self.spec.summary_task.replace(':', '-')}.log",
                                          ANNOUNCEMENT_PREFIX)

    # -- lifecycle -------------------------------------------------------------------
    def start(self, *, job_tasks: bool = True) -> None:
        """Picks ports and starts the tasks; ``job_tasks=False`` starts only the servers
        (the caller then plays the job's role itself, as tests do)."""
        layout = self.config.layout
        slow_ps = {i.ps: i.ms for i in self.plan.of(SlowPs)} if "ps" in layout else {}
        ports = iter(pick_free_ports(sum(layout.values()) + len(slow_ps)))
        self.cluster = {job: [f"{HOST}:{next(ports)}" for _ in range(n)] for job, n in layout.items()}
        self.advertised = {job: list(addresses) for job, addresses in self.cluster.items()}
        (self.logdir / "tasks").mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.progress_file.unlink()
        atexit.register(self.stop)
        for index, ms in sorted(slow_ps.items()):
            if self.interrupted:
                return
            listen = next(ports)
            self.advertised["ps"][index] = f"{HOST}:{listen}"
            target = int(self.cluster["ps"][index].rpartition(":")[2])
            self._spawn_process(
                f"proxy:{index}",
                self.logdir / "tasks" / f"proxy-ps-{index}.log",
                [self.python, "-u", "-m", "tfdiag.sample_jobs.proxy", "--listen", str(listen), "--target", str(target),
                 "--delay-ms", f"{ms / 2:g}"],
                dict(os.environ),
            )
        # Servers first, the job's tasks last: they wait for the servers' ports anyway.
        order = sorted(
            ((job, i) for job, n in layout.items() for i in range(n)),
            key=lambda ji: ji[0] in self.spec.job_roles,
        )
        for job, index in order:
            if self.interrupted:
                return
            if job_tasks or job not in self.spec.job_roles:
                self._spawn(job, index)

    def interrupt(self, signum: int) -> None:
        """Asks the cluster to stop (a signal handler may call it): ``start`` starts no
        more tasks, ``wait`` returns, and a second call makes ``stop`` kill at once."""
        if self.interrupted is None:
            self.interrupted = signum
        else:
            self._hurry = True

    def tf_config(self, job: str, index: int) -> dict:
        """The ``TF_CONFIG`` of one task: its own address is where it listens, the others'
        are what it dials (a slow-ps proxy instead of that ps)."""
        cluster = {name: list(addresses) for name, addresses in self.advertised.items()}
        cluster[job][index] = self.cluster[job][index]
        return {"cluster": cluster, "task": {"type": job, "index": index}}

    def start_program(self, job: str, index: int, program: Path, arguments: list[str], *, stdout: Path) -> TaskProcess:
        """Starts the caller's Python ``program`` as task ``job:index`` (``__main__`` with
        ``arguments``, after ``start(job_tasks=False)``), forked like the job's tasks; stdout
        to ``stdout``, stderr to the task's log; ``stop`` ends it with the others.

        >>> chief = cluster.start_program("chief", 0, Path("my_job.py"), ["logs/run1"], stdout=out)  # doctest: +SKIP
        >>> chief.process.wait(timeout=180)  # doctest: +SKIP
        """
        task = task_name(job, index)
        log = self.logdir / "tasks" / f"{job}-{index}.log"
        env = self._task_env(job, index)
        process = self._fork(log, env, list(arguments), program=program, stdout=stdout)
        if process is not None:
            self.tasks[task] = TaskProcess(task, log, process)
        else:
            self._spawn_process(task, log, [self.python, "-u", str(program), *arguments], env, stdout=stdout)
        return self.tasks[task]

    def _task_env(self, job: str, index: int) -> dict:
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps(self.tf_config(job, index))
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # Every task of a local cluster shares this host's cores; give each one a fair
        # share (as if it had a host of its own) instead of one thread pool per core each.
        threads = str(max(1, (os.cpu_count() or 1) // max(1, self.config.workers)))
        env.setdefault("TF_NUM_INTRAOP_THREADS", threads)
        env.pop(PROGRESS_ENV, None)
        if self._kills and task_name(job, index) == self.spec.summary_task:
            env[PROGRESS_ENV] = str(self.progress_file)
        return env

    def _spawn(self, job: str, index: int) -> None:
        task = task_name(job, index)
        log = self.logdir / "tasks" / f"{job}-{index}.log"
        env = self._task_env(job, index)
        arguments = ["--config", self.config.to_json()]
        if self._forks:
            process = self._fork(log, env, arguments)
            if process is not None:
                self.tasks[task] = TaskProcess(task, log, process)
                return
        self._spawn_process(task, log, [*self.task_command, *arguments], env)

    def _fork(self, log: Path, env: dict, arguments: list[str], **program) -> ForkedProcess | None:
        """A task process forked from the zygote (started on first use); None when it cannot
        start or fork, or the cluster is stopping (the caller then starts a process of its own)."""
        if self._stopping or self.interrupted:
            return None
        if self._zygote is None:
            self._zygote = shared_zygote([self.python, "-u", "-m", "tfdiag.sample_jobs.zygote", self.spec.module],
                                          self.logdir / "tasks" / "zygote.log")
        return self._zygote.spawn(log, env, arguments, cancelled=lambda: bool(self.interrupted or self._stopping),
                                  **program)

    def _spawn_process(self, task: str, log: Path, command: list[str], env: dict, stdout: Path | None = None) -> None:
        if self._stopping or self.interrupted:  # stopping, or about to: start nothing more
            return
        with open(log, "ab") as err, open(stdout or os.devnull, "ab") as out:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out if stdout else err,
                stderr=err,
                env=env,
                start_new_session=True,
                preexec_fn=die_with(os.getpid()),
            )
        self.tasks[task] = TaskProcess(task, log, process)

    def wait(self, timeout_s: float | None = None) -> int:
        """Waits for the job's tasks; returns 0, 1 when a task failed or time ran out, or
        130 when ``interrupt`` was called."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self.interrupted:
                return 130
            self._inject_kills()
            self._relay_announcements()
            job_tasks = [t for t in self.tasks.values() if t.job in self.spec.job_roles and not t.killed]
            pending = {task_name(job, index) for _, job, index in self._restarts}
            failed = False
            for task in list(self.tasks.values()):
                code = task.process.poll()
                if code is None or task.reported:
                    continue
                if task.killed:
                    task.reported = True
                    continue
                if code != 0 and task.task in self._restartable:
                    task.reported = True
                    self._restartable.discard(task.task)
                    self._say(f"task {task.task} failed with exit code {code} after the kill; restarting it")
                    self._restarts.append((time.monotonic() + RESTART_PAUSE_S, *parse_task(task.task)))
                    continue
                if code != 0:
                    task.reported = True
                    self._report_failure(task, code)
                    # A dead ps (or job task) stalls the job for good; a dead worker is
                    # something ParameterServerStrategy recovers from.
                    failed = failed or task.job != "worker" or task in job_tasks
                elif task not in job_tasks:
                    task.reported = True
                    self._say(f"task {task.task} exited before the job ended")
            if failed:
                return 1
            if not pending and all(t.process.poll() == 0 for t in job_tasks):
                return 0
            if deadline is not None and time.monotonic() > deadline:
                self._say(f"timed out after {timeout_s:.0f} s; stopping the cluster")
                return 1
            time.sleep(KILL_POLL_S if self._kills or self._restarts else POLL_S)

    def _inject_kills(self) -> None:
        """Carries out ``kill-worker`` injections that are due, and their restarts."""
        if self._kills:
            reached = read_progress(self.progress_file)
            for kill in [k for k in self._kills if reached >= k.step]:
                self._kills.remove(kill)
                task = self.tasks.get(f"worker:{kill.worker}")
                if task is None or task.process.poll() is not None:
                    continue
                task.killed = True
                _signal_group(task.process, signal.SIGKILL)
                self._say(f"killed worker:{kill.worker} (SIGKILL) at step {reached}" + (
                    f"; restarting it in {RESTART_PAUSE_S:g} s" if kill.restart else ""))
                if kill.restart:
                    self._restarts.append((time.monotonic() + RESTART_PAUSE_S, "worker", kill.worker))
                    if self.spec.synchronous:
                        self._restartable |= {t.task for t in self.tasks.values()
                                              if t.job in self.spec.job_roles and t is not task}
        for due, job, index in list(self._restarts):
            old = self.tasks[task_name(job, index)]
            # Not before the pause is over and the old process is gone (a SIGKILL is quick).
            if time.monotonic() >= due and old.process.poll() is not None:
                self._restarts.remove((due, job, index))
                with open(old.log, "ab") as out:
                    out.write(b"\n----- tfdiag sample: restarted after kill-worker -----\n")
                self._spawn(job, index)
                self._say(f"restarted {job}:{index} on {self.cluster[job][index]}")

    def stop(self) -> None:
        """Terminates every task still running (SIGTERM, then SIGKILL after ``STOP_GRACE_S``
        or at a second ``interrupt``) and starts none afterwards. Safe to call twice."""
        self._stopping = True
        running = [t for t in self.tasks.values() if t.process.poll() is None]
        for task in running:
            _signal_group(task.process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while running and time.monotonic() < deadline and not self._hurry:
            time.sleep(STOP_POLL_S)
            running = [t for t in running if t.process.poll() is None]
        for task in running:
            _signal_group(task.process, signal.SIGKILL)
        for task in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                task.process.wait(STOP_GRACE_S)  # SIGKILL cannot be ignored: this is brief
        atexit.unregister(self.stop)

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reporting -------------------------------------------------------------------
    def summary_line(self) -> str | None:
        task = self.tasks.get(self.spec.summary_task)
        if task is None:
            return None
        text = log_tail(task.log, lines=200)
        for line in reversed(text.splitlines()):
            if parse_summary(line):
                return line.strip()
        return None

    def _relay_announcements(self) -> None:
        for line in self._announcements.new_lines():
            print(line, file=self.stderr, flush=True)

    def _report_failure(self, task: TaskProcess, code: int) -> None:
        self._say(f"task {task.task} failed with exit code {code}; last lines of {task.log}:\n{log_tail(task.log)}")

    def _say(self, message: str) -> None:
        print(f"tfdiag sample: {message}", file=self.stderr, flush=True)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


@contextlib.contextmanager
def _signals_stop(cluster: LocalCluster):
    """While inside, ``SIGINT`` and ``SIGTERM`` call ``cluster.interrupt`` instead of raising
    (main thread only: Python runs signal handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        cluster.interrupt(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def launch(config: JobConfig, *, timeout_s: float | None = None, stderr=None) -> LaunchResult:
    """Runs ``config.job`` on a fresh local cluster and stops every process afterwards.

    The summary line of the job is re-printed to ``stderr``. Returns exit code 130 when
    interrupted (Ctrl-C or SIGTERM), after stopping the cluster.
    """
    stderr = stderr or sys.stderr
    cluster = LocalCluster(config, stderr=stderr)
    returncode = 1
    with _signals_stop(cluster):
        try:
            cluster.start()
            returncode = cluster.wait(timeout_s)
            if returncode == 130:
                print("tfdiag sample: interrupted; stopping the cluster", file=stderr, flush=True)
        finally:
            cluster.stop()
    summary = cluster.summary_line()
    if summary:
        print(summary, file=stderr, flush=True)
    elif returncode == 0:
        print(f"tfdiag sample: {cluster.spec.summary_task} printed no summary line", file=stderr, flush=True)
        returncode = 1
    return LaunchResult(
        returncode=returncode,
        logdir=Path(config.logdir),
        summary_line=summary,
        task_logs={name: t.log for name, t in cluster.tasks.items()},
        failed_tasks=[name for name, t in cluster.tasks.items() if t.reported and t.process.returncode not in (0, None)],
    )
