"""Live findings on a run that grows while it is analysed (real store writer, synthetic clock)."""

from __future__ import annotations

import pandas as pd

from tfdiag.analysis import RunLoader, load_run
from tfdiag.analysis.live import LiveFindings, announced_findings, enough_data, live_finding_windows
from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.window_load import WINDOW_TIME_COLUMNS
from tfdiag.analysis.step_stats import StepAccumulator

from tests.runs import MS, START_NS, RunBuilder

S = 1000 * MS
WORKERS = ("worker:0", "worker:1")


def growing_run(path) -> RunBuilder:
    """A two-worker ParameterServerStrategy run with no records yet; ``run_until`` grows it."""
    run = RunBuilder(path, workers=2, ps=1)
    run.write(by_task=True)
    return run


def run_until(run: RunBuilder, t_s: float, step_ms: dict[str, float]) -> int:
    """Each worker steps (``step_ms`` per task, 1 ms apart) until ``t_s``, its new steps
    appended to its file; returns now in ns."""
    until = START_NS + int(t_s * S)
    for task in WORKERS:
        run.steps_until(task, until, step_ms[task])
    run.grow()
    return until


def replay(tmp_path, phases, every_s=5.0, window_s=20.0, each=None):
    """Evaluates every ``every_s`` while the run goes through ``phases``: (until_s, worker:1's step ms);
    ``each(live, now)`` after every evaluation."""
    run = growing_run(tmp_path / "run")
    live = LiveFindings(run.path, window_s=window_s)
    announced = []
    t = 0.0
    for until_s, slow_ms in phases:
        while t + every_s <= until_s:
            t += every_s
            now = run_until(run, t, {"worker:0": 20.0, "worker:1": slow_ms})
            announced += [(t, change) for change in live.evaluate(now)]
            if each is not None:
                each(live, now)
    return run, live, announced


def whole_run_cut_to_window(path, now_ns, window_s, until_ns=None):
    """The full path's input: the whole run loaded from scratch (every step row kept), each
    frame cut to the rows dated from ``now_ns - window_s`` on (and up to ``until_ns``, for a
    run that went on after the window)."""
    whole = RunLoader(path, steps=StepAccumulator(sampled_rows=10**9)).refresh()
    cutoff = now_ns - int(window_s * S)
    frames = {}
    for kind, frame in whole.frames.items():
        column = WINDOW_TIME_COLUMNS.get(kind, "time_ns")
        keep = None if column is None else (frame[column] >= cutoff) & (frame[column] <= (until_ns or 2**63 - 1))
        frames[kind] = frame if keep is None else frame[keep].reset_index(drop=True)
    return LoadedRun(path, whole.manifest, frames, sources=whole.sources)


def test_a_straggler_that_begins_mid_run_is_announced_then_cleared(tmp_path):
    _, live, announced = replay(tmp_path, [(30, 20.0), (60, 45.0), (100, 20.0)])
    assert [(change.state, change.kind, change.tasks) for _, change in announced] == [
        ("began", "straggler", ("worker:1",)), ("cleared", "straggler", ("worker:1",))]
    (began_at, began), (cleared_at, cleared) = announced
    assert 30 < began_at <= 30 + 20, "announced within 20 s of its onset"
    assert began.onset_ns == began.time_ns - 5 * S, "the onset is the first of the two evaluations that saw it"
    assert began.severity in ("warning", "critical") and began.predicted_speedup > 1.1
    assert began.message.startswith(f"tfdiag: worker:1 straggler since step {began.step:,}: worker:1 is ")
    assert "slower per step" in began.message and "if repaired" in began.message
    assert 60 < cleared_at <= 60 + 25 and cleared.message.endswith("cleared")
    assert live.evaluations == 100 / 5 - 2  # from 15 s on: a 20-s window needs 10 s of steps


