"""Where a ParameterServerStrategy worker's time between closures goes, and what bounds the job.

A worker's step period under ``ClusterCoordinator`` is its closure (``run``) and the gap
to its next one. The gap is, in order:

- the *tail*: from the closure's last timestamp to its result on the coordinator (the
  closure's outstanding variable updates on the parameter servers, the result's way back);
- the *loop wait*: from that result until the user's loop called ``schedule()`` for the
  worker's next closure, when it came later (both on the coordinator's clock): the worker
  waits for the coordinator's own Python loop. ``model.fit`` makes round trips to the
  parameter servers itself between closures, so behind a slow link this is mostly that
  link (ps_fit behind 26.7 ms: a ``schedule()`` every 83.5 ms, three round trips).
  A loop that runs ahead of most closures (``LOOP_BOUND_SHARE``) held the few that waited
  for something it did once, not for its round: those waits are pauses (ps_fit with the hot-ps
  block: 8 of 200 closures waited, each the first of an epoch, 290-2600 ms);
- the *handover*: from the later of the two to the closure's start on the worker (the
  coordinator's dispatch thread).

``closure_gaps`` measures these per worker; ``coordinator_loop_ns`` is the loop's time
per closure where the workers waited for it; ``JobPace`` turns both into the run's
throughput: the workers' own paces (closure, tail, handover) added as rates, held to the
coordinator's loop, plus a *fixed* time (the start, pauses such as ``model.fit``'s epoch
ends). A change on the workers or the loop changes the paces or the loop; only a faster
link also shortens the fixed time (``slow_link``: the start and epoch ends make the same
calls as the steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import codes_of, grouped_rows, mean_of, median_of

# An idle time between closures is a pause (not the per-closure cost) when it is this many
# times the worker's median and at least PAUSE_MIN_NS: ps_fit's epoch ends idled 360-645
# ms against a median of 13-14 ms (docs/findings.md, ``coordinator_bound``).
PAUSE_FACTOR = 10.0
PAUSE_MIN_NS = 50_000_000
# The coordinator's loop limits the job when at least this share of the closures (and
# LOOP_MIN_CLOSURES of them) were scheduled after their worker's previous result: their
# worker waited for the loop. A loop that runs ahead (the tutorial's, which schedules
# every closure up front; ``model.fit``'s within an epoch on fast links) is never waited
# for, and the few closures it held below this share are pauses: ``model.fit``'s epoch
# ends, 290-315 ms where the hot-ps block's 50-57 ms tails put them under PAUSE_FACTOR
# times the usual idle (ps_fit hot-ps=0, 9.1 MB of variables, load average 5).
LOOP_BOUND_SHARE = 0.5
LOOP_MIN_CLOSURES = 10
# Round trips to the slowest ps a closure's tail holds: behind a delaying proxy the tail
# was two of them in every run (the tutorial-style loop at 25 ms: 53-59 ms tails at 27-29
# ms round trips, at 8 ms: 22-27 ms at 12-15 ms; ps_ctl at 25 ms: 52-58 ms at 28-32 ms).
TAIL_PS_ROUND_TRIPS = 2

GAP_COLUMNS = ["task", "run_ns", "idle_ns", "tail_ns", "wait_ns", "loop_wait_ns", "own_ns", "pauses", "pause_ns",
               "closures"]


def closure_gaps(steps: pd.DataFrame, closures: pd.DataFrame | None) -> pd.DataFrame:
    """Per worker, its closure and idle time per training step, pauses left out.

    Pairs each step record with its closure (``(task, step) == (worker, closure_id)``) and,
    for every closure whose previous closure on the same worker (by the closure records)
    has a step record too, takes the time from that closure's end to this one's start:
    a long run's step rows are a sample (``step_stats``), and a gap across closures left
    out of it is not idle time (the tutorial-style loop under a CPU quota, 1055 closures
    on worker:0 of which 650 rows kept). Columns: ``task``, ``run_ns`` (mean closure time
    per step), ``idle_ns`` (mean gap, per step), ``tail_ns`` (median from a closure's end
    to its result), ``wait_ns`` (mean from the previous result to the start, per step),
    ``loop_wait_ns`` (its part waiting for ``schedule()``, per step), ``own_ns`` (the
    worker's own pace per step: ``run + idle - loop_wait``), ``pauses`` (idle times over
    ``PAUSE_FACTOR`` times the median, and every wait for a loop that ran ahead of most
    closures), ``pause_ns`` (their total), ``closures``. Empty when no step pairs with a closure.

    >>> import pandas as pd
    >>> steps = pd.DataFrame({"task": ["worker:0"] * 3, "step": [0, 1, 2], "begin_ns": [0, 30, 60],
    ...                       "end_ns": [10, 40, 70], "steps": [1, 1, 1]})
    >>> closures = pd.DataFrame({"worker": ["worker:0"] * 3, "closure_id": [0, 1, 2], "dispatch_ns": [-1, 25, 55],
    ...                          "result_ns": [22, 52, 82]})
    >>> closure_gaps(steps, closures)[["task", "idle_ns", "tail_ns", "wait_ns", "loop_wait_ns", "own_ns"]].to_dict("records")
    [{'task': 'worker:0', 'idle_ns': 20.0, 'tail_ns': 12.0, 'wait_ns': 8.0, 'loop_wait_ns': 3.0, 'own_ns': 27.0}]
    """
    if steps.empty or closures is None or closures.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    begin, end, covered = (steps[name].to_numpy("float64") for name in ("begin_ns", "end_ns", "steps"))
    result = closures["result_ns"].to_numpy("float64")
    dispatch = (closures["dispatch_ns"].to_numpy("float64") if "dispatch_ns" in closures
                else np.full(len(closures), np.nan))
    # Fewer than LOOP_BOUND_SHARE of the closures waited for schedule(): the loop ran ahead of
    # the rest, so what held those was something it did once (an epoch end), not its round.
    loop_ahead = bool(_waited_for_loop(closures).sum() < LOOP_BOUND_SHARE * (len(closures) - 1))
    rows = []
    for task, (step_rows, closure_rows, places) in sorted(_paired(steps, closures).items()):
        order = np.argsort(places, kind="stable")  # the pairs of one worker in closure order
        step_rows, closure_rows, places = step_rows[order], closure_rows[order], places[order]
        own_begin, own_end, own_result = begin[step_rows], end[step_rows], result[closure_rows]
        follows = np.diff(places) == 1  # consecutive closures of the worker, both with a step row
        idle = np.clip(own_begin[1:] - own_end[:-1], 0.0, None)[follows]
        if not len(idle):
            continue
        wait = np.minimum(np.clip(own_begin[1:] - own_result[:-1], 0.0, None)[follows], idle)
        # schedule() after the previous result, both on the coordinator's clock (NaN: not recorded).
        late = np.nan_to_num(dispatch[closure_rows][1:] - own_result[:-1], nan=0.0)
        loop_wait = np.minimum(np.clip(late, 0.0, None)[follows], wait)
        pause = idle > np.maximum(PAUSE_FACTOR * median_of(idle), PAUSE_MIN_NS)
        if loop_ahead:
            pause |= loop_wait > 0
        per_step = max(mean_of(covered[step_rows]), 1.0)
        run = mean_of(own_end - own_begin) / per_step
        idle_ns = mean_of(idle[~pause]) / per_step
        loop_wait_ns = mean_of(loop_wait[~pause]) / per_step
        rows.append({
            "task": task, "run_ns": run, "idle_ns": idle_ns,
            "tail_ns": median_of(np.clip(own_result - own_end, 0.0, None)),
            "wait_ns": mean_of(wait[~pause]) / per_step, "loop_wait_ns": loop_wait_ns,
            "own_ns": run + idle_ns - loop_wait_ns,
            "pauses": int(pause.sum()), "pause_ns": float(idle[pause].sum()), "closures": len(step_rows),
        })
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def _paired(steps: pd.DataFrame, closures: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per worker, the positions of its step rows, of their closures' rows and each closure's
    place among the worker's closures by id, pair by pair (``(task, step) == (worker,
    closure_id)``), in the steps' order."""
    step_codes, step_tasks = codes_of(steps["task"])
    closure_codes, workers = codes_of(closures["worker"])
    worker_task = pd.Index([str(task) for task in step_tasks]).get_indexer([str(worker) for worker in workers])
    closure_task = np.append(worker_task, -1)[closure_codes]  # a closure without a worker (code -1): none
    ids, step_numbers = closures["closure_id"].to_numpy(), steps["step"].to_numpy()
    pairs = {}
    for code, own_closures in zip(*grouped_rows(closure_task, len(step_tasks))):
        own_steps = np.flatnonzero(step_codes == code)
        by_id = own_closures[np.argsort(ids[own_closures], kind="stable")]
        low, high = (np.searchsorted(ids[by_id], step_numbers[own_steps], side) for side in ("left", "right"))
        matches = high - low
        if matches.sum():
            starts = np.repeat(low - np.cumsum(matches) + matches, matches) + np.arange(matches.sum())
            pairs[str(step_tasks[code])] = (np.repeat(own_steps, matches), by_id[starts], starts)
    return pairs


