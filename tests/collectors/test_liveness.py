"""``LivenessProbe`` against real TensorFlow servers: answered, frozen, gone; and a TF1 job
whose ps froze, named while the job hangs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.load import load_run
from tfdiag.collectors import writers
from tfdiag.collectors.liveness import SLOW_AFTER, LivenessProbe
from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster

PS_SERVER = """
import sys, tensorflow as tf
server = tf.distribute.Server(tf.train.ClusterSpec({"ps": [sys.argv[1]]}), job_name="ps", task_index=0)
print("up", flush=True)
server.join()
"""


def _free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def _statuses(logdir: Path) -> list[str]:
    return list(load_run(logdir).frame("liveness")["status"])


@pytest.mark.cluster
def test_a_servers_checks_read_answered_then_frozen_then_gone(tmp_path):
    address = _free_address()
    server = subprocess.Popen([sys.executable, "-c", PS_SERVER, address], stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.DEVNULL)
    writer = writers.acquire(tmp_path, "worker:0")
    probe = None
    try:
        assert server.stdout.readline().strip() == "up"
        probe = LivenessProbe(writer, {"ps:0": address}, interval_s=0.2, timeout_s=1.0).start()
        for fault, status in ((None, "OK"), (signal.SIGSTOP, "DEADLINE_EXCEEDED"), (signal.SIGKILL, "UNAVAILABLE")):
            if fault is not None:
                os.kill(server.pid, fault)
            checks = probe.checks
            _wait_for(lambda: probe.checks >= checks + 2, 30)
            writer.flush()
            assert _statuses(tmp_path)[-1] == status
    finally:
        if probe is not None:
            probe.stop()
        writers.release(writer)
        server.kill()
        server.wait()
    assert set(load_run(tmp_path).frame("liveness")["target"]) == {"ps:0"}


@contextlib.contextmanager
def _servers_behind_delays(tmp_path: Path, count: int, delay_ms: float = 25.0):
    """``count`` ps servers, each behind a delaying proxy (``delay_ms`` each way) that delays
    while its switch file exists; yields ``[(proxy address, switch file)]``. The delay is well
    past ``SLOW_RATIO`` times a check's usual answer on a 2-core VM (4-14 ms through the proxy,
    idle half a second between checks): 5 ms each way read as 1.5-2x there, no onset."""
    processes, delayed = [], []
    try:
        for index in range(count):
            address, proxy_port = _free_address(), _free_address().rsplit(":", 1)[1]
            switch = tmp_path / f"delay-{index}-on"
            server = subprocess.Popen([sys.executable, "-c", PS_SERVER, address], stdout=subprocess.PIPE, text=True,
                                      stderr=subprocess.DEVNULL)
            processes.append(server)
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "tfdiag.sample_jobs.proxy", "--listen", proxy_port, "--target",
                 address.rsplit(":", 1)[1], "--delay-ms", str(delay_ms)], stderr=subprocess.DEVNULL,
                env={**os.environ, "TFDIAG_PROXY_DELAY_SWITCH": str(switch)}))
            assert server.stdout.readline().strip() == "up"
            delayed.append((f"127.0.0.1:{proxy_port}", switch))
        yield delayed
    finally:
        for process in processes:
            process.kill()
            process.wait()


@contextlib.contextmanager
def _handing_on(tmp_path: Path, targets: dict[str, str]):
    """A running ``LivenessProbe`` of ``targets`` every 0.1 s; yields it and the list of
    ``(task, its slow answers in a row)`` it hands on (0: back at the usual)."""
    writer = writers.acquire(tmp_path, "worker:0")
    probe, handed = LivenessProbe(writer, targets, interval_s=0.1, timeout_s=1.0), []
    probe.on_link_change = lambda task: handed.append((task, probe._answers.slow_in_a_row(task)))
    try:
        yield probe.start(), handed
    finally:
        probe.stop()
        writers.release(writer)


@pytest.mark.cluster
@pytest.mark.alone  # it judges the answers' latency: another test's load reads as a slow link
def test_a_link_that_turns_slow_and_back_is_handed_on_each_time(tmp_path):
    """A server behind the delaying proxy: checks while the delay is off are no onset; once
    it is on (50 ms a round trip), the second slow answer in a row hands the ps on (and a
    spell that lasts hands it on again, every ``SLOW_AGAIN_EVERY`` answers); once it is off,
    the first answer back at the usual hands it on once more (the probe's fresh round trips
    let a live finding clear). A worker's answers are not judged (its busy threads slow
    them): the same server checked as worker:0 is never handed on."""
    with _servers_behind_delays(tmp_path, 1) as [(address, switch)], \
            _handing_on(tmp_path, dict.fromkeys(["ps:0", "worker:0"], address)) as (probe, handed):
        _wait_for(lambda: probe.checks >= 20, 30)
        assert handed == []
        switch.touch()
        _wait_for(lambda: handed, 10, every_s=0.02)
        switch.unlink()  # at once: well before ten slow answers would make the delay the usual
        _wait_for(lambda: handed[-1][1] == 0, 10)
    assert {task for task, _ in handed} == {"ps:0"}
    assert handed[0][1] == SLOW_AFTER and all(in_a_row > 0 for _, in_a_row in handed[:-1])


@pytest.mark.cluster
@pytest.mark.alone  # it judges the answers' latency: another test's load reads as a slow link
def test_a_ps_is_judged_beside_its_peers(tmp_path):
    """Two ps, each behind its own delaying proxy. Both slowed at once (a busy host, as the
    checks see it) is no onset of either, however long it lasts; then only ps:0's link stays
    slow, and ps:0 alone is handed on."""
    # 60 ms each way: the ps checked first in a round answers 3-4x slower than the other on a
    # 2-core VM (15-28 ms against 3-7, its idle path waking), so 25 ms read as ps:1's alone.
    with _servers_behind_delays(tmp_path, 2, delay_ms=60.0) as delayed, \
            _handing_on(tmp_path, {f"ps:{index}": address for index, (address, _) in enumerate(delayed)}) \
            as (probe, handed):
        _wait_for(lambda: probe.checks >= 20, 30)
        for _, switch in delayed:
            switch.touch()
        checks = probe.checks
        _wait_for(lambda: probe.checks >= checks + 30, 30, every_s=0.1)  # 15 rounds: past settling, were they folded
        assert handed == []
        delayed[1][1].unlink()
        _wait_for(lambda: handed, 10, every_s=0.02)
    assert handed[0] == ("ps:0", SLOW_AFTER)


@pytest.mark.cluster
def test_a_frozen_ps_of_a_tf1_job_is_named_while_the_workers_wait_for_it(tmp_path):
    """ps:0 of a TF1 session job is stopped mid-run: within 30 s ``tfdiag analyze`` names it
    first, not answering, and the workers as waiting for it (no collector runs on a ps)."""
    logdir = tmp_path / "run"
    cluster = LocalCluster(JobConfig("tf1_session", str(logdir), ps=1, workers=2, steps=100_000))
    stopped = None
    try:
        cluster.start()
        _wait_for(lambda: _steps(logdir) >= 100, READY_TIMEOUT_S)
        stopped = cluster.tasks["ps:0"].process.pid
        os.kill(stopped, signal.SIGSTOP)
        frozen_at = time.monotonic()
        _wait_for(lambda: _stalled_tasks(logdir)[:1] == ["ps:0"], NAMED_WITHIN_S)
        print(f"ps:0 named {time.monotonic() - frozen_at:.1f} s after it froze")
        [finding] = [f for f in analyze(logdir).findings if f.kind == "stalled"]
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.stop()
    assert set(finding.tasks) == {"ps:0", "worker:0", "worker:1"}
    assert finding.evidence["silent"][0]["verdict"] == "frozen or hung"


READY_TIMEOUT_S = 120.0
NAMED_WITHIN_S = 30.0


def _steps(logdir: Path) -> int:
    try:
        return len(load_run(logdir).frame("step"))
    except Exception:  # noqa: BLE001 - the run is still being created
        return 0


def _stalled_tasks(logdir: Path) -> list[str]:
    return [task for f in analyze(logdir).findings if f.kind == "stalled" for task in f.tasks]


def _wait_for(condition, timeout_s: float, every_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(every_s)
