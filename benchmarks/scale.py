"""Scale benchmark: analysing large synthetic runs, whole and as they grow.

Five modes, each printing Markdown table rows (with the load average before and after):

- default: writes the run with ``benchmarks/synth.py`` unless it exists (``--step-ms``,
  ``--real-cadence`` passed on), then runs ``tfdiag analyze --format json`` in a fresh
  process, measuring wall time, CPU time and peak RSS (the analysing process's own
  ``ru_maxrss``, and the largest of its fold processes'), and checks that the analysis
  never imported TensorFlow; ``--serial`` folds the task files in that one process; it
  reads without the fold cache (``--no-cache``), as every mode but ``--cache``;
- ``--cache``: the default's measurement three times, one after the other: without the
  cache, cold (an empty cache directory: it saves every file's fold) and warm (it adopts
  them), with the size of the cache and whether the three reports are the same bytes;
- ``--duration SHORT LONG``: the default's measurement of two runs of the same steps, the
  second spread over ten times the duration (``--step-ms``): its peak RSS must stay
  within ``DURATION_MEMORY_RATIO`` of the first's, with the same findings;
- ``--grow STEPS``: in one process, the tab's way: a ``RunLoader`` and an analysis of the
  run, then ``synth.py --append`` adds STEPS steps to every worker, then the loader's
  refresh and a new analysis, timed apart (the refresh reads and folds only the appended
  bytes and rebuilds the frames of the kinds that got some);
- ``--check RUN...``: the streaming path against the exact one on runs small enough for
  the exact one (the row cap forced down to a few rows): findings and numbers must agree
  (counts, sums and means exactly, percentiles within ``PERCENTILE_RELATIVE_ERROR``).

    python benchmarks/scale.py /tmp/synth-10m --workers 64 --steps 156250
    python benchmarks/scale.py /tmp/synth-100m --workers 1024 --steps 97657
    python benchmarks/scale.py /tmp/synth-10m --workers 64 --steps 156250 --serial
    python benchmarks/scale.py --duration /tmp/synth-10m /tmp/synth-10m-long  # the long one: --step-ms 200
    python benchmarks/scale.py /tmp/synth-10m --grow 1000
    python benchmarks/scale.py /tmp/synth-1m --workers 64 --steps 20000 --cache
    python benchmarks/scale.py --check logs/ps_ctl-slow logs/mwms-clean
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs the CLI in-process (serially when asked, with the options after the third argument),
# then reports its own peak RSS, its fold processes' largest, their CPU time together, and
# whether TensorFlow got imported.
PROBE = (
    "import json, math, resource, sys, tfdiag.cli, tfdiag.analysis.parallel_fold as fold;"
    "fold.PARALLEL_BYTES = math.inf if sys.argv[3] == 'serial' else fold.PARALLEL_BYTES;"
    "code = tfdiag.cli.main(['analyze', sys.argv[1], '--format', 'json', '-q', '-o', sys.argv[2], *sys.argv[4:]]);"
    "own, folds = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN));"
    "print(json.dumps({'tensorflow': 'tensorflow' in sys.modules, 'peak_mb': own.ru_maxrss / 1024,"
    " 'fold_peak_mb': folds.ru_maxrss / 1024,"
    " 'cpu_s': sum(u.ru_utime + u.ru_stime for u in (own, folds))}), file=sys.stderr); sys.exit(code)"
)
# The peak RSS of a run spread over ten times the duration, to the same steps' in the usual one.
DURATION_MEMORY_RATIO = 1.2
CHECK_CAP = dict(sampled_rows=8, recent_rows=4)


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def measure(run: Path, serial: bool = False, cache: Path | None = None, label: str = "") -> dict | None:
    """Analyses ``run`` in a fresh process, through the fold cache in ``cache`` (None: none):
    the probe's figures, the wall time and the report."""
    output = run / "scale-report.json"
    options = ["--no-cache"] if cache is None else []
    environment = {**os.environ, **({"TFDIAG_CACHE_DIR": str(cache)} if cache is not None else {})}
    load_before = _load()
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", PROBE, str(run), str(output), "serial" if serial else "parallel",
                            *options], capture_output=True, text=True, env=environment)
    wall_s = time.perf_counter() - started
    if child.returncode not in (0, 1):
        print(child.stderr, file=sys.stderr)
        return None
    probe = json.loads(child.stderr.strip().splitlines()[-1])
    text = output.read_text()
    report = json.loads(text)
    print(f"| {run.name}: {report['summary']['steps']:,} step records, {len(report['workers'])} workers | "
          f"{'serial' if serial else 'parallel'}{label} | "
          f"{wall_s:.1f} s | {probe['cpu_s']:.1f} s | {probe['peak_mb']:,.0f} MB | {probe['fold_peak_mb']:,.0f} MB | "
          f"{'yes' if probe['tensorflow'] else 'no'} | {load_before} → {_load()} |")
    return {**probe, "wall_s": wall_s, "report": report, "text": text}


