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
"""

from __future__ import annotations

import argparse
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

HERE = Path(__file__).resolve().parent
PREFIX = "/data/plugin/tfdiag"
TARGET_MS = 200.0


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", help="logdir to hold the runs (created if missing)")
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000, help="steps per worker")
    parser.add_argument("--repeat", type=int, default=20, help="requests per route")
    args = parser.parse_args(argv)
    logdir = Path(args.logdir)
    base, new = "base", "new"
    ensure_run(logdir / base, args.workers, args.steps, seed=0)
    ensure_run(logdir / new, args.workers, args.steps, seed=1)

    plugin = TfdiagPlugin(base_plugin.TBContext(logdir=str(logdir)))
    client = Client(application.TensorBoardWSGI([plugin]))
    load_ms, status = time_get(client, f"{PREFIX}/report?run={base}")
    if status != 200:
        print(f"/report answered {status}", file=sys.stderr)
        return 1
    time_get(client, f"{PREFIX}/report?run={new}")
    steps = plugin._state(base).report().summary["steps"]

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