def test_under_a_coordinator_since_step_counts_training_steps_not_closures(tmp_path):
    run = growing_run(tmp_path / "run")
    live = LiveFindings(run.path, window_s=20.0)
    announced, closure_id = [], 0
    for t in range(5, 65, 5):  # each worker runs closures of 2 steps; worker:1 2.5x slower from 30 s on
        now = START_NS + t * S
        for task in WORKERS:
            ms = 50.0 if task == "worker:1" and t > 30 else 20.0
            _, begin = run.next_steps.get(task, (0, START_NS))
            count = (now - begin) // int((ms + 1) * MS)
            run.steps(task, count, ms, closures=True, first_step=closure_id, start_ns=begin, steps_per_record=2)
            closure_id += count  # closure ids count over the whole job, as a coordinator numbers them
        run.grow()
        announced += [change for change in live.evaluate(now) if change.state == "began"]
    began = next(change for change in announced if change.kind == "straggler")
    assert began.step == 2 * closure_id_at(run, began.onset_ns), "closures by the onset times 2 steps each"
    assert f"since step {began.step:,}:" in began.message


def closure_id_at(run: RunBuilder, time_ns: int) -> int:
    """Closures whose step records ended by ``time_ns`` (the highest id among them, plus one)."""
    return max(values["step"] for kind, values in run.records if kind == "step" and values["end_ns"] <= time_ns) + 1


def test_each_window_has_the_findings_of_the_full_path_on_the_same_records(tmp_path):
    """The incremental window (read by offset, aged batches dropped, unchanged windows not
    analysed again) against the whole run loaded from scratch and cut to the same seconds."""
    compared = []

    def compare(live, now):
        full = whole_run_cut_to_window(live.path, now, live.window_s)
        window = live.window(now)
        assert window.frame("step")[["task", "step", "end_ns"]].values.tolist() == \
            full.frame("step")[["task", "step", "end_ns"]].values.tolist()
        if enough_data(full.frame("step"), live.window_s):
            expected = announced_findings(full)
            assert live.findings.keys() == expected.keys()
            for key, finding in expected.items():
                assert live.findings[key].evidence == finding.evidence
                assert live.findings[key].recommendation == finding.recommendation
            compared.append(sorted(expected))

    replay(tmp_path, [(30, 20.0), (60, 45.0), (100, 20.0)], each=compare)
    assert [("straggler", ("worker:1",))] in compared and [] in compared  # windows with and without a finding


def test_an_unchanged_window_is_judged_without_analysing_it_again(tmp_path):
    run = growing_run(tmp_path / "run")
    live = LiveFindings(run.path)
    now = run_until(run, 30, {"worker:0": 20.0, "worker:1": 45.0})
    live.evaluate(now)
    (began,) = live.evaluate(now)  # the job paused: the same window, seen a second time
    assert began.kind == "straggler" and live.evaluations == 2 and live.analyses == 1
    now = run_until(run, 31, {"worker:0": 20.0, "worker:1": 45.0})
    live.evaluate(now)
    assert live.analyses == 2


def test_no_log_directory_yet_is_not_an_error(tmp_path):
    live = LiveFindings(tmp_path / "run")
    assert live.evaluate() == [] and live.evaluations == 0
    run_until(growing_run(tmp_path / "run"), 1, {"worker:0": 20.0, "worker:1": 20.0})
    assert live.evaluate(START_NS + S) == [] and live.window(START_NS + S) is not None


def test_a_clean_run_announces_nothing(tmp_path):
    _, live, announced = replay(tmp_path, [(90, 20.0)])
    assert announced == [] and live.evaluations > 10


def test_a_finding_seen_by_one_evaluation_only_is_not_announced(tmp_path):
    # A 4-s window sees a 4.5-s slowdown in exactly one evaluation (at 30 s).
    _, live, announced = replay(tmp_path, [(25.5, 20.0), (30.5, 60.0), (60, 20.0)], window_s=4.0)
    assert announced == [] and live.evaluations > 5


def test_too_little_data_is_not_judged(tmp_path):
    run = growing_run(tmp_path / "run")
    live = LiveFindings(run.path)
    now = run_until(run, 0.2, {"worker:0": 20.0, "worker:1": 45.0})  # 9 steps each
    assert live.evaluate(now) == [] and live.evaluations == 0
    now = run_until(run, 5.0, {"worker:0": 20.0, "worker:1": 45.0})  # enough steps, 5 s of a 20-s window
    assert live.evaluate(now) == [] and live.evaluations == 0


