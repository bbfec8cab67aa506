"""Live verdicts: the straggler and input_bound detectors on the records the screen keeps."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from tfdiag.analysis.live import WINDOW_S, announced_findings
from tfdiag.analysis.live_screen import KEPT_S, LiveScreen
from tfdiag.analysis.live_verdict import Verdicts, verdict_window_s, window_run
from tfdiag.store import load_manifest

from tests.analysis.test_live import whole_run_cut_to_window
from tests.runs import MS, START_NS, RunBuilder

S = 1000 * MS
STRAGGLER = ("straggler", "worker:1")


def job(path, until_s=30.0, slow_from_s=None, slow_ms=50.0, input_ms=0.0) -> RunBuilder:
    """Two workers of 20-ms steps for ``until_s``; from ``slow_from_s`` worker:1's take
    ``slow_ms``, of which ``input_ms`` waiting for input; a probe and a sampler alongside."""
    run = RunBuilder(path, workers=2, ps=1)
    grow(run, until_s, slow_from_s, slow_ms, input_ms)
    run.rpc("chief:0", "ps:0", 0.5, count=int(until_s * 20))
    run.system("host-a", "chief:0", 50.0, count=int(until_s), every_ms=1000.0, cpu_count=2)
    run.write(by_task=True)
    return run


def grow(run: RunBuilder, until_s: float, slow_from_s=None, slow_ms=50.0, input_ms=0.0) -> int:
    """Both workers step on to ``until_s`` (worker:1 as ``job`` says); returns then in ns."""
    until = START_NS + int(until_s * S)
    run.steps_until("worker:0", until)
    if slow_from_s is None:
        run.steps_until("worker:1", until)
        return until
    run.steps_until("worker:1", min(START_NS + int(slow_from_s * S), until))
    first, begin = run.next_steps["worker:1"]
    count = max((until - begin) // int((slow_ms + 1) * MS), 0)
    run.steps("worker:1", count, slow_ms, input_ms=input_ms, first_step=first, start_ns=begin)
    return until


def screened(run: RunBuilder, now_ns: int, screen: LiveScreen | None = None) -> LiveScreen:
    screen = screen or LiveScreen(run.path, "chief:0")
    screen.update(now_ns)
    return screen


def test_the_window_is_the_whole_runs_records_cut_to_it(tmp_path):
    run = job(tmp_path / "run", slow_from_s=15)
    now = START_NS + 30 * S
    window = window_run(run.path, load_manifest(run.path).manifest, screened(run, now).kept, now)
    expected = whole_run_cut_to_window(run.path, now, WINDOW_S)
    assert {"step", "rpc", "system"} <= set(window.frames)
    for kind, frame in expected.frames.items():
        if len(frame):
            column = {"step": "end_ns", "rpc": "recv_ns"}.get(kind, "time_ns")
            assert np.array_equal(np.sort(window.frame(kind)[column]), np.sort(frame[column])), kind
    assert set(window.frame("step")["source"]) == {"worker:0", "worker:1"}


def test_a_straggler_is_announced_with_the_whole_runs_prediction_for_the_window(tmp_path):
    run = job(tmp_path / "run", slow_from_s=22)
    now = START_NS + 30 * S
    verdicts = Verdicts(run.path)
    (began,) = verdicts.judge(screened(run, now).kept, now, {STRAGGLER: now - 2 * S})
    assert (began.state, began.kind, began.tasks, began.onset_ns, began.time_ns) == (
        "began", "straggler", ("worker:1",), now - 2 * S, now)
    expected = announced_findings(whole_run_cut_to_window(run.path, now, WINDOW_S))[("straggler", ("worker:1",))]
    assert began.predicted_speedup == pytest.approx(expected.recommendation.predicted_speedup, rel=1e-9)
    assert began.message.startswith(f"tfdiag: worker:1 straggler since step {began.step:,}: {expected.title}")
    assert began.message.endswith("if repaired")
    assert verdicts.judge(screened(run, now).kept, now, {STRAGGLER: now}) == []  # announced once
    assert list(verdicts.announced) == [("straggler", ("worker:1",))]


def test_a_straggler_is_judged_from_where_the_screen_saw_it_begin(tmp_path):
    run = job(tmp_path / "run", slow_from_s=27)  # 3 s of 2.5x steps: the screen's first sight
    now = START_NS + 30 * S
    screen = screened(run, now)
    assert STRAGGLER in screen.candidates()
    assert Verdicts(run.path).judge(screen.kept, now, {STRAGGLER: now}) == []  # the last 10 s: diluted
    (began,) = Verdicts(run.path).judge(screen.kept, now, {STRAGGLER: now}, from_ns=screen.recent_from_ns)
    assert began.window_s == verdict_window_s(screen.recent_from_ns, now) == pytest.approx(4.0, abs=0.05)
    assert began.record("chief:0")["window_s"] == began.window_s
    expected = announced_findings(whole_run_cut_to_window(run.path, now, began.window_s))[("straggler", ("worker:1",))]
    assert began.predicted_speedup == pytest.approx(expected.recommendation.predicted_speedup, rel=1e-9)


def test_a_clean_window_from_the_screens_start_announces_nothing(tmp_path):
    run = job(tmp_path / "run")
    now = START_NS + 30 * S
    screen = screened(run, now)
    assert Verdicts(run.path).judge(screen.kept, now, {STRAGGLER: now}, from_ns=screen.recent_from_ns) == []


def test_an_input_stall_is_announced(tmp_path):
    run = job(tmp_path / "run", slow_from_s=20, slow_ms=40.0, input_ms=20.0)
    now = START_NS + 30 * S
    (began,) = Verdicts(run.path).judge(screened(run, now).kept, now, {("input_bound", "worker:1"): now})
    assert began.kind == "input_bound" and "worker:1" in began.tasks and "Input pipeline" in began.message


def test_a_candidate_the_window_does_not_show_is_not_announced(tmp_path):
    run = job(tmp_path / "run")
    now = START_NS + 30 * S
    verdicts = Verdicts(run.path)
    assert verdicts.judge(screened(run, now).kept, now, {STRAGGLER: now}) == []
    assert verdicts.windows == 1 and not verdicts.announced


def test_a_window_with_too_few_steps_is_not_judged(tmp_path):
    run = job(tmp_path / "run", until_s=3.0, slow_from_s=0.5)
    now = START_NS + 3 * S
    verdicts = Verdicts(run.path)
    assert verdicts.judge(screened(run, now).kept, now, {STRAGGLER: now}) == []
    assert verdicts.windows == 0


def test_an_announced_straggler_clears_once_gone_and_its_window_shows_it_no_more(tmp_path):
    run = job(tmp_path / "run", slow_from_s=15)
    now = START_NS + 30 * S
    screen = screened(run, now)
    verdicts = Verdicts(run.path)
    (began,) = verdicts.judge(screen.kept, now, {STRAGGLER: now})
    key = ("straggler", ("worker:1",))
    later = START_NS + 45 * S
    run.steps_until("worker:0", later)
    run.steps_until("worker:1", later)
    run.grow()
    screened(run, later, screen)
    assert verdicts.judge(screen.kept, later, {}) == []  # not asked to clear: stays announced
    (cleared,) = verdicts.judge(screen.kept, later, {}, frozenset({key}))
    assert (cleared.state, cleared.tasks, cleared.step) == ("cleared", ("worker:1",), began.step)
    assert cleared.message == f"tfdiag: worker:1 straggler (since step {began.step:,}) cleared"
    assert not verdicts.announced


def test_the_screen_keeps_the_last_seconds_of_batches_and_drops_a_replaced_files(tmp_path):
    run = job(tmp_path / "run", until_s=40.0)
    now = START_NS + 40 * S
    screen = screened(run, now)
    assert screen.kept and min(item[3] for item in screen.kept) >= now - KEPT_S * S
    kinds = {item[1] for item in screen.kept}
    assert {"step", "rpc", "system"} <= kinds
    replaced = next(item[0] for item in screen.kept if item[2] == "worker:1")
    replaced.unlink()
    RunBuilder(run.path, workers=2, ps=1).steps("worker:1", 5, start_ns=now - 2 * S).grow()
    screen.update(now)
    assert [item[3] for item in screen.kept if item[0] == replaced] == [now - 2 * S + 4 * 21 * MS + 20 * MS]


@pytest.mark.alone
def test_a_verdict_costs_tens_of_milliseconds(tmp_path):
    run = job(tmp_path / "run", until_s=60.0, slow_from_s=50)
    now = START_NS + 60 * S
    kept = screened(run, now).kept
    Verdicts(run.path).judge(kept, now, {STRAGGLER: now})  # imports and caches aside
    spent = []
    for _ in range(5):
        begin = time.thread_time_ns()
        assert Verdicts(run.path).judge(kept, now, {STRAGGLER: now})
        spent.append((time.thread_time_ns() - begin) / 1e6)
    assert statistics.median(spent) < 150, spent
