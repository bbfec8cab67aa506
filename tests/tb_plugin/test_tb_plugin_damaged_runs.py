"""The tab answers every run, however damaged, and one run never breaks another (src/tfdiag/tb_plugin/runs.py).

Each damaged run sits in a logdir beside a good run and is asked for over HTTP through
TensorBoard's WSGI router: every route answers 200 with JSON, the report carries the
run's warnings, no absolute path of the logdir is shown, and the good run is unaffected.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tfdiag.report.figures import FIGURES
from tfdiag.store import log_dir

from tests.runs import START_NS, RunBuilder
from tests.tb_plugin.tb_plugin_runs import make_run
from tests.tb_plugin.test_tb_plugin_routes import PREFIX, client_for, get_json, make_plugin


def bad_manifest(run: Path) -> None:
    (log_dir(run) / "manifest.json").write_text("{not json")


def manifest_of_the_wrong_type(run: Path) -> None:
    (log_dir(run) / "manifest.json").write_text("[1, 2, 3]")


def manifest_not_utf8(run: Path) -> None:
    (log_dir(run) / "manifest.json").write_bytes(b'{"strategy": "\xff\xfe"}')


def directory_named_like_a_task_file(run: Path) -> None:
    (log_dir(run) / "worker-7.tfdiag").mkdir()


def dangling_link_named_like_a_task_file(run: Path) -> None:
    os.symlink(run / "nowhere", log_dir(run) / "worker-7.tfdiag")


def garbage_task_file(run: Path) -> None:
    (log_dir(run) / "worker-7.tfdiag").write_bytes(bytes(range(256)) * 12)


def empty_task_file(run: Path) -> None:
    (log_dir(run) / "worker-7.tfdiag").write_bytes(b"")


DAMAGES = [
    bad_manifest,
    manifest_of_the_wrong_type,
    manifest_not_utf8,
    directory_named_like_a_task_file,
    dangling_link_named_like_a_task_file,
    garbage_task_file,
]


def check_answers_everything(client, root: Path, run: str) -> dict:
    """Every route about ``run`` answers 200 JSON without the logdir's path; returns the report."""
    answers = {}
    for url, query in [
        ("/report", {"run": run}),
        *(("/figure", {"run": run, "name": name}) for name in FIGURES),
        ("/compare", {"base": run, "new": "good"}),
        ("/compare", {"base": "good", "new": run}),
    ]:
        response = client.get(PREFIX + url, query_string=query)
        body = response.get_data(as_text=True)
        assert (response.status_code, response.mimetype) == (200, "application/json"), (url, query, body)
        assert str(root) not in body, (url, query)
        answers.setdefault(url, json.loads(body))
    return answers["/report"]


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "logs"
    make_run(root / "good")
    return root


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda damage: damage.__name__)
def test_a_damaged_run_answers_with_its_warnings(root, damage):
    damage(make_run(root / "damaged"))
    client = client_for(make_plugin(root))
    assert get_json(client, PREFIX + "/runs") == ["damaged", "good"]
    report = check_answers_everything(client, root, "damaged")
    assert report["run"]["path"] == "damaged"
    assert report["run"]["warnings"], damage.__name__
    good = get_json(client, PREFIX + "/report?run=good")
    assert good["summary"]["primary_bottleneck"] == "straggler" and good["run"]["warnings"] == []


def test_damaged_live_finding_records_leave_the_good_ones_on_the_chart(root):
    run = make_run(root / "damaged")
    findings = RunBuilder(run)
    began = dict(task="chief:0", time_ns=START_NS + 2 * 10**9, state="began", kind="straggler", tasks="worker:1",
                 severity="warning", onset_ns=START_NS + 10**9, step=10, predicted_speedup=1.2,
                 message="tfdiag: worker:1 straggler since step 10")
    for damaged in ({}, {"onset_ns": None, "kind": "slow_link"}, {"state": None, "kind": "ps_hotspot"},
                    {"state": "cleared", "kind": "input_bound"}):
        findings.record("live_finding", **began | damaged)
    findings.write(manifest=False)
    with open(log_dir(run) / "chief-0.tfdiag", "ab") as file:
        file.write(b"TFDG\x01\x10\x00")  # a frame cut short: a truncated tail
    client = client_for(make_plugin(root))
    check_answers_everything(client, root, "damaged")
    chart = get_json(client, PREFIX + "/figure?run=damaged&name=findings_during_run")
    assert [trace["y"] for trace in chart["data"]] == [["straggler (worker:1)"]]


