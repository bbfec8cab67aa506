"""Scores tfdiag's diagnosis of the five user-job cases of issue 16, with faults made outside the jobs.

Each case runs a user-style job of this folder with a fault, analyses it as a user would
(``tfdiag analyze --format json``), and checks the finding the fault must produce (its
kind, the task it names, where it ranks), then measures the change each finding advises
— the fault removed, or the job changed — in runs interleaved with the faulty ones (the
host is shared: drift hits both). Measured speed-up = the change's examples/s over the
faulty run's (medians over ``--repeat``), each job's own summary line.

1. ``ps_tutorial``, CPU quota on worker 1 (20 ms in every 50) → ``straggler`` worker:1,
   primary only where lifting the quota gains more than ``coordinator_bound``'s ten
   steps per closure (both measured);
2. ``ps_tutorial``, a delaying proxy (25 ms round trip) in front of ps:1 → ``slow_link``
   ps:1 primary, predicted against the delay removed;
3. ``tf1_mts`` with the same proxy → ``slow_link`` ps:1, examples/s not 0;
4. ``mwms_dict_fit``, worker 1's input 40 ms a batch → ``input_bound`` worker:1, its
   input wait above 0, examples/s not 0;
5. ``ps_tutorial`` with worker 1 stopped (``SIGSTOP`` from outside, kept stopped) →
   ``stalled`` naming worker:1, found by ``tfdiag analyze`` while the job hangs; then
   the job is stopped and its processes killed.

A case is right only when every measured change's prediction is within
``matrix.PREDICTION_TOLERANCE`` (25 %) of its measured speed-up (the hung case's
``stalled`` predicts nothing by design, ``matrix.NO_PREDICTION``). The clean run of each
job (the runs the faults are removed from) must have no finding at warning level or above,
unless the change that finding advises was measured to pay (``CONFIRMED_GAIN``) and its
prediction is within the same 25 %: the tutorial-style loop, one step per closure, is
coordinator-bound.

    .venv/bin/python -m benchmarks.userjobs.score --workdir /tmp/users
    .venv/bin/python -m benchmarks.userjobs.score --workdir /tmp/users --rescore   # analyse the kept runs again
    .venv/bin/python -m benchmarks.userjobs.score --workdir /tmp/users --resume --repeat 2 --only 1  # a second pair

Every run's logdir and ``results.json`` (rates, load averages, the hung run's report)
stay under ``--workdir``; ``--rescore`` re-analyses the finished runs with today's code
(the hung run keeps the report taken while it hung). Prints a Markdown table for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness import faults
from benchmarks.matrix import PREDICTION_TOLERANCE
from benchmarks.userjobs import mwms_dict_fit, ps_tutorial
from benchmarks.userjobs.runner import UserRun, analyze_json, run_user_job
from tfdiag.analysis.detectors.stalled import STALL_FLOOR_S
from tfdiag.analysis.load import load_run
from tfdiag.errors import TfdiagError

TF1_SCRIPT = Path(__file__).with_name("tf1_mts.py")
QUOTA = (1, 20.0, 30.0)  # worker 1 runs 20 ms in every 50
PROXY_MS = 25.0
INPUT_MS = 40.0
# The hung run: worker 1 stopped once it finished this many closures; the analysis runs
# from STALL_FLOOR_S + HANG_MARGIN_S after, every HANG_POLL_S, until it names the stall.
HANG_AFTER_CLOSURES = 50
HANG_MARGIN_S = 10.0
HANG_POLL_S = 5.0
HANG_GIVE_UP_S = 150.0
HUNG_STEPS = 100_000  # far more than the stall lets run: the other worker keeps progressing


def run_tf1_mts(logdir, *, steps: int, slow_ps_ms: float | None = None) -> UserRun:
    command = [sys.executable, "-u", str(TF1_SCRIPT), "--logdir", str(logdir), "--steps", str(steps)]
    return run_user_job(command, logdir, shape="tf1_session", steps=steps,
                        inject=(faults.slow_ps(1, slow_ps_ms),) if slow_ps_ms else ())


def hung_worker(task: str, found: dict):
    """``while_running`` for the hung case: once ``task`` has progressed, stops it and keeps
    it stopped; analyses the run until a ``stalled`` finding appears (or gives up), puts
    the report and the time it took into ``found``, and ends the job."""
    @contextlib.contextmanager
    def hang(cluster):
        _wait_for_progress(cluster.logdir, task, HANG_AFTER_CLOSURES)
        with faults.stall(cluster.tasks[task].process.pid):
            stopped = time.monotonic()
            time.sleep(STALL_FLOOR_S + HANG_MARGIN_S)
            while True:
                report = analyze_json(cluster.logdir)
                found.update(report=report, after_s=round(time.monotonic() - stopped, 1))
                if any(f["kind"] == "stalled" for f in report["findings"]):
                    break
                if time.monotonic() - stopped > HANG_GIVE_UP_S:
                    break
                time.sleep(HANG_POLL_S)
            cluster.interrupt(signal.SIGTERM)  # ``wait`` returns, and the cluster is stopped
            yield
    return hang


def _wait_for_progress(logdir: Path, task: str, count: int, timeout_s: float = 300.0) -> None:
    """Until a heartbeat reports ``task`` at ``count`` closures or more."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(TfdiagError, OSError):
            beats = load_run(logdir).frame("heartbeat")
            if (beats.loc[beats["subject"].astype(str) == task, "progress"] >= count).any():
                return
        time.sleep(1.0)
    raise RuntimeError(f"{task} made no {count} closures within {timeout_s:.0f} s; see {logdir}/tasks")


