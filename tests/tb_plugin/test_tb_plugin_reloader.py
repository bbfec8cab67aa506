"""The tab never waits on a read: 202 with progress, background refreshes, the fold cache
(src/tfdiag/tb_plugin/reloader.py, runs.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import tfdiag.analysis.load as load
import tfdiag.tb_plugin.runs as runs
from tfdiag.analysis.fold_cache import FoldCache
from tfdiag.tb_plugin.reloader import Reloader

from tests.tb_plugin.tb_plugin_runs import make_run, write_steps
from tests.tb_plugin.test_tb_plugin_routes import PREFIX, client_for, get_json, make_plugin


class HeldAnalysis:
    """``runs.analyze`` that waits for ``release()`` on the calls the test holds."""

    def __init__(self, monkeypatch, held_calls: set[int]):
        self.real = runs.analyze
        self.calls = 0
        self.held = held_calls
        self.released = threading.Event()
        monkeypatch.setattr(runs, "analyze", self)

    def __call__(self, loaded):
        self.calls += 1
        if self.calls in self.held:
            assert self.released.wait(timeout=60)
        return self.real(loaded)

    def release(self) -> None:
        self.released.set()


def until_ready(client, url: str, timeout_s: float = 60.0):
    """The answer to ``url`` once it is not 202, asked every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while (response := client.get(url)).status_code == 202:
        assert time.monotonic() < deadline, f"{url} still 202 after {timeout_s} s"
        time.sleep(0.02)
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


