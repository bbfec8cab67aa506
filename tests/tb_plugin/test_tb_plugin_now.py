"""``/now`` (where a live run stands) and ``/faults`` (its faults and last words in time order)."""

from __future__ import annotations

import pytest

from tests.runs import MS, START_NS, RunBuilder
from tests.tb_plugin.test_tb_plugin_routes import PREFIX, client_for, get_json, make_plugin
from tests.tb_plugin.tb_plugin_runs import UNHEALTHY, failed_run, logdir  # noqa: F401 (logdir is a fixture)

WORKERS = ("worker:0", "worker:1")


class WallClock:
    """The wall clock the plugin reads, set by the test."""

    def __init__(self, at_ms: float):
        self.set(at_ms)

    def set(self, at_ms: float) -> None:
        self.now_ns = START_NS + int(at_ms * MS)

    def __call__(self) -> int:
        return self.now_ns


def test_now_of_a_growing_run_follows_it(tmp_path):
    run = RunBuilder(tmp_path / "logs" / "live", strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    for worker in WORKERS:
        run.steps_until(worker, START_NS + 2_000 * MS).heartbeats(worker, until_ms=2_000, subjects=(worker,))
    run.grow()
    clock = WallClock(2_500)
    client = client_for(make_plugin(tmp_path / "logs", refresh_interval_s=0, wall_clock=clock))
    now = get_json(client, PREFIX + "/now?run=live")
    assert (now["state"], now["reason"]) == ("running", "2 tasks writing")
    assert now["time_ns"] == clock.now_ns
    assert [worker["task"] for worker in now["progress"]] == list(WORKERS)
    first = {worker["task"]: worker["steps"] for worker in now["progress"]}
    assert all(steps > 80 for steps in first.values())
    assert all(0 < worker["idle_s"] < 1 for worker in now["progress"])
    assert now["findings"] == [] and now["silent"] == []

    for worker in WORKERS:  # the job runs on to 4 s
        run.steps_until(worker, START_NS + 4_000 * MS)
        run.record("heartbeat", task=worker, time_ns=START_NS + 4_000 * MS, subject=worker, progress=None,
                   in_flight=None, oldest_in_flight_ns=None, closed=False)
    run.grow()
    clock.set(4_200)
    grown = get_json(client, PREFIX + "/now?run=live")
    assert grown["state"] == "running"
    assert all(worker["steps"] > first[worker["task"]] + 80 for worker in grown["progress"])

    clock.set(4_000 + 60_000)  # nothing written for a minute: every task died or froze
    silent = get_json(client, PREFIX + "/now?run=live")
    assert silent["state"] == "silent" and "no task has written for 60 s" in silent["reason"]


def test_now_and_faults_of_a_failed_job(tmp_path):
    failed_run(tmp_path / "logs" / "failed").write(by_task=True)
    client = client_for(make_plugin(tmp_path / "logs", wall_clock=WallClock(4_000)))
    now = get_json(client, PREFIX + "/now?run=failed")
    assert now["state"] == "failed"
    assert now["reason"] == "worker:1 failed and ended the job: worker:0 failed because of it"
    ended = [finding for finding in now["findings"] if finding["kind"] == "task_failure"]
    assert {"severity": "critical", "tasks": ["worker:1"]}.items() <= ended[0].items()
    assert set(now["findings"][0]) == {"kind", "severity", "title", "tasks"}

    faults = get_json(client, PREFIX + "/faults?run=failed")
    assert [(e["task"], e["kind"], e["time_s"], e["root"]) for e in faults["events"]] == [
        ("worker:1", "failure", 2.5, True), ("worker:1", "retry", 2.7, True), ("worker:0", "exit", 3.0, False)]
    last_words = faults["events"][-1]
    assert last_words["detail"] == ("UnavailableError: Collective ops is aborted by: The following tasks are "
                                    "unhealthy: /job:worker/task:1")
    assert last_words["message"] == UNHEALTHY
    assert [root["task"] for root in faults["roots"]] == ["worker:1"]
    assert "no last words" in faults["roots"][0]["state"]
    assert [(v["task"], v["blamed"]) for v in faults["victims"]] == [("worker:0", ["worker:1"])]


def test_faults_answer_304_to_a_matching_etag(tmp_path):
    failed_run(tmp_path / "logs" / "failed").write(by_task=True)
    client = client_for(make_plugin(tmp_path / "logs"))
    first = client.get(PREFIX + "/faults?run=failed")
    again = client.get(PREFIX + "/faults?run=failed", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304


def test_now_of_a_hung_job_names_the_silent_ps(tmp_path):
    """Workers stopped at 20 s, still beating at 35 s; the chief's checks of ps:0 went unanswered."""
    run = RunBuilder(tmp_path / "logs" / "hung", strategy="tf1_session", workers=2, ps=1, chief=False)
    for worker in WORKERS:
        run.steps(worker, count=int(20_000 / 21), step_ms=20)
        run.heartbeats(worker, until_ms=35_000, subjects=(worker,))
    run.liveness("ps:0", ["OK", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"], start_ms=19_000)
    run.write(by_task=True)
    client = client_for(make_plugin(tmp_path / "logs", wall_clock=WallClock(36_000)))
    now = get_json(client, PREFIX + "/now?run=hung")
    assert now["state"] == "hung" and "ps:0 not answering" in now["reason"]
    assert now["silent"] == [{"task": "ps:0", "signal": "silent",
                              "detail": "2 status checks unanswered (DEADLINE_EXCEEDED: frozen or hung)"}]
    assert get_json(client, PREFIX + "/faults?run=hung") == {"events": [], "roots": [], "victims": []}


def test_a_task_that_stopped_writing_is_silent(tmp_path):
    """worker:1's beats stop at 10 s without a close while worker:0 steps on to 40 s: worker:1
    is silent, the job runs on without it."""
    run = RunBuilder(tmp_path / "logs" / "gone", strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    run.steps_until("worker:0", START_NS + 40_000 * MS).heartbeats("worker:0", until_ms=40_000, subjects=("worker:0",))
    run.steps_until("worker:1", START_NS + 10_000 * MS).heartbeats("worker:1", until_ms=10_000, subjects=("worker:1",))
    run.write(by_task=True)
    now = get_json(client_for(make_plugin(tmp_path / "logs", wall_clock=WallClock(41_000))), PREFIX + "/now?run=gone")
    assert {"task": "worker:1", "signal": "stopped_writing"}.items() <= now["silent"][0].items()
    assert now["state"] == "running"  # worker:0 still progresses: not hung


@pytest.mark.parametrize("route", ["/now", "/faults"])
@pytest.mark.parametrize("query, status", [("", 400), ("run=", 400), ("run=slow&run=slow", 400), ("run=nope", 404)])
def test_bad_arguments(logdir, route, query, status):
    get_json(client_for(make_plugin(logdir)), f"{PREFIX}{route}?{query}", status=status)
