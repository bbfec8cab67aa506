"""benchmarks/trials.py: a seed names one trial; a trial is judged by what was planted."""

from __future__ import annotations

import pytest

import json

from benchmarks.trial_corpus import CORPUS
from benchmarks.trial_judge import judge, per_kind, summary, wilson
from benchmarks.trial_space import FRESH_JOBS, HOLDOUT_SEEDS, JOB_DEFS, QUOTA_SEEDS, TUNED_SEEDS, draw, parse_seeds
from benchmarks.trials import load_results, report, trial_table


def trial(fault="stop-duty", task="worker:1", hogs=0, seed=1, **more):
    return {"seed": seed, "job": "ps_ctl", "fault": fault, "task": task, "strength": 2.0, "ms": None,
            "onset": "start", "hogs": hogs, "fix": False, "fix_first": False, "holdout": False, **more}


def result(findings, load=(1.0, 1.0), fix_rate=None, fix_description=None):
    runs = {"fault": {"findings": findings, "examples_per_s": 100.0}}
    if fix_rate:
        runs["fix"] = {"findings": [], "examples_per_s": fix_rate}
    return {"runs": runs, "load1": list(load), "cores": 2, "fix_description": fix_description}


def finding(kind, tasks, severity="warning", predicted=None):
    return {"kind": kind, "tasks": tasks, "severity": severity, "title": "", "predicted": predicted}


def test_a_seed_always_draws_the_same_trial_inside_the_declared_space():
    assert draw(1234) == draw(1234)
    trials = [draw(seed) for seed in parse_seeds("1000..1199")]
    assert {t.job for t in trials} == set(JOB_DEFS)
    assert all(t.fault in t.spec.faults for t in trials)
    assert all(1.2 <= t.strength <= 5 for t in trials if t.fault == "stop-duty")
    assert all(2 <= t.ms <= 40 for t in trials if t.fault == "proxy")
    assert all(t.holdout == ((t.job in FRESH_JOBS or t.seed >= HOLDOUT_SEEDS) and t.seed not in TUNED_SEEDS)
               for t in trials)
    assert not any(draw(seed).holdout for seed in TUNED_SEEDS)
    assert not any(t.fix for t in trials if t.fault in ("none", "stop", "exception"))


def test_from_quota_seeds_half_the_duty_cycles_are_cgroup_quotas_and_earlier_seeds_draw_as_before():
    held = [t for t in map(draw, parse_seeds(f"{QUOTA_SEEDS}..{QUOTA_SEEDS + 199}")) if t.fault == "stop-duty"]
    by_cgroup = [t for t in held if t.holder == "cgroup"]
    assert 0.3 < len(by_cgroup) / len(held) < 0.7 and all(t.onset == "mid" for t in by_cgroup)
    assert all(t.holder == "signals" for t in map(draw, parse_seeds(f"1000..{QUOTA_SEEDS - 1}")))
    # a seed drawn before holders existed names the same trial (seed 1227 as recorded in the results)
    assert draw(1227).to_dict() == {"seed": 1227, "job": "ps_ctl", "fault": "stop-duty", "task": "worker:0",
                                    "strength": 2.41, "ms": None, "onset": "mid", "hogs": 1, "fix": False,
                                    "fix_first": True, "holder": "signals", "holdout": True}


def test_recall_needs_the_planted_kind_on_the_planted_task_at_warning_level():
    assert judge(trial(), result([finding("straggler", ["worker:1"])]))["recalled"]
    wrong_task = judge(trial(), result([finding("straggler", ["worker:0"])]))
    assert wrong_task["located"] and not wrong_task["recalled"]
    assert not judge(trial(), result([finding("straggler", ["worker:1"], "info")]))["recalled"]
    # Slow input on every worker: any worker named is right.
    assert judge(trial("input", ""), result([finding("input_bound", ["worker:0"])]))["recalled"]


def test_a_warning_the_plant_does_not_explain_is_a_false_alarm():
    findings = [finding("straggler", ["worker:1"]), finding("coordinator_bound", ["worker:0"]),
                finding("host_contention", ["worker:0"]), finding("slow_link", ["ps:0"], "info")]
    assert judge(trial(), result(findings))["false_alarms"] == ["coordinator_bound worker:0", "host_contention worker:0"]
    # host_contention is true while hogs run, or other programs load the host past its cores.
    assert judge(trial(hogs=1), result(findings))["false_alarms"] == ["coordinator_bound worker:0"]
    assert judge(trial(), result(findings, load=(1.5, 3.1)))["false_alarms"] == ["coordinator_bound worker:0"]
    assert judge(trial("none", ""), result([finding("straggler", ["worker:1"])]))["false_alarms"] == ["straggler worker:1"]


