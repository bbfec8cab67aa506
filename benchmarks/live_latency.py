"""Live findings on a running job: how soon a fault that begins mid-run is announced, and at what cost.

Each run starts a job on a local cluster with live findings at their defaults (on, no
variable set) and, ``--clean`` seconds after its first step record, switches a fault on
for ``--on`` seconds and off for ``--off`` seconds, over and over until the job ends:

- ``straggler``: worker 1 under a CPU quota (``faults.cpu_quota``: SIGSTOP/SIGCONT,
  ``--on-ms`` running out of every ``--on-ms + --off-ms``);
- ``slow_link``: the delaying proxy in front of ps 1 (``slow-ps=1:--rtt-ms``), its delay
  switched by a file (``proxy.SWITCH_ENV_VAR``);
- ``input``: worker 1's input ``--input-ms`` slower per batch, switched by a file
  (``INPUT_SWITCH_ENV_VAR`` of ``mwms_dict_fit`` and ``ps_tutorial``; those jobs only).

Jobs: ``ps_ctl`` (bundled: 2 workers, 2 ps), ``ps_tutorial`` and ``mwms_dict_fit`` (user-style,
``benchmarks/userjobs/``). Read back from the task files: for every onset, the seconds to
the first ``live_finding`` that began the expected kind naming the faulty task (none
within the fault's on-time: missed; an onset with less than ``--on`` seconds of job left
is not counted); the findings announced in the clean lead-in (false); for each announced
finding, the whole-run analysis of the same window (``announced_findings`` on the run
cut to the window) and its predicted speed-up beside the announced one; and the live
thread's cost from its ``note`` (ticks, ms per tick, verdicts, confirmations and ms each).

    tools/loopback-only .venv/bin/python benchmarks/live_latency.py --job ps_ctl --fault straggler --steps 20000

``--replay RUN`` copies a recorded run frame by frame into a growing run, ticks a
``LiveMonitor`` every ``--interval`` seconds of the run's time, and prints the thread CPU
of the screens, the verdicts and the confirmations apart, then the parts of a judgement
(``timed_parts``: the reading, each table, each detector, the advisor).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* importable
from benchmarks.harness.faults import cpu_quota  # noqa: E402
from tfdiag.collectors.live_thread import DEFAULT_INTERVAL_S, ENV_VAR, SHARE_ENV_VAR  # noqa: E402
from tfdiag.events import task_name  # noqa: E402
from tfdiag.sample_jobs.jobs import JobConfig  # noqa: E402
from tfdiag.sample_jobs.launcher import LocalCluster  # noqa: E402
from tfdiag.store import MANIFEST_NAME, log_dir, read_task_file, task_files  # noqa: E402

COST = re.compile(r"live findings: (\d+) evaluations every [\d.]+ s or more \(every ([\d.]+) s on average, .*?\), "
                  r"([\d.]+) ms CPU each, (\d+) ms CPU per minute \(([\d.]+)% of a core\); (\d+) confirmations "
                  r"\(([\d.]+) ms CPU each, screens ([\d.]+) ms each\), (\d+) verdicts \(([\d.]+) ms CPU each\)")


def records(run_dir: Path, kind: str) -> list[dict]:
    batches = read_task_file(log_dir(run_dir) / "chief-0.tfdiag").batches.get(kind) or []
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def wait_for(read, timeout_s: float):
    """``read()``'s first truthy result, polled every 0.5 s for up to ``timeout_s``; else its last."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = read()
        if found:
            return found
        time.sleep(0.5)
    return read()


JOBS = {  # name -> (the launcher's shape, the tasks' command or None for the bundled job, workers, ps)
    "ps_ctl": ("ps_ctl", None, 2, 2),
    "ps_tutorial": ("ps_ctl", [sys.executable, "-u", "-m", "benchmarks.userjobs.ps_tutorial", "--task"], 2, 2),
    "mwms_dict_fit": ("mwms_fit", [sys.executable, "-u", "-m", "benchmarks.userjobs.mwms_dict_fit", "--worker"], 2, 0),
}
EXPECTED = {"straggler": ("straggler", "worker:1"), "slow_link": ("slow_link", "ps:1"), "input": ("input_bound", "worker:1")}