@dataclass(frozen=True)
class Case:
    name: str
    fault: str  # the run with the fault
    expected: tuple[str, str]  # (finding kind, task it names)
    # change: (its run, the finding kind that advises it); the first is the expected finding's own
    fixes: dict = field(default_factory=dict)
    nonzero_rate: bool = False  # the report's examples/s must not be 0
    input_wait: bool = False  # the expected task's input wait must be above 0


CASES = (
    Case("1. tutorial loop, CPU quota on worker:1", "tutorial quota", ("straggler", "worker:1"),
         {"quota lifted": ("tutorial clean", "straggler"),
          "10 steps/closure": ("tutorial quota, 10 steps/closure", "coordinator_bound")}),
    Case("2. tutorial loop, 25 ms proxy to ps:1", "tutorial proxy", ("slow_link", "ps:1"),
         {"delay removed": ("tutorial clean", "slow_link")}),
    Case("3. TF1 MonitoredTrainingSession, 25 ms proxy to ps:1", "tf1 proxy", ("slow_link", "ps:1"),
         {"delay removed": ("tf1 clean", "slow_link")}, nonzero_rate=True),
    Case("4. MWMS fit on dicts, worker:1 input 40 ms", "mwms slow input", ("input_bound", "worker:1"),
         {"input fixed": ("mwms clean", "input_bound")}, nonzero_rate=True, input_wait=True),
    Case("5. tutorial loop, worker:1 hung", "tutorial hung", ("stalled", "worker:1")),
)
# The clean run of each job, with the change its own finding advises where it has one: a
# warning on a clean run is a false alarm unless that change measured at least CONFIRMED_GAIN.
CLEAN = {"tutorial clean": {"10 steps/closure": ("tutorial 10 steps/closure", "coordinator_bound")},
         "tf1 clean": {}, "mwms clean": {}}
CONFIRMED_GAIN = 1.1


def runs(args) -> dict:
    """Every run, by name: a function of its logdir that runs it."""
    tutorial, found = args.tutorial_steps, {}
    return {
        "tutorial clean": lambda d: ps_tutorial.run_job(d, steps=tutorial),
        "tutorial 10 steps/closure": lambda d: ps_tutorial.run_job(d, steps=tutorial, steps_per_closure=10),
        "tutorial quota": lambda d: ps_tutorial.run_job(d, steps=tutorial, cpu_quota=QUOTA),
        "tutorial quota, 10 steps/closure": lambda d: ps_tutorial.run_job(d, steps=tutorial, cpu_quota=QUOTA,
                                                                         steps_per_closure=10),
        "tutorial proxy": lambda d: ps_tutorial.run_job(d, steps=tutorial, slow_ps=(1, PROXY_MS)),
        "tutorial hung": lambda d: _hung_run(d, found),
        "tf1 clean": lambda d: run_tf1_mts(d, steps=args.tf1_steps),
        "tf1 proxy": lambda d: run_tf1_mts(d, steps=args.tf1_steps, slow_ps_ms=PROXY_MS),
        "mwms clean": lambda d: mwms_dict_fit.run_job(d, steps=args.mwms_steps),
        "mwms slow input": lambda d: mwms_dict_fit.run_job(d, steps=args.mwms_steps, slow_input_worker=1,
                                                           input_ms=INPUT_MS),
    }


