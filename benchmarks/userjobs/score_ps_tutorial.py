"""Scores tfdiag's diagnosis of the tutorial-style PS job (``ps_tutorial``) under outside faults.

For each scenario: run the job with the fault, analyse it, note the primary finding and
the finding the fault should produce (kind, task, predicted speed-up), then measure the
change that finding advises (the fault removed, or ten steps per closure) in runs
interleaved with the faulty ones (A, B, A, B: the host is shared, so drift hits both).

    .venv/bin/python -m benchmarks.userjobs.score_ps_tutorial --steps 300 --repeats 2

Prints a markdown table (with the load average at start and end) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from benchmarks.userjobs.ps_tutorial import run_job


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: dict  # run_job keyword arguments that make the fault
    expected_kind: str | None
    expected_task: str | None
    changes: dict = field(default_factory=dict)  # name: run_job keyword arguments of the change measured


QUOTA = {"cpu_quota": (1, 20.0, 30.0)}
SCENARIOS = (
    Scenario("clean", {}, None, None, {"10 steps/closure": {"steps_per_closure": 10}}),
    Scenario("CPU quota 20/50 ms on worker:1", QUOTA, "straggler", "worker:1",
             {"quota lifted": {}, "10 steps/closure": {**QUOTA, "steps_per_closure": 10}}),
    Scenario("25 ms RTT to ps:1", {"slow_ps": (1, 25.0)}, "slow_link", "ps:1", {"delay removed": {}}),
    Scenario("8 ms RTT to ps:1", {"slow_ps": (1, 8.0)}, "slow_link", "ps:1", {"delay removed": {}}),
)


def analyze(logdir: str) -> dict:
    out = subprocess.run([sys.executable, "-c", "import sys; from tfdiag.cli import main; sys.exit(main())", "analyze", logdir, "--format", "json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def score(scenario: Scenario, steps: int, repeats: int, workdir: str) -> dict:
    """Interleaved runs of the fault and of each change; the first faulty run is analysed."""
    rates: dict[str, list[float]] = {"fault": [], **{name: [] for name in scenario.changes}}
    report = None
    for repeat in range(repeats):
        for name, kwargs in [("fault", scenario.fault), *scenario.changes.items()]:
            logdir = os.path.join(workdir, f"{scenario.name.replace(' ', '_').replace('/', '_')}-{name.replace(' ', '_').replace('/', '_')}-{repeat}")
            _, _, rate = run_job(logdir, steps=steps, **kwargs)
            rates[name].append(rate)
            if name == "fault" and report is None:
                report = analyze(logdir)
    findings = report["findings"]
    expected = next((f for f in findings if f["kind"] == scenario.expected_kind), None)
    warnings = [f["kind"] for f in findings if f["severity"] in ("warning", "critical")]
    fault_rate = statistics.median(rates["fault"])
    return {
        "scenario": scenario.name,
        "primary": (f"{findings[0]['kind']} {','.join(findings[0]['tasks'])}" if findings else "none"),
        "warnings": warnings,
        "expected": (f"{expected['kind']} {','.join(expected['tasks'])} predicted "
                     f"{expected['recommendation']['predicted_speedup']:.2f}x" if expected else
                     ("none (clean)" if scenario.expected_kind is None else "MISSING")),
        "rate": fault_rate,
        "measured": {name: statistics.median(values) / fault_rate for name, values in rates.items() if name != "fault"},
        "examples_per_s_reported": report["summary"].get("examples_per_s"),
        "predicted": {f["kind"]: f["recommendation"].get("predicted_speedup") for f in findings},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved runs of each variant")
    parser.add_argument("--only", action="append", help="scenario names to run (default: all)")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tfdiag-score-ps-tutorial-")
    load_before = os.getloadavg()
    rows = [score(s, args.steps, args.repeats, workdir) for s in SCENARIOS if not args.only or s.name in args.only]
    load_after = os.getloadavg()
    print(f"load average {load_before[0]:.1f} → {load_after[0]:.1f}; {args.repeats} interleaved runs each; {args.steps} steps")
    print("| scenario | primary | warning findings | expected finding | examples/s (job) | measured change |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        changes = ", ".join(f"{name}: {ratio:.2f}x" for name, ratio in row["measured"].items())
        print(f"| {row['scenario']} | {row['primary']} | {', '.join(row['warnings']) or '-'} | {row['expected']} | "
              f"{row['rate']:.0f} | {changes} |")
    print(json.dumps(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
