"""Runs a user's training script as a local cluster, optionally with a fault, and analyses it.

What every user job of this folder shares: a user job is a script every task runs with
the same arguments, telling its role from ``TF_CONFIG`` (as on a real cluster); the
launcher of the sample jobs (``src/tfdiag/sample_jobs/launcher.py``) starts it on free loopback
ports with one ``TF_CONFIG`` per task and appends ``--config JSON`` (the job's
``JobConfig``: steps, ``extra`` options), which the script may read or ignore. ``shape``
names the sample job whose cluster the script expects: ``tf1_session`` (ps + workers,
worker 0 the chief), ``ps_ctl`` (chief + ps + workers) or ``mwms_fit`` (workers only).
Faults come from outside the job: the launcher's ``slow-ps=I:MS`` (a delaying proxy in
front of ps I) through ``inject``, and anything done to the running processes
(``benchmarks/harness/faults.py``: a CPU quota, a stall) through ``while_running``. The script's
summary task prints ``tfdiag-sample: steps=N wall_s=S examples_per_s=E``; that is the
throughput measured. Each run is analysed as a user would, with
``tfdiag analyze LOGDIR --format json``.

Example:
    >>> run = run_user_job([sys.executable, "-u", "benchmarks/userjobs/tf1_mts.py"], "logs/u1",
    ...                    shape="tf1_session", inject=("slow-ps=1:25",), steps=2500)  # doctest: +SKIP
    >>> run.primary["kind"], run.examples_per_s  # doctest: +SKIP
    ('slow_link', 15120.4)

``benchmarks/userjobs/score.py`` runs and scores the jobs of this folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tfdiag.sample_jobs.jobs import JobConfig, parse_summary
from tfdiag.sample_jobs.launcher import LocalCluster


@dataclass(frozen=True)
class UserRun:
    """One run of a user job: its own throughput, the analysis (``tfdiag analyze`` JSON) and
    the 1-minute load average when it ended."""

    logdir: Path
    examples_per_s: float | None  # None: the run was stopped before its summary line (a hung job)
    report: dict
    load: float

    @property
    def findings(self) -> list[dict]:
        return self.report["findings"]

    @property
    def primary(self) -> dict | None:
        return self.findings[0] if self.findings else None


def run_user_job(command: list[str], logdir: str | Path, *, shape: str, steps: int = 200, workers: int = 2,
                 ps: int = 2, inject: tuple[str, ...] = (), extra: dict | None = None, while_running=None,
                 timeout_s: float = 900, finished: bool = True) -> UserRun:
    """Runs ``command`` as every task of a local cluster shaped like ``shape``, then analyses ``logdir``.

    ``while_running`` maps the started cluster to a context manager held while the job
    runs (an outside fault); it may end the job early with ``cluster.interrupt``, and
    then passes ``finished=False``. Raises ``RuntimeError`` when a job that should finish
    fails or prints no summary, naming the launcher's log (``LOGDIR/launcher.log``) and
    the task logs beside it.
    """
    logdir = Path(logdir)
    config = JobConfig(shape, str(logdir), steps=steps, workers=workers, ps=ps, inject=inject, extra=extra or {})
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / "launcher.log"
    code, summary = run_cluster(config, log, timeout_s, task_command=command, while_running=while_running)
    if finished and (code != 0 or summary is None):
        raise RuntimeError(f"{' '.join(command)} failed with exit {code}; see {log} and {logdir / 'tasks'}")
    return UserRun(logdir, summary[2] if summary else None, analyze_json(logdir), os.getloadavg()[0])


def chief_trains(train, config: JobConfig) -> int:
    """A ParameterServerStrategy user job's task, as ``TF_CONFIG`` names it: the chief runs
    ``train(config)`` (which returns the summary line) once the cluster is up; ps and
    workers serve."""
    from tfdiag.sample_jobs.task import run_server, wait_for_cluster

    tf_config = json.loads(os.environ["TF_CONFIG"])
    role, index = tf_config["task"]["type"], int(tf_config["task"]["index"])
    if role != "chief":
        run_server(role, index)
        return 0
    wait_for_cluster(tf_config["cluster"], "chief:0")
    print(train(config), file=sys.stderr, flush=True)
    return 0


def run_cluster(config: JobConfig, log: Path, timeout_s: float, task_command=None, while_running=None):
    """Starts ``config``'s local cluster (its tasks run ``task_command`` when given), waits
    at most ``timeout_s`` for it and stops it; returns the exit code and the parsed summary
    line (None when there was none). The launcher writes to ``log``; ``while_running``,
    when given, maps the started cluster to a context manager held while it runs (an
    outside fault)."""
    with open(log, "w") as out:
        cluster = LocalCluster(config, stderr=out, task_command=task_command)
        try:
            cluster.start()
            with while_running(cluster) if while_running else contextlib.nullcontext():
                code = cluster.wait(timeout_s)
        finally:
            cluster.stop()
    return code, parse_summary(cluster.summary_line() or "")


def analyze_json(logdir: str | Path) -> dict:
    """``tfdiag analyze LOGDIR --format json``, run as a user runs it (the console script
    beside this Python); raises ``RuntimeError`` with its stderr when it fails."""
    tfdiag = Path(sys.executable).with_name("tfdiag")
    out = subprocess.run([str(tfdiag), "analyze", str(logdir), "--format", "json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"tfdiag analyze {logdir} failed (exit {out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)