def _hung_run(logdir, found: dict) -> UserRun:
    """The hung case: the report is the one taken while the job hung, not after it was stopped."""
    run = ps_tutorial.run_job(logdir, steps=HUNG_STEPS, while_running=hung_worker("worker:1", found), finished=False)
    return UserRun(run.logdir, None, {**found["report"], "found_after_s": found["after_s"]}, run.load)


def score(case: Case, results: dict) -> dict:
    """The diagnosis of the case's first faulty run, and each fix's measured speed-up."""
    report = results[case.fault][0]["report"]
    findings = report["findings"]
    kind, task = case.expected
    rank = next((i + 1 for i, f in enumerate(findings) if f["kind"] == kind and task in f["tasks"]), None)
    fault_rate = _median_rate(results[case.fault])
    fixes = {}
    for change, (run, advised_by) in case.fixes.items():
        finding = next((f for f in findings if f["kind"] == advised_by), None)
        fixes[change] = {
            "advised_by": advised_by, "reported": finding is not None,
            "predicted": finding and finding["recommendation"].get("predicted_speedup"),
            "measured": _median_rate(results[run]) / fault_rate if fault_rate else None,
        }
    own = next(iter(fixes.values()), None)
    gains_most = own is None or own["measured"] is None or all(
        own["measured"] >= other["measured"] for other in fixes.values() if other["measured"] is not None)
    checks = {"named": rank is not None, "primary where its fix gains most": (rank == 1) == gains_most}
    for change, fix in fixes.items():  # the planted kind's own change, and any other a reported finding advised
        if fix["advised_by"] == kind or fix["reported"]:
            checks[f"{change}: predicted within {PREDICTION_TOLERANCE:.0%}"] = _within(fix)
    if case.nonzero_rate:
        checks["examples/s not 0"] = bool(report["summary"].get("examples_per_s"))
    if case.input_wait:
        checks["input wait > 0"] = any(w["task"] == task and (w.get("input_wait_frac") or 0) > 0
                                       for w in report["workers"])
    if kind == "stalled":
        stalled = next((f for f in findings if f["kind"] == "stalled"), {"evidence": {}})
        checks["first stalled"] = stalled["evidence"].get("first_stalled") == task
    return {"case": case.name, "expected": f"{kind} {task}", "primary": _named(findings[0]) if findings else "none",
            "rank": rank, "fixes": fixes, "checks": checks, "ok": all(checks.values()),
            "examples_per_s": report["summary"].get("examples_per_s"), "job_rate": fault_rate,
            "found_after_s": report.get("found_after_s"), "loads": [r["load"] for r in results[case.fault]]}


def score_clean(name: str, results: dict) -> dict:
    """A clean run: every warning is a false alarm but one whose advised change (``CLEAN``)
    measured at least ``CONFIRMED_GAIN``."""
    findings = results[name][0]["report"]["findings"]
    rate = _median_rate(results[name])
    fixes, false_alarms = {}, []
    for finding in (f for f in findings if f["severity"] in ("warning", "critical")):
        change = next((c for c, (_, kind) in CLEAN[name].items() if kind == finding["kind"]), None)
        if change and CLEAN[name][change][0] in results:
            fixes[change] = {"advised_by": finding["kind"], "predicted": finding["recommendation"].get("predicted_speedup"),
                             "measured": _median_rate(results[CLEAN[name][change][0]]) / rate}
        if not (change in fixes and fixes[change]["measured"] >= CONFIRMED_GAIN):
            false_alarms.append(_named(finding))
        elif not _within(fixes[change]):
            false_alarms.append(f"{_named(finding)} (predicted {_x(fixes[change]['predicted'])}, "
                                f"measured {_x(fixes[change]['measured'])})")
    return {"case": f"clean: {name.split()[0]}", "expected": "no false warning", "warnings": false_alarms,
            "primary": _named(findings[0]) if findings else "none", "clean_fixes": fixes, "ok": not false_alarms,
            "job_rate": rate, "loads": [r["load"] for r in results[name]]}