def test_prediction_error_and_effect_come_from_the_fix_run():
    verdict = judge(trial("proxy", "ps:1"), result([finding("slow_link", ["ps:1"], predicted=1.5)], fix_rate=200.0,
                                                   fix_description="fault removed"))
    assert verdict["measured"] == 2.0 and verdict["error"] == pytest.approx(0.25) and verdict["effect"] == 2.0
    # A duty cycle's effect is its declared strength over the training after its onset, whatever the fix measured.
    assert judge(trial(), result([], fix_rate=120.0, fix_description="fault removed"))["effect"] == 2.0
    late = result([], fix_rate=120.0, fix_description="fault removed")
    late["runs"]["fault"]["onset"] = onset(7.5) | {"after_start_s": 7.5, "before_end_s": 2.5}  # the last quarter
    assert judge(trial(onset="mid"), late)["effect"] == pytest.approx(1 / (0.75 + 0.25 / 2.0))


def test_the_speed_up_is_of_the_steady_rates_where_both_runs_timed_one():
    steady = result([finding("slow_link", ["ps:1"], predicted=1.5)], fix_rate=120.0, fix_description="fault removed")
    steady["runs"]["fault"]["steady_examples_per_s"], steady["runs"]["fix"]["steady_examples_per_s"] = 200.0, 300.0
    assert judge(trial("proxy", "ps:1"), steady)["measured"] == 1.5  # not the whole trainings' 1.2x
    assert judge(trial("kill", "worker:1"), steady)["measured"] == 1.2  # a kill costs its restart: the whole training
    steady["runs"]["fix"]["steady_examples_per_s"] = None  # one side without it: both whole
    assert judge(trial("proxy", "ps:1"), steady)["measured"] == 1.2


def test_a_pair_run_twice_measures_the_geometric_mean_and_its_spread():
    twice = result([finding("slow_link", ["ps:1"], predicted=1.5)], fix_rate=200.0, fix_description="fault removed")
    twice["repeat"] = {"fix": {"examples_per_s": 150.0}, "fault": {"examples_per_s": 100.0}}  # 2.0x, then 1.5x
    verdict = judge(trial("proxy", "ps:1"), twice)
    assert verdict["measured"] == pytest.approx(3**0.5) and verdict["effect"] == pytest.approx(1.732, abs=1e-3)
    assert verdict["repeat_spread"] == pytest.approx(0.5 / 3**0.5)
    assert verdict["error"] == pytest.approx(abs(1.5 - 3**0.5) / 3**0.5)
    once = judge(trial("proxy", "ps:1"), result([], fix_rate=200.0))
    figures = summary([{"trial": trial("proxy", "ps:1"), "verdict": v} for v in (verdict, once)])
    assert figures["repeat_spread"]["n"] == 1 and figures["repeat_spread"]["median"] == pytest.approx(0.289, abs=1e-3)
    assert figures["repeatable_error"]["n"] == 0  # pairs 29 % apart cannot check a prediction to 10 %
    twice["repeat"]["fix"]["examples_per_s"] = 190.0  # 2.0x, then 1.9x: 5 % apart
    close = judge(trial("proxy", "ps:1"), twice)
    figures = summary([{"trial": trial("proxy", "ps:1"), "verdict": close}])
    assert figures["repeatable_error"]["n"] == 1 and figures["repeatable_error"]["median"] == pytest.approx(close["error"])
    twice["repeat"]["fix"]["examples_per_s"] = 200.0  # the same 2.0x twice: no spread at all, the best-measured fix
    same = judge(trial("proxy", "ps:1"), twice)
    assert same["repeat_spread"] == 0.0
    assert summary([{"trial": trial("proxy", "ps:1"), "verdict": same}])["repeatable_error"]["n"] == 1