def test_an_empty_run_answers_with_a_warning(root):
    log_dir(root / "empty").mkdir(parents=True)
    empty_task_file(root / "empty")
    client = client_for(make_plugin(root))
    report = check_answers_everything(client, root, "empty")
    assert report["summary"]["steps"] == 0 and report["findings"] == []
    assert any("manifest" in warning for warning in report["run"]["warnings"])
    figure = get_json(client, PREFIX + "/figure?run=empty&name=step_time")
    assert figure["layout"]["meta"]["empty"] is True


def test_an_exception_in_one_run_becomes_its_warning(root, monkeypatch, caplog):
    """The last-resort guard: whatever fails while analysing one run, that run answers
    with the error as a warning (and the tasks read), it is logged with its traceback,
    and the other runs are untouched."""
    import tfdiag.tb_plugin.runs as runs

    make_run(root / "broken")
    real_analyze = runs.analyze

    def analyze(loaded):
        if loaded.path.name == "broken":
            raise ZeroDivisionError("planted")
        return real_analyze(loaded)

    monkeypatch.setattr(runs, "analyze", analyze)
    client = client_for(make_plugin(root, refresh_interval_s=0))
    with caplog.at_level("ERROR", logger="tfdiag.tb_plugin.runs"):
        report = check_answers_everything(client, root, "broken")
        get_json(client, PREFIX + "/report?run=broken")
    (warning,) = report["run"]["warnings"]
    assert "ZeroDivisionError: planted" in warning
    assert report["run"]["tasks"] == ["worker:0", "worker:1"]  # what was read is still shown
    logged = [record for record in caplog.records if "broken" in record.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info[0] is ZeroDivisionError  # once, with the traceback
    assert get_json(client, PREFIX + "/report?run=good")["summary"]["primary_bottleneck"] == "straggler"

    monkeypatch.setattr(runs, "analyze", real_analyze)
    write_more = make_run(root / "broken")  # the run changes on disk: it is analysed again
    assert get_json(client, PREFIX + f"/report?run={write_more.name}")["summary"]["primary_bottleneck"] == "straggler"


def test_a_failing_figure_is_an_empty_chart_that_says_why(root, monkeypatch):
    import tfdiag.tb_plugin.run_view as run_view

    def broken(report):
        raise ValueError("planted")

    monkeypatch.setitem(run_view.FIGURES, "step_time", broken)
    client = client_for(make_plugin(root))
    figure = get_json(client, PREFIX + "/figure?run=good&name=step_time")
    assert figure["layout"]["meta"]["empty"] is True
    assert "ValueError: planted" in figure["layout"]["annotations"][0]["text"]
    assert get_json(client, PREFIX + "/figure?run=good&name=step_breakdown")["data"]


def test_a_run_whose_analysis_hangs_answers_its_progress_and_delays_nothing(root, monkeypatch):
    """No request waits on a run's read or analysis: while one run's analysis hangs, its
    routes answer 202 with where its read stands, and other runs and the run list answer."""
    import tfdiag.tb_plugin.runs as runs

    make_run(root / "stuck")
    release = threading.Event()
    real_analyze = runs.analyze

    def analyze(loaded):
        if loaded.path.name == "stuck":
            assert release.wait(timeout=60)
        return real_analyze(loaded)

    monkeypatch.setattr(runs, "analyze", analyze)
    client = client_for(make_plugin(root, view_wait_s=0))
    try:
        started = time.monotonic()
        progress = get_json(client, PREFIX + "/report?run=stuck", status=202)
        assert progress["run"] == "stuck" and progress["stage"] in ("reading", "analysing")
        assert get_json(client, PREFIX + "/runs") == ["good", "stuck"]
        deadline = time.monotonic() + 30
        while (good := client.get(PREFIX + "/report?run=good")).status_code == 202:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert json.loads(good.get_data())["summary"]["primary_bottleneck"] == "straggler"
        busy = get_json(client, PREFIX + "/figure?run=stuck&name=step_time", status=202)
        assert busy["stage"] == "analysing" and busy["files_read"] == busy["files"] == 2
        assert busy["bytes_read"] == busy["bytes"] > 0
        assert time.monotonic() - started < 30
        status = {run["run"]: run for run in get_json(client, PREFIX + "/status")["runs"]}
        assert status["stuck"]["stage"] == "analysing" and status["good"]["stage"] in ("ready", "refreshing")
    finally:
        release.set()
    deadline = time.monotonic() + 30
    while (answer := client.get(PREFIX + "/report?run=stuck")).status_code == 202:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert answer.status_code == 200


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_named_like_a_task_file_does_not_hang_other_runs(root):
    """A FIFO in a run: the run list and other runs answer while that run is read; the
    run itself answers (the reader never blocks on a FIFO; if it did, opening the FIFO
    for writing here lets it go)."""
    run = make_run(root / "fifo")
    fifo = log_dir(run) / "worker-7.tfdiag"
    os.mkfifo(fifo)
    plugin = make_plugin(root)
    answers = {}
    reader = threading.Thread(target=lambda: answers.setdefault("fifo", client_for(plugin).get(PREFIX + "/report?run=fifo")))
    reader.start()
    client = client_for(plugin)
    assert get_json(client, PREFIX + "/runs") == ["fifo", "good"]
    assert get_json(client, PREFIX + "/report?run=good")["summary"]["primary_bottleneck"] == "straggler"
    deadline = time.monotonic() + 30
    while reader.is_alive() and time.monotonic() < deadline:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a writer that closes at once: EOF
        except OSError:
            pass  # no reader has it open (yet, or at all)
        reader.join(timeout=0.05)
    assert not reader.is_alive()
    assert answers["fifo"].status_code == 200
    assert answers["fifo"].mimetype == "application/json"


def test_runs_reached_through_links_out_of_the_logdir_are_not_shown(tmp_path, root):
    outside = make_run(tmp_path / "outside")
    os.symlink(outside, root / "linked_run")
    (root / "inner" / "plugins").mkdir(parents=True)
    os.symlink(log_dir(outside), root / "inner" / "plugins" / "tfdiag")
    os.symlink(tmp_path, root / "parent")
    client = client_for(make_plugin(root))
    assert get_json(client, PREFIX + "/runs") == ["good"]
    for name in ("linked_run", "inner", "parent/outside", str(outside)):
        get_json(client, PREFIX + "/report?" + f"run={name}", status=404)


def test_containment_check_resolves_links(tmp_path):
    from tfdiag.tb_plugin.runs import inside

    root = tmp_path / "logs"
    (root / "a").mkdir(parents=True)
    os.symlink(tmp_path, root / "up")
    os.symlink(root / "a", root / "same")
    real_root = os.path.realpath(root)
    assert inside(root / "a", real_root) and inside(root / "same", real_root) and inside(root, real_root)
    assert not inside(root / "up", real_root) and not inside(root / "up" / "logs" / ".." / "x", real_root)
    assert not inside(tmp_path / "logs2", real_root)  # a sibling sharing the prefix is outside


def test_a_run_named_with_undecodable_bytes_and_escapes_can_be_opened(root):
    make_run(root / os.fsdecode(b"run-\xff\x1b[2J"))
    client = client_for(make_plugin(root))
    runs = get_json(client, PREFIX + "/runs")
    assert runs == ["good", "run-\\xff\\x1b[2J"]
    report = get_json(client, PREFIX + "/report?" + "run=" + "run-%5Cxff%5Cx1b%5B2J")
    assert report["run"]["path"] == "run-\\xff\\x1b[2J"
    assert report["summary"]["primary_bottleneck"] == "straggler"


@pytest.mark.parametrize("discovery_ttl_s", [0, 60])
def test_a_run_removed_while_shown_is_404_or_its_last_state_never_500(root, discovery_ttl_s):
    import shutil

    make_run(root / "gone")
    client = client_for(make_plugin(root, discovery_ttl_s=discovery_ttl_s, refresh_interval_s=0))
    assert get_json(client, PREFIX + "/report?run=gone")["summary"]["steps"] > 0
    shutil.rmtree(root / "gone")
    for url in ("/report?run=gone", "/figure?run=gone&name=step_time", "/compare?base=gone&new=good"):
        response = client.get(PREFIX + url)
        assert response.status_code in ((404,) if discovery_ttl_s == 0 else (200, 404)), url
        assert response.mimetype == "application/json"
    assert get_json(client, PREFIX + "/runs") == (["good"] if discovery_ttl_s == 0 else ["gone", "good"])