def all_records(run_dir: Path, kind: str) -> list[dict]:
    rows = []
    for file in task_files(run_dir)[0]:
        batches = read_task_file(file).batches.get(kind) or []
        rows += pa.Table.from_batches(batches).to_pylist() if batches else []
    return rows


class Switch:
    """A fault switched by a file's presence (the proxy's delay, a user job's slow input)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.path.touch()

    def __exit__(self, *exc):
        self.path.unlink(missing_ok=True)


def one_run(workdir: Path, args) -> dict:
    shape, command, workers, ps = JOBS[args.job]
    switch = workdir / "fault-on"
    inject, extra = (), {}
    if args.fault == "slow_link":
        inject = (f"slow-ps=1:{args.rtt_ms:g}",)
        os.environ["TFDIAG_PROXY_DELAY_SWITCH"] = str(switch)
    if args.fault == "input":
        extra = {"slow_worker": 1, "input_ms": args.input_ms}
        os.environ["TFDIAG_INPUT_DELAY_SWITCH"] = str(switch)
    if args.job == "mwms_dict_fit":
        extra["keras"] = "tf_keras"
    for name in (ENV_VAR, SHARE_ENV_VAR):
        os.environ.pop(name, None)  # the defaults...
    if args.share:
        os.environ[SHARE_ENV_VAR] = str(args.share)  # ...but this share of a core
    config = JobConfig(shape, str(workdir / "run"), steps=args.steps, ps=ps, workers=workers, inject=inject,
                       extra=extra)
    load_before = os.getloadavg()[0]
    onsets = []  # (on_ns, off_ns)
    with open(workdir / "launcher.log", "w") as out:
        cluster = LocalCluster(config, stderr=out, task_command=command)
        try:
            cluster.start()
            first = wait_for(lambda: all_records(workdir / "run", "step"), 180)
            if not first:
                raise RuntimeError(f"no step records; see {workdir}")
            time.sleep(max(args.clean - (time.time_ns() - min(r["end_ns"] for r in first)) / 1e9, 0))
            clean_end_ns = time.time_ns()
            while not _ended(cluster):
                on_ns = time.time_ns()
                fault = (cpu_quota(cluster.tasks[task_name("worker", 1)].process.pid, args.on_ms, args.off_ms)
                         if args.fault == "straggler" else Switch(switch))
                with fault:
                    _sleep_while_running(cluster, args.on)
                onsets.append((on_ns, time.time_ns()))
                _sleep_while_running(cluster, args.off)
            code = cluster.wait(args.timeout)
        finally:
            cluster.stop()
    return _scored(workdir / "run", args, onsets, clean_end_ns, code, load_before)


def _ended(cluster) -> bool:
    """Whether the task that writes the manifest (the chief, else worker 0) has ended (a ps
    and a ParameterServerStrategy worker serve until stopped)."""
    lead = cluster.tasks.get("chief:0") or cluster.tasks["worker:0"]
    return lead.process.poll() is not None


def _sleep_while_running(cluster, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not _ended(cluster):
        time.sleep(0.2)


def _scored(run: Path, args, onsets, clean_end_ns: int, code: int, load_before: float) -> dict:
    found = sorted(all_records(run, "live_finding"), key=lambda r: r["time_ns"])
    kind, task = EXPECTED[args.fault]
    last_ns = max((r["end_ns"] for r in all_records(run, "step")), default=0)
    latencies, missed = [], 0
    for on_ns, off_ns in onsets:
        if last_ns - on_ns < args.on * 1e9:
            continue  # the job ended during this onset: not counted
        began = next((r for r in found if r["state"] == "began" and r["kind"] == kind and task in r["tasks"].split(",")
                      and on_ns <= r["time_ns"] <= off_ns + 2e9), None)
        if began is None:
            missed += 1
        else:
            latencies.append(round((began["time_ns"] - on_ns) / 1e9, 1))
    notes = [n["message"] for n in all_records(run, "note") if n["message"].startswith("live findings:")]
    cost = COST.search(notes[-1]) if notes else None
    return {
        "job": args.job, "fault": args.fault, "share": args.share, "exit": code, "onsets": len(latencies) + missed,
        "onsets_ns": onsets, "clean_end_ns": clean_end_ns,
        "announced_s": latencies, "missed": missed,
        "false": [f"{r['state']} {r['kind']} ({r['tasks']})" for r in found if r["time_ns"] < clean_end_ns],
        "other": sorted({f"{r['kind']} ({r['tasks']})" for r in found if (r["kind"], r["tasks"]) != (kind, task)}),
        "predictions": _predictions(run, [r for r in found if r["state"] == "began" and r["kind"] == kind]),
        "message": next((r["message"] for r in found if r["state"] == "began" and r["kind"] == kind), None),
        "cost": dict(zip(("ticks", "seconds_apart", "ms_per_tick", "ms_per_minute", "core_pct", "confirmations",
                          "ms_per_confirmation", "ms_per_screen", "verdicts", "ms_per_verdict"),
                         [float(x) for x in cost.groups()])) if cost else None,
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def _predictions(run: Path, began: list[dict]) -> list[tuple]:
    """(announced, the whole-run analysis of the same window) predicted speed-ups, per announcement."""
    from tfdiag.analysis.live import WINDOW_S, announced_findings
    from tfdiag.analysis.load import RunLoader
    from tfdiag.analysis.step_stats import StepAccumulator
    from tfdiag.analysis.window_load import window_of

    whole = RunLoader(run, steps=StepAccumulator(sampled_rows=10**9)).refresh()
    pairs = []
    for record in began:
        window = window_of(whole, record["time_ns"], record.get("window_s") or WINDOW_S)  # none: before the column
        finding = next((f for (kind, tasks), f in announced_findings(window).items()  # the same tasks, in any order
                        if kind == record["kind"] and sorted(tasks) == sorted(record["tasks"].split(","))), None)
        pairs.append((record["predicted_speedup"], finding.recommendation.predicted_speedup if finding else None))
    return pairs


class GrowingCopy:
    """A recorded run copied into ``path`` frame by frame, as its tasks wrote it."""

    def __init__(self, source: Path, path: Path):
        from tfdiag.analysis.window_load import WINDOW_TIME_COLUMNS

        self.path = path
        log_dir(path).mkdir(parents=True)
        shutil.copy(log_dir(source) / MANIFEST_NAME, log_dir(path) / MANIFEST_NAME)
        self.frames = {}  # task file -> [(its frames' newest time so far, byte where the frame ends)]
        for file in task_files(source)[0]:
            result, newest, ends = read_task_file(file), 0, []
            offsets = [frame.offset for frame in result.frames] + [result.end_offset]
            for frame, end in zip(result.frames, offsets[1:]):
                column = WINDOW_TIME_COLUMNS.get(frame.kind, "time_ns")
                if column is not None:
                    newest = max([newest] + [pc.max(batch.column(column)).as_py() or 0 for batch in frame.batches])
                ends.append((newest, end))
            self.frames[file] = ends
        self.written = dict.fromkeys(self.frames, 0)
        times = [newest for ends in self.frames.values() for newest, _ in ends if newest]
        self.first_ns, self.last_ns = min(times), max(times)

    def until(self, now_ns: int) -> None:
        """Appends to each task file the frames whose rows are all older than ``now_ns``."""
        for file, ends in self.frames.items():
            end = max([self.written[file]] + [end for newest, end in ends if newest <= now_ns])
            with open(file, "rb") as source, open(log_dir(self.path) / file.name, "ab") as copy:
                source.seek(self.written[file])
                copy.write(source.read(end - self.written[file]))
            self.written[file] = end


def replay(run: Path, interval_s: float) -> str:
    """A ``LiveMonitor`` ticked along a recorded run, twice: the thread CPU of its screens, its
    verdicts and its confirmations apart, then with each part of a judgement timed (``timed_parts``)."""
    screens, verdicts, confirms, messages = _replayed(run, interval_s)
    with timed_parts() as spent:
        _, timed_verdicts, timed_confirms, _ = _replayed(run, interval_s)

    def spread(values):
        return (f"median {statistics.median(values):.2f} ms, p90 {_quantile(values, 0.9):.2f}, largest "
                f"{max(values):.2f}" if values else "none")
    lines = [f"{len(screens) + len(verdicts) + len(confirms)} ticks every {interval_s:g} s of the run; thread CPU: "
             f"{len(screens)} screens: {spread(screens)}; {len(verdicts)} verdicts: {spread(verdicts)}; "
             f"{len(confirms)} confirmations (the first, reading the whole task files, left out): "
             f"{spread(confirms[1:])}; load average {os.getloadavg()[0]:.1f}", "",
             *[f"- {message}" for message in messages], ""]
    judged = timed_verdicts + timed_confirms
    if judged:
        lines += ["| part of a judgement | ms | share |", "| --- | --- | --- |"]
        groups = {"reading": ["refresh", "window"], "tables": [n for n in spent if n.startswith("table ")],
                  "detectors": [n for n in spent if n.startswith("detector ")], "advisor": ["advise"]}
        for group, names in groups.items():
            group_ns = sum(spent[name] for name in names)
            lines.append(f"| {group} | {group_ns / 1e6 / len(judged):.1f} | {group_ns / 1e6 / sum(judged):.0%} |")
    return "\n".join(lines)


def _quantile(values, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


@contextlib.contextmanager
def timed_parts():
    """The thread CPU of each part of the evaluations run inside it, by part: ``refresh``
    (``WindowLoader``'s reading), ``window`` (a verdict's, of the screen's records),
    ``table NAME`` (each ``Measurements`` table, built when
    first read), ``detector KIND`` and ``advise``; each part's own time, the parts it
    calls left out (a detector's first read of a table is the table's). The functions are
    wrapped while it lasts. cProfile, which this replaces, charged its own overhead per
    Python call: several times the evaluation, and most on the parts made of small
    pandas calls.
    """
    from tfdiag.analysis import detectors, live, live_verdict
    from tfdiag.analysis.measurements import Measurements
    from tfdiag.analysis.window_load import WindowLoader

    spent: dict[str, int] = defaultdict(int)
    children = [0]  # the thread CPU of the parts the running part called

    def timed(name, function):
        @functools.wraps(function)
        def part(*args, **kwargs):
            outer, children[0] = children[0], 0
            begin = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                took = time.thread_time_ns() - begin
                spent[name] += took - children[0]
                children[0] = outer + took
        return part

    tables = {name: table for name, table in vars(Measurements).items() if isinstance(table, functools.cached_property)}
    originals = ({name: table.func for name, table in tables.items()}, dict(detectors.DETECTORS), live.advise,
                 WindowLoader.refresh, live_verdict.window_run)
    for name, table in tables.items():
        table.func = timed(f"table {name}", table.func)
    for kind, detect in originals[1].items():
        detectors.DETECTORS[kind] = timed(f"detector {kind}", detect)  # detect_all's default registry
    live.advise = timed("advise", live.advise)
    WindowLoader.refresh = timed("refresh", WindowLoader.refresh)
    live_verdict.window_run = timed("window", live_verdict.window_run)
    try:
        yield spent
    finally:
        for name, table in tables.items():
            table.func = originals[0][name]
        detectors.DETECTORS.update(originals[1])
        live.advise, WindowLoader.refresh, live_verdict.window_run = originals[2:]


def _replayed(run: Path, interval_s: float):
    """(thread CPU ms of each screen-only tick, of each tick that ran a verdict, of each that
    confirmed, the messages) along ``run``."""
    from tfdiag.analysis.live_monitor import LiveMonitor

    with tempfile.TemporaryDirectory(prefix="tfdiag-live-replay-") as tmp:
        copy = GrowingCopy(run, Path(tmp) / "run")
        monitor = LiveMonitor(copy.path, own_task="chief:0")
        screens, verdicts, confirms, messages = [], [], [], []
        now_ns = copy.first_ns + int(interval_s * 1e9)
        while now_ns <= copy.last_ns:
            copy.until(now_ns)
            confirmations, judged, setup = monitor.confirmations, monitor.verdicts, monitor.setup_cpu_ns
            begin = time.thread_time_ns()
            messages += [f"{(now_ns - copy.first_ns) / 1e9:.0f} s: {transition.message}"
                         for transition in monitor.tick(now_ns)]
            took = (time.thread_time_ns() - begin - (monitor.setup_cpu_ns - setup)) / 1e6
            (confirms if monitor.confirmations > confirmations else verdicts if monitor.verdicts > judged
             else screens).append(took)
            now_ns += int(interval_s * 1e9)
    return screens, verdicts, confirms, messages


def _load(row: dict) -> str:
    return f"{row['load'][0]:.1f}-{row['load'][1]:.1f}"


def summary(rows: list[dict]) -> str:
    """One table row per (job, fault): onsets, latency p50/p90/max, missed, false, predictions, cost."""
    by_case = defaultdict(list)
    for row in rows:
        by_case[(row["job"], row["fault"] + (f", share {row['share']:.0%}" if row.get("share") else ""))].append(row)
    lines = ["| job | fault | onsets | announced after: p50 / p90 / max | missed | false in the clean lead-in | "
             "predicted: announced vs whole-run analysis of the window | ms per screen | verdicts, ms each | "
             "confirmations, ms each | share of a core | load |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (job, fault), group in by_case.items():
        latencies = sorted(x for row in group for x in row["announced_s"])
        costs = [row["cost"] for row in group if row["cost"]]
        pairs = [f"{a:.2f}/{b:.2f}" if b else f"{a:.2f}/none" for row in group for a, b in row["predictions"] if a]
        spread = (f"{statistics.median(latencies):.1f} / {_quantile(latencies, 0.9):.1f} / {max(latencies):.1f} s"
                  if latencies else "none")
        cost = (f"| {statistics.median(c['ms_per_screen'] for c in costs):.2f} | "
                f"{sum(c['verdicts'] for c in costs):.0f}, "
                f"{statistics.median(c['ms_per_verdict'] for c in costs):.0f} | "
                f"{sum(c['confirmations'] for c in costs):.0f}, "
                f"{statistics.median(c['ms_per_confirmation'] for c in costs):.0f} | "
                f"{statistics.median(c['core_pct'] for c in costs):.3f} % ") if costs else "| – | – | – | – "
        lines.append(f"| {job} | {fault} | {len(latencies) + sum(r['missed'] for r in group)} | {spread} | "
                     f"{sum(r['missed'] for r in group)} | {sum(len(r['false']) for r in group)} | "
                     f"{', '.join(pairs[:4]) or '–'} {cost}| "
                     f"{', '.join(_load(r) for r in group)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=sorted(JOBS), default="ps_ctl")
    parser.add_argument("--fault", choices=sorted(EXPECTED), default="straggler")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20000, help="the job's steps: it runs the fault's cycles until it ends")
    parser.add_argument("--clean", type=float, default=25.0, help="seconds of steps before the first onset")
    parser.add_argument("--on", type=float, default=25.0, help="seconds each onset lasts")
    parser.add_argument("--off", type=float, default=25.0, help="seconds between onsets")
    parser.add_argument("--on-ms", type=float, default=20.0, help="straggler: ms running ...")
    parser.add_argument("--off-ms", type=float, default=30.0, help="... and ms stopped, over and over")
    parser.add_argument("--rtt-ms", type=float, default=20.0, help="slow_link: round trip the proxy adds")
    parser.add_argument("--input-ms", type=float, default=40.0, help="input: ms more per batch")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="--replay: seconds between ticks")
    parser.add_argument("--share", type=float, help=f"${SHARE_ENV_VAR} for the job (default: the live budget)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--keep", type=Path, help="write the runs under this folder and keep them")
    parser.add_argument("--replay", type=Path, help="replay this recorded run and time its ticks (no job is run)")
    parser.add_argument("--results", type=Path, help="append each run's JSON line here; the table is made of all of them")
    args = parser.parse_args(argv)
    if args.replay:
        print(replay(args.replay, args.interval))
        return 0
    rows = [json.loads(line) for line in args.results.read_text().splitlines()] if args.results and \
        args.results.exists() else []
    with tempfile.TemporaryDirectory(prefix="tfdiag-live-") as tmp:
        for repeat in range(args.repeats):
            workdir = (args.keep or Path(tmp)) / f"{args.job}-{args.fault}-{repeat}"
            workdir.mkdir(parents=True)
            rows.append(one_run(workdir, args))
            print(json.dumps(rows[-1]), flush=True)
            if args.results:
                with args.results.open("a") as out:
                    out.write(json.dumps(rows[-1]) + "\n")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
