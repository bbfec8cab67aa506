"""RPC probe, system sampler and placement under a real ParameterServerStrategy cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdiag.analysis.links import link_table
from tfdiag.analysis.load import load_run

from .chief import run_as_chief

pytestmark = [pytest.mark.cluster, pytest.mark.alone]

JOB = Path(__file__).with_name("probe_job.py")
SECONDS = 4


@pytest.fixture(scope="module")
def probed_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("probe")
    outcome, stderr = run_as_chief(JOB, logdir, SECONDS, ps=2, workers=2)
    assert "retracing" not in stderr
    return outcome, load_run(logdir)


def test_probes_cover_every_link_and_offsets_stay_within_uncertainty(probed_run):
    outcome, run = probed_run
    # live: on by default; liveness: the workers and ps run no collector of their own
    assert outcome["collectors"] == ["faults", "last_words", "live", "liveness", "rpc", "stacks", "system"]
    checks = run.frame("liveness")
    assert set(checks["target"]) == {"worker:0", "worker:1", "ps:0", "ps:1"} and (checks["status"] == "OK").all()
    links = link_table(run.frame("rpc")).set_index(["src", "dst"])
    for dst in ("worker:0", "worker:1", "ps:0", "ps:1"):
        assert links.loc[("chief:0", dst), "samples"] >= 5
    for worker in ("worker:0", "worker:1"):
        for ps in ("ps:0", "ps:1"):
            assert links.loc[(worker, ps), "samples"] >= 5
    # One host, one clock: every measured offset lies within the probe's own bound.
    assert (links["offset_ns"].abs() <= links["offset_uncertainty_ns"]).all(), links
    assert (links["rtt_p50_ns"] < 50e6).all(), links
    rpc = run.frame("rpc")
    assert (rpc["recv_ns"] >= rpc["send_ns"]).all()
    assert set(rpc["payload_bytes"]) == {0, 1 << 20}


def test_probe_closures_leave_no_step_or_closure_records(probed_run):
    outcome, run = probed_run
    # The step frame is a sample past 1,024 rows a worker: count the exact counters.
    assert len(run.frame("closure")) == outcome["steps"] == int(run.step_counters["rows"].sum())


def test_placement_system_and_no_gpu_note(probed_run):
    _, run = probed_run
    placement = run.frame("placement").astype({"variable": str, "task": str})
    assert sorted(zip(placement["variable"], placement["task"], placement["bytes"])) == [
        ("bias:0", "ps:1", 128), ("kernel:0", "ps:0", 8192)]
    system = run.frame("system")
    assert len(system) >= SECONDS * 3 and (system["task"] == "chief:0").all()
    assert system["cpu_pct"].dropna().between(0, 100).all()
    notes = run.frame("note")["message"].astype(str)
    assert notes.str.contains("no GPU metrics").sum() == 1
    assert run.frame("gpu").empty
