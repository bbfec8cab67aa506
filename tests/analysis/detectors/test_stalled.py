"""``stalled`` on runs written through the real writer: hung, partly hung, ended, died, slow, long-stepped."""

import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.detectors.stalled import STALL_FLOOR_S
from tfdiag.analysis.findings import Severity

from tests.runs import MS, START_NS

WORKERS = ("worker:0", "worker:1")


def _stalled(report):
    return [finding for finding in report.findings if finding.kind == "stalled"]


def test_whole_job_stalled_names_every_worker_and_what_is_in_flight(builder):
    run = builder()
    run.steps("worker:0", count=150, step_ms=20, closures=True)  # ~3.2 s, then nothing
    run.steps("worker:1", count=100, step_ms=20, closures=True)  # ~2.1 s, then nothing
    run.heartbeats("chief:0", until_ms=60_000, subjects=WORKERS, in_flight=(2, 2_100))
    report = analyze(run.write())
    [finding] = _stalled(report)
    assert finding.severity is Severity.CRITICAL
    assert finding.evidence["state"] == "whole_job"
    assert finding.tasks == ("worker:1", "worker:0")  # the first to stop first: where the hang began
    assert finding.evidence["first_stalled"] == "worker:1" and "worker:1 stopped first, 1.1 s" in finding.summary
    assert finding.evidence["in_flight"]["closures"] == 2
    assert finding.evidence["in_flight"]["oldest_age_s"] == pytest.approx(57.9, abs=0.1)
    first, second = finding.evidence["stalled"]
    assert (first["last_step"], second["last_step"]) == (99, 149)
    assert first["since_ns"] == pytest.approx(START_NS + 2_100 * MS, abs=10 * MS)
    assert finding.recommendation.predicted_speedup is None
    assert report.to_dict()["findings"][0]["kind"] == "stalled"


def test_one_worker_stalled_while_the_other_progresses(builder):
    run = builder()
    run.steps("worker:0", count=120, step_ms=500, closures=True)  # to 60 s
    run.steps("worker:1", count=20, step_ms=500, closures=True)  # to 10 s
    run.heartbeats("chief:0", until_ms=60_500, subjects=WORKERS, in_flight=(1, 10_030))
    [finding] = _stalled(analyze(run.write()))
    assert finding.evidence["state"] == "partial"
    assert finding.tasks == ("worker:1",)
    assert finding.evidence["progressing"] == ["worker:0"]
    [state] = finding.evidence["stalled"]
    assert state["last_step"] == 19
    assert state["stalled_s"] == pytest.approx(50.5, abs=0.2)
    assert "worker:1" in finding.title and "in flight" in finding.summary


def test_a_run_that_ended_cleanly_is_not_stalled(builder):
    run = builder()
    for worker in WORKERS:
        run.steps(worker, count=100, step_ms=20, closures=True)
    # The last beat came long after the last step, but it is the clean-close marker.
    run.heartbeats("chief:0", until_ms=60_000, subjects=WORKERS, in_flight=(0, None), closed=True)
    assert _stalled(analyze(run.write())) == []


def test_a_task_that_died_is_reported_critical_as_stopped_not_hung(builder):
    run = builder(strategy="MultiWorkerMirroredStrategy")
    run.steps("worker:0", count=120, step_ms=500)  # to 60 s, writing its own beats
    run.steps("worker:1", count=40, step_ms=500)  # to 20 s, then its beats stop: no close marker
    run.heartbeats("worker:0", until_ms=60_500, subjects=("worker:0",))
    run.heartbeats("worker:1", until_ms=20_000, subjects=("worker:1",))
    [finding] = _stalled(analyze(run.write()))
    assert finding.severity is Severity.CRITICAL
    assert finding.evidence["state"] == "stopped_writing" and finding.evidence["first_stalled"] == "worker:1"
    assert finding.tasks == ("worker:1",)
    assert "hung" not in finding.title and "died" in finding.summary


def test_a_task_that_stopped_writing_as_the_others_stalled_is_named_first(builder):
    """A synchronous TF1 job: worker:1 froze at 20 s (its beats stop), worker:0 waits for it,
    beating on without progress to 60 s."""
    run = builder(strategy="tf1_session")
    run.steps("worker:0", count=40, step_ms=500)
    run.steps("worker:1", count=40, step_ms=500)
    run.heartbeats("worker:0", until_ms=60_000, subjects=("worker:0",))
    run.heartbeats("worker:1", until_ms=20_000, subjects=("worker:1",))
    [finding] = _stalled(analyze(run.write()))
    assert finding.evidence["state"] == "whole_job" and finding.evidence["first_stalled"] == "worker:1"
    assert finding.tasks == ("worker:1", "worker:0")
    assert finding.title.endswith("worker:1 stopped writing")


