"""RPC probe round trips folded as they are read: every probe under a cap; past it, per-link
histograms of every round trip and a bounded sample of the probes.

The coordinator's probe writes a round trip every second: a day is 86,400 rows, and a
prober of many links more. ``ProbeSample`` holds one task file's ``rpc`` rows as they came
while it holds at most ``RPC_ROWS`` (every test's run: analysed exactly as now,
``row_fold``); past it, per (writing task, link, plain or payload probe), a histogram of
every round trip ever read (``step_stats``' log buckets: exact counts and minimum,
percentiles within 1 %; ``links.link_table`` reads a compacted link's from it,
``probe_histograms``) and of the probes themselves:

- the ``FASTEST_PROBES`` fastest round trips: Cristian's method bounds a link's clock
  offset by its fastest probes (``links.link_table``, ``align``), and the fastest is what
  the path itself costs (``rtt_min_ns``);
- the ``RECENT_PROBES`` latest (``detectors.stalled`` asks whether the probe still reaches a task);
- the first probe of each slot of time, the slots doubling until the link holds at most
  ``LINK_PROBES``: an even sample over the run for its percentiles and timeline.

Each choice is the same over the rows kept and the new ones as over every row the link
ever had (the fastest of all are among the fastest kept, a slot's first probe is its
first half-slot's), so compactions never drift, and what is held is bounded by the links.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from tfdiag.analysis.row_fold import RowFold, group_codes
from tfdiag.analysis.step_stats import bucket_of

# Probes of a task file kept as they are (over an hour of the probe's 1 s); past it, a sample.
RPC_ROWS = 8192
# Per link and payload: the fastest probes kept, the latest, and the even sample's size.
FASTEST_PROBES = 64
RECENT_PROBES = 32
LINK_PROBES = 256
SLOT_NS = 1_000_000_000  # the narrowest slot of the even sample: the probe's period


class ProbeSample(RowFold):
    """The ``rpc`` record batches of one task file, folded.

    Example:
        >>> probes = ProbeSample()
        >>> probes.add(batch, "chief:0")  # doctest: +SKIP
        >>> probes.batches()  # doctest: +SKIP
    """

    ROWS = RPC_ROWS
    slot = SLOT_NS  # doubles until every link's even sample fits ``LINK_PROBES``

    def __init__(self, cap: int | None = None):
        super().__init__(cap)
        # (src, dst, payload) -> [probes, fastest round trip, buckets, counts] of the rows
        # compacted so far: each row is counted once, when the compaction that takes it in
        # reads it as new (``_fresh``); the rows since are counted when asked.
        self._histograms: dict[tuple[str, str, bool], list] = {}

    def _fresh(self, table: pa.Table) -> pa.Table:
        _count(self._histograms, table)
        return table

    def histograms(self) -> list[tuple]:
        """(src, dst, payload, probes, fastest round trip ns, buckets, counts) of every
        probe this fold read; empty until it compacted (its rows are then every probe)."""
        if self._kept is None:
            return []
        counted = {key: list(value) for key, value in self._histograms.items()}
        for batch, _ in self._raw:
            _count(counted, pa.Table.from_batches([batch]))
        return [(*key, *value) for key, value in counted.items()]

    def _compacted(self, table: pa.Table) -> pa.Table:
        payload = table["payload_bytes"].fill_null(0).to_numpy() > 0
        link = group_codes(table, ("src", "dst")) * 2 + payload
        send = table["send_ns"].fill_null(0).to_numpy()
        rtt = (table["recv_ns"].fill_null(0).to_numpy() - send).astype("float64")
        by_rtt, by_time = np.lexsort((rtt, link)), np.lexsort((send, link))
        keep = np.zeros(len(table), bool)
        keep[by_rtt[_rank(link[by_rtt]) < FASTEST_PROBES]] = True
        keep[by_time[_rank(link[by_time], from_end=True) < RECENT_PROBES]] = True
        while True:  # the first probe of each slot
            slot = send[by_time] // self.slot
            first = np.r_[True, (link[by_time][1:] != link[by_time][:-1]) | (slot[1:] != slot[:-1])]
            if np.unique(link[by_time][first], return_counts=True)[1].max() <= LINK_PROBES:
                break
            self.slot *= 2
        keep[by_time[first]] = True
        return table.filter(pa.array(keep))


def _rank(groups: np.ndarray, from_end: bool = False) -> np.ndarray:
    """Each row's position within its run of equal ``groups`` (0 for the first; with
    ``from_end``, 0 for the last)."""
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    lengths = np.diff(np.r_[starts, len(groups)])
    rank = np.arange(len(groups)) - np.repeat(starts, lengths)
    return np.repeat(lengths, lengths) - 1 - rank if from_end else rank


HISTOGRAM_COLUMNS = ["src", "dst", "payload", "probes", "rtt_min_ns", "buckets", "counts"]


def probe_histograms(folds: list[ProbeSample]) -> pd.DataFrame | None:
    """The round-trip histograms of ``folds`` (one per task file), merged per (src, dst,
    payload): None when no fold compacted (its rows are then every probe)."""
    merged: dict[tuple[str, str, bool], list] = {}
    for fold in folds:
        for src, dst, payload, probes, fastest, buckets, counts in fold.histograms():
            _merge(merged, (src, dst, payload), probes, fastest, buckets, counts)
    if not merged:
        return None
    return pd.DataFrame([(*key, *value) for key, value in merged.items()], columns=HISTOGRAM_COLUMNS)


def _count(histograms: dict, table: pa.Table) -> None:
    """Adds the round trips of ``table`` (``rpc`` rows) to ``histograms``."""
    if not len(table):
        return
    send = table["send_ns"].to_numpy(zero_copy_only=False)
    rtt = table["recv_ns"].to_numpy(zero_copy_only=False) - send
    known = ~np.isnan(rtt) if rtt.dtype.kind == "f" else np.ones(len(rtt), bool)
    payload = table["payload_bytes"].fill_null(0).to_numpy() > 0
    src, dst = (table[name].to_pylist() for name in ("src", "dst"))
    link = group_codes(table, ("src", "dst")) * 2 + payload
    for code in np.unique(link[known]):
        own = np.flatnonzero((link == code) & known)
        values = rtt[own].astype("int64")
        buckets, counts = np.unique(bucket_of(values), return_counts=True)
        key = (src[own[0]], dst[own[0]], bool(payload[own[0]]))
        _merge(histograms, key, len(own), int(values.min()), buckets, counts)


def _merge(histograms: dict, key: tuple, probes: int, fastest: int, buckets: np.ndarray, counts: np.ndarray) -> None:
    mine = histograms.get(key)
    if mine is None:
        histograms[key] = [probes, fastest, buckets, counts]
        return
    together = np.concatenate([mine[2], buckets])
    merged, where = np.unique(together, return_inverse=True)
    histograms[key] = [mine[0] + probes, min(mine[1], fastest), merged,
                       np.bincount(where, weights=np.concatenate([mine[3], counts]), minlength=len(merged)).astype("int64")]
