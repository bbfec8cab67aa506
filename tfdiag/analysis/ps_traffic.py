"""Parameter-server traffic model inputs, measured on the run: bytes, latency, bandwidth per ps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import ps_communication_ns


@dataclass(frozen=True)
class PsTraffic:
    """Per-ps inputs of ``whatif.ps_communication_ns``, medians over the workers' links."""

    bytes_per_ps: dict[str, float]  # variable bytes held: read and updated every step
    rtt_ns: dict[str, float]  # worker → ps round trip, median over workers of each link's p50
    bandwidth_bps: dict[str, float]  # worker → ps bytes per second
    workers: int  # workers sharing each ps

    def communication_ns(self, bytes_per_ps: dict[str, float] | None = None, rtt_ns: dict[str, float] | None = None) -> float:
        """Per-step communication time, optionally with other bytes or latencies (what-if)."""
        return ps_communication_ns(
            bytes_per_ps or self.bytes_per_ps, rtt_ns or self.rtt_ns, self.bandwidth_bps, self.workers
        )


def ps_traffic(measured: Measurements) -> PsTraffic | None:
    """The run's ps traffic inputs, or None when placement or bandwidth was not captured."""
    if measured.ps_load.empty:
        return None
    ps_tasks = list(measured.ps_load["task"])
    links = measured.links[measured.links["src"].str.startswith("worker:") & measured.links["dst"].isin(ps_tasks)]
    rtt = links.groupby("dst")["rtt_p50_ns"].median().to_dict()
    bandwidth = links.dropna(subset=["bandwidth_bps"]).groupby("dst")["bandwidth_bps"].median().to_dict()
    bandwidth.update(_transfer_bandwidth(measured, ps_tasks))
    if not bandwidth:
        return None
    fallback = float(np.median(list(bandwidth.values())))
    return PsTraffic(
        bytes_per_ps={row.task: float(row.bytes) for row in measured.ps_load.itertuples()},
        rtt_ns={ps: float(rtt.get(ps, 0.0)) for ps in ps_tasks},
        bandwidth_bps={ps: float(bandwidth.get(ps, fallback)) for ps in ps_tasks},
        workers=max(len(measured.workers), 1),
    )


def _transfer_bandwidth(measured: Measurements, ps_tasks: list[str]) -> dict[str, float]:
    """Bytes per second of traced RecvTensor transfers from each ps (TF1 RunMetadata)."""
    transfer = measured.run.frame("transfer")
    if transfer.empty:
        return {}
    from_ps = transfer[transfer["src"].astype(str).isin(ps_tasks) & (transfer["duration_ns"] > 0)]
    totals = from_ps.groupby("src", observed=True)[["bytes", "duration_ns"]].sum()
    return {str(ps): float(row.bytes) / (row.duration_ns / 1e9) for ps, row in totals.iterrows() if row.bytes > 0}
