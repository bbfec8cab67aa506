"""Live findings in a training process: the thread, its records, its cost, and a real job."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from benchmarks.harness.faults import cpu_quota
from benchmarks.live_latency import wait_for
from tfdiag.collectors import live_thread, writers
from tfdiag.events import task_name
from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster
from tfdiag.store import log_dir, read_task_file

from tests.runs import RunBuilder


def records(run_dir, kind, task="chief:0"):
    result = read_task_file(log_dir(run_dir) / f"{task.replace(':', '-')}.tfdiag")
    batches = result.batches.get(kind) or []
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def write_straggling_steps(run_dir, seconds=20.0):
    """The last ``seconds`` of two workers' steps, worker:1 three times slower, ending now."""
    now = time.time_ns()
    run = RunBuilder(run_dir, workers=2, ps=0)
    for task, step_ms in (("worker:0", 20), ("worker:1", 60)):
        run.steps_until(task, now, step_ms, start_ns=now - int(seconds * 1e9))
    run.write(by_task=True)


def test_importing_the_live_thread_module_loads_no_analysis():
    code = ("import sys, tfdiag.collectors.live_thread; "
            "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith('tfdiag.analysis')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("option, env, expected", [
    (None, None, live_thread.DEFAULT_INTERVAL_S), (None, "on", live_thread.DEFAULT_INTERVAL_S), (None, "2.5", 2.5),
    (None, "off", None), (None, "0", None), (None, "soon", None), (3, "off", 3.0), (0, "5", None),
])
def test_the_interval_comes_from_the_argument_then_the_environment(monkeypatch, option, env, expected):
    if env is None:
        monkeypatch.delenv(live_thread.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(live_thread.ENV_VAR, env)
    assert live_thread.interval_from(option) == expected


@pytest.mark.alone
def test_the_thread_announces_a_straggler_records_it_and_declares_its_cost(tmp_path, capsys, monkeypatch):
    """The announcement is one plain line on stderr even under a root logging set-up (which
    would prefix it with a level and a logger name)."""
    monkeypatch.setenv(live_thread.SHARE_ENV_VAR, "1")  # every 0.3 s, whatever an evaluation costs
    write_straggling_steps(tmp_path)
    writer = writers.acquire(tmp_path, "chief:0")
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    root.addHandler(handler)
    try:
        thread = live_thread.start(tmp_path, writer, 0.3)
        deadline = time.monotonic() + 60
        while thread.transitions == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        thread.stop()
    finally:
        root.removeHandler(handler)
    writers.release(writer)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "worker:1 straggler since" in line]
    assert all(line.startswith("tfdiag: ") for line in lines), lines
    assert len(lines) == 1 and re.search(r"worker:1 is (2\.[5-9]|3\.\d)x slower per step", lines[0])
    (began,) = records(tmp_path, "live_finding")
    assert began["state"] == "began" and began["kind"] == "straggler" and began["tasks"] == "worker:1"
    assert began["message"] == lines[0] and began["onset_ns"] <= began["time_ns"]
    cost = thread.cost()
    assert cost["evaluations"] >= 1 and cost["cpu_ms_per_evaluation"] > 0 and cost["verdicts"] >= 1
    (note,) = [n for n in records(tmp_path, "note") if n["message"].startswith("live findings:")]
    assert f"{cost['evaluations']} evaluations every 0.3 s or more" in note["message"]


@pytest.mark.alone
def test_a_verdict_announces_a_straggler_whatever_the_credit(tmp_path, capsys, monkeypatch):
    """At the default share with no credit ahead, a straggler is announced at the first screens
    (a verdict on the screen's records), not once the share has paid for an analysis."""
    monkeypatch.delenv(live_thread.SHARE_ENV_VAR, raising=False)
    monkeypatch.setattr(live_thread, "BURST_CPU_S", 0.0)
    write_straggling_steps(tmp_path)
    writer = writers.acquire(tmp_path, "chief:0")
    thread = live_thread.start(tmp_path, writer, 0.5)
    began = time.monotonic()
    while thread.transitions == 0 and time.monotonic() < began + 30:
        time.sleep(0.1)
    thread.stop()
    writers.release(writer)
    assert thread.transitions == 1 and thread.monitor.verdicts >= 1 and thread.monitor.confirmations == 0
    assert "worker:1 straggler since" in capsys.readouterr().err
    assert thread.cost()["verdicts"] == thread.monitor.verdicts