def test_a_run_whose_every_writer_stopped_at_once_is_judged_at_its_last_beat(builder):
    run = builder()
    for worker in WORKERS:
        run.steps(worker, count=100, step_ms=20, closures=True)
    run.heartbeats("chief:0", until_ms=5_000, subjects=WORKERS, in_flight=(1, 2_000))  # killed: no marker
    assert _stalled(analyze(run.write())) == []


def test_a_slow_worker_that_keeps_progressing_is_not_stalled(builder):
    run = builder()
    run.steps("worker:0", count=600, step_ms=100, closures=True)  # to 60 s
    run.steps("worker:1", count=30, step_ms=2_000, closures=True)  # 20x slower, also to 60 s
    run.heartbeats("chief:0", until_ms=61_000, subjects=WORKERS, in_flight=(2, 59_000))
    report = analyze(run.write())
    assert _stalled(report) == []
    assert "straggler" in [finding.kind for finding in report.findings]


@pytest.mark.parametrize("behind_ms", [5_000, 29_000])
def test_long_regular_steps_are_not_a_stall(builder, behind_ms):
    run = builder()
    for worker in WORKERS:
        run.steps(worker, count=10, step_ms=30_000, idle_ms=10, closures=True)  # ends at ~300 s
    run.heartbeats("chief:0", until_ms=300_100 + behind_ms, subjects=WORKERS, in_flight=(2, 300_000))
    assert _stalled(analyze(run.write())) == []


def test_the_floor_holds_for_fast_steps(builder):
    run = builder()
    for worker in WORKERS:
        run.steps(worker, count=100, step_ms=20, closures=True)
    run.heartbeats("chief:0", until_ms=2_100 + (STALL_FLOOR_S - 5) * 1000, subjects=WORKERS, in_flight=(2, 2_100))
    assert _stalled(analyze(run.write())) == []


def test_clean_run_with_heartbeats_has_no_warning(builder):
    run = builder()
    for worker in WORKERS:
        run.steps(worker, step_ms=20, input_ms=1, closures=True)
    run.heartbeats("chief:0", until_ms=2_500, every_ms=1_000, subjects=WORKERS, in_flight=(2, 2_100), closed=True)
    report = analyze(run.write())
    assert [f for f in report.findings if f.severity.rank >= Severity.WARNING.rank] == []


def test_one_beat_with_a_damaged_time_does_not_make_a_live_run_hang(builder):
    run = builder()
    for worker in WORKERS:
        run.steps(worker, count=100, step_ms=20, closures=True)
    run.heartbeats("chief:0", until_ms=2_500, every_ms=1_000, subjects=WORKERS, in_flight=(2, 2_100))
    # A beat decades after the run (a flipped time that still passes the reader's range check).
    run.record("heartbeat", task="chief:0", time_ns=2**61, subject="worker:1", progress=100,
               in_flight=None, oldest_in_flight_ns=None, closed=False)
    assert [f for f in analyze(run.write()).findings if f.severity is not Severity.INFO] == []


def _probes(run, src, dst, until_ms, every_ms=2_000):
    """The coordinator's RPC probe answered by ``dst`` every ``every_ms`` up to ``until_ms``."""
    for at_ms in range(0, until_ms, every_ms):
        send = START_NS + at_ms * MS
        run.record("rpc", src=src, dst=dst, send_ns=send, remote_ns=send + MS // 2, recv_ns=send + MS,
                   payload_bytes=0)


