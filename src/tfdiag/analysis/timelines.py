"""Time series for charts and traces, on the reference clock (the JSON report leaves them out)."""

from __future__ import annotations

import pandas as pd

from tfdiag.analysis.align import to_reference_clock
from tfdiag.analysis.links import latency_probes
from tfdiag.analysis.live import live_finding_windows
from tfdiag.analysis.measurements import Measurements


def build_timelines(measured: Measurements) -> dict[str, pd.DataFrame]:
    """``rpc`` (src, dst, time_ns, rtt_ns), ``gpu`` and ``system`` samples, ``closures`` and
    ``allreduce`` records, and ``live_findings`` (when each finding announced during the run
    began and ended), each with times moved onto the reference clock where the measuring
    task is known."""
    run, offsets = measured.run, measured.offsets
    rpc = latency_probes(run.frame("rpc"))
    system = run.frame("system")
    closures = run.frame("closure")
    allreduce = run.frame("allreduce")
    return {
        "rpc": pd.DataFrame({
            "src": rpc["src"].astype(str), "dst": rpc["dst"].astype(str),
            "time_ns": to_reference_clock(rpc["send_ns"], rpc["src"], offsets),
            "rtt_ns": rpc["recv_ns"] - rpc["send_ns"],
        }),
        "gpu": run.frame("gpu").drop(columns=["source"]),
        "system": system.assign(time_ns=to_reference_clock(system["time_ns"], system["task"], offsets)).drop(
            columns=["source"]),
        "closures": closures.drop(columns=["source"]),
        "allreduce": allreduce.assign(time_ns=to_reference_clock(allreduce["time_ns"], allreduce["task"], offsets)).drop(
            columns=["source"]),
        "live_findings": live_finding_windows(run.frame("live_finding"), offsets),
    }
