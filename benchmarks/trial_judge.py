"""Judges a trial's findings against what was planted, and aggregates many trials.

Per trial (``judge``):

* **never ran** — a fault started from outside (``trial_run``'s stop duty cycle, switched
  proxy, stop) whose run recorded its onset (``onset``) at or after the last step record of
  the training it was to slow (the planted worker's, else the job's), or that the job
  outlived before its onset came: the trial measured a clean run. It is neither recalled
  nor missed: ``recalled`` and ``located`` are None and ``summary`` counts it apart
  (``never_ran``), so a benchmark whose onset misses the training cannot pass for a
  detector's miss (seeds 1029, 1032, 1036 and 1037 did, with a fixed delay). Runs recorded
  before the onset was (no ``onset``) are judged as they were. But a stop that left the job
  hung ran, whenever it came: the job's exit was the harness's interrupt, not its own (seeds
  1084 and 1288: a ``ps_tutorial`` worker stopped after the last step hung the job's close;
  1217 and 1251: a ``ps_ctl`` worker stopped before any step record was written). Likewise an exception the
  user's code never raised: the fault run exited 0 (seeds 1118 and 1119: ``tf1_feed``'s
  worker 1 waited 30 s for the chief's variables and the job's steps ran out before its
  raise step). Likewise a stop duty cycle whose worker took fewer than ``MIN_STEPS_AFTER``
  steps after its onset: it slowed no training a detector could time (seeds 1050, 1215 and
  1233: ``tf1_feed``'s worker 1, slowed from its start, began training when worker 0 had
  done the job's steps, one step after the fault's onset; in the fix runs it waited 30 s
  for the chief and took one step too);
* **recall** — the planted kind (``trial_run.EXPECTED_KIND``) at warning or above naming
  the planted task (any task where the fault hit every worker); ``located`` when the kind
  is there on some task, ``recalled`` when on the right one;
* **precision** — every warning-level finding must be explained by the plant: its kind in
  ``EXPLAINS[fault]``, or ``host_contention`` while the host was shared (hogs running, or the
  1-minute load average above the host's cores at the trial's start or end: other programs
  ran beside the job); any other is a false alarm;
* **ranking** — the planted finding is the primary (first) one;
* **prediction** — where the fix ran: measured = the fix run's examples/s over the fault
  run's (each job's own summary line: its steady rate, after the warm-up its own clock
  timed, where both runs have one, ``sample_jobs.step_clock``; the whole training's
  otherwise, and for a kill, whose cost is the restart); error = |predicted − measured| /
  measured, with the planted finding's prediction. Where the pair ran twice (``trial_run.REPEAT_SEEDS``):
  measured = the geometric mean of the two pairs' speed-ups, and ``repeat_spread`` = their
  difference over it: how well one pair measures a speed-up on this host.

The effect of a fault, for the targets' bins: a stop duty cycle's slowdown of its task's
training (``duty_cycle_effect``: its strength over the part of the training after its onset),
else the measured speed-up of a fix that removed the fault; unmeasured otherwise. A mid-run
duty cycle of strength 3 over the last third of the training slows it 1.29x, not 3x: binned
by strength alone (``summary``'s ``recall_by_strength``, the rule before 7 December 2026),
such trials counted as misses of 1.5x faults whose fix measured 0.9-1.2x.
"""

from __future__ import annotations

import math
import random
import statistics

from benchmarks.trial_run import EXPECTED_KIND

WARNING = ("warning", "critical")
# The finding kinds a planted fault explains, beside its own: what the fault also makes true.
EXPLAINS = {
    "none": set(),
    "stop-duty": {"straggler"},
    "proxy": {"slow_link", "communication_bound"},
    "input": {"input_bound", "straggler"},
    "shard-skew": {"shard_imbalance", "straggler"},
    "hot-ps": {"ps_hotspot", "slow_link", "communication_bound"},
    "kill": {"task_failure", "stalled", "straggler"},
    "stop": {"stalled", "task_failure"},
    "exception": {"task_failure", "stalled"},
}
# A finding of the job itself, true whatever is planted: its fix measured on the clean job.
# Still a false alarm by the rule (the plant does not explain it); ``summary``
# counts the trials whose only false alarms are these apart (``precise_but_own``).
JOB_OWN = {
    # The tutorial-style PS loop runs one step a closure: the coordinator's loop paces it
    # (its fix, ten steps a closure, measured 1.56x: docs/benchmarks.md, user jobs).
    "ps_tutorial": {"coordinator_bound"},
}
Z95 = 1.959963984540054
# A fix measured by two pairs whose speed-ups differ by more than this (of their mean) cannot
# check a prediction to the target's 10 %: ``summary`` reports the error over the others too.
REPEATABLE_SPREAD = 0.10
# A worker that took fewer steps than this after a duty cycle's onset had no step rate to
# slow: the fault acted on no training (``judge``; chosen as the fewest steps a rate is read from).
MIN_STEPS_AFTER = 10


