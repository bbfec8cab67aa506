"""``slow_link``: a slow path to a ps delays every source; a busy host delays only some probes."""

from tfdiag.analysis import analyze


def _probed(builder, rtt_ms):
    """A PS run with probes from each source in ``rtt_ms`` (source -> (to ps:0, to ps:1))."""
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=25, idle_ms=2, closures=True)
    for src, (ps0, ps1) in rtt_ms.items():
        run.rpc(src, "ps:0", ps0, count=3).rpc(src, "ps:1", ps1, count=3)
    return run


def test_one_sources_delayed_probes_on_a_busy_host_are_no_slow_link(builder):
    # ps_fit's clean run on two saturated cores: worker:1's probes to ps:1 waited for a core.
    run = _probed(builder, {"chief:0": (1.2, 3.8), "worker:0": (0.9, 2.1), "worker:1": (1.0, 11.0)})
    assert "slow_link" not in [f.kind for f in analyze(run.write()).findings]


def test_a_slow_path_to_a_ps_seen_from_every_source_is_slow_link(builder):
    run = _probed(builder, {"chief:0": (1.5, 15.0), "worker:0": (2.7, 15.3), "worker:1": (1.2, 14.2)})
    finding = next(f for f in analyze(run.write()).findings if f.kind == "slow_link")
    assert finding.tasks == ("ps:1",)
    assert finding.evidence["rtt_ms_min"] == {"chief:0->ps:1": 15.0, "worker:0->ps:1": 15.3, "worker:1->ps:1": 14.2}
