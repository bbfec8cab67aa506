"""Scale benchmark: analysing large synthetic runs, whole and as they grow.

Three modes, each printing one Markdown table row (with the load average before and after):

- default: writes the run with ``benchmarks/synth.py`` unless it exists, then runs
  ``tfdiag analyze --format json`` in a fresh process, measuring wall time and peak RSS
  (the child's own ``ru_maxrss``), and checks that the analysis never imported TensorFlow;
- ``--grow STEPS``: in one process, the tab's way: a ``RunLoader`` and an analysis of the
  run, then ``synth.py --append`` adds STEPS steps to every worker, then the loader's
  refresh and a new analysis (the re-analysis reads and folds only the appended bytes);
- ``--check RUN...``: the streaming path against the exact one on runs small enough for
  the exact one (the row cap forced down to a few rows): findings and numbers must agree
  (counts, sums and means exactly, percentiles within ``PERCENTILE_RELATIVE_ERROR``).

    python benchmarks/scale.py /tmp/synth-10m --workers 64 --steps 156250
    python benchmarks/scale.py /tmp/synth-100m --workers 1024 --steps 97657
    python benchmarks/scale.py /tmp/synth-10m --grow 1000
    python benchmarks/scale.py --check logs/ps_ctl-slow logs/mwms-clean
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs the CLI in-process, then reports its own peak RSS and whether TensorFlow got imported.
PROBE = (
    "import json, resource, sys, tfdiag.cli;"
    "code = tfdiag.cli.main(['analyze', sys.argv[1], '--format', 'json', '-q', '-o', sys.argv[2]]);"
    "usage = resource.getrusage(resource.RUSAGE_SELF);"
    "print(json.dumps({'tensorflow': 'tensorflow' in sys.modules, 'peak_mb': usage.ru_maxrss / 1024,"
    " 'cpu_s': usage.ru_utime + usage.ru_stime}), file=sys.stderr); sys.exit(code)"
)
CHECK_CAP = dict(sampled_rows=8, recent_rows=4)


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def whole(run: Path, workers: int, steps: int) -> int:
    if not run.exists():
        subprocess.run([sys.executable, str(HERE / "synth.py"), str(run), "--workers", str(workers),
                        "--steps", str(steps)], check=True)
    output = run / "scale-report.json"
    load_before = _load()
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", PROBE, str(run), str(output)], capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if child.returncode not in (0, 1):
        print(child.stderr, file=sys.stderr)
        return child.returncode
    probe = json.loads(child.stderr.strip().splitlines()[-1])
    report = json.loads(output.read_text())
    print(f"| {report['summary']['steps']:,} step records, {len(report['workers'])} workers | {wall_s:.1f} s | "
          f"{probe['cpu_s']:.1f} s | {probe['peak_mb']:,.0f} MB | {'yes' if probe['tensorflow'] else 'no'} | "
          f"{load_before} → {_load()} |")
    return 0


def grow(run: Path, steps: int) -> int:
    from tfdiag.analysis import analyze
    from tfdiag.analysis.load import RunLoader

    load_before = _load()
    started, cpu = time.perf_counter(), time.process_time()
    loader = RunLoader(run)
    first = analyze(loader.refresh())
    first_s, first_cpu = time.perf_counter() - started, time.process_time() - cpu
    subprocess.run([sys.executable, str(HERE / "synth.py"), str(run), "--steps", str(steps), "--append"], check=True)
    started, cpu = time.perf_counter(), time.process_time()
    again = analyze(loader.refresh())
    again_s, again_cpu = time.perf_counter() - started, time.process_time() - cpu
    added = again.summary["steps"] - first.summary["steps"]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| {first.summary['steps']:,} step records, {len(first.workers)} workers | {first_s:.1f} s "
          f"({first_cpu:.1f} s CPU) | +{added:,} | {again_s:.2f} s ({again_cpu:.2f} s CPU) | {peak_mb:,.0f} MB | "
          f"{load_before} → {_load()} |")
    return 0


def differences(exact: dict, streamed: dict, relative: float) -> list[str]:
    """Where the streamed report's findings and numbers differ from the exact one's."""
    problems = []

    def compare(name, a, b, tolerance):
        if a is None or b is None or isinstance(a, str):
            if a != b:
                problems.append(f"{name}: {a!r} vs {b!r}")
        elif not math.isclose(a, b, rel_tol=tolerance, abs_tol=0.0015):  # the report rounds to 3 decimals
            problems.append(f"{name}: {a} vs {b}")

    kinds = lambda report: [(f["kind"], f["severity"], f["tasks"]) for f in report["findings"]]  # noqa: E731
    if kinds(exact) != kinds(streamed):
        problems.append(f"findings: {kinds(exact)} vs {kinds(streamed)}")
    compare("steps", exact["summary"]["steps"], streamed["summary"]["steps"], 0)
    compare("examples_per_s", exact["summary"]["examples_per_s"], streamed["summary"]["examples_per_s"], 1e-9)
    compare("step_time_ms", exact["summary"]["step_time_ms"], streamed["summary"]["step_time_ms"], relative)
    for a, b in zip(exact["workers"], streamed["workers"]):
        for key in ("task", "steps", "examples"):
            compare(f"{a['task']} {key}", a[key], b[key], 0)
        compare(f"{a['task']} mean", a["step_time_ms"]["mean"], b["step_time_ms"]["mean"], 1e-9)
        compare(f"{a['task']} input_wait_frac", a["input_wait_frac"], b["input_wait_frac"], 1e-9)
        for name in ("p50", "p95"):
            compare(f"{a['task']} {name}", a["step_time_ms"][name], b["step_time_ms"][name], relative)
    return problems


def check(runs: list[Path]) -> int:
    from tfdiag.analysis import analyze
    from tfdiag.analysis.load import RunLoader
    from tfdiag.analysis.step_stats import PERCENTILE_RELATIVE_ERROR, StepAccumulator

    failed = 0
    for run in runs:
        exact_run = RunLoader(run).refresh()
        streamed_run = RunLoader(run, StepAccumulator(**CHECK_CAP)).refresh()
        exact, streamed = analyze(exact_run).to_dict(), analyze(streamed_run).to_dict()
        problems = differences(exact, streamed, PERCENTILE_RELATIVE_ERROR)
        failed += bool(problems)
        kept = f"{len(streamed_run.frame('step')):,} of {len(exact_run.frame('step')):,} rows kept"
        findings = ", ".join(f["kind"] for f in exact["findings"]) or "no findings"
        print(f"| {run.name} | {kept} | {findings} | {'same' if not problems else '; '.join(problems)} |")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="*", type=Path)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--steps", type=int, default=156_250)
    parser.add_argument("--grow", type=int, metavar="STEPS", help="append STEPS steps per worker and re-analyse")
    parser.add_argument("--check", action="store_true", help="compare the streaming and exact paths on RUNs")
    args = parser.parse_args(argv)
    if args.check:
        return check(args.run)
    if len(args.run) != 1:
        parser.error("one run directory")
    if args.grow:
        return grow(args.run[0], args.grow)
    return whole(args.run[0], args.workers, args.steps)


if __name__ == "__main__":
    sys.exit(main())
