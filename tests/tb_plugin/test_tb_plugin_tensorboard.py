"""End to end: a real ``tensorboard`` process loads the plugin from its entry point, and
headless Chromium opens the tab.

Two servers start side by side: the default one (``--load_fast`` auto, the Rust data
server when installed) drives the browser; one with ``--load_fast=false
--path_prefix=/tb`` checks the routes over HTTP. Both bind 127.0.0.1 only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tfdiag.report.figures import FIGURES

from tests.tb_plugin.tb_plugin_runs import failed_run, make_full_run, make_run

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TENSORBOARD = Path(sys.executable).parent / "tensorboard"
STARTUP_TIMEOUT_S = 40.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str, timeout: float = 10.0) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.headers.get_content_type(), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get_content_type(), error.read()


def fetch_ready(url: str, timeout_s: float = 60.0) -> tuple[int, str, bytes]:
    """``fetch`` asked again every 0.1 s while it answers 202 (the run is being read), as the tab does."""
    deadline = time.monotonic() + timeout_s
    while (answer := fetch(url))[0] == 202 and time.monotonic() < deadline:
        time.sleep(0.1)
    return answer


@contextmanager
def tensorboard(logdir: Path, log_path: Path, *flags: str):
    """Starts tensorboard on a free loopback port; yields its base URL; always kills it."""
    port = free_port()
    command = [str(TENSORBOARD), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port), *flags]
    prefix = next((flag.split("=", 1)[1] for flag in flags if flag.startswith("--path_prefix=")), "")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process, f"http://127.0.0.1:{port}{prefix}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_until_up(process: subprocess.Popen, base: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"tensorboard exited with {process.returncode}:\n{log_path.read_text(errors='replace')}")
        try:
            if fetch(base + "/data/plugins_listing", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"tensorboard did not answer within {STARTUP_TIMEOUT_S} s:\n{log_path.read_text(errors='replace')}")


MARKUP_RUN = "<script>alert(1)</script>"
HOSTILE_TASK = "worker:<img src=x onerror=alert(9)>"
RUNS = sorted([MARKUP_RUN, "damaged", "failed", "full", "slow", "sweep/even", "tasks"])
FIGURE_NAMES = list(FIGURES)


def check_routes(base: str) -> None:
    status, content_type, body = fetch(base + "/data/plugins_listing")
    listing = json.loads(body)
    assert listing["tfdiag"]["enabled"] is True, listing["tfdiag"]
    assert listing["tfdiag"]["tab_name"] == "tfdiag"

    plugin = base + "/data/plugin/tfdiag"
    status, content_type, body = fetch(plugin + "/runs")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == RUNS

    status, content_type, body = fetch(plugin + "/report?run=slow")  # not read yet: read in the background
    assert (status, content_type, json.loads(body)["run"]) == (202, "application/json", "slow")
    status, content_type, body = fetch_ready(plugin + "/report?run=slow")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["summary"]["primary_bottleneck"] == "straggler"

    status, content_type, body = fetch_ready(plugin + "/report?run=damaged")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["run"]["warnings"]

    status, content_type, body = fetch_ready(plugin + "/now?run=failed")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["state"] == "failed"

    status, content_type, body = fetch_ready(plugin + "/figure?run=full&name=rpc_latency_heatmap")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["data"]
    status, content_type, body = fetch_ready(plugin + "/compare?base=slow&new=sweep%2Feven")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["primary_bottleneck"] == {"base": "straggler", "new": None}

    for url in (
        "/report?run=%2e%2e%2fslow", "/report?run=/etc/passwd", "/figure?run=..&name=step_time",
        "/compare?base=slow&new=..%2f..", "/figure?run=slow&name=..%2f..%2fplugin.py",
    ):
        assert fetch(plugin + url)[0] in (400, 404), url
    assert fetch(plugin + "/report")[0] == 400
    assert fetch(plugin + "/..%2f..%2fplugin.py")[0] == 404

    status, content_type, body = fetch(plugin + "/index.js")
    assert (status, content_type) == (200, "text/javascript")


def make_logdir(logdir: Path) -> None:
    make_run(logdir / "slow")
    make_run(logdir / "sweep" / "even", slow_ms=20.0)
    make_run(logdir / MARKUP_RUN, slow_ms=20.0)  # a run name that is also markup
    make_full_run(logdir / "full")  # every signal: every chart has data
    failed_run(logdir / "failed").write(by_task=True)  # worker:1 stopped, worker:0 failed because of it
    make_full_run(logdir / "tasks", worker_names=("worker:0", HOSTILE_TASK))  # a task name that is markup
    damaged = make_run(logdir / "damaged")  # a manifest that is not JSON, a task file of garbage
    (damaged / "plugins" / "tfdiag" / "manifest.json").write_text("{not json")
    (damaged / "plugins" / "tfdiag" / "worker-9.tfdiag").write_bytes(bytes(range(256)) * 4)
    # A directory with no event files and no run: discovery walks the logdir.
    (logdir / "other").mkdir()


def test_tab_in_tensorboard_and_chromium(tmp_path):
    logdir = tmp_path / "logs"
    make_logdir(logdir)

    with ExitStack() as stack:
        default, base = stack.enter_context(tensorboard(logdir, tmp_path / "tb-default.log"))
        legacy, prefixed = stack.enter_context(
            tensorboard(logdir, tmp_path / "tb-legacy.log", "--load_fast=false", "--path_prefix=/tb")
        )
        wait_until_up(default, base, tmp_path / "tb-default.log")
        wait_until_up(legacy, prefixed, tmp_path / "tb-legacy.log")
        check_routes(base)
        check_routes(prefixed)

        if not os.path.exists(CHROMIUM):
            pytest.skip(f"{CHROMIUM} is missing, so the browser half of this test cannot run")
        sync_api = pytest.importorskip("playwright.sync_api")
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                open_tab(browser, base + "/#tfdiag", tmp_path)
                open_prefixed_tab(browser, prefixed + "/#tfdiag", tmp_path / "tab-prefixed.png")
                open_entry_page(browser, base + "/data/plugin_entry.html?name=tfdiag", tmp_path / "tab-full-page.png")
            finally:
                browser.close()
        for name in ("tab.png", "tab-tasks.png", "tab-failed.png", "tab-compare.png", "tab-prefixed.png", "tab-full-page.png"):
            assert (tmp_path / name).stat().st_size > 10_000, name


@contextmanager
def watched_page(browser, height: int = 1500):
    """A page whose script errors and dialogs (an executed payload would alert) fail the test."""
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1300, "height": height})
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    try:
        yield page
    finally:
        page.close()
    assert not errors, errors


def tab_frame(page):
    return page.frame_locator('iframe[src*="plugin_entry.html?name=tfdiag"]')


def wait_for_charts(frame, count: int, timeout: float = 30_000) -> None:
    deadline = time.monotonic() + timeout / 1000
    while time.monotonic() < deadline:
        if frame.locator(".chart[data-state]").count() >= count:
            return
        time.sleep(0.2)
    pytest.fail(f"only {frame.locator('.chart[data-state]').count()} of {count} charts were drawn")


def open_tab(browser, url: str, tmp_path: Path) -> None:
    """The whole tab: runs, overview, findings, every view, hostile names, compare mode."""
    with watched_page(browser) as page:
        page.goto(url, timeout=30_000)
        frame = tab_frame(page)
        # The first run is the one named like markup: it shows as text, nothing runs.
        frame.locator(".primary.none").wait_for(timeout=30_000)
        assert frame.locator(".run-select option").all_inner_texts() == RUNS
        assert frame.locator(".run-select").input_value() == MARKUP_RUN
        assert frame.locator(".tfdiag script").count() == 0

        # The full run: the Now panel, then the primary bottleneck first in the overview, then all views.
        frame.locator(".run-select").select_option("full")
        primary = frame.locator('.primary[data-kind="straggler"]')
        primary.wait_for(timeout=30_000)
        assert frame.locator("main > *").first.get_attribute("class") == "now-box"
        assert frame.locator("main > *").nth(1).locator(".primary").get_attribute("data-kind") == "straggler"
        text = primary.inner_text()
        assert "worker:1" in text and "predicted" in text and "%" in text
        assert primary.locator("pre.change code").count() == 1
        assert "ParameterServerStrategy" in frame.locator(".stats").first.inner_text()
        badges = frame.locator(".finding .badge").all_inner_texts()
        assert badges[0].lower() == "critical" and len(badges) >= 2
        assert frame.locator(".finding .evidence").count() == len(badges)
        wait_for_charts(frame, len(FIGURE_NAMES))
        drawn = frame.locator(".chart").evaluate_all("boxes => boxes.map((b) => [b.dataset.figure, b.dataset.state])")
        assert dict(drawn) == {name: "drawn" for name in FIGURE_NAMES}
        assert frame.locator(".js-plotly-plot .main-svg").count() >= len(FIGURE_NAMES)
        legend = frame.locator('.chart[data-figure="step_time"] .legendtext').evaluate_all("items => items.map((i) => i.textContent)")
        assert sorted(legend) == ["worker:0", "worker:1"]
        page.screenshot(path=str(tmp_path / "tab.png"), full_page=True)

        # A task named like markup shows as text, in the overview, the findings and the charts.
        frame.locator(".run-select").select_option("tasks")
        frame.locator('.primary[data-kind="straggler"]').wait_for(timeout=20_000)
        wait_for_charts(frame, len(FIGURE_NAMES))
        assert HOSTILE_TASK in frame.locator(".primary").inner_text()
        assert HOSTILE_TASK in frame.locator(".task-list").inner_text()
        legend = frame.locator('.chart[data-figure="step_time"] .legendtext').evaluate_all("items => items.map((i) => i.textContent)")
        assert HOSTILE_TASK in legend
        assert frame.locator(".tfdiag img").count() == 0
        page.screenshot(path=str(tmp_path / "tab-tasks.png"), full_page=True)

        # A damaged run shows its page, with its warnings as text.
        frame.locator(".run-select").select_option("damaged")
        frame.locator(".stat.unhealthy").wait_for(timeout=20_000)
        warnings = frame.locator(".warnings li")
        assert warnings.count() >= 1 and all(text.strip() for text in warnings.all_text_contents())
        assert frame.locator(".message.error").count() == 0

        # A failed job: the Now panel says so, the Faults section marks the root's rows.
        frame.locator(".run-select").select_option("failed")
        now = frame.locator('.now[data-state="failed"]')
        now.wait_for(timeout=20_000)
        assert "worker:1 failed and ended the job" in now.inner_text()
        assert frame.locator(".now .progress tbody tr").count() == 2
        assert frame.locator(".fault-timeline tbody tr").evaluate_all(
            "rows => rows.map((r) => [r.dataset.kind, r.classList.contains('root')])") == [
            ["failure", True], ["retry", True], ["exit", False]]
        assert "worker:1" in frame.locator(".faults .job-end").inner_text()
        page.screenshot(path=str(tmp_path / "tab-failed.png"), full_page=True)

        # Switch back and forth quickly: a late response for an earlier choice is dropped.
        frame.locator(".run-select").select_option(MARKUP_RUN)
        frame.locator(".run-select").select_option("slow")
        frame.locator('.primary[data-kind="straggler"]').wait_for(timeout=20_000)
        page.wait_for_timeout(500)
        assert frame.locator(".primary").count() == 1

        # Compare mode: slow against the even sweep resolves the straggler.
        frame.locator(".compare-select").select_option("sweep/even")
        comparison = frame.locator(".comparison")
        comparison.wait_for(timeout=20_000)
        assert "straggler" in comparison.locator(".compare-list.resolved").inner_text()
        assert "straggler → none" in comparison.inner_text()
        assert frame.locator(".side-by-side .primary").count() == 2
        wait_for_charts(frame, 4)
        page.screenshot(path=str(tmp_path / "tab-compare.png"), full_page=True)
        frame.locator(".compare-select").select_option("")
        frame.locator('.primary[data-kind="straggler"]').wait_for(timeout=20_000)
        assert frame.locator(".comparison").count() == 0


def open_prefixed_tab(browser, url: str, screenshot: Path) -> None:
    """Under --path_prefix with --load_fast=false: the tab loads its module, data and charts."""
    with watched_page(browser) as page:
        page.goto(url, timeout=30_000)
        frame = tab_frame(page)
        frame.locator(".primary.none").wait_for(timeout=30_000)
        frame.locator(".run-select").select_option("slow")
        frame.locator('.primary[data-kind="straggler"]').wait_for(timeout=30_000)
        frame.locator('.chart[data-figure="step_time"][data-state="drawn"]').wait_for(timeout=30_000)
        page.screenshot(path=str(screenshot), full_page=True)


def open_entry_page(browser, url: str, screenshot: Path) -> None:
    """The tab's page on its own (what the iframe holds), screenshot at full height."""
    with watched_page(browser, height=1000) as page:
        page.goto(url, timeout=30_000)
        page.locator(".run-select").select_option("full")
        page.locator('.primary[data-kind="straggler"]').wait_for(timeout=30_000)
        wait_for_charts(page, len(FIGURE_NAMES))
        page.wait_for_timeout(500)
        page.screenshot(path=str(screenshot), full_page=True)


