"""What an overhead A/B's phases cost (``overhead_ab.py``): this process's CPU per phase,
and the per-component cost model, each collector component's measured CPU against what
``src/tfdiag/collectors/budget.py`` declares it may cost, with its table for docs/benchmarks.md."""

from __future__ import annotations

import math
import statistics
import time

from benchmarks.harness.stats import interval
from tfdiag.collectors import budget


class Meter:
    """CPU of this process per phase: the whole, the calling thread, each ledger component."""

    def __init__(self):
        self._start = None

    def begin(self) -> None:
        self._start = (time.process_time(), time.thread_time(), budget.LEDGER.snapshot())

    def end(self) -> dict:
        process, thread, ledger = self._start
        now = budget.LEDGER.snapshot()
        return {"process": time.process_time() - process, "thread": time.thread_time() - thread,
                "ledger": {name: (now[name] - ledger.get(name, 0)) / 1e9 for name in now}}


def merge_meters(meters: list[dict], hooks: list[float]) -> dict:
    """One phase's ``Meter`` readings of several workers, summed; the hooks' CPU as ``hooks``."""
    ledger = {}
    for meter in meters:
        for name, seconds in meter["ledger"].items():
            ledger[name] = ledger.get(name, 0.0) + seconds
    ledger["hooks"] = sum(hooks)
    return {"process": sum(m["process"] for m in meters), "thread": sum(m["thread"] for m in meters), "ledger": ledger}


def cost_model(results: dict, units: int, unit: str, components: frozenset, jobs: str, processes: int = 1) -> dict:
    """Each component's measured CPU per ``unit`` (closure or step), share of a core and of
    the job's CPU in instrumented phases, against ``budget.COMPONENTS``; and the whole.

    ``processes`` instrumented processes run the collectors, each with its own threads
    and steps: a declared budget is allowed once per process (``live``'s once: it runs
    in the chief only).

    The ledger components are read directly; on ps_ctl ``closure_timing`` is the calling
    thread's extra CPU (``schedule``'s wrapper), B − A of the means; what TensorFlow does
    for the collectors on the coordinator's other threads is ``unattributed`` (the
    process's extra CPU less the rest). The whole is the process's extra CPU, B − A.
    """
    a, b = results["plain"], results["instrumented"]
    wall = statistics.fmean(b["wall"])  # seconds per instrumented phase

    def mean(phases, read):
        return statistics.fmean(read(m) for m in phases["meter"])

    job_cpu = mean(b, lambda m: m["process"]) + statistics.fmean(b["task_cpu"])
    measured = {name: mean(b, lambda m, n=name: m["ledger"].get(n, 0.0)) - mean(a, lambda m, n=name: m["ledger"].get(n, 0.0))
                for name in budget.COMPONENTS if name in components or name == "hooks" and jobs == "fit"}
    if jobs == "ps":
        measured["closure_timing"] = mean(b, lambda m: m["thread"]) - mean(a, lambda m: m["thread"])
    differences = [mb["process"] - ma["process"] for ma, mb in zip(a["meter"], b["meter"])]
    whole, whole_half = interval(differences) if len(differences) > 1 else (statistics.fmean(differences), math.nan)
    if jobs == "fit":
        measured["step_input"] = whole - sum(measured.values()) if "step_input" in components else 0.0
    else:
        measured["unattributed"] = whole - sum(measured.values())
    rows, allowed = [], 0.0
    for name, seconds in measured.items():
        declared = budget.COMPONENTS.get(name)
        running = name in components or name == "unattributed"
        copies = 1 if name == "live" else processes
        limit = ((declared.per_step_us * 1e-6 * units + declared.core_share * wall) * copies
                 if declared and running else None)
        allowed += limit or 0.0
        rows.append({"component": name, "running": running, "cpu_s": seconds, "limit_s": limit})
    live = budget.COMPONENTS["live"].core_share * wall
    return {"unit": unit, "units": units, "wall": wall, "job_cpu": job_cpu, "rows": rows, "whole": whole,
            "whole_half": whole_half, "allowed": allowed, "live": live}


def model_table(model: dict) -> str:
    """The per-component table (markdown) of ``cost_model``'s result."""
    unit, units, wall, job_cpu = model["unit"], model["units"], model["wall"], model["job_cpu"]

    def cells(seconds, limit):
        share_core, share_job = seconds / wall, seconds / job_cpu
        budget_cell = "–" if limit is None else f"{limit / units * 1e6:.0f} µs ({limit / job_cpu:.3%})"
        verdict = "–" if limit is None else ("ok" if seconds <= limit else "OVER")
        return [f"{seconds / units * 1e6:.1f}", f"{share_core:.3%}", f"{share_job:.3%}", budget_cell, verdict]

    header = ["component", f"CPU µs per {unit}", "share of a core (its processes together)", "share of the job's CPU",
              f"budget per {unit} (share of job CPU)", "within"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    notes = {"unattributed": " (TensorFlow's threads on the coordinator)", "step_input": " (the whole less the rest)"}
    for row in model["rows"]:
        name = row["component"] + (notes.get(row["component"], "") if row["running"] else " (off)")
        lines.append("| " + " | ".join([name, *cells(row["cpu_s"], row["limit_s"])]) + " |")
    whole = cells(model["whole"], model["allowed"])
    whole[0] += f" ± {model['whole_half'] / units * 1e6:.0f}"  # the 95 % interval of the pairs' differences
    lines.append("| " + " | ".join(["**whole** (process CPU, B − A, ± 95 %)", *whole]) + " |")
    if not any(row["component"] == "live" and row["running"] for row in model["rows"]):
        lines.append(f"| live findings (reserved, not running) | – | {budget.COMPONENTS['live'].core_share:.3%} | "
                     f"{model['live'] / job_cpu:.3%} | {model['live'] / units * 1e6:.0f} µs | – |")
    return "\n".join(lines)


def change(plain: list[float], instrumented: list[float], scale: float) -> str:
    """``"A → B (+x %)"`` of the medians of two kinds of phases, times ``scale``."""
    a, b = statistics.median(plain) * scale, statistics.median(instrumented) * scale
    return f"{a:.1f} → {b:.1f} ({b / a - 1:+.1%})"


def mean_change(plain: list[float], instrumented: list[float], scale: float) -> str:
    """``"A → B"`` of the means of two kinds of phases, times ``scale`` (for quantities whose
    per-phase values are too coarse for a median)."""
    return f"{statistics.fmean(plain) * scale:.2f} → {statistics.fmean(instrumented) * scale:.2f}"
