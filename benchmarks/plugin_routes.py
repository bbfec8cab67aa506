"""Plugin benchmark: how fast every route of the TensorBoard tab answers on a large run.

Writes a synthetic run with ``benchmarks/synth.py`` (unless it exists), builds the
plugin's WSGI app in-process (TensorBoard's router, werkzeug's test client, no
sockets), loads the run once (the first ``/report``, timed apart), then times each
route ``--repeat`` times and prints a markdown table of the first request (which builds
and caches the answer), the median and the max, in milliseconds.
A second run (``--compare``, default: the same run written again with another seed)
is used for ``/compare``.

    python benchmarks/plugin_routes.py /tmp/tfdiag-bench --workers 64 --steps 2000

The issue's bar: every route answers within 200 ms for a 64-worker run once loaded.

``--large RUN`` (a run ``synth.py`` wrote, e.g. the scale benchmark's day of 1,024
workers) measures what a user of a long, wide run waits for, each view from a new plugin
(as when TensorBoard starts): ``/runs``, then ``/report`` and the charts the tab draws
first, each asked every 0.1 s until it answers 200 (a run not read yet answers 202 with
its progress; the tab asks every second). **Cold**: an empty fold cache (``--cache``,
emptied first); the time to the first 202 is reported apart. **Warm**: a second plugin
over the cache the first filled (the folds, and the answers of its view once a poll
found nothing new), then the time until its own loader has read the run (the saved view
is shown meanwhile). **Refresh**: ``synth.py --append`` adds ``--grow`` steps to every
worker; the reply to the next ``/report`` (the view it replaces), then the time until the
new steps show. Targets: first view within 2 s, refresh within 200 ms (issue #33).

    python benchmarks/plugin_routes.py --large /tmp/synth-day --grow 10 --cache /tmp/tfdiag-fold-cache
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tfdiag.report.figures import FIGURES
from tfdiag.tb_plugin.plugin import TfdiagPlugin
from tfdiag.tb_plugin.runs import REFRESH_INTERVAL_S

HERE = Path(__file__).resolve().parent
PREFIX = "/data/plugin/tfdiag"
TARGET_MS = 200.0
FIRST_VIEW_MS, GROWN_VIEW_MS = 2000.0, 200.0
FIRST_FIGURES = ("step_breakdown", "step_time")  # the charts at the top of the tab


def ensure_run(path: Path, workers: int, steps: int, seed: int) -> None:
    if (path / "plugins" / "tfdiag").is_dir():
        return
    subprocess.run([sys.executable, str(HERE / "synth.py"), str(path), "--workers", str(workers), "--steps", str(steps),
                    "--seed", str(seed)], check=True)


def time_get(client: Client, url: str) -> tuple[float, int]:
    started = time.perf_counter()
    response = client.get(url)
    response.get_data()
    return (time.perf_counter() - started) * 1e3, response.status_code


def _until_ready(client: Client, url: str, every_s: float = 0.1) -> float:
    """Milliseconds until ``url`` answers 200, asked every ``every_s`` while it answers 202 (being read)."""
    started = time.perf_counter()
    while True:
        _, status = time_get(client, url)
        if status == 200:
            return (time.perf_counter() - started) * 1e3
        if status != 202:
            raise RuntimeError(f"{url} answered {status}")
        time.sleep(every_s)


def _view(client: Client, run: str) -> list[tuple[str, float]]:
    """(route, ms) of the tab's view of ``run``: its report, then its first charts."""
    urls = [("/report", f"{PREFIX}/report?run={run}")]
    urls += [(f"/figure?name={name}", f"{PREFIX}/figure?run={run}&name={name}") for name in FIRST_FIGURES]
    return [(label, _until_ready(client, url)) for label, url in urls]


def _until_read(client: Client) -> None:
    """Asks /report every 0.1 s until every run's loader has read and analysed what is on disk."""
    while True:
        runs = json.loads(client.get(f"{PREFIX}/status").get_data())["runs"]
        if all(state["stage"] == "ready" and state["analyses"] for state in runs):
            return
        for state in runs:
            client.get(f"{PREFIX}/report?run={state['run']}")
        time.sleep(0.1)


def _steps(client: Client, run: str) -> int:
    return json.loads(client.get(f"{PREFIX}/report?run={run}").get_data())["summary"]["steps"]


def _first_view(run: Path) -> tuple[Client, float, float, list[tuple[str, float]]]:
    """A new plugin's first view of ``run``: (client, ms to the first answer of /report, ms in all, parts)."""
    plugin = TfdiagPlugin(base_plugin.TBContext(logdir=str(run.parent)))
    client = Client(application.TensorBoardWSGI([plugin]))
    started = time.perf_counter()
    _until_ready(client, f"{PREFIX}/runs")
    reply_ms, _ = time_get(client, f"{PREFIX}/report?run={run.name}")
    parts = _view(client, run.name)
    return client, reply_ms, (time.perf_counter() - started) * 1e3, parts


