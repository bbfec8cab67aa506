"""Heartbeats folded as they are read: every row under a cap, past it what the readers use.

Each task writes a heartbeat every ``HEARTBEAT_EVERY_S`` (5 s): 17,280 rows a task a day.
``HeartbeatTail`` holds one task file's rows as they came while it holds at most
``HEARTBEAT_ROWS`` (every test's run, a run of hours: analysed exactly as now,
``row_fold``); past it,
per (writing task, task, subject), the rows that ``detectors.stalled``, ``restarts`` and
``job_status`` read:

- the latest ``RECENT_BEATS`` rows (the run's clock, each task's last beat, the rhythm of
  the recent beats, the coordinator's closures in flight);
- the first row, every clean-close row (``closed``) and the ``GAP_EDGE`` rows either side
  of a pause longer than ``GAP_NS`` (a process that stopped and one that started: the
  dates a restart is read from, each kept with a neighbour in rhythm);
- the first row that carried the latest ``progress`` count (when a subject that counts only
  in heartbeats last moved).

A row kept for the first three reasons is pinned; the recent rows and the progress row are
chosen again at each compaction, over the rows that are not pinned, so what is held stays
bounded by the number of tasks and of pauses, not by the run's length.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tfdiag.analysis.row_fold import RowFold, group_codes
from tfdiag.events import HEARTBEAT_EVERY_S

# Rows of a task file kept as they are (2 h 50 min of one writer's beats); past it, compactions.
HEARTBEAT_ROWS = 2048
# The latest rows kept per (task, subject): 21 min of beats, past any stall threshold's look-back.
RECENT_BEATS = 256
# A pause between two beats of one subject longer than two beats: the writer stopped or restarted.
GAP_NS = int(2 * HEARTBEAT_EVERY_S * 1e9)
# Rows kept on each side of such a pause: a pair stays within stalled's ISOLATED_BEAT_S.
GAP_EDGE = 2
_PIN = "__pin"  # 1: kept for good (first, closed, a pause's edge); 2: the latest progress change; 0: recent
_FOR_GOOD, _PROGRESS = 1, 2


class HeartbeatTail(RowFold):
    """The ``heartbeat`` record batches of one task file, folded.

    Example:
        >>> tail = HeartbeatTail()
        >>> tail.add(batch, "worker:0")  # doctest: +SKIP
        >>> tail.batches()  # doctest: +SKIP
    """

    ROWS = HEARTBEAT_ROWS
    RUN_ROWS = 64 * HEARTBEAT_ROWS
    OWN_COLUMN = _PIN

    def _fresh(self, table: pa.Table) -> pa.Table:
        return table.append_column(_PIN, pa.array(np.zeros(len(table), "int8")))

    def _compacted(self, table: pa.Table) -> pa.Table:
        return _kept(table)


def _kept(table: pa.Table) -> pa.Table:
    """The rows of ``table`` (one writer's, ``_PIN`` marking those kept before) to keep, pinned anew."""
    group = group_codes(table, ("task", "subject"))
    order = np.lexsort((table["time_ns"].fill_null(0).to_numpy(), group))
    table, group = table.take(order), group[order]
    time, pin = table["time_ns"].fill_null(0).to_numpy(), table[_PIN].to_numpy()
    first = np.r_[True, group[1:] != group[:-1]]
    for_good = (pin == _FOR_GOOD) | first | table["closed"].fill_null(False).to_numpy(zero_copy_only=False)
    live = np.flatnonzero(pin == 0)  # the recent rows of the last compaction and the new ones: consecutive beats
    live_group = group[live]
    same = np.r_[False, live_group[1:] == live_group[:-1]]
    gap = np.flatnonzero(same & (np.diff(time[live], prepend=0) > GAP_NS))
    for step in range(GAP_EDGE):  # the rows either side of each pause
        for_good[live[np.clip(gap - 1 - step, 0, None)]] = True
        for_good[live[np.clip(gap + step, None, len(live) - 1)]] = True
    from_end = np.r_[np.flatnonzero(live_group[1:] != live_group[:-1]) + 1, len(live)]
    rank = np.repeat(from_end, np.diff(np.r_[0, from_end])) - np.arange(len(live))  # 1 for a group's last row
    recent = np.zeros(len(table), bool)
    recent[live[rank <= RECENT_BEATS]] = True
    progress = _latest_change(table, group, pin)
    keep = for_good | recent | progress
    pins = np.where(for_good, _FOR_GOOD, np.where(progress & ~recent, _PROGRESS, 0)).astype("int8")
    table = table.set_column(table.schema.get_field_index(_PIN), _PIN, pa.array(pins))
    return table.filter(pa.array(keep))


def _latest_change(table: pa.Table, group: np.ndarray, pin: np.ndarray) -> np.ndarray:
    """Per group, the first row (of those not pinned for good) that carried its latest
    ``progress`` count: when that subject last moved."""
    counted = np.flatnonzero(table["progress"].is_valid().to_numpy(zero_copy_only=False) & (pin != _FOR_GOOD))
    chosen = np.zeros(len(table), bool)
    if not len(counted):
        return chosen
    own, value = group[counted], table["progress"].to_numpy(zero_copy_only=False)[counted]
    change = np.r_[True, (own[1:] != own[:-1]) | (value[1:] != value[:-1])]
    last_of_group = np.r_[own[1:] != own[:-1], True]
    latest = np.maximum.accumulate(np.where(change, np.arange(len(counted)), 0))  # each row's run start
    chosen[counted[latest[last_of_group]]] = True
    return chosen