@pytest.mark.alone
@pytest.mark.cluster
def test_tab_on_a_sample_job_run(tmp_path):
    """A real ps_ctl run with a slow worker: the tab's top card names the straggler."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    from tfdiag.sample_jobs.cli import run_sample

    logdir = tmp_path / "logs"
    # The job takes about 8 s on 2 cores; the timeout only bounds a hung cluster.
    result = run_sample("ps_ctl", ps=1, workers=2, steps=200, logdir=logdir / "ps_ctl", inject=["slow-worker=1:40"],
                        timeout_s=90)
    if not result.ok:
        tails = {task: path.read_text(errors="replace")[-600:] for task, path in result.task_logs.items() if path.exists()}
        pytest.fail(f"the sample job failed ({result.returncode}); task log tails: {tails}")
    with tensorboard(logdir, tmp_path / "tb.log") as (process, base):
        wait_until_up(process, base, tmp_path / "tb.log")
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                with watched_page(browser) as page:
                    page.goto(base + "/#tfdiag", timeout=30_000)
                    frame = tab_frame(page)
                    primary = frame.locator(".primary").first
                    primary.wait_for(timeout=30_000)
                    assert primary.get_attribute("data-kind") == "straggler"
                    assert "worker:1" in primary.inner_text()
                    frame.locator('.chart[data-figure="step_time"][data-state="drawn"]').wait_for(timeout=30_000)
                    page.screenshot(path=str(tmp_path / "tab-sample-job.png"), full_page=True)
            finally:
                browser.close()
    assert (tmp_path / "tab-sample-job.png").stat().st_size > 10_000