def _within(fix: dict) -> bool:
    """The prediction is within ``PREDICTION_TOLERANCE`` of the measured speed-up."""
    predicted, measured = fix["predicted"], fix["measured"]
    return bool(predicted and measured) and abs(predicted - measured) / measured <= PREDICTION_TOLERANCE


def _named(finding: dict) -> str:
    return f"{finding['kind']} {','.join(finding['tasks'])} [{finding['severity']}]"


def _median_rate(runs: list[dict]) -> float | None:
    rates = [r["examples_per_s"] for r in runs if r["examples_per_s"]]
    return statistics.median(rates) if rates else None


def table(rows: list[dict]) -> str:
    lines = ["| case | expected | found: primary (expected's rank) | predicted vs measured | job examples/s | load | ok |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if "fixes" in row:
            found = f"{row['primary']} ({'rank ' + str(row['rank']) if row['rank'] else 'missing'})"
            changes = "; ".join(f"{name}: {_x(fix['predicted'])} vs {_x(fix['measured'])}"
                                f"{'' if fix['advised_by'] == row['expected'].split()[0] else ' (' + fix['advised_by'] + ')'}"
                                for name, fix in row["fixes"].items()) or (
                f"found {row['found_after_s']} s after the stop" if row["found_after_s"] else "–")
            failed = [name for name, ok in row["checks"].items() if not ok]
        else:
            found = row["primary"]
            changes = "; ".join(f"{name}: {_x(fix['predicted'])} vs {_x(fix['measured'])} ({fix['advised_by']})"
                                for name, fix in row["clean_fixes"].items()) or "–"
            failed = row["warnings"]
        rate = "–" if row["job_rate"] is None else f"{row['job_rate']:,.0f}"
        loads = ", ".join(f"{load:.1f}" for load in row["loads"])
        verdict = "yes" if row["ok"] else "NO: " + ", ".join(failed)
        lines.append(f"| {row['case']} | {row['expected']} | {found} | {changes} | {rate} | {loads} | {verdict} |")
    return "\n".join(lines)


def _x(value) -> str:
    return "–" if value is None else f"{value:.2f}x"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="where every run's logdir and results.json stay")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each; medians count")
    parser.add_argument("--only", action="append", help="case numbers to run (default: all), e.g. --only 1")
    parser.add_argument("--tutorial-steps", type=int, default=1500)
    parser.add_argument("--tf1-steps", type=int, default=2500)
    parser.add_argument("--mwms-steps", type=int, default=200)
    parser.add_argument("--rescore", action="store_true", help="analyse the kept runs again; run nothing")
    parser.add_argument("--resume", action="store_true", help="keep the runs of results.json; make only the missing")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if not args.only or c.name.split(".")[0] in args.only]
    needed = list(dict.fromkeys(name for case in cases for name in (case.fault, *(run for run, _ in case.fixes.values()))))
    needed += [run for name in CLEAN if name in needed for run, _ in CLEAN[name].values() if run not in needed]
    saved = args.workdir / "results.json"
    if args.rescore:
        results = json.loads(saved.read_text())
        for name, kept in results.items():
            for run in kept:
                if run["examples_per_s"] is not None:  # the hung run keeps its report from while it hung
                    run["report"] = analyze_json(run["logdir"])
        saved.write_text(json.dumps(results))
    else:
        makers = runs(args)
        results = json.loads(saved.read_text()) if args.resume else {}
        args.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(args.repeat):
            for name in needed:
                if (attempt and name == "tutorial hung") or len(results.get(name, ())) > attempt:
                    continue  # one hung run is enough; --resume keeps the runs made
                run = makers[name](args.workdir / f"{name.replace(' ', '-').replace(',', '').replace('/', '-')}-{attempt}")
                results.setdefault(name, []).append({"logdir": str(run.logdir), "examples_per_s": run.examples_per_s,
                                                     "load": run.load, "report": run.report})
                saved.write_text(json.dumps(results))  # after every run: a failed run loses only itself
                print(f"{name} {attempt}: {run.examples_per_s} examples/s, primary "
                      f"{run.primary and _named(run.primary)}, load {run.load:.1f}", file=sys.stderr, flush=True)
    rows = [score(case, results) for case in cases] + [score_clean(name, results) for name in CLEAN if name in results]
    print(f"load average (1 min) at the end of each run; {args.repeat} interleaved run(s) each")
    print(table(rows))
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
