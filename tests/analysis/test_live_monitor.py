"""The live screen and its confirmations on runs that grow while they are screened (synthetic clock)."""

from __future__ import annotations

import subprocess
import sys

from tfdiag.analysis.live_monitor import (CLEAR_AFTER_S, CLEAR_OVERDUE_S, FREE_VERDICT_RETRIES, MAX_RETRY_S,
                                         NEW_ONSET_GAP_S, LiveMonitor)
from tfdiag.analysis.live_screen import LiveScreen

from tests.runs import MS, START_NS, RunBuilder

S = 1000 * MS
WORKERS = ("worker:0", "worker:1")


class Job:
    """A two-worker, two-ps ParameterServerStrategy run grown second by second, screened every ``every_s``."""

    def __init__(self, path, every_s=2.0):
        self.run = RunBuilder(path, workers=2, ps=2)
        self.run.write(by_task=True)
        self.monitor = LiveMonitor(self.run.path, own_task="chief:0")
        self.every_s, self.t, self.announced = every_s, 0.0, []
        self.probe_ms = 0.5

    def until(self, t_s, step_ms=None, input_ms=None, rtt_ms=None, beats=True):
        """Runs the job to ``t_s``: per worker ``step_ms`` (default 20) of which ``input_ms``
        waiting; probes of ps:0 with ``rtt_ms`` round trips; heartbeats of the chief."""
        step_ms, input_ms, rtt_ms = step_ms or {}, input_ms or {}, rtt_ms or {}
        while self.t + self.every_s <= t_s:
            self.t += self.every_s
            now = START_NS + int(self.t * S)
            for task in WORKERS:
                first, begin = self.run.next_steps.get(task, (0, START_NS))
                ms = step_ms.get(task, 20.0)
                count = max((now - begin) // int((ms + 1) * MS), 0)
                if count:
                    self.run.steps(task, count, ms, input_ms=input_ms.get(task, 0.0), first_step=first, start_ns=begin)
            for i in range(int(self.every_s / 0.5)):  # a probe round every 0.5 s
                send = now - int(self.every_s * S) + i * 500 * MS
                for dst in ("worker:0", "worker:1", "ps:0", "ps:1"):
                    rtt = int(rtt_ms.get(dst, self.probe_ms) * MS)
                    self.run.record("rpc", src="chief:0", dst=dst, send_ns=send, remote_ns=send + rtt // 2,
                                    recv_ns=send + rtt, payload_bytes=0)
            if beats and self.t % 5 < self.every_s:
                for task in WORKERS:
                    done = self.run.next_steps.get(task, (0, 0))[0]
                    self.run.record("heartbeat", task="chief:0", time_ns=now, subject=task, progress=done,
                                    in_flight=None, oldest_in_flight_ns=None, closed=False)
            self.run.grow()
            self.announced += [(self.t, change) for change in self.monitor.tick(now)]
        return self

    def began(self, kind):
        return [(t, change) for t, change in self.announced if change.state == "began" and change.kind == kind]


def test_a_straggler_is_announced_by_a_verdict_on_its_window_and_cleared(tmp_path):
    job = Job(tmp_path / "run").until(20).until(45, step_ms={"worker:1": 50.0}).until(65)
    (began_at, began), = job.began("straggler")
    assert began.tasks == ("worker:1",) and 20 < began_at < 20 + 4  # the screen's first sight, 2 s in
    assert began.message.startswith(f"tfdiag: worker:1 straggler since step {began.step:,}: worker:1 ")
    assert "if repaired" in began.message
    # The announced finding is the whole run's analysis of the same window.
    from tfdiag.analysis.live import announced_findings  # pandas: not in the subprocess of the clean-run test
    from tests.analysis.test_live import whole_run_cut_to_window

    expected = announced_findings(whole_run_cut_to_window(job.run.path, began.time_ns, began.window_s, began.time_ns))
    finding = expected[("straggler", ("worker:1",))]
    assert began.predicted_speedup == finding.recommendation.predicted_speedup
    assert finding.title in began.message
    cleared = [(t, c) for t, c in job.announced if c.state == "cleared" and c.kind == "straggler"]
    assert cleared and 45 < cleared[0][0] <= 45 + 15
    assert job.monitor.verdicts <= 12 < job.monitor.screens and job.monitor.confirmations == 0


def test_a_clean_run_is_screened_without_confirming_or_importing_the_analysis(tmp_path):
    script = f"""
import sys
sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parents[2])!r})
from tests.analysis.test_live_monitor import Job
job = Job({str(tmp_path / 'run')!r}).until(60)
print(job.monitor.confirmations, job.announced, 'tfdiag.analysis.live' in sys.modules, job.monitor.screens)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "[]", "False", "30"]  # (pandas itself: pyarrow imports it where the writer builds a batch)


def test_an_input_stall_that_begins_mid_run_is_announced(tmp_path):
    job = Job(tmp_path / "run").until(30).until(60, step_ms={"worker:1": 40.0}, input_ms={"worker:1": 20.0})
    (began_at, began), = job.began("input_bound")
    assert "worker:1" in began.tasks and 30 < began_at <= 40


def test_a_link_delay_that_begins_mid_run_is_announced(tmp_path):
    job = Job(tmp_path / "run").until(30).until(60, rtt_ms={"ps:0": 20.5})
    (began_at, began), = job.began("slow_link")
    assert began.tasks == ("ps:0",) and 30 < began_at <= 40


def test_a_link_delay_that_ends_is_cleared_and_a_new_one_announced_again(tmp_path):
    job = Job(tmp_path / "run").until(30).until(50, rtt_ms={"ps:0": 20.5}).until(80)
    job.until(100, rtt_ms={"ps:0": 20.5})
    cleared = [t for t, change in job.announced if change.state == "cleared" and change.kind == "slow_link"]
    assert [t for t, _ in job.began("slow_link")][1:] and 50 < cleared[0] <= 50 + 15
    assert 80 < job.began("slow_link")[1][0] <= 80 + 10


def _reading(run, dst: str, at_s: float, rtt_ms: float) -> None:
    """A round trip from chief:0 to ``dst`` sent ``at_s`` into the run."""
    send, rtt = START_NS + int(at_s * S), int(rtt_ms * MS)
    run.record("rpc", src="chief:0", dst=dst, send_ns=send, remote_ns=send + rtt // 2, recv_ns=send + rtt,
               payload_bytes=0)


def _screened(run, at_s: float) -> LiveScreen:
    run.write(by_task=True)
    screen = LiveScreen(run.path)
    screen.update(START_NS + int(at_s * S))
    return screen


def _screen_links(run, readings: dict[str, list[float]], until_s: int) -> list:
    """Round trips to each ps of ``readings`` (ms), one a second up to ``until_s``, the last
    ones as listed (the first repeated before them), screened every second; the last screen's candidates."""
    run.write(by_task=True)
    screen = LiveScreen(run.path)
    for at_s in range(until_s):
        for dst, values in readings.items():
            _reading(run, dst, at_s, values[max(at_s - until_s + len(values), 0)])
        run.grow()
        screen.update(START_NS + int((at_s + 0.5) * S))
        found = screen.candidates()
    return found


def test_a_link_that_rose_above_its_peers_is_a_candidate_until_read_fast_again(tmp_path):
    """Its last four round trips slow (``LINK_SAMPLES``): a candidate; its newest fast again (the delay ended): none."""
    for newest_ms, expected in ((20.0, [("slow_link", "ps:1")]), (0.5, [])):
        readings = {"ps:0": [0.5], "ps:1": [0.5, 20.0, 20.0, 20.0, newest_ms]}
        assert _screen_links(RunBuilder(tmp_path / f"run-{newest_ms}", workers=2, ps=2), readings, 30) == expected


def test_a_link_slower_than_its_peers_all_along_is_no_candidate(tmp_path):
    """A ps busier than the others, its round trips 3x theirs from the start: no rise, no candidate."""
    readings = {"ps:0": [0.8], "ps:1": [4.0]}
    assert _screen_links(RunBuilder(tmp_path / "run", workers=2, ps=2), readings, 40) == []


def test_a_delay_from_before_the_links_usual_was_known_does_not_hide_the_next_onset(tmp_path):
    """ps:1 read slow for its first 30 s, in line with ps:0 for 5 s, then slow again: the
    slow readings never became its usual, so the second onset is a candidate."""
    readings = {"ps:0": [0.5], "ps:1": [20.0] + [0.5] * 5 + [20.0] * 4}
    assert _screen_links(RunBuilder(tmp_path / "run", workers=2, ps=2), readings, 40) == [("slow_link", "ps:1")]


def test_a_closer_look_at_links_no_screen_has_seen_fresh_finds_the_one_that_rose(tmp_path):
    """The probe reads each link every 16 s, so no screen saw four fresh round trips of one
    before the closer look (four rounds a second apart) read ps:1 slow: its older round trips
    are its usual. Were they as slow, nothing rose."""
    for older_ms, expected in ((0.5, [("slow_link", "ps:1")]), (20.0, [])):
        run = RunBuilder(tmp_path / f"run-{older_ms}", workers=2, ps=2)
        for at_s in (12, 28, 44):
            _reading(run, "ps:0", at_s, 0.5)
            _reading(run, "ps:1", at_s - 8, older_ms)
        for at_s in (57, 58, 59, 60):
            _reading(run, "ps:0", at_s, 0.5)
            _reading(run, "ps:1", at_s, 20.0)
        assert _screened(run, 61).candidates() == expected


def test_a_slow_links_window_follows_the_pace_of_the_link_looked_at_closer(tmp_path):
    """The probe reads a link that turned slow every second, the others every 16 s: the
    candidate's window holds its readings since the change, not a minute of older ones."""
    run = RunBuilder(tmp_path / "run", workers=2, ps=2)
    for at_s in (12, 28, 44, 60):
        _reading(run, "ps:0", at_s, 0.5)
        _reading(run, "ps:1", at_s - 8, 0.5)
    for at_s in (57, 58, 59, 60):
        _reading(run, "ps:1", at_s, 20.0)
    screen = _screened(run, 61)
    assert screen.probe_interval_s(frozenset({"ps:1"})) == 1.0 and screen.probe_interval_s() > 8


def test_a_worker_that_stops_is_named_within_30_s(tmp_path):
    job = Job(tmp_path / "run").until(30)
    # worker:1 stops: no more steps, its progress count stands still; worker:0 steps on.
    job.until(60, step_ms={"worker:1": 1e9})
    (began_at, began), = job.began("stalled")
    assert began.tasks == ("worker:1",) and 30 < began_at <= 30 + 30
    assert "no progress" in began.message and began.severity == "critical"


def test_a_spent_credit_delays_clearing_a_link_a_while_but_not_its_onset_a_verdict_or_a_stopped_task(tmp_path):
    job = Job(tmp_path / "run")
    job.monitor.may_confirm = lambda: False  # the thread's CPU credit spent, all run long
    job.until(20).until(40, step_ms={"worker:1": 50.0}, rtt_ms={"ps:0": 20.5})
    assert job.began("slow_link") and [c.tasks for _, c in job.began("straggler")] == [("worker:1",)]
    # The delay ended at 40: the screen last shows the link then, and clearing waits for the
    # credit (CLEAR_AFTER_S on, at 44) ...
    job.until(40 + CLEAR_AFTER_S + CLEAR_OVERDUE_S - 2)
    assert not [c for _, c in job.announced if c.state == "cleared" and c.kind == "slow_link"]
    # ... CLEAR_OVERDUE_S at most: then it is judged whatever the credit (twice: a finding is
    # cleared when two judgements in a row miss it), and cleared.
    job.until(40 + CLEAR_AFTER_S + CLEAR_OVERDUE_S + 6)
    assert [c for _, c in job.announced if c.state == "cleared" and c.kind == "slow_link"]
    job.until(100, step_ms={"worker:1": 1e9})  # worker:1 stops: named from the screen, no credit needed
    (began_at, began), = job.began("stalled")
    assert began.tasks == ("worker:1",) and began_at <= 54 + 30


def test_a_silent_writer_and_a_failed_task_are_named(tmp_path):
    job = Job(tmp_path / "run")
    job.run.record("heartbeat", task="worker:1", time_ns=START_NS + 2 * S, subject="worker:1", progress=None,
                   in_flight=None, oldest_in_flight_ns=None, closed=False)
    job.until(10)
    job.run.exit("ps:0", 11_000, message="Socket closed")
    job.until(30)
    stalled, failed = job.began("stalled"), job.began("task_failure")
    assert [c.tasks for _, c in stalled] == [("worker:1",)] and stalled[0][0] <= 2 + 30
    assert "written nothing" in stalled[0][1].message
    assert [c.tasks for _, c in failed] == [("ps:0",)] and failed[0][0] <= 12 + 2
    assert "ps:0 ended on UnavailableError: Socket closed" in failed[0][1].message


def test_a_candidate_the_analysis_rejects_is_retried_ever_less_often(tmp_path):
    # worker:1 1.22x slower: a screen candidate (1.2x), never a straggler for the detector (1.25x; 1.5x on one host).
    job = Job(tmp_path / "run").until(200, step_ms={"worker:1": 24.6})
    assert job.announced == [] and job.monitor.confirmations == 0
    # 2 s apart FREE_VERDICT_RETRIES times, then 4, 8, ... s, then every 120 s
    assert 3 <= job.monitor.verdicts <= FREE_VERDICT_RETRIES + 200 / MAX_RETRY_S + 7


def test_a_rejected_candidate_keeps_its_wait_through_a_short_absence(tmp_path):
    job = Job(tmp_path / "run").until(120, step_ms={"worker:1": 24.6})
    key = ("straggler", "worker:1")
    next_ns, rejections = job.monitor._retry[key]
    wait_s = (next_ns - (START_NS + 120 * S)) / S
    assert rejections > FREE_VERDICT_RETRIES and wait_s > 4
    job.until(120 + wait_s + 10)  # gone longer than its wait, shorter than MAX_RETRY_S / 2 past it
    assert job.monitor._retry[key][1] == rejections


def test_a_new_onset_after_rejected_ones_is_judged_at_once(tmp_path):
    from tfdiag.analysis.live import WINDOW_S  # pandas: not in the subprocess of the clean-run test

    assert NEW_ONSET_GAP_S == WINDOW_S  # the last streak's records are out of the verdict's window
    job = Job(tmp_path / "run").until(80, step_ms={"worker:1": 24.6})  # rejected: its wait has grown
    next_ns, rejections = job.monitor._retry[("straggler", "worker:1")]
    assert rejections > FREE_VERDICT_RETRIES and next_ns > START_NS + 100 * S
    job.until(92).until(110, step_ms={"worker:1": 50.0})  # 12 s away, then a 2.5x straggler
    (began_at, _), = job.began("straggler")
    assert 92 < began_at < 92 + 4


def test_the_screen_reads_only_what_was_appended(tmp_path):
    job = Job(tmp_path / "run").until(20)
    read = job.monitor.screen.bytes_read
    job.until(22)
    assert 0 < job.monitor.screen.bytes_read - read < read / 5
    assert LiveScreen(tmp_path / "nothing").candidates() == []


def test_a_coordinators_closure_results_show_a_slowed_worker_before_its_step_records(tmp_path):
    run = RunBuilder(tmp_path / "run", workers=2, ps=1)
    for task, step_ms in (("worker:0", 20.0), ("worker:1", 50.0)):
        for i in range(int(14_000 / (step_ms + 1))):  # results only: the timings are copied later
            result = START_NS + int((i + 1) * (step_ms + 1) * MS)
            run.record("closure", worker=task, closure_id=i, dispatch_ns=result - int(step_ms * MS),
                       result_ns=result, ok=True, error="")
    screen = LiveScreen(run.write(by_task=True), "chief:0")
    screen.update(START_NS + 14 * S)
    assert screen.candidates() == [("straggler", "worker:1")]
    screen.first_ns["worker:1"] = START_NS + 8 * S  # a worker that joined 6 s ago: still warming up
    assert screen.candidates() == []
