"""Per-link latency: one row per (src, dst) pair, from the RPC probe or traced transfers.

``link_table`` summarises the RPC probe (round trips and clock offsets). Where no probe
ran (a TF1 session: ``DiagnosticsHook`` traces ``RecvTensor`` transfers instead),
``link_latency_table`` measures the same links from the traced transfers, so the
latency detectors read one table whichever collector fed it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import grouped_rows, quantile
from tfdiag.analysis.step_stats import histogram_quantiles

# Fraction of a link's probes (the fastest ones) used for its clock-offset estimate: the
# fastest round trips bound the offset tightest (Cristian's method).
FASTEST_FRACTION = 0.25

# Samples a link needs before it is judged: each link is probed every few seconds (or
# traced every hundredth step), and one or two round trips of a short run on a loaded
# machine say more about that moment than about the link.
MIN_LINK_SAMPLES = 3

# The round-trip percentiles of a link's row (``rtt_p50_ns``, ``rtt_p95_ns``, ``rtt_p99_ns``).
PERCENTILES = (0.5, 0.95, 0.99)

COLUMNS = ["src", "dst", "samples", "rtt_min_ns", "rtt_p50_ns", "rtt_p95_ns", "rtt_p99_ns", "offset_ns",
           "offset_uncertainty_ns", "bandwidth_bps"]


def latency_probes(rpc: pd.DataFrame) -> pd.DataFrame:
    """The pure latency probes (no payload) of the ``rpc`` records."""
    if "payload_bytes" not in rpc.columns:
        return rpc
    return rpc[rpc["payload_bytes"].fillna(0) == 0]


def link_table(rpc: pd.DataFrame, histograms: pd.DataFrame | None = None) -> pd.DataFrame:
    """Round-trip statistics and clock offset per (src, dst).

    A link in ``histograms`` (``LoadedRun.probe_histograms``: the probes of a long run,
    whose rows are a sample) takes ``samples``, ``rtt_min_ns`` and the percentiles from
    its histogram of every round trip (percentiles within 1 %), and the bandwidth's two
    medians likewise; the offset still comes from the rows (the fastest are all kept).

    Columns: ``src``, ``dst``, ``samples``, ``rtt_min_ns`` (what the path itself costs: load on
    either end only adds to it), ``rtt_p50_ns``, ``rtt_p95_ns``, ``rtt_p99_ns``,
    ``offset_ns`` (dst clock minus src clock: the median over the fastest quarter of the
    probes), ``offset_uncertainty_ns`` (half the slowest round trip among those: each
    probe's offset is within half its own round trip, Cristian's bound, so their median is
    too), and
    ``bandwidth_bps`` (bytes per second from payload probes, NaN without them: the extra
    time a probe carrying N bytes takes over a plain one).
    """
    if rpc.empty:
        return pd.DataFrame(columns=COLUMNS)
    send, recv = rpc["send_ns"].to_numpy(), rpc["recv_ns"].to_numpy()
    rtt, offset = recv - send, rpc["remote_ns"].to_numpy() - (send + recv) // 2
    payload = (rpc["payload_bytes"].fillna(0).to_numpy() if "payload_bytes" in rpc.columns
               else np.zeros(len(rpc), "int64"))
    src_codes, src_names = pd.factorize(rpc["src"].astype(str), sort=True)
    dst_codes, dst_names = pd.factorize(rpc["dst"].astype(str), sort=True)
    pair = src_codes * len(dst_names) + dst_codes  # (src, dst) pairs in sorted order
    ping_pair = np.where(payload == 0, pair, -1)
    samples = np.bincount(ping_pair[ping_pair >= 0], minlength=len(src_names) * len(dst_names))
    pairs = np.flatnonzero(samples)
    if not len(pairs):
        return pd.DataFrame(columns=COLUMNS)
    loaded_rows = np.flatnonzero(payload > 0)
    bulk_bytes = _medians(payload.astype("float64"), loaded_rows, pair[loaded_rows])
    bulk_rtt = _medians(rtt.astype("float64"), loaded_rows, pair[loaded_rows])
    counted = _histograms(histograms)
    # Each link's timed probes sorted by round trip, once for every link (a 1,024-worker run
    # has 4,096 links): its percentiles are ranks, its fastest quarter a prefix.
    timed = (ping_pair >= 0) & (~np.isnan(rtt) if rtt.dtype.kind == "f" else True)
    order = np.flatnonzero(timed)
    order = order[np.lexsort((rtt[order], ping_pair[order]))]
    ordered_rtt, link_of = rtt[order], ping_pair[order]
    bounds = np.searchsorted(link_of, np.arange(len(samples) + 1))
    fastest = ordered_rtt <= _sorted_quantiles(ordered_rtt, bounds, FASTEST_FRACTION)[link_of]  # a prefix of each link
    fastest_end = bounds[:-1] + np.bincount(link_of[fastest], minlength=len(samples))
    fastest_offset = _medians(offset, order[fastest], link_of[fastest])
    percentiles = np.column_stack([_sorted_quantiles(ordered_rtt, bounds, q) for q in PERCENTILES]).tolist()
    src_names, dst_names = [str(name) for name in src_names], [str(name) for name in dst_names]
    rows = []
    for code in pairs.tolist():
        src, dst = src_names[code // len(dst_names)], dst_names[code % len(dst_names)]
        own_rtt = ordered_rtt[bounds[code]:bounds[code + 1]]
        plain = counted.get((src, dst, False))
        if plain is not None:  # a long run's: every round trip, from the histogram
            link_samples, rtt_min, (p50, p95, p99) = plain[0], plain[1], plain[2]
        else:
            link_samples, rtt_min = int(samples[code]), own_rtt[0] if len(own_rtt) else math.nan
            p50, p95, p99 = percentiles[code]
        quickest = ordered_rtt[bounds[code]:fastest_end[code]]
        bandwidth = math.nan
        if code in bulk_bytes:  # the extra time a probe carrying N bytes takes over a plain one
            loaded = counted.get((src, dst, True))
            bulk_p50 = loaded[2][0] if loaded is not None else bulk_rtt.get(code, math.nan)
            extra_s = (bulk_p50 - p50) / 1e9
            bandwidth = bulk_bytes[code] / extra_s if extra_s > 0 else math.nan
        rows.append((src, dst, link_samples, rtt_min, p50, p95, p99, fastest_offset.get(code, math.nan),
                     quickest[-1] / 2 if len(quickest) else math.nan, bandwidth))
    return pd.DataFrame(rows, columns=COLUMNS)


def _sorted_quantiles(ordered: np.ndarray, bounds: np.ndarray, q: float) -> np.ndarray:
    """Per group of ``ordered`` (values sorted within each group, group i between ``bounds[i]``
    and ``bounds[i + 1]``): ``groups.sorted_quantile`` of it, NaN for an empty group."""
    counts = np.diff(bounds)
    if not len(ordered):
        return np.full(len(counts), np.nan)
    position = q * np.maximum(counts - 1, 0)
    low = np.minimum(bounds[:-1] + position.astype("int64"), len(ordered) - 1)  # an empty group's: NaN below
    high = np.minimum(low + 1, np.maximum(bounds[1:] - 1, low))
    quantiles = ordered[low] + (ordered[high] - ordered[low]) * (position % 1)
    return np.where(counts > 0, quantiles, np.nan)


def _medians(values: np.ndarray, rows: np.ndarray, links: np.ndarray) -> dict[int, float]:
    """Link -> the median of the ``values`` of its ``rows`` (NaN left out), as
    ``groups.median_of`` takes it; a link whose values are all NaN has none."""
    if values.dtype.kind == "f":
        known = ~np.isnan(values[rows])
        rows, links = rows[known], links[known]
    by_link = np.lexsort((values[rows], links))
    rows, links = rows[by_link], links[by_link]
    linked, first, counts = np.unique(links, return_index=True, return_counts=True)
    low, high = rows[first + (counts - 1) // 2], rows[first + counts // 2]
    medians = (values[low].astype("float64") + values[high].astype("float64")) / 2
    return dict(zip(linked.tolist(), medians.tolist()))


def _histograms(histograms: pd.DataFrame | None) -> dict[tuple[str, str, bool], tuple[int, int, list[float]]]:
    """(src, dst, payload) -> (probes, fastest round trip, its ``PERCENTILES``) of
    ``probe_fold``'s histograms, every link's read at once (``step_stats.histogram_quantiles``)."""
    if histograms is None:
        return {}
    bounds = np.r_[0, np.cumsum([len(buckets) for buckets in histograms["buckets"]])]
    percentiles = histogram_quantiles(np.concatenate(list(histograms["buckets"])),
                                      np.concatenate(list(histograms["counts"])), bounds, PERCENTILES).tolist()
    return {(str(src), str(dst), bool(payload)): (int(probes), int(fastest), quantiles)
            for src, dst, payload, probes, fastest, quantiles in zip(
                histograms["src"], histograms["dst"], histograms["payload"], histograms["probes"],
                histograms["rtt_min_ns"], percentiles)}


LATENCY_COLUMNS = ["src", "dst", "samples", "rtt_min_ns", "rtt_p50_ns", "rtt_p99_ns", "source"]


def transfer_link_table(transfer: pd.DataFrame) -> pd.DataFrame:
    """Latency per (src, dst) link from traced ``transfer`` records (TF1 ``RecvTensor``).

    A ``RecvTensor`` is a call the receiving task makes to the task that holds the
    tensor, so a transfer from ``ps:1`` to ``worker:0`` is a round trip on the link
    ``worker:0 -> ps:1``: its duration is the request, the wait for the tensor, and the
    reply with its bytes. ``rtt_min_ns`` (the quickest transfer, usually the smallest
    tensor) is what the path itself costs, as for a probe.

    Before (as logged)::

        src   dst       bytes  duration_ns
        ps:1  worker:0  8192   13000000
        ps:1  worker:0  256    12800000

    After::

        src       dst   samples  rtt_min_ns  rtt_p50_ns  rtt_p99_ns  source
        worker:0  ps:1  2        12800000    12900000    12998000    transfer

    >>> table = transfer_link_table(pd.DataFrame({"src": ["ps:1", "ps:1"], "dst": ["worker:0", "worker:0"],
    ...                                            "bytes": [8192, 256], "duration_ns": [13_000_000, 12_800_000]}))
    >>> table[["src", "dst", "samples", "rtt_min_ns"]].to_dict("records")
    [{'src': 'worker:0', 'dst': 'ps:1', 'samples': 2, 'rtt_min_ns': 12800000.0}]
    """
    if transfer.empty:
        return pd.DataFrame(columns=LATENCY_COLUMNS)
    rtt = transfer["duration_ns"].to_numpy("float64")
    src_codes, src_names = pd.factorize(transfer["dst"].astype(str), sort=True)  # the caller: the task that received the tensor
    dst_codes, dst_names = pd.factorize(transfer["src"].astype(str), sort=True)
    pair = np.where((src_codes >= 0) & (dst_codes >= 0), src_codes * len(dst_names) + dst_codes, -1)
    rows = []
    for code, own in zip(*grouped_rows(pair, len(src_names) * len(dst_names))):  # (src, dst) in sorted order
        own_rtt = rtt[own]
        valid = own_rtt[~np.isnan(own_rtt)]
        rows.append((str(src_names[code // len(dst_names)]), str(dst_names[code % len(dst_names)]), len(own),
                     valid.min() if len(valid) else math.nan, quantile(own_rtt, 0.5), quantile(own_rtt, 0.99),
                     "transfer"))
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS)


def round_trips(rpc: pd.DataFrame, transfer: pd.DataFrame, source: str) -> pd.DataFrame:
    """Every round trip over time, from the probe's plain round trips (``source`` ``rpc``,
    dated by their send) or traced transfers (``transfer``, on the link ``receiver ->
    holder`` as in ``transfer_link_table``), in time order. Columns: ``src``, ``dst``,
    ``time_ns``, ``rtt_ns``.

    >>> probes = pd.DataFrame({"src": ["worker:0"] * 2, "dst": ["ps:0"] * 2, "send_ns": [1000, 0],
    ...                        "recv_ns": [1500, 100]})
    >>> round_trips(probes, pd.DataFrame(), "rpc")[["time_ns", "rtt_ns"]].values.tolist()
    [[0, 100], [1000, 500]]
    """
    columns = ["src", "dst", "time_ns", "rtt_ns"]
    if source == "rpc":
        rows = latency_probes(rpc)
        if rows.empty:
            return pd.DataFrame(columns=columns)
        frame = pd.DataFrame({"src": rows["src"], "dst": rows["dst"], "time_ns": rows["send_ns"],
                              "rtt_ns": rows["recv_ns"] - rows["send_ns"]})
    elif transfer.empty:
        return pd.DataFrame(columns=columns)
    else:
        frame = pd.DataFrame({"src": transfer["dst"], "dst": transfer["src"], "time_ns": transfer["time_ns"],
                              "rtt_ns": transfer["duration_ns"]})
    frame = frame.dropna()
    return frame.assign(src=frame["src"].astype(str), dst=frame["dst"].astype(str)).sort_values(
        "time_ns", kind="stable", ignore_index=True)[columns]


def link_latency_table(probe_links: pd.DataFrame, transfer: pd.DataFrame) -> pd.DataFrame:
    """Latency per (src, dst) link: the RPC probe's when it measured enough, else traced transfers.

    ``probe_links`` is a ``link_table``. The probe is used when at least one of its links
    has ``MIN_LINK_SAMPLES`` round trips; otherwise (no probe ran, or too briefly) the
    ``transfer`` records are (``transfer_link_table``). One source per run: a link is
    compared with its peers, and a probe's round trip carries no tensor while a
    transfer's does. Columns: ``src``, ``dst``, ``samples``, ``rtt_min_ns``,
    ``rtt_p50_ns``, ``rtt_p99_ns``, ``source`` (``rpc`` or ``transfer``).
    """
    if not probe_links.empty and (probe_links["samples"] >= MIN_LINK_SAMPLES).any():
        return probe_links.assign(source="rpc")[LATENCY_COLUMNS]
    return transfer_link_table(transfer)
