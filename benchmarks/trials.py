"""Randomized trials: precision, recall and prediction error of tfdiag's diagnosis.

Each seed draws one trial from the declared space (``benchmarks/trial_space.py``: job,
fault, strength, onset, background hogs, whether the fix runs), runs it on a local
cluster (``benchmarks/trial_run.py``), analyses the fault run and judges it
(``benchmarks/trial_judge.py``). One JSON line per trial is appended to ``--results``
right after it ran, so a batch can stop anywhere and the next resumes: seeds already in
the file are skipped. ``--report`` aggregates the file (``--holdout`` keeps only the
holdout trials: ``trial_space.is_holdout``, whatever the file recorded) and prints the
Markdown tables of docs/benchmarks.md; ``--reanalyse`` first analyses each fault run still
kept in its logdir again with the current code (a ``stop`` trial keeps the report taken
while it hung).

    tools/loopback-only .venv/bin/python -m benchmarks.trials --seeds 1000..1009 \\
        --results benchmarks/results/trials.jsonl --workdir /tmp/trials
    .venv/bin/python -m benchmarks.trials --report --holdout --reanalyse --results benchmarks/results/trials.jsonl
    .venv/bin/python -m benchmarks.trials --list --seeds 1000..1049   # the drawn trials, nothing run

``--budget-s`` stops a batch before a trial would start past it (trials run under a shared
lock in batches: ``flock /tmp/tfdiag-bench.lock ...``). Exit status 3: every seed was done already.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from benchmarks.trial_judge import REPEATABLE_SPREAD, judge, per_kind, summary
from benchmarks.trial_space import FRESH_JOBS, HOLDOUT_SEEDS, TUNED_SEEDS, draw, is_holdout, parse_seeds


# The targets of issue 32 beside the figures they bound (recall by the fault's effect).
TARGETS = {">=1.5x": "≥ 0.95 (and precision ≥ 0.95)", "1.2-1.5x": "≥ 0.8"}
HELD_BY = {"signals": "signals (SIGSTOP/SIGCONT)", "cgroup": "a cgroup CPU quota"}


def load_results(path: Path, reanalyse: bool = False) -> list[dict]:
    """The trials of a results file, each judged again by today's rules; with ``reanalyse``,
    each kept fault run's findings first made again by today's analysis (``reanalysed``)."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        row["trial"]["holdout"] = is_holdout(row["trial"]["seed"], row["trial"]["job"])
        if reanalyse and "error" not in row["result"]:
            row["reanalysed"] = reanalysed(row)
        row["verdict"] = judge(row["trial"], row["result"])
    return rows


def reanalysed(row: dict) -> bool:
    """Replaces the fault run's findings with the current analysis of its logdir, if still kept."""
    from benchmarks.trial_run import findings_of
    from tfdiag.analysis.engine import analyze

    run = row["result"]["runs"]["fault"]
    files = Path(run["logdir"]) / "plugins" / "tfdiag"
    if row["trial"]["fault"] == "stop" or not files.is_dir():
        return False
    run["findings"] = findings_of(analyze(run["logdir"]).to_dict())
    return True


