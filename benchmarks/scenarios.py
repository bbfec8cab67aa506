"""Diagnosis-accuracy benchmark: plant a bottleneck, check the diagnosis, apply the advice.

For each scenario: run a sample job with an injection, analyse it, check that the
primary finding names the planted kind and task, then run the job again with the change
the advisor recommends (a `--tune`, or the injection removed where the fix is to repair
hardware or network), and compare the measured speed-up with the predicted one.

    python benchmarks/scenarios.py --steps 200 --out docs/benchmarks-scenarios.md

With ``--workdir DIR`` the runs and their measured throughputs (``DIR/rates.json``) are
kept; ``--rescore DIR`` then analyses those runs again without re-running any job, to
check a change to the analysis against the same measurements.

Throughput comes from each job's own `tfdiag-sample: ... examples_per_s=E` line (not from
tfdiag's logs), so the measurement does not depend on the thing being measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tfdiag.sample_jobs.advice import tune_options
from tfdiag.sample_jobs.jobs import JobConfig

# The tfdiag of the Python running this script, whatever is on PATH.
TFDIAG = (sys.executable, "-m", "tfdiag.cli")

SUMMARY = re.compile(r"tfdiag-sample: steps=(\d+) wall_s=([\d.]+) examples_per_s=([\d.]+)")


@dataclass(frozen=True)
class Scenario:
    name: str
    job: str
    inject: tuple[str, ...]
    expected_kind: str | None
    expected_task: str | None  # a task the primary finding must name; None: any
    fix_removes_injection: bool = False  # the advice is to repair the host or link
    ps: int = 2

    @property
    def fix(self) -> tuple[str, ...]:
        """The --tune options that apply the expected finding's advice (``sample_jobs.advice``)."""
        return tune_options(self.expected_kind, JobConfig(self.job, "-", ps=self.ps, workers=2))


SCENARIOS = (
    Scenario("clean ps_ctl", "ps_ctl", (), None, None),
    Scenario("input delay", "ps_ctl", ("input-delay=20",), "input_bound", None),
    Scenario("slow worker", "ps_ctl", ("slow-worker=1:40",), "straggler", "worker:1", fix_removes_injection=True),
    Scenario("hot ps", "ps_ctl", ("hot-ps=0",), "ps_hotspot", "ps:0"),
    Scenario("slow ps link", "ps_ctl", ("slow-ps=1:25",), "slow_link", "ps:1", fix_removes_injection=True),
    Scenario("shard skew", "mwms_fit", ("shard-skew=1:3",), "shard_imbalance", "worker:1", ps=0),
    Scenario("worker killed", "ps_ctl", ("kill-worker=1@30+restart",), "task_failure", "worker:1",
             fix_removes_injection=True),
)


def run_job(job: str, logdir: Path, steps: int, ps: int, inject=(), tune=()) -> float:
    """Runs a sample job; returns its own examples/s."""
    command = [*TFDIAG, "sample", job, "--workers", "2", "--steps", str(steps), "--logdir", str(logdir)]
    if ps:
        command += ["--ps", str(ps)]
    for spec in inject:
        command += ["--inject", spec]
    for spec in tune:
        command += ["--tune", spec]
    result = subprocess.run(command, capture_output=True, text=True)
    match = SUMMARY.search(result.stderr)
    if result.returncode != 0 or match is None:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return float(match.group(3))


def analyse(logdir: Path) -> dict:
    result = subprocess.run([*TFDIAG, "analyze", str(logdir), "--format", "json"], capture_output=True, text=True)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"tfdiag analyze {logdir} failed:\n{result.stderr}")
    return json.loads(result.stdout)


def measure_rates(scenario: Scenario, workdir: Path, steps: int, repeats: int) -> dict:
    """Runs the scenario and its fix ``repeats`` times each; their examples/s."""
    slug = scenario.name.replace(" ", "-")
    rates = {"base": [], "fixed": []}
    for attempt in range(repeats):
        rates["base"].append(run_job(scenario.job, workdir / f"{slug}-{attempt}", steps, scenario.ps, scenario.inject))
        if scenario.expected_kind is not None:
            inject = () if scenario.fix_removes_injection else scenario.inject
            rates["fixed"].append(run_job(scenario.job, workdir / f"{slug}-fixed-{attempt}", steps, scenario.ps,
                                          inject, scenario.fix))
    return rates