@pytest.mark.parametrize("frozen, waiting", [("worker:1", "worker:0"), ("worker:0", "worker:1")])
def test_the_worker_that_stopped_answering_is_named_first_when_the_whole_job_stalls(builder, frozen, waiting):
    # A frozen worker holds the parameter servers and through them the other worker, whose
    # last closure came back 1 s earlier; only the frozen one stops answering the probe.
    run = builder()
    run.steps(waiting, count=100, step_ms=20, closures=True)  # to ~2.1 s
    run.steps(frozen, count=150, step_ms=20, closures=True)  # to ~3.2 s
    run.heartbeats("chief:0", until_ms=60_000, subjects=WORKERS, in_flight=(2, 2_100))
    _probes(run, "chief:0", waiting, until_ms=60_000)
    _probes(run, "chief:0", "ps:0", until_ms=60_000)
    _probes(run, "chief:0", frozen, until_ms=3_000)
    _probes(run, frozen, "ps:0", until_ms=3_000)  # relayed: read on the frozen worker
    [finding] = _stalled(analyze(run.write()))
    assert finding.evidence["state"] == "whole_job"
    assert finding.tasks == (frozen, waiting)
    assert finding.evidence["first_stalled"] == frozen and finding.evidence["unresponsive"] == [frozen]
    assert f"{frozen} stopped answering the coordinator's probes, which {waiting} still answers" in finding.summary
    assert finding.title.endswith(f"; {frozen} not answering")


def test_the_ps_that_stopped_answering_is_named_first_and_the_workers_as_waiting_for_it(builder):
    """A frozen ps holds every worker; the probe still reaches the workers and ps:1 after the
    stall, ps:0 (from the coordinator and relayed from the workers) only before it."""
    run = builder()  # 2 ps
    run.steps("worker:0", count=150, step_ms=20, closures=True).steps("worker:1", count=140, step_ms=20, closures=True)
    run.heartbeats("chief:0", until_ms=60_000, subjects=WORKERS, in_flight=(2, 3_000))
    for task in (*WORKERS, "ps:1"):
        _probes(run, "chief:0", task, until_ms=60_000)
    _probes(run, "chief:0", "ps:0", until_ms=3_000)
    for worker in WORKERS:
        _probes(run, worker, "ps:0", until_ms=3_000)
    [finding] = _stalled(analyze(run.write()))
    assert finding.tasks[0] == "ps:0" and finding.evidence["unresponsive"] == ["ps:0"]
    assert "ps:0 stopped answering the coordinator's probes, which worker:1, worker:0 still answer" in finding.summary
    assert finding.title.endswith("; ps:0 not answering")


@pytest.mark.parametrize("ps_checks, unresponsive", [("before", ["worker:1", "ps:0"]), (None, ["worker:1", "ps:0"]),
                                                      ("answering", ["worker:1"])])
def test_a_ps_that_answers_its_status_checks_is_not_named_for_a_probe_stuck_on_a_frozen_worker(
        builder, ps_checks, unresponsive):
    """worker:1 froze; the probe round whose leg through it waits out its deadline reaches
    ps:0 no more, but the coordinator's status checks of ps:0 are answered after the stall
    began: ps:0 is not what the workers wait for (test_heartbeat's frozen worker named
    worker:1, ps:0 on a loaded host). Checks answered only before the stall, or none, leave
    ps:0 unreached."""
    run = builder()
    run.steps("worker:0", count=100, step_ms=20, closures=True)
    run.steps("worker:1", count=150, step_ms=20, closures=True)
    run.heartbeats("chief:0", until_ms=60_000, subjects=WORKERS, in_flight=(2, 2_100))
    _probes(run, "chief:0", "worker:0", until_ms=60_000)
    _probes(run, "chief:0", "ps:0", until_ms=3_000)
    _probes(run, "chief:0", "worker:1", until_ms=3_000)
    if ps_checks == "before":
        run.liveness("ps:0", ["OK"], task="chief:0", start_ms=1_000)
    elif ps_checks == "answering":
        run.liveness("ps:0", ["OK"] * 29, task="chief:0", every_ms=2_000, start_ms=1_000)
    [finding] = _stalled(analyze(run.write()))
    assert finding.evidence["unresponsive"] == unresponsive
    assert ("ps:0" in finding.tasks) == ("ps:0" in unresponsive)


def test_without_probes_after_the_stall_the_first_to_stop_is_named_first(builder):
    # The prober itself stopped (or none ran): no task is known to be unresponsive.
    run = builder()
    run.steps("worker:0", count=150, step_ms=20, closures=True)
    run.steps("worker:1", count=100, step_ms=20, closures=True)
    run.heartbeats("chief:0", until_ms=60_000, subjects=WORKERS, in_flight=(2, 2_100))
    for worker in WORKERS:
        _probes(run, "chief:0", worker, until_ms=2_000)
    [finding] = _stalled(analyze(run.write()))
    assert finding.tasks == ("worker:1", "worker:0") and finding.evidence["unresponsive"] == []


