"""``last_words.job_end`` and the ``task_failure`` finding it makes: the root task of a job's end."""

from __future__ import annotations

from tests.runs import RunBuilder
from tfdiag.analysis import analyze

UNHEALTHY = ("Graph execution error:\n\nCollective ops is aborted by: The following tasks are unhealthy "
             "(stopped sending heartbeats):\n/job:worker/replica:0/task:1\n")
RESET = "Collective ops is aborted by: recvmsg:Connection reset by peer from remote target /job:worker/replica:0/task:0"


def _ended(run: RunBuilder):
    findings = [f for f in analyze(run.write(by_task=True)).findings if f.kind == "task_failure"]
    assert len(findings) == 1, [f.title for f in findings]
    return findings[0]


def _mwms(tmp_path, until_ms=20_000.0):
    run = RunBuilder(tmp_path, strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    run.steps("worker:0", count=200, step_ms=50).steps("worker:1", count=200, step_ms=50)
    return run.heartbeats("worker:0", until_ms=until_ms, subjects=("worker:0",))


def test_a_frozen_worker_is_the_root_and_the_worker_that_aborted_its_victim(tmp_path):
    run = _mwms(tmp_path).heartbeats("worker:1", until_ms=10_000.0, subjects=("worker:1",))
    finding = _ended(run.exit("worker:0", 18_000.0, message=UNHEALTHY, blamed=("worker:1",)))
    assert finding.severity.value == "critical" and finding.tasks == ("worker:1",)
    assert [v["task"] for v in finding.evidence["failed_because_of_it"]] == ["worker:0"]
    [root] = finding.evidence["root"]
    assert root["state"] == "last heartbeat 8.0 s before the first failure; no last words: killed or frozen"
    assert "unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1" in finding.summary


def test_a_root_that_resumes_and_fails_on_its_victims_stays_the_root(tmp_path):
    run = _mwms(tmp_path).heartbeats("worker:1", until_ms=10_000.0, subjects=("worker:1",))
    run.exit("worker:0", 18_000.0, message=UNHEALTHY, blamed=("worker:1",))
    finding = _ended(run.exit("worker:1", 40_000.0, message=RESET, blamed=("worker:0",)))
    assert finding.tasks == ("worker:1",)
    assert finding.evidence["root"][0]["state"].endswith("later ended on UnavailableError: " + RESET)


def test_a_task_that_ends_on_its_own_error_is_the_root(tmp_path):
    run = _mwms(tmp_path).heartbeats("worker:1", until_ms=20_000.0, subjects=("worker:1",))
    run.exit("worker:1", 15_000.0, error_type="ValueError", message="Input 0 is incompatible with the layer")
    finding = _ended(run.exit("worker:0", 16_000.0, message=RESET.replace("task:0", "task:1"), blamed=("worker:1",)))
    assert finding.tasks == ("worker:1",)
    assert finding.evidence["root"][0]["state"].endswith("ended on ValueError: Input 0 is incompatible with the layer")


def test_a_ps_that_runs_no_collector_is_named_from_the_errors(tmp_path):
    run = RunBuilder(tmp_path, strategy="tf1_session", workers=2, ps=1, chief=False)
    run.steps("worker:0").steps("worker:1").heartbeats("worker:0", subjects=("worker:0",))
    message = "UnavailableError: from remote target /job:ps/replica:0/task:0 while calling RecvTensor"
    run.exit("worker:0", 20_000.0, message=message, blamed=("ps:0",))
    finding = _ended(run.exit("worker:1", 20_100.0, message=message, blamed=("ps:0",)))
    assert finding.tasks == ("ps:0",)
    assert finding.evidence["root"][0]["state"].startswith("wrote no records")
    assert {v["task"] for v in finding.evidence["failed_because_of_it"]} == {"worker:0", "worker:1"}


def test_an_exit_without_an_error_is_no_failure(tmp_path):
    run = _mwms(tmp_path).exit("worker:0", 18_000.0, error_type="")
    assert "task_failure" not in [f.kind for f in analyze(run.write(by_task=True)).findings]