def diagnosis(trial: dict, findings: list[dict], shared: bool = False) -> tuple[list[dict], dict | None, list[str]]:
    """Of a run's findings: the planted kind's at warning level, the one naming the planted
    task (None: missed), and the false alarms (warning-level findings the plant does not
    explain). ``shared``: other programs loaded the host (``host_contention`` is then true)."""
    warned = [f for f in findings if f["severity"] in WARNING]
    kind = EXPECTED_KIND.get(trial["fault"])
    task = trial["task"] or None  # no task: the fault hit every worker
    planted = [f for f in warned if f["kind"] == kind]
    hit = next((f for f in planted if task is None or task in f["tasks"]), None)
    explained = EXPLAINS[trial["fault"]] | ({"host_contention"} if trial["hogs"] or shared else set())
    return planted, hit, [f"{f['kind']} {','.join(f['tasks'])}" for f in warned if f["kind"] not in explained]


def shared_host(result: dict) -> bool:
    """Other programs ran beside the trial: the load average exceeded the host's cores."""
    return max(result["load1"]) > result.get("cores", 2)


def fault_ran(result: dict) -> bool | None:
    """Whether the fault run's outside fault started before the last step record of the training
    it was to slow (``trial_run.describe_onset``); None where the run recorded no onset (a
    fault inside the job, a proxy from the start, a run from before onsets were recorded)."""
    onset = result["runs"]["fault"].get("onset")
    if not onset:
        return None
    started, last = onset.get("onset_time_ns"), onset.get("training_last_ns")
    return started is not None and last is not None and started < last


def _never_raised(trial: dict, result: dict) -> bool:
    """An exception trial whose job ended well: the raising task never reached its raise step."""
    return trial["fault"] == "exception" and result["runs"]["fault"].get("exit") == 0


def _hung(trial: dict, result: dict) -> bool:
    """A stop applied (its onset dated) to a job that then did not end on its own."""
    run = result["runs"]["fault"]
    return trial["fault"] == "stop" and (run.get("onset") or {}).get("onset_time_ns") is not None \
        and run.get("exit") != 0


def _idle_worker(trial: dict, result: dict) -> bool:
    """A stop duty cycle whose worker took fewer than ``MIN_STEPS_AFTER`` steps after its onset."""
    onset = result["runs"]["fault"].get("onset") or {}
    steps = onset.get("steps_after")
    return trial["fault"] == "stop-duty" and onset.get("over") == trial["task"] and steps is not None \
        and steps < MIN_STEPS_AFTER


def duty_cycle_effect(strength: float, onset: dict | None) -> float:
    """The slowdown a stop duty cycle of ``strength`` made of its task's training: the
    strength after its onset, none before, so ``1 / (1 - g + g / strength)`` with ``g`` the
    share of the fault run's training (first step to last) after the onset; ``strength``
    itself where the run recorded no onset or the onset came before the first step.

    >>> round(duty_cycle_effect(3.0, {"after_start_s": 2.0, "before_end_s": 2.0}), 2)
    1.5
    """
    before, after = (onset or {}).get("after_start_s"), (onset or {}).get("before_end_s")
    if before is None or after is None or before <= 0:
        return strength
    share = min(max(after / (before + after), 0.0), 1.0) if before + after > 0 else 0.0
    return 1 / (1 - share + share / strength)