def run_batch(seeds: list[int], results: Path, workdir: Path, budget_s: float | None) -> int:
    from benchmarks.trial_run import run_trial  # imports TensorFlow's launcher only to run

    done = {row["trial"]["seed"] for row in load_results(results)}
    todo = [seed for seed in seeds if seed not in done]
    if not todo:
        print(f"every seed is in {results}", file=sys.stderr)
        return 3
    started = time.monotonic()
    results.parent.mkdir(parents=True, exist_ok=True)
    for number, seed in enumerate(todo, 1):
        if budget_s and time.monotonic() - started > budget_s:
            print(f"budget of {budget_s:.0f} s spent: {len(todo) - number + 1} trials left", file=sys.stderr)
            break
        trial = draw(seed)
        print(f"[{number}/{len(todo)}] {trial.label()} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        try:
            result = run_trial(trial, workdir)
        except (RuntimeError, OSError, ValueError) as error:  # a trial that cannot run is recorded, not scored
            print(f"  seed {seed} failed: {error}", file=sys.stderr, flush=True)
            result = {"error": str(error)}
        row = {"trial": trial.to_dict(), "result": result, "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with results.open("a") as out:
            out.write(json.dumps(row, default=str) + "\n")
        if "error" not in result:
            verdict = judge(row["trial"], result)
            print(f"  {onset_text(result)}recalled={verdict['recalled']} never_ran={verdict['never_ran']} "
                  f"false_alarms={verdict['false_alarms']} predicted={verdict['predicted']} "
                  f"measured={verdict['measured']}", file=sys.stderr, flush=True)
    return 0


def onset_text(result: dict) -> str:
    """Where the fault run's outside fault started against its training, as a short phrase
    (``trial_run.describe_onset``); "" where the run recorded no onset."""
    onset = result["runs"]["fault"].get("onset")
    if not onset:
        return ""
    if onset.get("onset_time_ns") is None:
        return f"onset never came ({onset['rule']}; the job ended first); "
    if onset.get("before_end_s") is None:
        return f"onset by {onset['by']}, no step recorded; "
    return (f"onset by {onset['by']} at step {onset['onset_step']}, {onset['after_start_s']} s into and "
            f"{onset['before_end_s']} s before the end of {onset['over']}'s training; ")


def _p(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def _ci(pair) -> str:
    return f"{_p(pair[0])}–{_p(pair[1])}"


def report(rows: list[dict], title: str) -> str:
    """The Markdown tables of a set of judged trials."""
    kinds = per_kind(rows)
    lines = [title, "", "| kind | planted | TP | FP | FN | precision (95 % CI) | recall (95 % CI) | F1 (95 % CI) "
             "| right task when found |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k in kinds:
        lines.append(f"| {k['kind']} | {k['planted']} | {k['tp']} | {k['fp']} | {k['fn']} | {_p(k['precision'])} "
                     f"({_ci(k['precision_ci'])}) | {_p(k['recall'])} ({_ci(k['recall_ci'])}) | {_p(k['f1'])} "
                     f"({_ci(k['f1_ci'])}) | {k['localised']} of {k['located']} |")
    s = summary(rows)
    lines += ["", "| figure | measured | 95 % CI | target (issue 32, on the holdout) |", "| --- | --- | --- | --- |"]
    for name, group in s["recall_by_effect"].items():
        lines.append(f"| recall, faults of effect {name} | {group['hits']} of {group['n']} | {_ci(group['ci'])} "
                     f"| {TARGETS.get(name, '–')} |")
    strength = s["recall_by_strength"].get(">=1.5x")
    if strength:
        lines.append(f"| ... duty cycles binned by strength, not by their effect (the rule before 7 December 2026) "
                     f"| {strength['hits']} of {strength['n']} | {_ci(strength['ci'])} | – |")
    for name, group in s["recall_by_holder"].items():
        lines.append(f"| recall, stop duty cycles held by {HELD_BY[name]} | {group['hits']} of {group['n']} "
                     f"| {_ci(group['ci'])} | – |")
    tp = s["trial_precision"]
    lines.append(f"| trials without a false alarm | {tp['hits']} of {tp['n']} | {_ci(tp['ci'])} | precision ≥ 0.95 |")
    own = s["precise_but_own"]
    lines.append(f"| ... but for the job's own bottleneck (`trial_judge.JOB_OWN`) | {own['hits']} of {own['n']} "
                 f"| {_ci(own['ci'])} | – |")
    for name, group in s["clean_false_alarms"].items():
        target = "≤ 2 %" if name == "with hogs" else "–"
        lines.append(f"| clean runs {name} with a false alarm | {group['alarms']} of {group['n']} | {_ci(group['ci'])} "
                     f"| {target} |")
        lines.append(f"| ... but for the job's own bottleneck | {group['alarms_but_own']} of {group['n']} "
                     f"| {_ci(group['ci_but_own'])} | – |")
    never = s["never_ran"]
    lines.append("| faults that never ran (onset after the last step, exception never raised, worker idle after the onset; out of recall) "
                 f"| {never['n']} of {never['n'] + s['faulty']} | – | – |")
    primary = s["primary"]
    lines.append(f"| planted finding ranked first, when found | {primary['hits']} of {primary['n']} | {_ci(primary['ci'])} | – |")
    error = s["prediction_error"]
    lines.append(f"| prediction error, fix runs: median / p90 | {_pct(error['median'])} / {_pct(error['p90'])} "
                 f"over {error['n']} | – | ≤ 10 % / ≤ 25 % |")
    spread, repeatable = s["repeat_spread"], s["repeatable_error"]
    if spread["n"]:
        lines.append(f"| one fix run pair's speed-up against the mirrored pair's: median / p90 difference "
                     f"| {_pct(spread['median'])} / {_pct(spread['p90'])} over {spread['n']} | – | – |")
        lines.append(f"| ... prediction error where the two pairs agree within {REPEATABLE_SPREAD:.0%}: median / p90 "
                     f"| {_pct(repeatable['median'])} / {_pct(repeatable['p90'])} over {repeatable['n']} | – "
                     "| ≤ 10 % / ≤ 25 % |")
    return "\n".join(lines)


def header(rows: list[dict], holdout: bool) -> str:
    """The line above the tables: how many trials, which seeds, the load they ran under."""
    fresh = sum(r["trial"]["job"] in FRESH_JOBS for r in rows)
    loads = [x for r in rows for x in r["result"]["load1"]]
    cores = max(r["result"].get("cores", 2) for r in rows)
    again = sum(bool(r.get("reanalysed")) for r in rows)
    return (f"**{len(rows)} {'holdout ' if holdout else ''}trials** ({fresh} of them on the fresh jobs), seeds "
            f"{seed_ranges(sorted(r['trial']['seed'] for r in rows))}; 1-minute load average {min(loads):.1f}–"
            f"{max(loads):.1f} on {cores} cores" + (f"; {again} of them re-analysed with the current code" if again else ""))


def seed_ranges(seeds: list[int]) -> str:
    """Sorted seeds as runs.

    >>> seed_ranges([1, 2, 3, 7])
    '1–3, 7'
    """
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][1] + 1:
            runs[-1][1] = seed
        else:
            runs.append([seed, seed])
    return ", ".join(f"{a}–{b}" if b > a else f"{a}" for a, b in runs)


def _pct(value) -> str:
    return "–" if value is None else f"{value:.1%}"


def trial_table(rows: list[dict]) -> str:
    """One line per trial: what was planted and what was found."""
    lines = ["| seed | job | fault | task | strength / ms | effect | onset | hogs | found (warning+) | recalled "
             "| false alarms | predicted | measured | load |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        t, v = row["trial"], row["verdict"]
        found = "; ".join(f"{f['kind']} {','.join(f['tasks'])}" for f in row["result"]["runs"]["fault"]["findings"]
                          if f["severity"] in ("warning", "critical")) or "none"
        size = t["strength"] if t["strength"] else t["ms"] if t["ms"] else ""
        load = "–".join(f"{x:.1f}" for x in row["result"]["load1"][:: max(1, len(row["result"]["load1"]) - 1)])
        recalled = ("never ran" if v.get("never_ran") else "–" if v["recalled"] is None
                    else "yes" if v["recalled"] else "NO")
        fault = t["fault"] + (" (cgroup)" if t.get("holder") == "cgroup" else "")
        lines.append(f"| {t['seed']} | {t['job']} | {fault} | {t['task'] or '–'} | {size} | {_p(v['effect'])} "
                     f"| {t['onset']} | {t['hogs']} "
                     f"| {found} | {recalled} "
                     f"| {', '.join(v['false_alarms']) or '–'} | {_p(v['predicted'])} | {_p(v['measured'])} | {load} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", help="A..B (inclusive) or A,B,C: the trials to run (with --report: to report)")
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/trials.jsonl"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tfdiag-trials"), help="every run's logdir")
    parser.add_argument("--budget-s", type=float, help="start no trial after this many seconds of the batch")
    parser.add_argument("--report", action="store_true", help="aggregate --results; run nothing")
    parser.add_argument("--holdout", action="store_true", help=f"--report: only holdout trials ({', '.join(FRESH_JOBS)}, "
                                                                f"seeds >= {HOLDOUT_SEEDS}; never the {len(TUNED_SEEDS)} "
                                                                "seeds rules were fitted on)")
    parser.add_argument("--reanalyse", action="store_true",
                        help="--report: analyse each fault run still kept in its logdir again with the current code")
    parser.add_argument("--trials", action="store_true", help="--report: also one line per trial")
    parser.add_argument("--list", action="store_true", help="print the trials --seeds draws; run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for seed in parse_seeds(args.seeds or ""):
            print(draw(seed).label())
        return 0
    if args.report:
        rows = [r for r in load_results(args.results, args.reanalyse) if "error" not in r["result"]]
        if args.holdout:
            rows = [r for r in rows if r["trial"]["holdout"]]
        if args.seeds:
            seeds = set(parse_seeds(args.seeds))
            rows = [r for r in rows if r["trial"]["seed"] in seeds]
        if not rows:
            print(f"no judged trials in {args.results}", file=sys.stderr)
            return 2
        print(report(rows, header(rows, args.holdout)))
        if args.trials:
            print("\n" + trial_table(rows))
        return 0
    if not args.seeds:
        parser.error("--seeds is needed to run trials")
    return run_batch(parse_seeds(args.seeds), args.results, args.workdir, args.budget_s)


if __name__ == "__main__":
    sys.exit(main())
