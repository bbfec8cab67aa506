"""Failure and hang localisation: a task stopped (``SIGSTOP``, kept), killed (``SIGKILL``) or
ended on an exception, in each strategy's job; does tfdiag name it as the root, and how soon?

Each case (``CASES``) runs a sample job on a loopback cluster (an exception: the user job of
the same structure that raises in its own code, ``benchmarks/userjobs``), waits for the first
records and ``FAULT_AFTER_S`` more, plants the fault, then runs ``tfdiag analyze RUN --format
json`` in a fresh process, one after another (at least ``POLL_S`` apart), for up to
``FOLLOW_S``, and once more after the job is over: *named* is the time from the fault to the
end of the first analysis, while the job hangs or once it died, whose critical
``task_failure`` or ``stalled`` finding names the task as its root (:func:`judge`);
*announced*, to the first ``tfdiag: TASK stalled|task_failure`` line in the summary task's log. Then every task is killed and the dead run analysed once more. One JSON
line a case (``--results``, appended), a markdown table on stdout, progress on stderr.

    tools/loopback-only flock /tmp/tfdiag-bench.lock .venv/bin/python -m benchmarks.failures \\
        --results benchmarks/results/failures.jsonl [--cases 'mwms_fit/stop/*,*/kill/ps:0'] [--list]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.harness import faults
from benchmarks.harness.cluster import training_started
from benchmarks.userjobs import gen_fit, ps_embed, tf1_feed
from tfdiag.sample_jobs.jobs import JOBS, JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster

FAULT_AFTER_S = 5.0  # after the first records: the job is training
FOLLOW_S = 60.0  # how long the job is followed after the fault
POLL_S = 3.0
NAMED_WITHIN_S = 30.0  # the bar: a stopped, dead or waited-on task named within 30 s
EXCEPTION_WAIT_S = 120.0  # an exception case whose task has not exited by then: no fault seen
KINDS = ("task_failure", "stalled")
# The user jobs that raise in their own code (``raise_at``), by the structure they share.
RAISING = {"ps_ctl": ps_embed.TASK_COMMAND, "mwms_fit": gen_fit.TASK_COMMAND, "tf1_session": tf1_feed.TASK_COMMAND}


@dataclass(frozen=True)
class Case:
    """One job structure, fault (stop, kill, exception) and the task it is planted on."""

    job: str
    fault: str
    task: str
    steps: int  # ~20-30 s of training on the 2-core host
    extra: dict = field(default_factory=dict)  # an exception case: the user job's raise_at, raise_worker

    @property
    def name(self) -> str:
        return f"{self.job}/{self.fault}/{self.task}"

    def config(self, logdir: Path) -> JobConfig:
        ps = 2 if JOBS[self.job].ps else 0
        return JobConfig(self.job, str(logdir), steps=self.steps, ps=ps, workers=2, extra=self.extra)

    @property
    def command(self) -> list[str] | None:
        return RAISING[self.job] if self.fault == "exception" else None


def _cases() -> list[Case]:
    steps = {"ps_ctl": 1800, "ps_fit": 800, "mwms_fit": 450, "tf1_session": 2500}
    cases = [Case(job, fault, task, count) for job, count in steps.items() for fault in ("stop", "kill")
             for task in ("worker:1",) + (("ps:0",) if JOBS[job].ps else ())]
    return cases + [
        Case("ps_ctl", "exception", "chief:0", 900, {"raise_at": 300}),  # ps_embed: the chief's loop raises
        Case("mwms_fit", "exception", "worker:1", 300, {"raise_at": 100, "raise_worker": 1}),  # gen_fit
        # tf1_feed; worker 1 may wait 30 s for the chief's variables (SessionManager's recovery wait):
        # the job's steps leave it 200 after that (it trained 422 of 4,000 on 7 December)
        Case("tf1_session", "exception", "worker:1", 4000, {"raise_at": 200, "raise_worker": 1}),
        # one process: nothing else is left to name it (the analysis asks this host's process table)
        Case("mirrored", "stop", "worker:0", 3000),
        Case("mirrored", "kill", "worker:0", 3000),
    ]


CASES = _cases()


def select(patterns: str | None) -> list[Case]:
    """The cases whose name (``job/fault/task``) matches one of the comma-separated globs."""
    if not patterns:
        return list(CASES)
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    return [case for case in CASES if any(fnmatch.fnmatchcase(case.name, g) for g in globs)]


def roots_of(finding: dict) -> tuple[list[str], list[str]]:
    """The tasks a critical finding names as the root, and those it names as failed or waiting
    because of it. ``task_failure``'s job end: ``root`` and ``failed_because_of_it``; ``stalled``:
    the tasks not answering (``silent`` ps, ``unresponsive``), else the first to stop; the other
    ``task_failure`` (failures seen by the coordinator or restarts) names the failed tasks."""
    evidence = finding.get("evidence") or {}
    if finding["kind"] == "task_failure" and "root" in evidence:
        return [r["task"] for r in evidence["root"]], [v["task"] for v in evidence["failed_because_of_it"]]
    if finding["kind"] == "stalled":
        silent = [s["task"] for s in evidence.get("silent") or []] + list(evidence.get("unresponsive") or [])
        roots = list(dict.fromkeys(silent)) or [evidence["first_stalled"]]
        return roots, [task for task in finding["tasks"] if task not in roots]
    return list(finding["tasks"]), []


def judge(report: dict, task: str) -> dict:
    """Whether a report (``tfdiag analyze --format json``) names ``task`` as the root in a critical
    ``task_failure`` or ``stalled`` finding, and tells it apart (no other task named a root)."""
    critical = [f for f in report["findings"] if f["severity"] == "critical" and f["kind"] in KINDS]
    named = [(f, *roots_of(f)) for f in critical]
    naming = next((f for f, roots, _ in named if task in roots), None)
    other_roots = sorted({r for _, roots, _ in named for r in roots} - {task})
    waiting = sorted({o for _, roots, others in named if task in roots for o in others} - {task})
    title = (naming or (critical[0] if critical else {})).get("title")
    return {"named": naming is not None, "apart": naming is not None and not other_roots,
            "other_roots": other_roots, "waiting": waiting, "kind": naming and naming["kind"], "title": title}


def analyze_json(logdir: Path, out: Path, watch=lambda: None) -> dict:
    """``tfdiag analyze LOGDIR --format json`` in a fresh process (the console script beside this
    Python), calling ``watch()`` every 0.2 s while it runs."""
    tfdiag = Path(sys.executable).with_name("tfdiag")
    with open(out, "w") as stdout:
        proc = subprocess.Popen([str(tfdiag), "analyze", str(logdir), "--format", "json", "-q"], stdout=stdout,
                                stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            watch()
            time.sleep(0.2)
    try:
        return json.loads(out.read_text())
    except ValueError:
        return {"findings": []}  # a run too young to analyse (no step records yet)


ANNOUNCED = re.compile(r"^tfdiag: (\S+) (stalled|task_failure)\b")


def announced(log: Path, task: str) -> bool:
    """Whether the summary task's log has a live announcement of ``task`` stalled or failed."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return any((m := ANNOUNCED.match(line)) and m[1] == task and not line.endswith("cleared")
               for line in text.splitlines())