def test_a_run_not_read_yet_answers_202_with_its_progress(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    make_run(root / "run")
    held = HeldAnalysis(monkeypatch, {1})
    client = client_for(make_plugin(root, view_wait_s=0))
    started = time.monotonic()
    response = client.get(PREFIX + "/report?run=run")
    assert time.monotonic() - started < 5
    assert response.status_code == 202 and response.headers["Retry-After"] == "1"
    assert response.headers["Cache-Control"] == "no-cache, must-revalidate"
    for url in ("/figure?run=run&name=step_time", "/faults?run=run", "/now?run=run", "/compare?base=run&new=run"):
        assert client.get(PREFIX + url).status_code == 202, url
    deadline = time.monotonic() + 30
    while (progress := get_json(client, PREFIX + "/report?run=run", status=202))["stage"] != "analysing":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert progress == {"run": "run", "stage": "analysing", "files_read": 2, "files": 2,
                        "bytes_read": progress["bytes"], "bytes": progress["bytes"], "analyses": 1}
    held.release()
    report = until_ready(client, PREFIX + "/report?run=run")
    assert report == get_json(client_for(make_plugin(root)), PREFIX + "/report?run=run")
    assert get_json(client, PREFIX + "/status")["runs"][0]["stage"] in ("ready", "refreshing")


def test_a_refresh_answers_at_once_from_the_view_it_replaces(tmp_path, monkeypatch):
    """While a grown run is analysed again, its routes answer from the last view; the
    new view (with the answers the tab had asked for built) replaces it when done."""
    root = tmp_path / "logs"
    run = make_run(root / "live", slow_ms=20.0)
    held = HeldAnalysis(monkeypatch, {2})
    plugin = make_plugin(root, view_wait_s=0, refresh_interval_s=0)
    client = client_for(plugin)
    first = until_ready(client, PREFIX + "/report?run=live")
    figure = get_json(client, PREFIX + "/figure?run=live&name=step_time")
    write_steps(run, "worker:1", 90.0, steps=30, first_step=40, start_ns=10**19 // 5)
    started = time.monotonic()
    assert get_json(client, PREFIX + "/report?run=live") == first  # starts the refresh, answers the old view
    assert get_json(client, PREFIX + "/figure?run=live&name=step_time") == figure
    assert time.monotonic() - started < 5
    state = plugin._state("live")
    deadline = time.monotonic() + 30
    while held.calls < 2:  # asked again, as the tab polls, until a refresh has read the new steps
        assert get_json(client, PREFIX + "/report?run=live") == first  # the old view meanwhile
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert state.status()["stage"] == "refreshing"
    held.release()
    deadline = time.monotonic() + 30
    while (second := get_json(client, PREFIX + "/report?run=live"))["summary"]["steps"] == first["summary"]["steps"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert second["summary"]["steps"] == first["summary"]["steps"] + 30
    assert "figure:step_time" in state.view().built  # built before it was published
    assert get_json(client, PREFIX + "/figure?run=live&name=step_time") != figure


def test_a_second_session_reads_no_file_again_and_shows_the_same(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    make_run(root / "run", steps=400)
    cache = FoldCache(tmp_path / "cache", min_file_bytes=0)
    first = get_json(client_for(make_plugin(root, fold_cache=cache)), PREFIX + "/report?run=run")
    assert len(list(cache.directory.glob("*.fold"))) == 2
    reads = []
    real = load.read_task_file
    monkeypatch.setattr(load, "read_task_file", lambda path, offset=0: reads.append(Path(path).name) or real(path, offset))
    assert get_json(client_for(make_plugin(root, fold_cache=cache)), PREFIX + "/report?run=run") == first
    assert reads == []
    assert get_json(client_for(make_plugin(root, fold_cache=FoldCache(tmp_path / "empty"))),
                    PREFIX + "/report?run=run") == first


def test_the_tab_uses_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIAG_CACHE_DIR", str(tmp_path / "user-cache"))
    root = tmp_path / "logs"
    make_run(root / "run")
    plugin = make_plugin(root)
    get_json(client_for(plugin), PREFIX + "/report?run=run")
    assert plugin._state("run").loader.cache.directory == tmp_path / "user-cache" / "folds"


def test_status_lists_the_runs_asked_for(tmp_path):
    root = tmp_path / "logs"
    make_run(root / "a")
    make_run(root / "b")
    client = client_for(make_plugin(root))
    assert get_json(client, PREFIX + "/status") == {"runs": []}
    get_json(client, PREFIX + "/report?run=b")
    (status,) = get_json(client, PREFIX + "/status")["runs"]
    assert status["run"] == "b" and status["stage"] == "ready" and status["analyses"] == 1
    assert status["files_read"] == status["files"] == 2


@pytest.mark.parametrize("interval_s, refreshes", [(60.0, 1), (0.0, 3)])
def test_the_reloader_refreshes_at_most_once_an_interval(interval_s, refreshes):
    done = []
    reloader = Reloader(lambda: done.append(1), "run", interval_s)
    for _ in range(3):
        assert reloader.ask(wait_s=10)
    assert len(done) == refreshes


def _saved_session(root: Path, cache: FoldCache) -> dict:
    """A first session's answers: the report, the fault timeline and one chart, saved by a
    refresh that found nothing new."""
    client = client_for(make_plugin(root, fold_cache=cache, refresh_interval_s=0))
    answers = {url: get_json(client, PREFIX + url)
               for url in ("/report?run=run", "/faults?run=run", "/figure?run=run&name=step_time")}
    get_json(client, PREFIX + "/report?run=run")  # nothing changed: the answers are saved
    assert len(list(cache.directory.glob("*.view"))) == 1
    return answers


def test_a_second_session_answers_from_the_saved_view_while_it_reads(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    make_run(root / "run")
    cache = FoldCache(tmp_path / "cache", min_file_bytes=0)
    answers = _saved_session(root, cache)
    held = HeldAnalysis(monkeypatch, {1})
    client = client_for(make_plugin(root, fold_cache=cache, view_wait_s=0))
    for url, answer in answers.items():
        assert until_ready(client, PREFIX + url) == answer, url  # while the run is analysed
    deadline = time.monotonic() + 30
    while held.calls == 0:  # the saved answers came before this session's analysis
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for url in ("/now?run=run", "/figure?run=run&name=step_breakdown", "/compare?base=run&new=run"):
        assert get_json(client, PREFIX + url, status=202)["stage"] == "refreshing", url
    held.release()
    until_ready(client, PREFIX + "/now?run=run")
    for url, answer in answers.items():
        assert get_json(client, PREFIX + url) == answer, url  # this session's own view: the same
    assert get_json(client, PREFIX + "/figure?run=run&name=step_breakdown")["data"]


def test_a_saved_view_of_other_files_is_not_shown(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    run = make_run(root / "run")
    cache = FoldCache(tmp_path / "cache", min_file_bytes=0)
    _saved_session(root, cache)
    write_steps(run, "worker:1", 90.0, steps=30, first_step=40, start_ns=10**19 // 5)
    held = HeldAnalysis(monkeypatch, {1})
    client = client_for(make_plugin(root, fold_cache=cache, view_wait_s=0))
    get_json(client, PREFIX + "/report?run=run", status=202)
    deadline = time.monotonic() + 30
    while held.calls == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert get_json(client, PREFIX + "/report?run=run", status=202)["stage"] == "analysing"
    held.release()
    assert until_ready(client, PREFIX + "/report?run=run")["summary"]["steps"] == 110


def test_the_tab_opens_warm_after_tfdiag_analyze(tmp_path, monkeypatch):
    """The CLI's and the tab's loaders share cache entries (the same caps and code, the run's
    path spelt absolute by both, here given relative to each)."""
    from tfdiag.analysis import fold_cache
    from tfdiag.cli import main

    monkeypatch.setattr(fold_cache, "MIN_FILE_BYTES", 0)
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "logs" / "run", steps=400)
    assert main(["analyze", "logs/run", "-q", "-o", "report.json", "--format", "json"]) == 0
    reads = []
    real = load.read_task_file
    monkeypatch.setattr(load, "read_task_file", lambda path, offset=0: reads.append(Path(path).name) or real(path, offset))
    shown = get_json(client_for(make_plugin("logs")), PREFIX + "/report?run=run")
    assert reads == []
    assert shown["summary"] == json.loads((tmp_path / "report.json").read_text())["summary"]