def coordinator_loop_ns(closures: pd.DataFrame | None) -> float:
    """The coordinator's loop time per closure where the workers waited for it, else 0.

    The median time from one ``schedule()`` to the next (every worker's closures, by
    dispatch time, pauses left out) over the closures scheduled after their worker's
    previous result, when those are ``LOOP_BOUND_SHARE`` of the closures and at least
    ``LOOP_MIN_CLOSURES``: then the loop, not the workers, set the pace. Both times are on
    the coordinator's clock.

    >>> closures = pd.DataFrame({"worker": ["worker:0", "worker:1"] * 10, "closure_id": range(20),
    ...                          "dispatch_ns": [80 * i for i in range(20)],
    ...                          "result_ns": [80 * i + 70 for i in range(20)]})
    >>> coordinator_loop_ns(closures)
    80.0
    """
    if closures is None or closures.empty or "dispatch_ns" not in closures:
        return 0.0
    ordered = closures.sort_values("dispatch_ns")
    dispatch = ordered["dispatch_ns"].to_numpy("float64")
    waited = _waited_for_loop(ordered)[1:]
    spacing = np.diff(dispatch)
    if waited.sum() < max(LOOP_MIN_CLOSURES, LOOP_BOUND_SHARE * len(spacing)):
        return 0.0
    spacing = spacing[waited]
    return median_of(spacing[spacing <= max(PAUSE_FACTOR * median_of(spacing), PAUSE_MIN_NS)])


