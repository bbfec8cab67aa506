"""``slow_link``: round trips to one parameter server take much longer than to the others."""

from __future__ import annotations

import numpy as np

from tfdiag.analysis.detectors.evidence import task_list
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.ps_traffic import ps_traffic
from tfdiag.analysis.whatif import PS_ROUND_TRIPS_PER_STEP, predicted_speedup

# A parameter server is behind a slow link when the fastest round trip to it is this many
# times that to the other ps and at least MIN_EXTRA_NS more. The fastest probe is what
# the path itself costs; load on either end only adds to a probe (on the 2-core CI
# machine a clean ps_ctl run has medians of 0.5-8 ms on the same link, and fastest round
# trips of 0.5-1.8 ms on every link), so 3x and 2 ms stay clear of that noise.
SLOW_RATIO = 3.0
# Probes per link before a link is judged: each link is probed every few seconds, and one
# or two round trips of a short run on a loaded machine say more about that moment than
# the link.
MIN_SAMPLES = 3
MIN_EXTRA_NS = 2_000_000
CRITICAL_EXTRA_NS = 20_000_000


def detect(measured: Measurements) -> list[Finding]:
    links = measured.links
    if links.empty:
        return []
    # Judge each parameter server by the median over its sources, against the other ps.
    # Probes to workers are answered by the worker's own busy threads, so their round
    # trips measure its load as much as the network; they are left to `straggler`.
    to_ps = links[links["dst"].str.startswith("ps:") & (links["samples"] >= MIN_SAMPLES)]
    per_dst = to_ps.groupby("dst")["rtt_min_ns"].median()
    if len(per_dst) < 2:
        return []
    findings = []
    for dst, rtt in per_dst.items():
        peers = float(np.median(per_dst.drop(dst)))
        extra = rtt - peers
        if rtt < SLOW_RATIO * max(peers, 1.0) or extra < MIN_EXTRA_NS:
            continue
        findings.append(_finding(measured, str(dst), float(rtt), peers))
    return findings


def _finding(measured: Measurements, dst: str, rtt: float, peers: float) -> Finding:
    extra = rtt - peers
    sources = measured.links[measured.links["dst"] == dst]
    speedup = None
    traffic = ps_traffic(measured)
    if dst.startswith("ps:") and not measured.workers.empty:
        if traffic is not None:
            fixed = dict(traffic.rtt_ns, **{dst: max(traffic.rtt_ns.get(dst, 0.0) - extra, 0.0)})
            saving = traffic.communication_ns() - traffic.communication_ns(rtt_ns=fixed)
        else:
            saving = PS_ROUND_TRIPS_PER_STEP * extra
        saving = min(max(saving, 0.0), float(measured.workers["mean_ns"].min()))
        speedup = predicted_speedup(measured.workers, measured.workers["mean_ns"] - saving, measured.synchronous)
    return Finding(
        kind="slow_link",
        severity=Severity.CRITICAL if extra >= CRITICAL_EXTRA_NS else Severity.WARNING,
        title=f"Round trips to {dst} take at least {rtt / 1e6:.1f} ms, {extra / 1e6:.1f} ms more than to its peers",
        summary=(
            f"The RPC probe from {task_list(sorted(sources['src']))} measures round trips of at least "
            f"{rtt / 1e6:.1f} ms to {dst} against {peers / 1e6:.1f} ms to the other parameter servers: the network "
            f"path to {dst} (its host, NIC, a proxy or a congested switch port) adds latency to every step."
        ),
        tasks=(dst,),
        evidence={
            "rtt_ms_min": {f"{row.src}->{row.dst}": round(row.rtt_min_ns / 1e6, 2) for row in sources.itertuples()},
            "rtt_ms_p50": {f"{row.src}->{row.dst}": round(row.rtt_p50_ns / 1e6, 2) for row in sources.itertuples()},
            "rtt_ms_p99": {f"{row.src}->{row.dst}": round(row.rtt_p99_ns / 1e6, 2) for row in sources.itertuples()},
            "peer_rtt_ms_min": round(peers / 1e6, 2),
        },
        recommendation=Recommendation(
            action=f"Fix the network path to {dst}, or move {dst} to a host with a fast link to the workers.",
            change=f"Place {dst} on a host in the workers' rack or fix its link; check with `ping`/`iperf` from a worker host.",
            predicted_speedup=speedup,
        ),
    )