def evaluate(scenario: Scenario, workdir: Path, rates: dict) -> dict:
    """Analyses the scenario's first run and scores its prediction against ``rates``."""
    slug = scenario.name.replace(" ", "-")
    base_rates, fixed_rates = rates["base"], rates["fixed"]
    report = analyse(workdir / f"{slug}-0")
    primary = report["findings"][0] if report["findings"] else None
    found_kind = primary["kind"] if primary else None
    found_tasks = primary["tasks"] if primary else []
    correct = found_kind == scenario.expected_kind and (
        scenario.expected_task is None or scenario.expected_task in found_tasks)
    predicted = primary["recommendation"]["predicted_speedup"] if primary else None
    measured = statistics.median(fixed_rates) / statistics.median(base_rates) if fixed_rates else None
    error = abs(predicted - measured) / measured if predicted and measured else None
    return {"scenario": scenario.name, "expected": _label(scenario.expected_kind, scenario.expected_task),
            "found": _label(found_kind, ", ".join(found_tasks)), "correct": correct, "predicted": predicted,
            "measured": measured, "error": error,
            "fix": ", ".join(f"--tune {t}" for t in scenario.fix) or ("injection removed" if scenario.fix_removes_injection else "")}


def _label(kind, tasks) -> str:
    return "none" if kind is None else f"{kind} ({tasks})" if tasks else kind


def _number(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown(rows: list[dict]) -> str:
    lines = ["| scenario | expected | found | ok | fix applied | predicted | measured | error |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| {row['scenario']} | {row['expected']} | {row['found']} | {'yes' if row['correct'] else 'NO'} | "
                     f"{row['fix']} | {_number(row['predicted'], '.2f')} | {_number(row['measured'], '.2f')} | "
                     f"{_number(row['error'], '.0%')} |")
    errors = [row["error"] for row in rows if row["error"] is not None]
    correct = sum(row["correct"] for row in rows)
    lines.append("")
    lines.append(f"Diagnosed correctly: {correct} of {len(rows)}. "
                 + (f"Median error of predicted against measured speed-up: {statistics.median(errors):.0%}." if errors else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=1, help="runs per side; the median throughput counts")
    parser.add_argument("--only", action="append", help="run only scenarios whose name contains this")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--workdir", type=Path, help="keep the runs and their throughputs here")
    parser.add_argument("--rescore", type=Path, metavar="WORKDIR",
                        help="analyse the runs a --workdir run kept again; run no job")
    args = parser.parse_args(argv)
    scenarios = [s for s in SCENARIOS if not args.only or any(o in s.name for o in args.only)]
    rows = []
    with contextlib.ExitStack() as stack:
        workdir = args.rescore or args.workdir or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="tfdiag-scenarios-")))
        workdir.mkdir(parents=True, exist_ok=True)
        rates_file = workdir / "rates.json"
        all_rates = json.loads(rates_file.read_text()) if rates_file.exists() else {}
        for scenario in scenarios:
            print(f"scenario: {scenario.name}", file=sys.stderr, flush=True)
            try:
                if not args.rescore:
                    all_rates[scenario.name] = measure_rates(scenario, workdir, args.steps, args.repeats)
                    rates_file.write_text(json.dumps(all_rates, indent=1))
                rows.append(evaluate(scenario, workdir, all_rates[scenario.name]))
            except (RuntimeError, KeyError) as error:
                print(f"scenario {scenario.name!r} could not run: {error}", file=sys.stderr)
                rows.append({"scenario": scenario.name, "expected": _label(scenario.expected_kind, scenario.expected_task),
                             "found": "job failed", "correct": False, "predicted": None, "measured": None, "error": None,
                             "fix": ""})
            print(markdown(rows[-1:]).splitlines()[-3], file=sys.stderr, flush=True)
    table = markdown(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
