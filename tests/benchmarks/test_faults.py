"""Outside faults on real processes: a CPU quota and a stall never leave a process stopped; a kill ends the family."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import psutil
import pytest

from benchmarks.harness import faults


@pytest.fixture
def family():
    """A process with a child, both spinning, killed at the end."""
    code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'while True: pass']); exec('while True: pass')"
    parent = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    processes = [psutil.Process(parent.pid), *psutil.Process(parent.pid).children()]
    yield processes
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone already: a test killed it
            process.kill()
    parent.wait()


def states(processes):
    return {process.status() for process in processes}


def test_a_cpu_quota_stops_the_family_part_of_the_time_and_ends_running(family):
    seen = set()
    with faults.cpu_quota(family[0].pid, on_ms=20, off_ms=30):
        for _ in range(100):
            seen |= states(family)
            time.sleep(0.007)
    assert psutil.STATUS_STOPPED in seen and seen - {psutil.STATUS_STOPPED}
    time.sleep(0.05)
    assert psutil.STATUS_STOPPED not in states(family)


def test_a_stall_holds_every_process_until_released(family):
    held = faults.stall(family[0].pid)
    time.sleep(0.1)
    assert states(family) == {psutil.STATUS_STOPPED}
    held.release()
    time.sleep(0.05)
    assert psutil.STATUS_STOPPED not in states(family)


def test_a_kill_ends_the_whole_family_even_when_stopped(family):
    faults.stall(family[0].pid)
    faults.kill(family[0].pid)
    assert psutil.wait_procs(family, timeout=10)[1] == []


def cpu_seconds(processes):
    return sum(sum(process.cpu_times()[:2]) for process in processes)


def test_a_cgroup_quota_holds_the_family_to_its_cpu_share_and_leaves_no_cgroup(family):
    try:
        quota = faults.cgroup_quota(family[0].pid, on_ms=5, off_ms=45)
    except OSError as error:
        pytest.skip(f"no writable cgroup with the cpu controller here: {error}")
    with quota:
        assert quota.cgroup.is_dir()
        assert sorted(int(pid) for pid in (quota.cgroup / "cgroup.procs").read_text().split()) == \
            sorted(process.pid for process in family)
        before, start = cpu_seconds(family), time.monotonic()
        time.sleep(1.0)
        share = (cpu_seconds(family) - before) / (time.monotonic() - start)
        # Two spinning processes held to 5 ms of CPU in every 50 ms together (0.1 core: far
        # under what they get even on a loaded 2-core host), and the kernel says it held them.
        assert share < 0.1 * 1.5
        assert quota.throttled_s() > 0
    assert not quota.cgroup.exists()
    assert all("tfdiag-quota" not in open(f"/proc/{process.pid}/cgroup").read() for process in family)


def test_a_quota_of_cores_holds_the_family_to_them_and_counts_its_cpu(family):
    try:
        quota = faults.cgroup_quota.of_cores(family[0].pid, 0.3, period_ms=100)
    except OSError as error:
        pytest.skip(f"no writable cgroup with the cpu controller here: {error}")
    with quota:
        before, start = faults.cpu_seconds(family[0].pid), time.monotonic()
        time.sleep(1.0)
        share = (faults.cpu_seconds(family[0].pid) - before) / (time.monotonic() - start)
        # two spinning processes (up to 2 cores unheld) share 0.3 of a core
        assert 0.3 * 0.5 < share < 0.3 * 1.3
        assert faults.cpu_seconds(family[0].pid) == pytest.approx(cpu_seconds(family), abs=0.05)
    assert not quota.cgroup.exists()


def test_a_quota_needs_positive_times():
    with pytest.raises(ValueError, match="on_ms=0"):
        faults.cpu_quota(1, on_ms=0, off_ms=30)
    with pytest.raises(ValueError, match="cores and period_ms > 0"):
        faults.cgroup_quota.of_cores(1, 0.0)


def test_a_quota_spec_is_worker_on_and_off():
    assert faults.parse_quota("1:20:30") == (1, 20.0, 30.0)
    assert faults.parse_quota(None) is None
    with pytest.raises(ValueError, match="I:ON_MS:OFF_MS.*'1:20'"):
        faults.parse_quota("1:20")
    with pytest.raises(ValueError, match="by='kernel'"):
        faults.worker_quota(1, 20, 30, by="kernel")


def test_slow_ps_is_the_launchers_injection():
    assert faults.slow_ps(1, 25) == "slow-ps=1:25"