def whole(run: Path, workers: int, steps: int, synth_options: list[str], serial: bool, cache: bool) -> int:
    if not run.exists():
        subprocess.run([sys.executable, str(HERE / "synth.py"), str(run), "--workers", str(workers),
                        "--steps", str(steps), *synth_options], check=True)
    if cache:
        return cached(run, serial)
    return 0 if measure(run, serial) is not None else 1


def cached(run: Path, serial: bool) -> int:
    """The default's measurement without the fold cache, cold (saving) and warm, in a fresh
    cache directory; 1 if one failed or the reports differ."""
    directory = Path(tempfile.mkdtemp(prefix="tfdiag-scale-cache-"))
    try:
        runs = [measure(run, serial, None, ", no cache"), measure(run, serial, directory, ", cold: saving"),
                measure(run, serial, directory, ", warm")]
        size_mb = sum(entry.stat().st_size for entry in (directory / "folds").iterdir()) / 2**20
    finally:
        shutil.rmtree(directory)
    if None in runs:
        return 1
    same = len({item["text"] for item in runs}) == 1
    print(f"cache {size_mb:,.0f} MB; the three reports are {'the same bytes' if same else 'not the same'}")
    return 0 if same else 1


def duration(short: Path, long: Path) -> int:
    """Whether ``long`` (the same steps over ten times the duration) stays within
    ``DURATION_MEMORY_RATIO`` of ``short``'s peak RSS, with the same findings."""
    first, second = measure(short), measure(long)
    if first is None or second is None:
        return 1
    ratio = second["peak_mb"] / first["peak_mb"]
    kinds = [[(f["kind"], f["severity"], f["tasks"]) for f in m["report"]["findings"]] for m in (first, second)]
    print(f"peak RSS ratio {ratio:.2f} (at most {DURATION_MEMORY_RATIO}); findings "
          f"{'the same' if kinds[0] == kinds[1] else 'differ: ' + repr(kinds)}")
    return 0 if ratio <= DURATION_MEMORY_RATIO and kinds[0] == kinds[1] else 1


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
    grown = loader.refresh()
    read_s = time.perf_counter() - started
    again = analyze(grown)
    again_s, again_cpu = time.perf_counter() - started, time.process_time() - cpu
    added = again.summary["steps"] - first.summary["steps"]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| {first.summary['steps']:,} step records, {len(first.workers)} workers | {first_s:.1f} s "
          f"({first_cpu:.1f} s CPU) | +{added:,} | {again_s:.2f} s (read {read_s:.2f} s, analysis {again_s - read_s:.2f} s; "
          f"{again_cpu:.2f} s CPU) | {peak_mb:,.0f} MB | "
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
    parser.add_argument("--step-ms", type=float, help="synth.py's, for a run it writes")
    parser.add_argument("--real-cadence", action="store_true", help="synth.py's, for a run it writes")
    parser.add_argument("--serial", action="store_true", help="fold the task files in the analysing process")
    parser.add_argument("--cache", action="store_true", help="analyse without the fold cache, cold and warm")
    parser.add_argument("--check", action="store_true", help="compare the streaming and exact paths on RUNs")
    parser.add_argument("--duration", action="store_true", help="compare the peak RSS of two runs (short, long)")
    args = parser.parse_args(argv)
    if args.check:
        return check(args.run)
    if args.duration:
        if len(args.run) != 2:
            parser.error("--duration: two run directories")
        return duration(*args.run)
    if len(args.run) != 1:
        parser.error("one run directory")
    if args.grow:
        return grow(args.run[0], args.grow)
    synth_options = (["--step-ms", str(args.step_ms)] if args.step_ms else []) + (
        ["--real-cadence"] if args.real_cadence else [])
    return whole(args.run[0], args.workers, args.steps, synth_options, args.serial, args.cache)


if __name__ == "__main__":
    sys.exit(main())