def test_per_kind_and_summary_count_true_and_false_positives():
    rows = [{"trial": trial(), "result": result([finding("straggler", ["worker:1"])])},
            {"trial": trial(holder="cgroup"), "result": result([])},
            {"trial": trial("none", "", hogs=1), "result": result([finding("straggler", ["worker:0"])])},
            {"trial": trial("none", ""), "result": result([])}]
    for row in rows:
        row["verdict"] = judge(row["trial"], row["result"])
    (straggler,) = per_kind(rows)
    assert (straggler["tp"], straggler["fp"], straggler["fn"]) == (1, 1, 1)
    assert straggler["precision"] == 0.5 and straggler["recall"] == 0.5
    figures = summary(rows)
    assert figures["clean_false_alarms"]["with hogs"]["alarms"] == 1
    assert figures["clean_false_alarms"]["with hogs"]["alarms_but_own"] == 1  # a straggler is no job's own
    assert figures["clean_false_alarms"]["without hogs"]["alarms"] == 0
    tutorial = {"trial": trial("none", "", hogs=1, job="ps_tutorial"),
                "result": result([finding("coordinator_bound", ["worker:0"])])}
    tutorial["verdict"] = judge(tutorial["trial"], tutorial["result"])
    own = summary([tutorial])["clean_false_alarms"]["with hogs"]
    assert (own["alarms"], own["alarms_but_own"]) == (1, 0)
    assert figures["recall_by_effect"][">=1.5x"]["hits"] == 1
    held = figures["recall_by_holder"]  # a row recorded before holders existed was held by signals
    assert (held["signals"]["hits"], held["signals"]["n"], held["cgroup"]["hits"], held["cgroup"]["n"]) == (1, 1, 0, 1)


def test_wilson_interval_stays_inside_0_and_1():
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0
    low, high = wilson(19, 20)
    assert low < 0.95 < high


def test_a_report_reanalyses_the_kept_runs_and_recomputes_the_holdout(tmp_path):
    # A corpus run (ps_embed, worker 0 under a stop duty cycle) recorded with no findings, and
    # the same trial whose logdir is gone: only the kept one is analysed again and recalled.
    label = json.loads((CORPUS / "seed-1064" / "label.json").read_text())
    rows = [{"trial": label["trial"] | {"holdout": True},
             "result": {"runs": {"fault": {"logdir": str(logdir), "findings": [], "examples_per_s": 1.0}},
                        "load1": [1.0], "cores": 2}} for logdir in (CORPUS / "seed-1064", tmp_path / "gone")]
    path = tmp_path / "trials.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    kept, gone = load_results(path, reanalyse=True)
    assert kept["reanalysed"] and kept["verdict"]["recalled"]
    assert not gone["reanalysed"] and gone["verdict"]["recalled"] is False
    assert not kept["trial"]["holdout"]  # seed 1064 was fitted on


def onset(at_s, last_s=10.0, first_s=0.0):
    """A fault run's recorded onset ``at_s`` (None: it never came) against training from
    ``first_s`` to ``last_s`` (``trial_run.describe_onset``)."""
    ns = 10**9
    return {"rule": "0.333 of 400 steps", "target_step": 134, "by": None if at_s is None else "progress",
            "onset_step": None if at_s is None else 140, "onset_time_ns": None if at_s is None else int(at_s * ns),
            "over": "worker:1", "training_first_ns": int(first_s * ns), "training_last_ns": int(last_s * ns)}


def test_a_fault_that_began_after_the_last_step_never_ran_and_stays_out_of_recall():
    missed = result([])
    late, never, inside = (result([]) for _ in range(3))
    late["runs"]["fault"]["onset"] = onset(10.0)  # at the last step's end: after the training
    never["runs"]["fault"]["onset"] = onset(None)  # the job ended before the onset came
    inside["runs"]["fault"]["onset"] = onset(4.0)
    verdicts = [judge(trial(onset="mid"), r) for r in (missed, late, never, inside)]
    assert [v["never_ran"] for v in verdicts] == [False, True, True, False]
    assert [v["recalled"] for v in verdicts] == [False, None, None, False]
    # A clean trial never "never ran", whatever it recorded.
    assert not judge(trial("none", ""), late)["never_ran"]
    rows = [{"trial": trial(onset="mid", seed=seed), "result": r} for seed, r in zip((1, 2, 3, 4), (missed, late, never, inside))]
    rows.append({"trial": trial(onset="mid", seed=5), "result": result([finding("straggler", ["worker:1"])])})
    for row in rows:
        row["verdict"] = judge(row["trial"], row["result"])
    (straggler,) = per_kind(rows)
    assert (straggler["planted"], straggler["tp"], straggler["fn"]) == (3, 1, 2)
    figures = summary(rows)
    assert figures["never_ran"] == {"n": 2, "seeds": [2, 3]} and figures["faulty"] == 3
    assert figures["recall_by_effect"][">=1.5x"]["n"] == 3
    inside["runs"]["fault"]["onset"] |= {"after_start_s": 8.0, "before_end_s": 2.0}  # 2x over the last fifth: 1.11x
    rows[3]["verdict"] = judge(rows[3]["trial"], inside)
    figures = summary(rows)
    assert figures["recall_by_effect"][">=1.5x"]["n"] == 2 and figures["recall_by_effect"]["<1.2x"]["n"] == 1
    assert figures["recall_by_strength"][">=1.5x"]["n"] == 3  # by its strength alone, as before
    assert ("| faults that never ran (onset after the last step, exception never raised, worker idle after the onset; out of recall) | 2 of 5 |"
            in report(rows, ""))
    assert "| never ran |" in trial_table([r | {"result": r["result"] | {"load1": [1.0]}} for r in rows])


