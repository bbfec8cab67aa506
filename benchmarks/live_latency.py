"""Live findings on a running job: how soon a mid-run straggler is announced, and at what cost.

Each repeat runs ``ps_ctl`` (2 workers, 1 ps) on a local cluster with live findings on
(``TFDIAG_LIVE_FINDINGS=--interval``). ``--clean`` seconds after its first step
record, worker 1 gets a CPU quota (``faults.cpu_quota``: SIGSTOP/SIGCONT, ``--on-ms``
running out of every ``--on-ms + --off-ms``) for ``--starved`` seconds; then the job runs
free until it ends. Read back from the coordinator's task file:

- ``announced_s``: seconds from the quota's start to the ``live_finding`` record that
  began a ``straggler`` naming worker 1 (the line logged at the same moment);
- ``cleared_s``: seconds from the quota's end to its ``cleared`` record;
- ``false``: any finding announced before the quota began (a clean window);
- the live thread's cost, from the ``note`` it writes when the job closes: evaluations,
  how far apart on average (the budget spaces them: ``--share``), thread CPU ms per
  evaluation and per minute, share of one core;
- the load average (``os.getloadavg``) at the start and the end.

    tools/loopback-only .venv/bin/python benchmarks/live_latency.py --repeats 2   # results as JSON lines, then a table

``--keep DIR`` leaves the runs under ``DIR`` (``run0/run``, ...). ``--replay RUN`` then
copies such a run frame by frame into a growing run (each frame once the run's clock
passes its newest row), evaluates live findings every ``--interval`` seconds of the
run's time, and prints the thread CPU per evaluation (a first pass as it runs, a second
with each part timed) and each part's own thread CPU (``timed_parts``: the reading, each
table, each detector, the advisor), for docs/benchmarks.md, "Where an evaluation's CPU
goes". Any recorded run replays (``RUN/plugins/tfdiag``), a kept one or a sample job's:

    .venv/bin/python benchmarks/live_latency.py --replay /tmp/live/run0/run
    .venv/bin/python benchmarks/live_latency.py --replay /tmp/mwms   # after tfdiag sample mwms_fit --logdir /tmp/mwms
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

COST = re.compile(r"live findings: (\d+) evaluations every ([\d.]+) s or more \(every ([\d.]+) s on average, .*?\), "
                  r"([\d.]+) ms CPU each, (\d+) ms CPU per minute \(([\d.]+)% of a core\)")


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


def one_run(workdir: Path, args) -> dict:
    config = JobConfig("ps_ctl", str(workdir / "run"), steps=args.steps, ps=1, workers=2)
    os.environ[ENV_VAR] = str(args.interval)
    if args.share:
        os.environ[SHARE_ENV_VAR] = str(args.share)
    load_before = os.getloadavg()[0]
    with open(workdir / "launcher.log", "w") as out:
        cluster = LocalCluster(config, stderr=out)
        try:
            cluster.start()
            first = wait_for(lambda: records(workdir / "run", "step"), 120)
            if not first:
                raise RuntimeError(f"no step records; see {workdir}")
            time.sleep(max(args.clean - (time.time_ns() - first[0]["end_ns"]) / 1e9, 0))
            false = records(workdir / "run", "live_finding")
            onset_ns = time.time_ns()
            with cpu_quota(cluster.tasks[task_name("worker", 1)].process.pid, args.on_ms, args.off_ms):
                time.sleep(args.starved)
            freed_ns = time.time_ns()
            code = cluster.wait(args.timeout)
        finally:
            cluster.stop()
    found = records(workdir / "run", "live_finding")
    began = next((r for r in found if r["state"] == "began" and r["kind"] == "straggler"
                  and "worker:1" in r["tasks"].split(",") and r["time_ns"] >= onset_ns), None)
    cleared = next((r for r in found if began and r["state"] == "cleared" and r["kind"] == began["kind"]
                    and r["tasks"] == began["tasks"] and r["time_ns"] > began["time_ns"]), None)
    notes = [n["message"] for n in records(workdir / "run", "note") if n["message"].startswith("live findings:")]
    cost = COST.search(notes[-1]) if notes else None
    return {
        "exit": code,
        "announced_s": round((began["time_ns"] - onset_ns) / 1e9, 1) if began else None,
        "cleared_s": round((cleared["time_ns"] - freed_ns) / 1e9, 1) if cleared else None,
        "message": began["message"] if began else None,
        "false": [f"{r['state']} {r['kind']} ({r['tasks']})" for r in false],
        "other": [f"{r['state']} {r['kind']} ({r['tasks']})" for r in found if r is not began and r is not cleared],
        "evaluations": int(cost[1]) if cost else None,
        "seconds_apart": float(cost[3]) if cost else None,
        "cpu_ms_per_evaluation": float(cost[4]) if cost else None,
        "cpu_ms_per_minute": int(cost[5]) if cost else None,
        "core_pct": float(cost[6]) if cost else None,
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


class GrowingCopy:
    """A recorded run copied into ``path`` frame by frame, as its tasks wrote it."""

    def __init__(self, source: Path, path: Path):
        from tfdiag.analysis.load import WINDOW_TIME_COLUMNS

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
    """Live findings evaluated along a recorded run, twice: thread CPU per evaluation and
    the transitions as it runs, then with each part timed (``timed_parts``) for its share."""
    plain_ms, _, messages = _replayed(run, interval_s)
    with timed_parts() as spent:
        timed_ms, live, _ = _replayed(run, interval_s)
    whole = sum(timed_ms)
    lines = [f"{len(plain_ms)} evaluations ({live.evaluations} judged, {live.analyses} analysed), thread CPU per "
             f"evaluation: median {statistics.median(plain_ms):.1f} ms (mean {statistics.mean(plain_ms):.1f}, "
             f"largest {max(plain_ms):.1f}), {statistics.median(timed_ms):.1f} ms with its parts timed; "
             f"load average {os.getloadavg()[0]:.1f}", "",
             *[f"- {message}" for message in messages], "",
             "| part | ms per evaluation | share of an evaluation |", "| --- | --- | --- |"]
    groups = {"reading": ["refresh"], "tables": sorted(name for name in spent if name.startswith("table ")),
              "detectors": sorted(name for name in spent if name.startswith("detector ")), "advisor": ["advise"]}
    for group, names in groups.items():
        group_ns = sum(spent[name] for name in names)
        lines.append(f"| {group} | {group_ns / 1e6 / len(timed_ms):.1f} | {group_ns / 1e6 / whole:.1%} |")
        if len(names) > 1:
            lines += [f"| &nbsp;&nbsp;{name.split(' ', 1)[1]} | {spent[name] / 1e6 / len(timed_ms):.2f} | "
                      f"{spent[name] / 1e6 / whole:.1%} |"
                      for name in sorted(names, key=spent.get, reverse=True) if spent[name] / 1e6 / whole >= 0.005]
    rest_ms = whole - sum(spent.values()) / 1e6
    lines.append(f"| the rest (judging the window, hysteresis) | {rest_ms / len(timed_ms):.1f} | {rest_ms / whole:.1%} |")
    return "\n".join(lines)


@contextlib.contextmanager
def timed_parts():
    """The thread CPU of each part of the evaluations run inside it, by part: ``refresh``
    (``WindowLoader``'s reading), ``table NAME`` (each ``Measurements`` table, built when
    first read), ``detector KIND`` and ``advise``; each part's own time, the parts it
    calls left out (a detector's first read of a table is the table's). The functions are
    wrapped while it lasts. cProfile, which this replaces, charged its own overhead per
    Python call: several times the evaluation, and most on the parts made of small
    pandas calls.
    """
    from tfdiag.analysis import detectors, live
    from tfdiag.analysis.load import WindowLoader
    from tfdiag.analysis.measurements import Measurements

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
                 WindowLoader.refresh)
    for name, table in tables.items():
        table.func = timed(f"table {name}", table.func)
    for kind, detect in originals[1].items():
        detectors.DETECTORS[kind] = timed(f"detector {kind}", detect)  # detect_all's default registry
    live.advise = timed("advise", live.advise)
    WindowLoader.refresh = timed("refresh", WindowLoader.refresh)
    try:
        yield spent
    finally:
        for name, table in tables.items():
            table.func = originals[0][name]
        detectors.DETECTORS.update(originals[1])
        live.advise, WindowLoader.refresh = originals[2], originals[3]


def _replayed(run: Path, interval_s: float):
    """(thread CPU ms of each evaluation, the ``LiveFindings``, the transitions' messages) along ``run``."""
    from tfdiag.analysis.live import LiveFindings

    with tempfile.TemporaryDirectory(prefix="tfdiag-live-replay-") as tmp:
        copy = GrowingCopy(run, Path(tmp) / "run")
        live = LiveFindings(copy.path)
        cpu_ms, messages, now_ns = [], [], copy.first_ns + int(interval_s * 1e9)
        while now_ns <= copy.last_ns:
            copy.until(now_ns)
            begin = time.thread_time_ns()
            transitions = live.evaluate(now_ns)
            cpu_ms.append((time.thread_time_ns() - begin) / 1e6)
            messages += [transition.message for transition in transitions]
            now_ns += int(interval_s * 1e9)
    return cpu_ms, live, messages


def table(rows: list[dict], args) -> str:
    lines = [f"ps_ctl, 2 workers, 1 ps; live findings every {args.interval:g} s; worker 1 at "
             f"{args.on_ms:g}/{args.on_ms + args.off_ms:g} ms CPU from {args.clean:g} s after its first step for "
             f"{args.starved:g} s", "",
             "| run | announced after | cleared after | false before | evaluations apart | CPU per evaluation | CPU per minute | share of a core | load (start, end) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for number, row in enumerate(rows, 1):
        def seconds(value):
            return "never" if value is None else f"{value:.1f} s"
        lines.append(f"| {number} | {seconds(row['announced_s'])} | {seconds(row['cleared_s'])} | "
                     f"{', '.join(row['false']) or 'none'} | {seconds(row['seconds_apart'])} | {row['cpu_ms_per_evaluation']} ms | "
                     f"{row['cpu_ms_per_minute']} ms | {row['core_pct']} % | {row['load'][0]}, {row['load'][1]} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between live evaluations")
    parser.add_argument("--share", type=float, default=None,
                        help=f"share of a core the evaluations may use (${SHARE_ENV_VAR}); default: the live budget")
    parser.add_argument("--clean", type=float, default=30.0, help="seconds of steps before the quota")
    parser.add_argument("--starved", type=float, default=50.0, help="seconds under the quota")
    parser.add_argument("--on-ms", type=float, default=20.0)
    parser.add_argument("--off-ms", type=float, default=30.0)
    parser.add_argument("--steps", type=int, default=12000, help="ps_ctl steps: the job runs on after the quota")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--keep", type=Path, help="write the runs under this folder and keep them "
                        "(e.g. to profile an evaluation on them), instead of a temporary one")
    parser.add_argument("--replay", type=Path, help="replay this recorded run and profile its evaluations "
                        "(no job is run)")
    args = parser.parse_args(argv)
    if args.replay:
        print(replay(args.replay, args.interval))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="tfdiag-live-") as tmp:
        for repeat in range(args.repeats):
            workdir = (args.keep or Path(tmp)) / f"run{repeat}"
            workdir.mkdir(parents=True)
            rows.append(one_run(workdir, args))
            print(json.dumps(rows[-1]), flush=True)
    print(table(rows, args))
    return 0 if all(row["announced_s"] is not None and row["announced_s"] <= 30 and not row["false"]
                    for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
