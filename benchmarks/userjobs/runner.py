"""Runs a user's training script as a local cluster, optionally with a fault, and analyses it.

A user job is a script every task runs with the same arguments, telling its role from
``TF_CONFIG`` (as on a real cluster); the launcher of the sample jobs
(``sample_jobs/launcher.py``) starts it on free loopback ports with one ``TF_CONFIG`` per
task (and appends ``--config JSON``, which the script may ignore). ``shape`` names the
sample job whose cluster the script expects: ``tf1_session`` (ps + workers, worker 0 the
chief), ``ps_ctl`` (chief + ps + workers) or ``mwms_fit`` (workers only). Faults are the
ones the launcher plants from outside the job: ``slow-ps=I:MS`` (a delaying proxy in
front of ps I) and ``kill-worker=I@STEP[+restart]``. The script's summary task must print
``tfdiag-sample: steps=N wall_s=S examples_per_s=E``; that is the throughput measured.

Example:
    >>> run = run_user_job("benchmarks/userjobs/tf1_mts.py", "logs/u1", shape="tf1_session",
    ...                    fault="slow-ps=1:25", steps=200)  # doctest: +SKIP
    >>> run.primary["kind"], run.examples_per_s  # doctest: +SKIP
    ('slow_link', 5120.4)

As a benchmark it runs the script clean and with each fault, interleaved, and scores the
primary findings against what the faults plant, with predicted against measured speed-ups
(the fix of a planted fault is its removal: measured = clean / faulty throughput):

    python benchmarks/userjobs/runner.py benchmarks/userjobs/tf1_mts.py \\
        --fault slow-ps=1:10 --fault slow-ps=1:40 --steps 200 --repeat 2 --workdir /tmp/tf1-mts
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tfdiag.analysis.engine import analyze
from tfdiag.sample_jobs.jobs import JobConfig, parse_summary
from tfdiag.sample_jobs.launcher import LocalCluster

# The --inject kinds the launcher carries out itself, from outside the job's code.
OUTSIDE_FAULTS = ("slow-ps", "kill-worker")


@dataclass(frozen=True)
class UserRun:
    """One run of a user job: its throughput and the analysis' findings (JSON form)."""

    logdir: Path
    examples_per_s: float
    findings: list[dict] = field(default_factory=list)

    @property
    def primary(self) -> dict | None:
        return self.findings[0] if self.findings else None


def run_user_job(script: str | Path, logdir: str | Path, *, shape: str = "tf1_session", fault: str | None = None,
                 steps: int = 200, workers: int = 2, ps: int = 2, args: tuple[str, ...] = (),
                 timeout_s: float = 900, python: str = sys.executable) -> UserRun:
    """Runs ``script`` on a local cluster shaped like ``shape``, then analyses ``logdir``.

    The script gets ``--logdir LOGDIR --steps STEPS`` and ``args``. Raises ``ValueError``
    for a fault the launcher cannot plant, ``RuntimeError`` when the job fails (naming the
    launcher's log, ``LOGDIR/launcher.log``, and the task logs beside it).
    """
    if fault and fault.partition("=")[0] not in OUTSIDE_FAULTS:
        raise ValueError(f"fault {fault!r}: a user job takes only {', '.join(OUTSIDE_FAULTS)} (planted from outside)")
    logdir = Path(logdir)
    config = JobConfig(shape, str(logdir), steps=steps, workers=workers, ps=ps, inject=(fault,) if fault else ())
    command = [python, "-u", str(script), "--logdir", str(logdir), "--steps", str(steps), *args]
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / "launcher.log"
    code, summary = run_cluster(config, log, timeout_s, task_command=command)
    if code != 0 or summary is None:
        raise RuntimeError(f"{script} ({fault or 'no fault'}) failed with exit {code}; see {log} and {logdir / 'tasks'}")
    report = analyze(logdir)
    return UserRun(logdir, summary[2], [finding.to_dict() for finding in report.findings])


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


# What each outside fault plants: (finding kind, the task it must name), from its spec.
EXPECTED = {
    "slow-ps": lambda spec: ("slow_link", f"ps:{spec.partition('=')[2].split(':')[0]}"),
    "kill-worker": lambda spec: ("task_failure", f"worker:{spec.partition('=')[2].split('@')[0]}"),
}


def score(fault: str | None, runs: list[UserRun], clean_runs: list[UserRun]) -> dict:
    """Diagnosis of the first run, and the median speed-up of removing the fault."""
    findings = runs[0].findings
    primary = runs[0].primary
    if fault is None:
        expected = "no warning"
        ok = not any(f["severity"] in ("warning", "critical") for f in findings)
    else:
        kind, task = EXPECTED[fault.partition("=")[0]](fault)
        expected = f"{kind} ({task})"
        ok = primary is not None and primary["kind"] == kind and task in primary["tasks"]
    predicted = primary["recommendation"]["predicted_speedup"] if fault and ok else None
    measured = (statistics.median(r.examples_per_s for r in clean_runs)
                / statistics.median(r.examples_per_s for r in runs)) if fault else None
    found = "none" if primary is None else f"{primary['kind']} ({', '.join(primary['tasks'])}) [{primary['severity']}]"
    return {"fault": fault or "clean", "expected": expected, "found": found, "ok": ok, "predicted": predicted,
            "measured": measured, "error": abs(predicted - measured) / measured if predicted and measured else None,
            "examples_per_s": [round(r.examples_per_s, 1) for r in runs]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run a user job clean and with outside faults; score the diagnosis.")
    parser.add_argument("script")
    parser.add_argument("--shape", default="tf1_session", choices=("tf1_session", "ps_ctl", "mwms_fit"))
    parser.add_argument("--fault", action="append", default=[], help=f"one of {', '.join(OUTSIDE_FAULTS)} (repeatable)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each; medians count")
    parser.add_argument("--workdir", type=Path, required=True, help="where every run's logdir is kept")
    args = parser.parse_args(argv)
    faults = [None, *args.fault]
    runs: dict[str | None, list[UserRun]] = {fault: [] for fault in faults}
    load = os.getloadavg()[0]
    for attempt in range(args.repeat):
        for fault in faults:
            logdir = args.workdir / f"{(fault or 'clean').replace('=', '-').replace(':', '-')}-{attempt}"
            run = run_user_job(args.script, logdir, shape=args.shape, fault=fault, steps=args.steps)
            runs[fault].append(run)
            print(f"{fault or 'clean'} {attempt}: {run.examples_per_s:.1f} examples/s, primary "
                  f"{run.primary and run.primary['kind']}", file=sys.stderr, flush=True)
    rows = [score(fault, runs[fault], runs[None]) for fault in faults]
    print(f"load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print("| fault | expected | found (primary) | ok | predicted | measured | error | examples/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        numbers = [("–" if row[k] is None else f"{row[k]:.2f}") for k in ("predicted", "measured")]
        error = "–" if row["error"] is None else f"{row['error']:.0%}"
        print(f"| {row['fault']} | {row['expected']} | {row['found']} | {'yes' if row['ok'] else 'NO'} | "
              f"{numbers[0]} | {numbers[1]} | {error} | {', '.join(map(str, row['examples_per_s']))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