def test_the_pause_between_screens_is_capped(tmp_path):
    """Screens that alone would take the whole share stretch the pause to MAX_PAUSE_S, no
    further (an interval asked for longer stays)."""
    writer = writers.acquire(tmp_path, "chief:0")
    try:
        for interval_s, expected in ((2.0, live_thread.MAX_PAUSE_S), (10.0, 10.0)):
            thread = live_thread.LiveThread(tmp_path, writer, interval_s)
            thread.core_share, thread.ticks, thread.cpu_ns = 0.003, 10, int(10 * 50e6)  # 50-ms screens
            assert thread.pause_s() == expected
            thread.cpu_ns = int(10 * 1e6)  # 1-ms screens: every interval_s
            assert thread.pause_s() == interval_s
    finally:
        writers.release(writer)


@pytest.mark.alone
def test_ticks_are_spaced_to_stay_within_the_live_share_of_a_core(tmp_path, monkeypatch):
    """Asked for every 0.01 s, ticks come only as often as a 1 % share of a core (and a
    burst of 5 ms) pays for: over the thread's life its screens' CPU stays within the share
    plus the burst, give or take the last tick (the one that goes into debt); the one verdict
    (which announces the straggler) is apart."""
    monkeypatch.setenv(live_thread.SHARE_ENV_VAR, "0.01")
    monkeypatch.setattr(live_thread, "BURST_CPU_S", 0.005)
    write_straggling_steps(tmp_path)
    writer = writers.acquire(tmp_path, "chief:0")
    thread = live_thread.start(tmp_path, writer, 0.01)
    time.sleep(4)
    thread.stop()
    writers.release(writer)
    cost = thread.cost()
    alive_s = thread.cpu_ns / 1e9 / cost["cpu_share"]
    screens_s = (thread.cpu_ns - thread.monitor.verdict_cpu_ns) / 1e9
    assert cost["evaluations"] >= 2 and cost["seconds_apart"] > 3 * 0.01  # stretched...
    assert cost["verdicts"] == 1 and cost["confirmations"] == 0
    last_tick_s = 0.05  # a screen on a loaded host, at most
    assert screens_s <= 0.01 * alive_s + 0.005 + last_tick_s  # ...to the share


@pytest.mark.parametrize("env, expected", [(None, 0.003), ("0.01", 0.01), ("2", 0.003), ("lots", 0.003)])
def test_the_share_comes_from_the_environment_else_the_budget(monkeypatch, env, expected):
    if env is None:
        monkeypatch.delenv(live_thread.SHARE_ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(live_thread.SHARE_ENV_VAR, env)
    assert live_thread.core_share() == expected


@pytest.mark.alone
@pytest.mark.cluster
def test_a_worker_starved_mid_run_is_announced_within_30_s(tmp_path, monkeypatch):
    """ps_ctl with live findings on by default; 12 s after both workers
    stepped, worker 1 gets 40 % of a CPU (SIGSTOP/SIGCONT); the coordinator must log it
    within 30 s."""
    # Live findings on by default (no variable), every 2 s; a 5 % share so that a loaded full
    # `make test` does not space the ticks out (the default share's pacing is
    # test_ticks_are_spaced_to_stay_within_the_live_share_of_a_core's; benchmarks/live_latency.py
    # measures the latency under it).
    monkeypatch.delenv(live_thread.ENV_VAR, raising=False)
    monkeypatch.setenv(live_thread.SHARE_ENV_VAR, "0.05")  # the tasks inherit it
    config = JobConfig("ps_ctl", str(tmp_path / "run"), steps=1_000_000, ps=1, workers=2)
    with open(tmp_path / "launcher.log", "w") as out:
        cluster = LocalCluster(config, stderr=out)
        try:
            cluster.start()
            both = wait_for(lambda: first_steps(config.logdir), timeout_s=90)  # each worker's first step
            assert both, (tmp_path / "launcher.log").read_text()
            time.sleep(max(12 - (time.time_ns() - max(both)) / 1e9, 0))
            onset_ns = time.time_ns()
            with cpu_quota(cluster.tasks[task_name("worker", 1)].process.pid, on_ms=20, off_ms=30):
                announced = wait_for(lambda: records(config.logdir, "live_finding"), timeout_s=35)
        finally:
            cluster.stop()
    assert announced, (tmp_path / "run" / "tasks" / "chief-0.log").read_text()[-3000:]
    (began,) = announced
    assert (began["state"], began["kind"], began["tasks"]) == ("began", "straggler", "worker:1")
    assert began["time_ns"] - onset_ns <= 30e9
    assert began["message"] in (tmp_path / "run" / "tasks" / "chief-0.log").read_text()


def first_steps(run_dir) -> list[int]:
    """When each worker's first step ended, once both workers have stepped; else []."""
    first = {}
    for row in records(run_dir, "step"):
        first.setdefault(row["task"], row["end_ns"])
    return list(first.values()) if len(first) == 2 else []