def _waited_for_loop(closures: pd.DataFrame) -> np.ndarray:
    """Per closure (in ``closures``' order), whether ``schedule()`` came after its worker's
    previous result: the worker waited for the loop. False without ``dispatch_ns``."""
    if "dispatch_ns" not in closures:
        return np.zeros(len(closures), bool)
    order = np.argsort(closures["dispatch_ns"].to_numpy("float64"), kind="stable")
    dispatch, result = (closures[name].to_numpy("float64")[order] for name in ("dispatch_ns", "result_ns"))
    worker = codes_of(closures["worker"])[0][order]  # -1: no worker, no previous closure
    by_worker = np.argsort(worker, kind="stable")  # each worker's closures, in dispatch order
    follows = (worker[by_worker[1:]] == worker[by_worker[:-1]]) & (worker[by_worker[1:]] >= 0)
    previous_result = np.full(len(closures), np.nan)  # the same worker's previous closure's result
    previous_result[by_worker[1:][follows]] = result[by_worker[:-1][follows]]
    waited = np.empty(len(closures), bool)
    waited[order] = dispatch > previous_result  # NaN: False
    return waited


def loop_round_trips(loop_ns: float, round_trip_ns: float) -> int:
    """Round trips on a link of ``round_trip_ns`` that fit whole in the loop's ``loop_ns``:
    how many the loop makes to a slow ps, estimated from its time (``model.fit`` behind 26.7
    ms: 83.5 ms, three; behind 12.7 ms: 41 ms, three).

    >>> loop_round_trips(83.5, 26.7), loop_round_trips(5.3, 26.7)
    (3, 0)
    """
    if loop_ns <= 0 or not round_trip_ns > 0:
        return 0
    return int(loop_ns // round_trip_ns)


def loop_link_saving(links: pd.DataFrame, loop_ns: float, ps: str, peers_ns: float) -> tuple[int, float]:
    """The coordinator's loop's round trips to ``ps`` per closure (``loop_ns``), and what a
    link as fast as its peers' (``peers_ns``) would save it: ``loop_round_trips`` at the
    coordinator's own fastest probe of ``ps``, times the excess of each. ``(0, 0.0)`` when
    the coordinator did not probe ``ps`` or its loop did not set the pace (``loop_ns`` 0).

    >>> links = pd.DataFrame({"src": ["chief:0", "worker:0"], "dst": ["ps:1", "ps:1"], "rtt_min_ns": [26.7, 26.3]})
    >>> loop_link_saving(links, 83.5, "ps:1", 0.7)  # three round trips of 26 more
    (3, 78.0)
    """
    if links.empty or loop_ns <= 0:
        return 0, 0.0
    own = links[(links["dst"].astype(str) == ps) & ~links["src"].astype(str).str.startswith("worker:")]
    if own.empty:
        return 0, 0.0
    round_trip = float(own["rtt_min_ns"].min())
    round_trips = loop_round_trips(loop_ns, round_trip)
    return round_trips, round_trips * max(round_trip - peers_ns, 0.0)


@dataclass(frozen=True)
class JobPace:
    """The run's training steps as the workers' paces, the coordinator's loop and a fixed time.

    ``own_ns``: per worker (index: task), its own time per step (``closure_gaps``'
    ``own_ns``); ``loop_ns``: the coordinator's loop time per step where it set the pace,
    else 0; ``steps``: the run's training steps; ``fixed_ns``: the time before the first
    closure started and in pauses, which no change to a step shortens; ``spread``: the
    run's other time (first ``schedule()`` to last result) over what the paces explain,
    at least 1 (the last closures of a slow worker that the others no longer share, epoch
    ends too short to count as pauses): it scales with the steps; ``steps_per_closure``:
    the run's mean.
    """

    own_ns: pd.Series
    loop_ns: float
    steps: float
    fixed_ns: float = 0.0
    spread: float = 1.0
    steps_per_closure: float = 1.0

    def step_time_ns(self, own_ns: pd.Series | None = None, loop_ns: float | None = None) -> float:
        """Time per training step of the whole job: the workers' rates added, held to the loop's."""
        own = (self.own_ns if own_ns is None else own_ns).astype(float).clip(lower=1.0)
        loop = self.loop_ns if loop_ns is None else loop_ns
        return max(1.0 / float((1.0 / own).sum()), loop)

    def speedup(self, own_ns: pd.Series | None = None, loop_ns: float | None = None,
                fixed_ns: float | None = None) -> float:
        """The run's throughput ratio when the workers' paces become ``own_ns``, the loop's
        ``loop_ns`` (per step) and the fixed time ``fixed_ns``.

        >>> pace = JobPace(pd.Series({"worker:0": 40.0, "worker:1": 40.0}), loop_ns=40.0, steps=100, fixed_ns=1000.0)
        >>> pace.speedup(own_ns=pd.Series({"worker:0": 10.0, "worker:1": 10.0}))  # held to the loop's 40
        1.0
        >>> round(pace.speedup(loop_ns=10.0), 3)  # (100 * 40 + 1000) / (100 * 20 + 1000)
        1.667
        """
        old = self.steps * self.step_time_ns() * self.spread + self.fixed_ns
        fixed = self.fixed_ns if fixed_ns is None else fixed_ns
        return float(old / (self.steps * self.step_time_ns(own_ns, loop_ns) * self.spread + fixed))

    def limit(self) -> float:
        """The largest throughput ratio the coordinator's loop allows a change on the workers
        (inf when the loop did not set the pace)."""
        if self.loop_ns <= 0:
            return math.inf
        return self.speedup(own_ns=self.own_ns * 0.0)


def job_pace(measured) -> JobPace | None:
    """The ``JobPace`` of a ParameterServerStrategy run (``measured``: ``Measurements``, whose
    ``gaps`` are ``closure_gaps``'; its ``pace`` is this, computed once), or None without
    closure records paired with steps.

    The fixed time is the start (first ``schedule()`` to the first closure's start on a
    worker) and the pauses (the median worker's: an epoch end idles every worker at once).
    """
    closures = measured.closures
    if measured.synchronous or closures is None or closures.empty or measured.workers.empty:
        return None
    gaps = measured.gaps.set_index("task")
    if gaps.empty:
        return None
    steps = float(measured.workers["steps"].sum())
    per_closure = max(steps / max(len(closures), 1), 1.0)
    pace = JobPace(gaps["own_ns"], coordinator_loop_ns(closures) / per_closure, steps)
    first = float(closures["dispatch_ns"].min())
    span = float(closures["result_ns"].max()) - first
    fixed = max(float(measured.steps["begin_ns"].min()) - first, 0.0) + float(gaps["pause_ns"].median())
    fixed = min(fixed, span)
    spread = max((span - fixed) / max(steps * pace.step_time_ns(), 1.0), 1.0)
    return JobPace(pace.own_ns, pace.loop_ns, steps, fixed, spread, per_closure)


def paced_speedup(measured, tasks: pd.Series, period_ratio: pd.Series) -> float | None:
    """The run's throughput ratio when each worker of ``tasks`` steps at ``period_ratio`` times
    its period (a repaired straggler), through the ``JobPace``: held to the coordinator's
    loop, the run's fixed time kept. None without closure records.

    ParameterServerStrategy's ``model.fit`` (ps_fit) spends 2.1-2.4 s of a 5.3-5.7 s run
    outside its steps (start-up, five epoch ends), which no faster worker shortens.
    """
    pace = measured.pace
    if pace is None:
        return None
    ratio = pd.Series(period_ratio.to_numpy("float64"), index=tasks.astype(str).to_numpy())
    own = pace.own_ns * ratio.reindex(pace.own_ns.index).fillna(1.0)
    return pace.speedup(own)
