"""``benchmarks/failures.py``'s pure parts: the case list, judging real reports (runs written
through the real writer, analysed and rendered as ``tfdiag analyze --format json`` renders
them) as naming the root task, and the table."""

from __future__ import annotations

import json

from benchmarks import failures
from tests.runs import RunBuilder
from tfdiag.analysis import analyze
from tfdiag.report.json_format import render_json
from tfdiag.sample_jobs.jobs import JOBS

UNHEALTHY = ("Graph execution error:\n\nCollective ops is aborted by: The following tasks are unhealthy "
             "(stopped sending heartbeats):\n/job:worker/replica:0/task:1\n")


def _report(path) -> dict:
    return json.loads(render_json(analyze(path)))


def _mwms_ended(tmp_path) -> dict:
    """MultiWorkerMirroredStrategy: worker:1 frozen, worker:0 aborted naming it (last_words)."""
    run = RunBuilder(tmp_path / "mwms", strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    run.steps("worker:0", count=200, step_ms=50).steps("worker:1", count=200, step_ms=50)
    run.heartbeats("worker:0", until_ms=20_000.0, subjects=("worker:0",))
    run.heartbeats("worker:1", until_ms=10_000.0, subjects=("worker:1",))
    run.exit("worker:0", 18_000.0, message=UNHEALTHY, blamed=("worker:1",))
    return _report(run.write(by_task=True))


def _tf1_ps_silent(tmp_path) -> dict:
    """A TF1 job whose workers hang 15 s on ps:0, which stopped answering its status checks."""
    run = RunBuilder(tmp_path / "tf1", strategy="tf1_session", workers=2, ps=1, chief=False)
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=int(20_000 / 21), step_ms=20).heartbeats(worker, until_ms=35_000, subjects=(worker,))
    run.liveness("ps:0", ["OK", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"], start_ms=19_000)
    return _report(run.write(by_task=True))


def test_every_structure_is_stopped_and_killed_on_a_worker_and_on_a_ps_where_it_has_one():
    names = [case.name for case in failures.CASES]
    assert len(names) == len(set(names))
    for job in ("ps_ctl", "ps_fit", "mwms_fit", "tf1_session"):
        for fault in ("stop", "kill"):
            assert f"{job}/{fault}/worker:1" in names
            assert (f"{job}/{fault}/ps:0" in names) == JOBS[job].ps
    assert {case.job for case in failures.CASES if case.fault == "exception"} == set(failures.RAISING)
    assert all(case.command is None for case in failures.CASES if case.fault != "exception")


def test_cases_are_selected_by_globs_and_listed(capsys):
    assert [c.name for c in failures.select("mwms_fit/stop/*, */kill/ps:0")] == [
        "ps_ctl/kill/ps:0", "ps_fit/kill/ps:0", "mwms_fit/stop/worker:1", "tf1_session/kill/ps:0"]
    assert failures.select(None) == failures.CASES
    assert failures.main(["--list", "--cases", "tf1_session/stop/*"]) == 0
    assert capsys.readouterr().out.split() == ["tf1_session/stop/worker:1", "tf1_session/stop/ps:0"]
    assert failures.main(["--list", "--cases", "nothing/*"]) == 2


def test_the_root_of_a_job_end_is_named_and_its_victim_told_apart(tmp_path):
    report = _mwms_ended(tmp_path)
    verdict = failures.judge(report, "worker:1")
    assert verdict["named"] and verdict["apart"] and verdict["kind"] == "task_failure"
    assert verdict["waiting"] == ["worker:0"] and verdict["title"].startswith("worker:1 failed and ended the job")
    victim = failures.judge(report, "worker:0")
    assert not victim["named"] and not victim["apart"] and victim["other_roots"] == ["worker:1"]


def test_a_silent_ps_is_the_root_of_a_stall_and_the_workers_wait_for_it(tmp_path):
    report = _tf1_ps_silent(tmp_path)
    verdict = failures.judge(report, "ps:0")
    assert verdict["named"] and verdict["apart"] and verdict["kind"] == "stalled"
    assert verdict["waiting"] == ["worker:0", "worker:1"]
    assert not failures.judge(report, "worker:0")["named"]


def test_a_report_without_a_critical_finding_names_nothing():
    assert failures.judge({"findings": []}, "worker:1") == {
        "named": False, "apart": False, "other_roots": [], "waiting": [], "kind": None, "title": None}


def test_the_table_has_a_row_a_case_and_the_summary(tmp_path):
    ended, silent = _mwms_ended(tmp_path), _tf1_ps_silent(tmp_path)
    rows = [
        {"job": "mwms_fit", "fault": "stop", "task": "worker:1", "fault_s": 5.0, "named_s": 12.0, "announced_s": 9.5,
         "hung": failures.judge(ended, "worker:1"), "dead": failures.judge(ended, "worker:1"), "load1_fault": 2.5},
        {"job": "tf1_session", "fault": "stop", "task": "ps:0", "fault_s": 5.0, "named_s": 41.0, "announced_s": None,
         "dead": failures.judge(silent, "ps:0"), "load1_fault": 3.0},
        {"job": "ps_ctl", "fault": "exception", "task": "chief:0", "fault_s": None, "named_s": None,
         "announced_s": None, "dead": failures.judge({"findings": []}, "chief:0"), "load1_fault": 1.0},
    ]
    lines = failures.table(rows).splitlines()
    assert len(lines) == 2 + len(rows) + 1
    assert lines[2].startswith("| mwms_fit | stop | worker:1 | 12.0 s | 9.5 s | yes | yes (worker:0) | worker:1 failed")
    assert "| tf1_session | stop | ps:0 | 41.0 s | no | yes | yes (worker:0, worker:1) |" in lines[3]
    assert lines[4].startswith("| ps_ctl | exception (not seen) | chief:0 | no | no | no | - | - |")
    assert "root task named / all cases: 2/3" in lines[-1]
    assert "p50 12.0 s, p90 41.0 s, max 41.0 s" in lines[-1] and "1/3 named within 30 s" in lines[-1]