def test_a_duty_cycle_on_a_worker_that_trained_almost_no_steps_after_its_onset_never_ran():
    # tf1_feed's worker 1, slowed from its start, began training once worker 0 had done the
    # job's steps: one step after the onset, no step rate for a detector to compare.
    idle, trained = result([]), result([])
    idle["runs"]["fault"]["onset"] = onset(0.0) | {"steps_after": 1}
    trained["runs"]["fault"]["onset"] = onset(0.0) | {"steps_after": 12}
    assert judge(trial(onset="start"), idle)["never_ran"] and judge(trial(onset="start"), idle)["recalled"] is None
    assert not judge(trial(onset="start"), trained)["never_ran"] and judge(trial(onset="start"), trained)["recalled"] is False
    job_wide = result([])  # the steps counted were the job's (the planted worker recorded none): not idle
    job_wide["runs"]["fault"]["onset"] = onset(0.0) | {"steps_after": 1, "over": "job"}
    assert not judge(trial(onset="start"), job_wide)["never_ran"]


def test_a_stop_that_left_the_job_hung_ran_whenever_it_came():
    # ps_tutorial: the worker stopped after the last step hung the job's close; the harness
    # ended it (exit 130) once `stalled` named the worker.
    hung = result([finding("stalled", ["worker:1", "worker:0"])])
    hung["runs"]["fault"] |= {"onset": onset(12.0), "exit": 130}
    verdict = judge(trial("stop", onset="mid"), hung)
    assert not verdict["never_ran"] and verdict["recalled"]
    ended = result([])  # the same late stop, but the job ended on its own: it measured a clean run
    ended["runs"]["fault"] |= {"onset": onset(12.0), "exit": 0}
    assert judge(trial("stop", onset="mid"), ended)["never_ran"]
    outlived = result([])  # the job ended before the onset came: no stop was applied
    outlived["runs"]["fault"] |= {"onset": onset(None), "exit": 130}
    assert judge(trial("stop", onset="mid"), outlived)["never_ran"]


def test_an_exception_the_job_never_raised_never_ran():
    raised, quiet = result([finding("task_failure", ["worker:1"])]), result([])
    raised["runs"]["fault"]["exit"], quiet["runs"]["fault"]["exit"] = 1, 0  # the job ended on it, or well
    assert not judge(trial("exception"), raised)["never_ran"] and judge(trial("exception"), raised)["recalled"]
    verdict = judge(trial("exception"), quiet)
    assert verdict["never_ran"] and verdict["recalled"] is None
    assert not judge(trial("stop-duty"), quiet)["never_ran"]  # only an exception is read from the exit


def test_the_jobs_own_bottleneck_is_a_false_alarm_counted_apart():
    rows = [{"trial": trial("none", "", seed=seed, job=job), "result": result([finding("coordinator_bound", [])])}
            for seed, job in ((1, "ps_tutorial"), (2, "ps_ctl"))]
    for row in rows:
        row["verdict"] = judge(row["trial"], row["result"])
    assert [r["verdict"]["false_alarms"] for r in rows] == [["coordinator_bound "], ["coordinator_bound "]]
    figures = summary(rows)
    assert figures["trial_precision"]["hits"] == 0  # the rule: the plant explains neither
    assert figures["precise_but_own"]["hits"] == 1  # ps_tutorial is paced by its coordinator's loop
