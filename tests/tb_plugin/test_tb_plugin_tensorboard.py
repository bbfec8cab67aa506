"""End to end: a real ``tensorboard`` process loads the plugin from its entry point, and
headless Chromium opens the tab.

Two servers start side by side: the default one (``--load_fast`` auto, the Rust data
server when installed) drives the browser; one with ``--load_fast=false
--path_prefix=/tb`` checks the routes over HTTP. Both bind 127.0.0.1 only.
"""

from __future__ import annotations

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

from tests.tb_plugin.tb_plugin_runs import make_run

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
RUNS = sorted([MARKUP_RUN, "slow", "sweep/even"])


def check_routes(base: str) -> None:
    status, content_type, body = fetch(base + "/data/plugins_listing")
    listing = json.loads(body)
    assert listing["tfdiag"]["enabled"] is True, listing["tfdiag"]
    assert listing["tfdiag"]["tab_name"] == "tfdiag"

    status, content_type, body = fetch(base + "/data/plugin/tfdiag/runs")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == RUNS

    status, content_type, body = fetch(base + "/data/plugin/tfdiag/report?run=slow")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["summary"]["primary_bottleneck"] == "straggler"

    assert fetch(base + "/data/plugin/tfdiag/report?run=%2e%2e%2fslow")[0] == 404
    assert fetch(base + "/data/plugin/tfdiag/report")[0] == 400
    assert fetch(base + "/data/plugin/tfdiag/..%2f..%2fplugin.py")[0] == 404

    status, content_type, body = fetch(base + "/data/plugin/tfdiag/index.js")
    assert (status, content_type) == (200, "text/javascript")


def test_tab_in_tensorboard_and_chromium(tmp_path):
    logdir = tmp_path / "logs"
    make_run(logdir / "slow")
    make_run(logdir / "sweep" / "even", slow_ms=20.0)
    make_run(logdir / MARKUP_RUN, slow_ms=20.0)  # a run name that is also markup
    # A directory with no event files and no run, and an event-less run: discovery walks the logdir.
    (logdir / "other").mkdir()

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
                for url, name in [(base + "/#tfdiag", "tab.png"), (prefixed + "/#tfdiag", "tab-prefixed.png")]:
                    screenshot = open_tab(browser, url, tmp_path / name)
                    assert screenshot.stat().st_size > 10_000
            finally:
                browser.close()


def open_tab(browser, url: str, screenshot: Path) -> Path:
    """Opens the tab, checks the overview and the chart, switches runs, saves a screenshot."""
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1300, "height": 1500})
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    try:
        page.goto(url, timeout=30_000)
        frame = page.frame_locator('iframe[src*="plugin_entry.html?name=tfdiag"]')
        # The first run is the one named like markup: it shows as text, nothing runs.
        frame.locator(".primary.none").wait_for(timeout=30_000)
        assert frame.locator(".run-select option").all_inner_texts() == RUNS
        assert frame.locator(".run-select").input_value() == MARKUP_RUN
        frame.locator(".run-select").select_option("slow")
        primary = frame.locator('.primary[data-kind="straggler"]')
        primary.wait_for(timeout=30_000)
        assert "straggler" in primary.inner_text()
        assert "worker:1" in primary.inner_text()
        assert frame.locator(".finding .badge").first.inner_text().lower() == "critical"
        frame.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=30_000)
        legend_items = frame.locator(".js-plotly-plot .legendtext")
        legend_items.nth(1).wait_for(timeout=10_000)
        legend = legend_items.evaluate_all("items => items.map((item) => item.textContent)")
        assert sorted(legend) == ["worker:0", "worker:1"]

        # Switch runs: the overview follows the selection.
        frame.locator(".run-select").select_option("sweep/even")
        frame.locator(".primary.none").wait_for(timeout=20_000)
        # Switch back and forth quickly: a late response for an earlier choice is dropped.
        frame.locator(".run-select").select_option(MARKUP_RUN)
        frame.locator(".run-select").select_option("slow")
        frame.locator('.primary[data-kind="straggler"]').wait_for(timeout=20_000)
        frame.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=20_000)
        page.wait_for_timeout(1000)
        assert frame.locator('.primary[data-kind="straggler"]').count() == 1
        assert frame.locator(".run-select").input_value() == "slow"
        page.screenshot(path=str(screenshot), full_page=True)
    finally:
        page.close()
    assert not errors, errors
    return screenshot
