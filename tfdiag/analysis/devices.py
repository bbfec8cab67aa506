"""GPU and host utilisation per device, from the system sampler's records."""

from __future__ import annotations

import pandas as pd


def gpu_table(gpu: pd.DataFrame) -> pd.DataFrame:
    """One row per (host, index): utilisation mean and median, memory use, power.

    Columns: ``host``, ``index``, ``samples``, ``util_mean``, ``util_p50``,
    ``mem_used_frac`` (mean), ``mem_used_frac_peak``, ``power_w_mean``.
    """
    columns = ["host", "index", "samples", "util_mean", "util_p50", "mem_used_frac", "mem_used_frac_peak", "power_w_mean"]
    if gpu.empty:
        return pd.DataFrame(columns=columns)
    frame = gpu.assign(mem_frac=gpu["mem_used_bytes"] / gpu["mem_total_bytes"].where(gpu["mem_total_bytes"] > 0))
    grouped = frame.groupby(["host", "index"], observed=True)
    table = pd.DataFrame({
        "samples": grouped.size(),
        "util_mean": grouped["util_pct"].mean(),
        "util_p50": grouped["util_pct"].median(),
        "mem_used_frac": grouped["mem_frac"].mean(),
        "mem_used_frac_peak": grouped["mem_frac"].max(),
        "power_w_mean": grouped["power_w"].mean(),
    }).reset_index()
    table["host"] = table["host"].astype(str)
    return table[columns]


def host_table(system: pd.DataFrame) -> pd.DataFrame:
    """One row per (host, task) sampler: CPU and memory mean and peak, network and disk rates.

    Columns: ``host``, ``task``, ``cpu_mean``, ``cpu_peak``, ``mem_used_frac_peak``,
    ``net_bytes_per_s`` (sent + received), ``disk_bytes_per_s`` (read + written).
    """
    columns = ["host", "task", "cpu_mean", "cpu_peak", "mem_used_frac_peak", "net_bytes_per_s", "disk_bytes_per_s"]
    if system.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (host, task), samples in system.sort_values("time_ns").groupby(["host", "task"], observed=True):
        span_s = (samples["time_ns"].iloc[-1] - samples["time_ns"].iloc[0]) / 1e9

        def rate(*counters: str) -> float:
            moved = sum(float(samples[c].iloc[-1] - samples[c].iloc[0]) for c in counters)
            return moved / span_s if span_s > 0 else float("nan")

        rows.append({
            "host": str(host), "task": str(task),
            "cpu_mean": float(samples["cpu_pct"].mean()), "cpu_peak": float(samples["cpu_pct"].max()),
            "mem_used_frac_peak": float(samples["mem_used_frac"].max()),
            "net_bytes_per_s": rate("net_sent_bytes", "net_recv_bytes"),
            "disk_bytes_per_s": rate("disk_read_bytes", "disk_write_bytes"),
        })
    return pd.DataFrame(rows, columns=columns)