def judge(trial: dict, result: dict) -> dict:
    """The verdict of one trial: whether its fault ran, recall, false alarms, rank, prediction
    error, effect."""
    fault = trial["fault"]
    findings = result["runs"]["fault"]["findings"]
    never_ran = fault != "none" and not _hung(trial, result) and (
        fault_ran(result) is False or _never_raised(trial, result) or _idle_worker(trial, result))
    kind = None if never_ran else EXPECTED_KIND.get(fault)  # never ran: neither recalled nor missed
    planted, hit, false_alarms = diagnosis(trial, findings, shared_host(result))
    verdict = {"never_ran": never_ran,
               "recalled": hit is not None if kind else None, "located": bool(planted) if kind else None,
               "named_tasks": sorted({t for f in planted for t in f["tasks"]}),
               "primary": bool(findings) and hit is not None and findings[0] is hit,
               "false_alarms": false_alarms, "predicted": hit and hit["predicted"],
               "measured": None, "error": None, "repeat_spread": None,
               "effect": duty_cycle_effect(trial["strength"], result["runs"]["fault"].get("onset"))
               if fault == "stop-duty" else None}
    runs, again = result["runs"], result.get("repeat") or {}
    rate = "steady_examples_per_s" if fault != "kill" and all(
        (side or {}).get("steady_examples_per_s") for side in (runs["fault"], runs.get("fix"))) else "examples_per_s"
    fix, base = runs.get("fix"), runs["fault"][rate]
    if fix and fix[rate] and base:
        verdict["measured"] = fix[rate] / base
        if (again.get("fix") or {}).get(rate) and (again.get("fault") or {}).get(rate):
            second = again["fix"][rate] / again["fault"][rate]
            first, verdict["measured"] = verdict["measured"], math.sqrt(verdict["measured"] * second)
            verdict["repeat_spread"] = abs(first - second) / verdict["measured"]
        if verdict["predicted"]:
            verdict["error"] = abs(verdict["predicted"] - verdict["measured"]) / verdict["measured"]
        if verdict["effect"] is None and result.get("fix_description") == "fault removed":
            verdict["effect"] = round(verdict["measured"], 3)
    return verdict


def wilson(successes: int, n: int) -> tuple[float, float]:
    """The Wilson score 95 % interval of a proportion.

    >>> [round(x, 3) for x in wilson(19, 20)]
    [0.764, 0.991]
    """
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _f1(tp: int, fp: int, fn: int) -> float:
    """F1; NaN where the kind was neither planted nor reported (a resample without it)."""
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else math.nan


def per_kind(rows: list[dict], resamples: int = 2000) -> list[dict]:
    """Per finding kind: precision, recall (Wilson intervals), F1 (bootstrap interval over
    trials), localisation. A trial counts once per kind: TP when the kind was planted and
    recalled; FN when planted and missed; FP when reported at warning level unexplained. A
    fault that never ran (``judge``) planted nothing."""
    kinds = sorted(({_planted(r) for r in rows} - {None})
                   | {alarm.split()[0] for r in rows for alarm in r["verdict"]["false_alarms"]})
    table = []
    for kind in kinds:
        marks = [_marks(r, kind) for r in rows]
        tp, fp, fn = (sum(m[i] for m in marks) for i in range(3))
        planted = [r for r in rows if _planted(r) == kind]
        located = [r for r in planted if r["verdict"]["located"]]
        rng = random.Random(0)
        boot = sorted(f1 for f1 in (_f1(*(sum(m[i] for m in sample) for i in range(3)))
                                    for sample in ([rng.choice(marks) for _ in marks] for _ in range(resamples)))
                      if not math.isnan(f1))
        table.append({"kind": kind, "planted": len(planted), "tp": tp, "fp": fp, "fn": fn,
                      "precision": tp / (tp + fp) if tp + fp else math.nan, "precision_ci": wilson(tp, tp + fp),
                      "recall": tp / (tp + fn) if tp + fn else math.nan, "recall_ci": wilson(tp, tp + fn),
                      "f1": _f1(tp, fp, fn), "f1_ci": (quantile(boot, 0.025), quantile(boot, 0.975)),
                      "localised": sum(r["verdict"]["recalled"] for r in located), "located": len(located)})
    return table


def _planted(row: dict) -> str | None:
    """The finding kind a trial planted; None for a clean trial or a fault that never ran."""
    return None if row["verdict"].get("never_ran") else EXPECTED_KIND.get(row["trial"]["fault"])


def _marks(row: dict, kind: str) -> tuple[int, int, int]:
    """(TP, FP, FN) of one trial for one kind."""
    verdict, planted = row["verdict"], _planted(row) == kind
    if planted:
        return (1, 0, 0) if verdict["recalled"] else (0, 0, 1)
    unexplained = any(alarm.split()[0] == kind for alarm in verdict["false_alarms"])
    return (0, int(unexplained), 0)


