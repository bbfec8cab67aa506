"""cgroup throttled time (src/tfdiag/collectors/cgroup_throttling.py), on a real CPU quota where one can be set."""

from __future__ import annotations

import math
import sys

import pytest

from tfdiag.collectors import cgroup_throttling


def test_a_sampler_held_to_a_cgroups_cpu_quota_counts_the_kernels_throttled_time():
    # A real CFS quota (benchmarks/harness/faults.py: 5 ms of CPU in every 50 ms) on a child that
    # spins while its sampler runs: the kernel throttles it most of each period, and the
    # samples after the move count that time.
    import json
    import subprocess

    from benchmarks.harness import faults

    child = subprocess.Popen([sys.executable, "-m", "tests.collectors.stopped_sampler", "6", "spin"],
                             stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        quota = faults.cgroup_quota(child.pid, on_ms=5, off_ms=45)
    except OSError as error:
        child.kill()
        child.wait()
        pytest.skip(f"no writable cgroup with the cpu controller here: {error}")
    with quota:
        assert cgroup_throttling.cgroup_cpu_stat(child.pid) == str(quota.cgroup / "cpu.stat")
        output = child.communicate(timeout=60)[0]
    throttled_ms = [json.loads(line)["throttled_ms"] for line in output.splitlines()]
    counted = [value for value in throttled_ms if not math.isnan(value)]
    assert len(counted) >= 2
    assert sum(counted) >= 0.5 * 500 * (len(counted) - 1)


def test_a_move_into_a_cgroup_made_since_the_last_reading_counts_its_throttling_at_once():
    # A quota made for a running process (as cgclassify or the trials' harness do) throttles it
    # from the move: the first reading after it counts that, where one reading every 4 s (a
    # coordinator's of its workers) would otherwise miss a quota of a few seconds. A move into a
    # cgroup made before the last reading counts what that reading cannot tell apart: NaN.
    import subprocess
    import time

    from benchmarks.harness import faults

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        try:
            older = faults.cgroup_quota(sleeper.pid, on_ms=5, off_ms=45)
        except OSError as error:
            pytest.skip(f"no writable cgroup with the cpu controller here: {error}")
        with older:
            reading = cgroup_throttling.ThrottledTime(spinner.pid)
            (older.cgroup / "cgroup.procs").write_text(str(spinner.pid))  # a cgroup older than the reading
            time.sleep(0.5)
            assert math.isnan(reading.take())
        with faults.cgroup_quota(spinner.pid, on_ms=5, off_ms=45):  # made after that reading
            time.sleep(1.0)
            assert reading.take() >= 0.5 * 900  # held about 90 % of the second
    finally:
        for process in (spinner, sleeper):
            process.kill()
            process.wait()


def test_a_malformed_proc_cgroup_line_is_skipped(monkeypatch, tmp_path):
    proc, root = tmp_path / "cgroup", tmp_path / "sys-fs-cgroup"
    stat = root / "cpu,cpuacct" / "job1" / "cpu.stat"
    stat.parent.mkdir(parents=True)
    stat.write_text("nr_throttled 0\nthrottled_time 0\n")
    monkeypatch.setattr(cgroup_throttling, "CGROUP_ROOT", str(root))
    real_open = open

    def open_proc_as(path, *args, **kwargs):
        return real_open(proc if path == "/proc/7/cgroup" else path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", open_proc_as)
    proc.write_text("garbage without colons\n1:cpu\n")
    assert cgroup_throttling.cgroup_cpu_stat(7) is None
    proc.write_text("garbage without colons\n4:cpu,cpuacct:/job1\n1:cpu\n")  # the well-formed line still counts
    assert cgroup_throttling.cgroup_cpu_stat(7) == str(stat)


def test_throttled_time_is_read_from_cgroup_v1_and_v2(tmp_path):
    v2, v1, none = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    v2.write_text("usage_usec 100\nnr_throttled 3\nthrottled_usec 2500\n")
    v1.write_text("nr_periods 10\nnr_throttled 3\nthrottled_time 2500000\n")
    none.write_text("usage_usec 100\n")
    assert cgroup_throttling.throttled_usec(str(v2)) == cgroup_throttling.throttled_usec(str(v1)) == 2500.0
    assert math.isnan(cgroup_throttling.throttled_usec(str(none)))
    assert math.isnan(cgroup_throttling.throttled_usec(str(tmp_path / "missing")))