def test_the_window_keeps_only_recent_records(tmp_path):
    run = growing_run(tmp_path / "run")
    live = LiveFindings(run.path, window_s=10.0)
    now = run_until(run, 60, {"worker:0": 20.0, "worker:1": 20.0})
    window = live.window(now).frame("step")
    assert window["end_ns"].min() >= now - 10 * S
    assert 2 * 9 * 47 <= len(window) <= 2 * 10 * 48  # ~10 s of 21-ms steps per worker


def test_windows_from_records_pair_each_began_with_its_clear(tmp_path):
    run, _, announced = replay(tmp_path, [(30, 20.0), (60, 45.0), (100, 20.0)])
    for _, change in announced:
        run.record("live_finding", **change.record("chief:0"))
    # A worker that began straggling and had not cleared when the records end.
    run.record("live_finding",
               **announced[0][1].record("chief:0") | {"tasks": "worker:0", "time_ns": START_NS + 99 * S})
    # A "cleared" with no "began" (a damaged log): left out.
    run.record("live_finding", **announced[1][1].record("chief:0") | {"kind": "input_bound"})
    windows = live_finding_windows(load_run(run.grow()).frame("live_finding"), {"chief:0": 1 * S})
    assert list(windows["tasks"]) == ["worker:1", "worker:0"]
    first = windows.iloc[0]
    assert first["began_ns"] == announced[0][1].onset_ns + S and first["ended_ns"] == announced[1][1].onset_ns + S
    assert first["kind"] == "straggler" and first["step"] == announced[0][1].step
    assert pd.isna(windows.iloc[1]["ended_ns"])


def test_windows_of_a_run_without_live_records_are_empty(tmp_path):
    run, _, _ = replay(tmp_path, [(10, 20.0)])
    assert live_finding_windows(load_run(run.path).frame("live_finding")).empty


def test_windows_skip_rows_a_damaged_log_makes_unusable(tmp_path):
    run, _, announced = replay(tmp_path, [(30, 20.0), (60, 45.0), (100, 20.0)])
    began = announced[0][1].record("chief:0")
    run.record("live_finding", **began)
    run.record("live_finding", **began | {"onset_ns": None, "kind": "input_bound"})  # no onset
    run.record("live_finding", **began | {"kind": None})
    run.record("live_finding", **began | {"state": "paused", "kind": "slow_link"})
    run.record("live_finding", **began | {"kind": "ps_hotspot", "tasks": None, "step": None, "predicted_speedup": None})
    windows = live_finding_windows(load_run(run.grow()).frame("live_finding"))
    assert list(zip(windows["kind"], windows["tasks"])) == [("straggler", "worker:1"), ("ps_hotspot", "")]
    assert pd.isna(windows.iloc[1]["step"]) and pd.isna(windows.iloc[1]["predicted_speedup"])


def test_a_task_file_that_was_replaced_is_read_again(tmp_path):
    run = growing_run(tmp_path / "run")
    live = LiveFindings(run.path, window_s=10.0)
    now = run_until(run, 20, {"worker:0": 20.0, "worker:1": 20.0})
    assert set(live.window(now).frame("step")["task"]) == {"worker:0", "worker:1"}
    replaced = tmp_path / "run" / "plugins" / "tfdiag" / "worker-1.tfdiag"
    replaced.unlink()
    run.steps("worker:1", count=1, step_ms=20, start_ns=now - 30 * MS).grow()  # a restarted worker's new file
    steps = live.window(now).frame("step")
    assert ((steps["task"] == "worker:1") & (steps["end_ns"] == now - 10 * MS)).sum() == 1  # the new file's step


def test_a_copied_task_file_is_counted_once_in_the_window(tmp_path):
    run = growing_run(tmp_path / "run")
    live = LiveFindings(run.path, window_s=10.0)
    now = run_until(run, 20, {"worker:0": 20.0, "worker:1": 20.0})
    alone = len(live.window(now).frame("step"))
    files = tmp_path / "run" / "plugins" / "tfdiag"
    (files / "worker-9.tfdiag").write_bytes((files / "worker-1.tfdiag").read_bytes())
    window = live.window(now)
    assert len(window.frame("step")) == alone
    assert any("worker-9.tfdiag" in warning and "duplicates" in warning for warning in window.warnings)
