"""Collector overhead: sample jobs with and without collectors, alternating.

Runs ``tfdiag sample JOB`` and ``tfdiag sample JOB --no-collect`` in turns (so drift in
the machine's load hits both alike), parses ``examples_per_s`` from each run's
``tfdiag-sample:`` line, and prints the median throughput ratio (collect / no-collect)
per job with a markdown table for ``docs/benchmarks.md``. It also counts the CPU
seconds of every process of each run (the launcher's children: all tasks): their
difference is what the collectors cost in CPU, one-time work included (on a shared
2-core machine it moves by a CPU-second or more between runs of the same code).

    python benchmarks/overhead.py --jobs ps_ctl mwms_fit --pairs 5 --steps 400
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUMMARY = re.compile(r"tfdiag-sample: steps=(\d+) wall_s=([0-9.]+) examples_per_s=([0-9.]+)")
# Collectors may cost at most 1 % of throughput at default settings (issue #4).
MAX_OVERHEAD = 0.01


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(job: str, collect: bool, steps: int, logdir: Path, timeout_s: float) -> tuple[float, float] | None:
    """(examples per second, CPU seconds of all its processes) of one run, or None when it failed."""
    command = [sys.executable, "-m", "tfdiag.cli", "sample", job, "--steps", str(steps), "--logdir", str(logdir),
               "--timeout", str(timeout_s)]
    if not collect:
        command.append("--no-collect")
    cpu_before = children_cpu_s()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60)
    cpu_s = children_cpu_s() - cpu_before
    match = SUMMARY.findall(done.stderr)
    if done.returncode != 0 or not match:
        print(f"  {job} collect={collect}: failed (exit {done.returncode}): {done.stderr[-500:]}", file=sys.stderr)
        return None
    return float(match[-1][2]), cpu_s


def measure(job: str, pairs: int, steps: int, timeout_s: float, workdir: Path) -> dict:
    rates = {True: [], False: []}
    cpu = {True: [], False: []}
    ratios = []
    for i in range(pairs):
        # Alternate which goes first, so neither always runs on a warmer page cache.
        order = (True, False) if i % 2 == 0 else (False, True)
        pair = {}
        for collect in order:
            result = run_once(job, collect, steps, workdir / f"{job}-{i}-{'on' if collect else 'off'}", timeout_s)
            pair[collect] = result and result[0]
            if result is not None:
                rates[collect].append(result[0])
                cpu[collect].append(result[1])
        if pair.get(True) and pair.get(False):
            ratios.append(pair[True] / pair[False])
        print(f"  {job} pair {i}: on={pair.get(True)} off={pair.get(False)}", file=sys.stderr, flush=True)
    return {
        "job": job, "pairs": len(ratios),
        "on": statistics.median(rates[True]) if rates[True] else None,
        "off": statistics.median(rates[False]) if rates[False] else None,
        "ratio": statistics.median(ratios) if ratios else None,
        "ratios": ratios,
        "cpu_on": statistics.median(cpu[True]) if cpu[True] else None,
        "cpu_off": statistics.median(cpu[False]) if cpu[False] else None,
    }


def table(results: list[dict], steps: int) -> str:
    lines = [
        "| job | pairs | steps | examples/s with collectors (median) | without (median) | ratio (median of pairs) "
        "| pair ratios | CPU-s per run with → without (medians) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if not r["ratio"]:
            lines.append(f"| {r['job']} | 0 | {steps} | n/a | n/a | n/a | n/a | n/a |")
            continue
        cpu = r["cpu_on"] - r["cpu_off"]
        lines.append(f"| {r['job']} | {r['pairs']} | {steps} | {r['on']:.0f} | {r['off']:.0f} | {r['ratio']:.3f} | "
                     f"{', '.join(f'{x:.3f}' for x in r['ratios'])} | {r['cpu_on']:.1f} → {r['cpu_off']:.1f} "
                     f"({cpu:+.1f}, {cpu / r['cpu_off']:+.1%}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", default=["ps_ctl", "mwms_fit"])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    parser.add_argument("--workdir", default=None, help="where the runs go (default: a temp dir)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tfdiag-overhead-"))
    started = time.monotonic()
    results = [measure(job, args.pairs, args.steps, args.timeout, workdir) for job in args.jobs]
    print(table(results, args.steps))
    print(f"took {time.monotonic() - started:.0f} s; runs in {workdir}")
    worst = [r for r in results if r["ratio"] is not None and r["ratio"] < 1 - MAX_OVERHEAD]
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