def _only_own_alarms(row: dict) -> bool:
    """Whether every false alarm of a trial (none included) is its job's own bottleneck (``JOB_OWN``)."""
    own = JOB_OWN.get(row["trial"]["job"], ())
    return all(alarm.split(" ")[0] in own for alarm in row["verdict"]["false_alarms"])


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation (numpy's default)."""
    values = sorted(values)
    position = q * (len(values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def summary(rows: list[dict]) -> dict:
    """The figures the targets are read against; recall over the faults that ran, those that
    never did counted apart (``never_ran``)."""
    never_ran = [r for r in rows if r["verdict"].get("never_ran")]
    faulty = [r for r in rows if r["trial"]["fault"] != "none" and not r["verdict"].get("never_ran")]
    clean = [r for r in rows if r["trial"]["fault"] == "none"]

    def recall_of(selected):
        hits = sum(bool(r["verdict"]["recalled"]) for r in selected)
        return {"n": len(selected), "hits": hits, "ci": wilson(hits, len(selected))}

    def bin_of(effect):
        return "unmeasured" if effect is None else ">=1.5x" if effect >= 1.5 else "1.2-1.5x" if effect >= 1.2 else "<1.2x"

    bins, by_strength = {}, {}
    for r in faulty:
        bins.setdefault(bin_of(r["verdict"]["effect"]), []).append(r)
        strength = r["trial"]["strength"] if r["trial"]["fault"] == "stop-duty" else r["verdict"]["effect"]
        by_strength.setdefault(bin_of(strength), []).append(r)
    held = {}  # the stop duty cycles by what held the worker (``trial_space.HOLDERS``)
    for r in faulty:
        if r["trial"]["fault"] == "stop-duty":
            held.setdefault(r["trial"].get("holder", "signals"), []).append(r)
    clean_alarms = {hogs: [r for r in clean if bool(r["trial"]["hogs"]) == hogs] for hogs in (False, True)}
    precise = [r for r in rows if not r["verdict"]["false_alarms"]]
    precise_but_own = [r for r in rows if _only_own_alarms(r)]
    errors = [r["verdict"]["error"] for r in rows if r["verdict"]["error"] is not None]
    spreads = [r["verdict"]["repeat_spread"] for r in rows if r["verdict"].get("repeat_spread") is not None]
    repeatable = [r["verdict"]["error"] for r in rows if r["verdict"]["error"] is not None
                  and r["verdict"].get("repeat_spread") is not None
                  and r["verdict"]["repeat_spread"] <= REPEATABLE_SPREAD]
    recalled = [r for r in faulty if r["verdict"]["recalled"]]
    return {
        "trials": len(rows), "faulty": len(faulty), "clean": len(clean),
        "never_ran": {"n": len(never_ran), "seeds": sorted(r["trial"]["seed"] for r in never_ran)},
        "recall_by_effect": {name: recall_of(group) for name, group in sorted(bins.items())},
        "recall_by_strength": {name: recall_of(group) for name, group in sorted(by_strength.items())},
        "recall_by_holder": {name: recall_of(group) for name, group in sorted(held.items())},
        "trial_precision": {"n": len(rows), "hits": len(precise), "ci": wilson(len(precise), len(rows))},
        "precise_but_own": {"n": len(rows), "hits": len(precise_but_own),
                            "ci": wilson(len(precise_but_own), len(rows))},
        "clean_false_alarms": {("with hogs" if hogs else "without hogs"): {
            "n": len(group), "alarms": sum(bool(r["verdict"]["false_alarms"]) for r in group),
            "ci": wilson(sum(bool(r["verdict"]["false_alarms"]) for r in group), len(group)),
            "alarms_but_own": sum(not _only_own_alarms(r) for r in group),
            "ci_but_own": wilson(sum(not _only_own_alarms(r) for r in group), len(group))}
            for hogs, group in clean_alarms.items()},
        "primary": {"n": len(recalled), "hits": sum(r["verdict"]["primary"] for r in recalled),
                    "ci": wilson(sum(r["verdict"]["primary"] for r in recalled), len(recalled))},
        "prediction_error": {"n": len(errors), "median": statistics.median(errors) if errors else None,
                             "p90": quantile(errors, 0.9) if errors else None},
        "repeat_spread": {"n": len(spreads), "median": statistics.median(spreads) if spreads else None,
                          "p90": quantile(spreads, 0.9) if spreads else None},
        "repeatable_error": {"n": len(repeatable), "median": statistics.median(repeatable) if repeatable else None,
                             "p90": quantile(repeatable, 0.9) if repeatable else None},
    }