def _ps_job_stalled_at(builder, stall_ms: float, statuses: list[str]):
    """A TF1 job whose workers stop at ``stall_ms``, 15 s before its latest beat, with the
    chief's status checks of ps:0 from just before the stall."""
    run = builder(strategy="tf1_session", workers=2, ps=1, chief=False)
    for worker in WORKERS:
        run.steps(worker, count=int(stall_ms / 21), step_ms=20)
        run.heartbeats(worker, until_ms=stall_ms + 15_000, subjects=(worker,))
    return run.liveness("ps:0", statuses, start_ms=stall_ms - 1_000)


def test_a_ps_that_stopped_answering_is_named_before_the_floor(builder):
    """15 s into a stall, below STALL_FLOOR_S, a ps whose status checks all failed since it
    began is named first, the workers as waiting for it."""
    run = _ps_job_stalled_at(builder, 20_000, ["OK", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"])
    [finding] = _stalled(analyze(run.write(by_task=True)))
    assert finding.tasks == ("ps:0", "worker:0", "worker:1")
    assert "ps:0 not answering" in finding.title
    assert "ps:0 has not answered its last 2 status checks, since the stall began (DEADLINE_EXCEEDED: frozen or " \
        "hung)" in finding.summary
    [silent] = finding.evidence["silent"]
    assert silent["last_answer_ns"] == START_NS + 19_000 * MS


def test_a_ps_that_answered_once_after_the_stall_began_then_froze_is_named(builder):
    """The ps answered 1 s after the workers' last progress (it froze just after): still the
    task they wait for (ps_ctl's worker 1 answered 0.15 s after its last closure)."""
    run = _ps_job_stalled_at(builder, 20_000, [])
    run.liveness("ps:0", ["OK", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"], start_ms=21_000, every_ms=5_000)
    [finding] = _stalled(analyze(run.write(by_task=True)))
    assert finding.tasks[0] == "ps:0" and finding.evidence["silent"][0]["last_answer_ns"] == START_NS + 21_000 * MS


def test_a_ps_checked_seldom_that_answered_after_the_stall_began_is_still_named(builder):
    """A job of many unwatched tasks checks each every 30 s (liveness.round_every_s): the ps's
    last answer came 25 s into the stall, within two of its checks' spacing."""
    run = builder(strategy="tf1_session", workers=2, ps=1, chief=False)
    for worker in WORKERS:
        run.steps(worker, count=int(20_000 / 21), step_ms=20)
        run.heartbeats(worker, until_ms=110_000, subjects=(worker,))
    run.liveness("ps:0", ["OK", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"], start_ms=45_000, every_ms=30_000)
    [finding] = _stalled(analyze(run.write(by_task=True)))
    assert finding.tasks[0] == "ps:0" and finding.evidence["silent"][0]["last_answer_ns"] == START_NS + 45_000 * MS


def test_a_ps_silent_only_long_after_the_stall_began_is_not_its_cause(builder):
    """The ps answered for 11 s into the stall (past ANSWER_AFTER_STALL_S), then went silent:
    the workers' stall is judged by the floor, and the ps not named as what they wait for."""
    run = _ps_job_stalled_at(builder, 20_000, [])
    run.liveness("ps:0", ["OK"] * 7 + ["DEADLINE_EXCEEDED"] * 2, start_ms=19_000, every_ms=2_000)
    assert _stalled(analyze(run.write(by_task=True))) == []  # 15 s of stall: under the floor


@pytest.mark.parametrize("statuses", [["OK", "OK", "OK"], ["OK", "DEADLINE_EXCEEDED"]],
                         ids=["answering", "one-miss"])
def test_a_ps_that_answers_or_missed_once_leaves_a_short_pause_alone(builder, statuses):
    run = _ps_job_stalled_at(builder, 20_000, statuses)
    assert _stalled(analyze(run.write(by_task=True))) == []


def test_a_silent_ps_while_the_workers_progress_is_no_stall(builder):
    run = builder(strategy="tf1_session", workers=2, ps=1, chief=False)
    for worker in WORKERS:
        run.steps(worker, count=1_500, step_ms=20).heartbeats(worker, until_ms=31_000, subjects=(worker,))
    run.liveness("ps:0", ["OK"] + ["DEADLINE_EXCEEDED"] * 3, start_ms=5_000)
    assert _stalled(analyze(run.write(by_task=True))) == []