def run_case(case: Case, workdir: Path) -> dict:
    logdir = workdir / case.name.replace("/", "-").replace(":", "")
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    result = {"case": case.name, **asdict(case), "fault_s": None, "named_s": None, "announced_s": None}
    out = logdir / "analyze.json"
    with open(logdir / "launcher.log", "w") as log:
        cluster = LocalCluster(case.config(logdir), stderr=log, task_command=case.command)
        held = None
        try:
            cluster.start()
            started = time.monotonic()
            training_started(logdir)
            result["records_after_s"] = round(time.monotonic() - started, 1)
            target = cluster.tasks[case.task].process
            time.sleep(FAULT_AFTER_S)
            fault_at = time.monotonic()
            if case.fault == "stop":
                held = faults.stall(target.pid)
            elif case.fault == "kill":
                faults.kill(target.pid)
            else:
                fault_at = None  # the task raises at its raise_at step: the fault is its exit
            result["load1_fault"] = os.getloadavg()[0]
            summary_log = cluster.tasks[cluster.spec.summary_task].log
            # Followed while a task that runs the job's code, other than the target, is alive.
            job_tasks = [t.process for t in cluster.tasks.values() if t.job in cluster.spec.job_roles]

            def watch():
                nonlocal fault_at
                now = time.monotonic()
                if fault_at is None and target.poll() not in (None, 0):
                    fault_at = now
                if fault_at is not None and result["announced_s"] is None and announced(summary_log, case.task):
                    result["announced_s"] = round(now - fault_at, 1)

            followed = False  # an analysis ended after the fault
            read_over = False  # an analysis began once the job was over: it read the job's end
            while True:
                began = time.monotonic()
                watch()
                if fault_at is None and (began - started > EXCEPTION_WAIT_S or target.poll() == 0):
                    break  # no exception: it never came, or the task ended cleanly before its raise_at step
                over = all(p.poll() is not None for p in job_tasks if p is not target)
                if followed and (began - fault_at > FOLLOW_S or None not in (result["named_s"], result["announced_s"])
                                 or read_over):
                    break
                report = analyze_json(logdir, out, watch)
                followed, read_over = fault_at is not None, over and fault_at is not None
                if followed and result["named_s"] is None and judge(report, case.task)["named"]:
                    result["named_s"] = round(time.monotonic() - fault_at, 1)
                    result["hung"] = judge(report, case.task)
                    print(f"  named after {result['named_s']} s: {result['hung']['title']}", file=sys.stderr, flush=True)
                time.sleep(max(0.0, POLL_S - (time.monotonic() - began)))
            result["fault_s"] = None if fault_at is None else round(fault_at - started, 1)
            result["job_exited"] = all(p.poll() is not None for p in job_tasks)
        finally:
            for task in cluster.tasks.values():
                faults.kill(task.process.pid)
            if held is not None:
                held.release()
            cluster.stop()
    result["dead"] = judge(analyze_json(logdir, out), case.task)
    result["load1_end"] = os.getloadavg()[0]
    return result