def large(run: Path, grow: int, cache: Path) -> int:
    """Cold and warm first views and the refresh of a growing run, on ``run`` (its parent is the logdir)."""
    load = "/".join(f"{value:.1f}" for value in os.getloadavg())
    shutil.rmtree(cache, ignore_errors=True)
    os.environ["TFDIAG_CACHE_DIR"] = str(cache)
    client, cold_reply, cold_ms, cold = _first_view(run)
    time.sleep(REFRESH_INTERVAL_S)  # the tab's next poll: a refresh that finds nothing new saves the view
    time_get(client, f"{PREFIX}/report?run={run.name}")
    _until_read(client)
    cache_mb = sum(entry.stat().st_size for entry in cache.rglob("*.fold")) / 1e6
    client, warm_reply, warm_ms, warm = _first_view(run)
    started = time.perf_counter()
    _until_read(client)  # the saved view is shown while this session's loader reads the run
    caught_up_s = time.perf_counter() - started
    steps = _steps(client, run.name)
    subprocess.run([sys.executable, str(HERE / "synth.py"), str(run), "--steps", str(grow), "--append"], check=True)
    time.sleep(REFRESH_INTERVAL_S)
    reply_ms, status = time_get(client, f"{PREFIX}/report?run={run.name}")
    started = time.perf_counter()
    while (added := _steps(client, run.name) - steps) == 0:
        time.sleep(0.1)
    shown_s = time.perf_counter() - started + reply_ms / 1e3
    again = _view(client, run.name)
    print(f"{run.name}: {steps:,} step records; +{added:,} appended; fold cache {cache_mb:,.0f} MB; load {load} → "
          + "/".join(f"{value:.1f}" for value in os.getloadavg()) + "\n")
    print("| view | first reply ms | " + " | ".join(f"`{label}` ms" for label, _ in cold)
          + " | whole view ms | target ms |")
    print("| --- |" + " ---: |" * (len(cold) + 3))
    for name, reply, parts, total, target in (("first view, cold cache", cold_reply, cold, cold_ms, FIRST_VIEW_MS),
                                              ("first view, warm cache", warm_reply, warm, warm_ms, FIRST_VIEW_MS)):
        print(f"| {name} | {reply:,.0f} | " + " | ".join(f"{ms:,.0f}" for _, ms in parts)
              + f" | {total:,.0f} | {target:,.0f} |")
    print(f"| warm cache, the loader's own read | – | – | – | – | read and analysed after {caught_up_s:,.1f} s | – |")
    print(f"| refresh (+{added:,} records) | {reply_ms:,.0f} ({status}) | "
          + " | ".join(f"{ms:,.0f}" for _, ms in again) + f" | new steps shown after {shown_s:,.1f} s | "
          f"{GROWN_VIEW_MS:,.0f} |")
    return 0 if warm_ms <= FIRST_VIEW_MS and reply_ms <= GROWN_VIEW_MS else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", nargs="?", help="logdir to hold the runs (created if missing)")
    parser.add_argument("--large", type=Path, metavar="RUN", help="first view and refresh of a large synthetic run")
    parser.add_argument("--grow", type=int, default=10, help="with --large: steps appended to every worker")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/tfdiag-fold-cache"),
                        help="with --large: the fold cache's directory (emptied first)")
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000, help="steps per worker")
    parser.add_argument("--repeat", type=int, default=20, help="requests per route")
    args = parser.parse_args(argv)
    if args.large:
        return large(args.large, args.grow, args.cache)
    if not args.logdir:
        parser.error("a logdir, or --large RUN")
    logdir = Path(args.logdir)
    base, new = "base", "new"
    ensure_run(logdir / base, args.workers, args.steps, seed=0)
    ensure_run(logdir / new, args.workers, args.steps, seed=1)

    plugin = TfdiagPlugin(base_plugin.TBContext(logdir=str(logdir)))
    client = Client(application.TensorBoardWSGI([plugin]))
    load_ms = _until_ready(client, f"{PREFIX}/report?run={base}", every_s=0.01)
    _until_ready(client, f"{PREFIX}/report?run={new}")
    steps = _steps(client, base)

    routes = [("/runs", f"{PREFIX}/runs"), ("/figures", f"{PREFIX}/figures"), ("/report", f"{PREFIX}/report?run={base}")]
    routes += [(f"/figure?name={name}", f"{PREFIX}/figure?run={base}&name={name}") for name in FIGURES]
    routes += [("/compare", f"{PREFIX}/compare?base={base}&new={new}"), ("/index.js", f"{PREFIX}/index.js")]
    print(f"{args.workers} workers, {steps:,} step records; first /report (load + analysis): {load_ms:,.0f} ms\n")
    print("| route | first ms (builds and caches) | median ms | max ms |")
    print("| --- | ---: | ---: | ---: |")
    slow = []
    for label, url in routes:
        times = []
        for _ in range(args.repeat):
            elapsed, status = time_get(client, url)
            if status != 200:
                print(f"{url} answered {status}", file=sys.stderr)
                return 1
            times.append(elapsed)
        print(f"| `{label}` | {times[0]:.1f} | {statistics.median(times):.1f} | {max(times):.1f} |")
        if max(times) > TARGET_MS:
            slow.append(label)
    if slow:
        print(f"\nslower than {TARGET_MS:.0f} ms: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
