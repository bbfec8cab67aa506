"""From a real parameter-server job to the diagnosis: the walking skeleton's promise.

`tfdiag sample ps_ctl` on a local cluster (chief, 2 ps, 2 workers as processes), then
`tfdiag analyze --format json` names the planted bottleneck, and stays quiet without one.
"""

from __future__ import annotations

import io
import json

import pytest

from tfdiag.cli import main
from tfdiag.sample_jobs import run_sample

pytestmark = [pytest.mark.cluster, pytest.mark.alone]

STEPS = 200


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """``analysed(*injections)`` runs ps_ctl once per distinct injection and returns the JSON report."""
    reports = {}

    def run(*inject: str) -> dict:
        if inject not in reports:
            logdir = tmp_path_factory.mktemp("ps_ctl")
            stderr = io.StringIO()
            result = run_sample("ps_ctl", ps=2, workers=2, steps=STEPS, logdir=logdir, inject=inject,
                                timeout_s=240, stderr=stderr)
            assert result.ok, stderr.getvalue()
            reports[inject] = logdir
        return reports[inject]

    return run


def analyze_json(run_dir, capsys) -> dict:
    capsys.readouterr()
    code = main(["analyze", str(run_dir), "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_slow_worker_is_named_the_straggler(analysed, capsys):
    report = analyze_json(analysed("slow-worker=1:40"), capsys)
    assert report["summary"]["primary_bottleneck"] == "straggler"
    [straggler] = [f for f in report["findings"] if f["kind"] == "straggler"]
    assert straggler["tasks"] == ["worker:1"]
    # All five tasks share this host's cores: the advisor holds the gain to the idle CPU
    # (1.15-1.5 here, by the load), below the model's own.
    assert straggler["recommendation"]["predicted_speedup"] > 1.05
    evidence = straggler["evidence"]
    limit = evidence.get("host_cpu_limit")
    unlimited = limit["unlimited_speedup"] if limit else straggler["recommendation"]["predicted_speedup"]
    # The model's own gain (1.19-1.5 here, by how long the clean step is), and no more than
    # both workers stepping at worker:0's period would give.
    periods = evidence["step_period_ms"]
    at_typical_period = 2 * periods["worker:1"] / (periods["worker:0"] + periods["worker:1"])
    assert 1.1 < unlimited <= at_typical_period * 1.02
    assert report["run"]["skipped_records"] == 0
    assert {w["task"] for w in report["workers"]} == {"worker:0", "worker:1"}


def test_input_delay_is_named_input_bound(analysed, capsys):
    report = analyze_json(analysed("input-delay=20"), capsys)
    assert report["summary"]["primary_bottleneck"] == "input_bound"
    [finding] = [f for f in report["findings"] if f["kind"] == "input_bound"]
    assert set(finding["tasks"]) == {"worker:0", "worker:1"}
    assert all(w["input_wait_frac"] > 0.5 for w in report["workers"])


def test_clean_run_reports_neither(analysed, capsys):
    report = analyze_json(analysed(), capsys)
    assert "straggler" not in {f["kind"] for f in report["findings"]}
    # ps_ctl's in-graph fetch of a cached batch takes 12-20 % of its step whether or not the
    # pipeline prefetches (six 400-step runs, three with --tune prefetch=on: the same shares
    # and throughput), so input_bound's 20 % bar lies inside this job's own spread: a run
    # can read 20.1 % and warn (predicting 1.18x that prefetching does not give). Not critical.
    assert not [f for f in report["findings"] if f["kind"] == "input_bound" and f["severity"] == "critical"]
    assert report["summary"]["steps"] >= STEPS


def test_slow_ps_link_is_measured_and_named(analysed, capsys):
    """A 25 ms proxy in front of ps:1, read by the RPC probe from each worker (issue #4's check)."""
    report = analyze_json(analysed("slow-ps=1:25"), capsys)
    links = {(link["src"], link["dst"]): link for link in report["rpc"]}
    for worker in ("worker:0", "worker:1"):
        slow, fast = links[worker, "ps:1"], links[worker, "ps:0"]
        # The proxy (a Python process sharing two cores with five TensorFlow tasks) adds its
        # 25 ms once per round trip, plus its own scheduling delay under load (41 ms seen in
        # CI); 50 ms more than the fast link would be the delay counted twice. On a slow,
        # loaded host every link waits for the cores too (the fast one read 15 ms, the slow
        # one 34), and the proxy's sleep hides part of that wait: the difference keeps at
        # least half the delay.
        slow_ms, fast_ms = slow["rtt_ms"]["p50"], fast["rtt_ms"]["p50"]
        assert 25 <= slow_ms < fast_ms + 50
        assert slow_ms - fast_ms >= 25 / 2
        # A 200-step run lasts a few seconds: the probe's first rounds must all land in it.
        assert slow["samples"] >= 3 and fast["samples"] >= 3
        # One host, one clock: an offset within the probe's own uncertainty.
        assert abs(fast["clock_offset_ms"]) <= fast["clock_offset_uncertainty_ms"]
    [finding] = [f for f in report["findings"] if f["kind"] == "slow_link"]
    assert finding["tasks"] == ["ps:1"]