def _percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0..1) of ``values``; None for none."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)] if ordered else None


def table(results: list[dict]) -> str:
    """The markdown table of the results, with a summary row."""
    def yes(flag):
        return "yes" if flag else "no"

    def secs(value):
        return "no" if value is None else f"{value:.1f} s"

    lines = ["| job | fault | task | named | announced | named after it died | others told apart "
             "| finding | load |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        verdicts = [v for v in (r.get("hung"), r["dead"]) if v and v["named"]]
        apart = yes(all(v["apart"] for v in verdicts)) if verdicts else "-"
        waiting = ", ".join(sorted({w for v in verdicts for w in v["waiting"]}))
        title = (r.get("hung") or r["dead"])["title"] or "-"
        fault = r["fault"] if r["fault_s"] is not None else f"{r['fault']} (not seen)"
        lines.append(f"| {r['job']} | {fault} | {r['task']} | {secs(r['named_s'])} | {secs(r['announced_s'])} | "
                     f"{yes(r['dead']['named'])} | {apart}{' (' + waiting + ')' if waiting else ''} | "
                     f"{title.replace('|', '/')} | {r.get('load1_fault') or 0:.1f} |")
    times = [r["named_s"] for r in results if r["named_s"] is not None]
    named = sum(1 for r in results if r["named_s"] is not None or r["dead"]["named"])
    p50, p90 = _percentile(times, 0.5), _percentile(times, 0.9)
    spread = f"p50 {p50:.1f} s, p90 {p90:.1f} s, max {max(times):.1f} s" if times else "none named"
    within = sum(1 for t in times if t <= NAMED_WITHIN_S)
    lines.append(f"| **root task named / all cases: {named}/{len(results)}** | | | {spread} | | "
                 f"{sum(1 for r in results if r['dead']['named'])}/{len(results)} | | "
                 f"{within}/{len(results)} named within {NAMED_WITHIN_S:.0f} s | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", help="comma-separated globs of case names job/fault/task (default: all)")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--results", type=Path, help="append one JSON line a case to this file")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tfdiag-failures")
    args = parser.parse_args(argv)
    cases = select(args.cases)
    if args.list or not cases:
        print("\n".join(case.name for case in cases) or f"no case matches {args.cases!r}")
        return 0 if cases else 2
    results = []
    for index, case in enumerate(cases, 1):
        print(f"[{index}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
        results.append(run_case(case, args.workdir))
        print(f"  fault at {results[-1]['fault_s']} s; named: {results[-1]['named_s']}; "
              f"after it died: {results[-1]['dead']['named']}", file=sys.stderr, flush=True)
        if args.results:
            with open(args.results, "a") as out:
                out.write(json.dumps({**results[-1], "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                          + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
