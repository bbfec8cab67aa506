"""``slow_link``: round trips to one parameter server take much longer than to the others.

The metric is ``Measurements.link_latency``: the fastest round trip per (src, dst) link,
measured by the RPC probe or, in a TF1 session where no probe runs, by the traced
``RecvTensor`` transfers (``links.link_latency_table``). The decision is the same for
both; the predicted speed-up is the probe's ps traffic model, or for traced transfers
the time each traced step waited on the slow link (``ps_traffic.traced_link_cost``).

A path that turned slow mid-run hides behind the fastest round trip of the whole run,
taken before it turned; so each round trip to a ps (``Measurements.round_trips``) is also
judged against its peers' at the time, and a ps whose every round trip was slow for
``MIN_SLOW_SHARE`` of the run or more is reported with that stretch; the probe's
prediction then saves its share of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tfdiag.analysis.breakdown import closure_tail_ns
from tfdiag.analysis.closure_gaps import TAIL_PS_ROUND_TRIPS, loop_link_saving
from tfdiag.analysis.detectors.evidence import task_list
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.links import MIN_LINK_SAMPLES
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.ps_traffic import ps_traffic, traced_link_cost
from tfdiag.analysis.whatif import PS_ROUND_TRIPS_PER_STEP, predicted_speedup, ps_round_trips_per_step

KIND = "slow_link"

# A parameter server is behind a slow link when the fastest round trip to it is this many
# times that to the other ps and at least MIN_EXTRA_NS more. The fastest probe is what
# the path itself costs; load on either end only adds to a probe (on the 2-core CI
# machine a clean ps_ctl run has medians of 0.5-8 ms on the same link, and fastest round
# trips of 0.5-1.8 ms on every link), so 3x and 2 ms stay clear of that noise. A ps is
# judged by the median over its sources against the other ps, and only when every source
# agrees (``_slow_from_every_source``).
SLOW_RATIO = 3.0
MIN_EXTRA_NS = 2_000_000
CRITICAL_EXTRA_NS = 20_000_000
# A ps whose every round trip was slow against its peers' at the time (each against the
# fastest to the other ps within PEER_SPAN_SHARE of the run of it, from the same source where
# that source probed one) for MIN_SLOW_SHARE of the run or more, over MIN_SLOW_ROUND_TRIPS
# round trips or more, is behind a path that turned slow, whatever its fastest round trip
# before: a loaded host delays some probes, not every one for a third of the run. Counted in
# round trips, not in windows of the run: a short run's probe reads each link every few
# seconds (a 14-s ps_fit run, trial 2396: 5 probes of each worker's link).
MIN_SLOW_SHARE = 0.3
MIN_SLOW_ROUND_TRIPS = 2 * MIN_LINK_SAMPLES
PEER_SPAN_SHARE = 0.1


@dataclass(frozen=True)
class SlowStretch:
    """The round trips in a row for which a ps was slow: its fastest round trip (the median
    over its sources of each one's fastest) and its peers' (the median of the peers' at the
    time, ns), from ``start_ns`` to ``end_ns`` (its first slow round trip to the next that was
    not, or the run's last; the sources' clocks), ``share`` of the run's round trips' span."""

    rtt_ns: float
    peers_ns: float
    start_ns: float
    end_ns: float
    share: float


def detect(measured: Measurements) -> list[Finding]:
    whole = slow_ps(measured.link_latency)
    stretches = {dst: stretch for dst, stretch in slow_stretches(measured.round_trips).items() if dst not in whole}
    return ([_finding(measured, dst, rtt, peers) for dst, (rtt, peers) in whole.items()]
            + [_finding(measured, dst, stretch.rtt_ns, stretch.peers_ns, stretch) for dst, stretch in stretches.items()])


def slow_stretches(round_trips: pd.DataFrame) -> dict[str, SlowStretch]:
    """The ps whose every round trip (``links.round_trips``) was slow against its peers' at
    the time, as ``slow_ps`` judges the run, for ``MIN_SLOW_SHARE`` of the run and
    ``MIN_SLOW_ROUND_TRIPS`` or more: the longest such stretch of each. A round trip's peers'
    is the fastest to the other ps within ``PEER_SPAN_SHARE`` of the run of it, from its own
    source where that source probed one; a round trip with no peer's near it is not judged.
    """
    if round_trips.empty:
        return {}
    times = round_trips["time_ns"].to_numpy("float64")
    span = float(times.max() - times.min())
    to_ps = round_trips[round_trips["dst"].str.startswith("ps:")].reset_index(drop=True)
    if to_ps["dst"].nunique() < 2 or span <= 0:
        return {}
    dst, source = to_ps["dst"].to_numpy(), pd.factorize(to_ps["src"])[0]
    when, rtt = to_ps["time_ns"].to_numpy("float64"), to_ps["rtt_ns"].to_numpy("float64")
    near = PEER_SPAN_SHARE * span
    # Each source's round trips on a time line of its own: its times moved on by a stride
    # longer than the run and the reach of ``near`` on each side, one per source.
    own_line = source * (span + 4.0 * near) + when
    peers = np.full(len(to_ps), np.nan)
    for ps in to_ps["dst"].unique():
        own, others = np.flatnonzero(dst == ps), np.flatnonzero(dst != ps)
        everyone = _fastest_near(when[others], rtt[others], when[own], near)
        same_source = _fastest_near(own_line[others], rtt[others], own_line[own], near)
        peers[own] = np.where(np.isnan(same_source), everyone, same_source)
    slow = _slow_array(rtt, peers)
    stretches = {}
    for ps in to_ps["dst"].unique():
        rows = np.flatnonzero((dst == ps) & ~np.isnan(peers))
        longest = _longest_run(slow[rows])
        if longest is None:
            continue
        first, last = longest
        start = when[rows[first]]
        end = when[rows[last + 1]] if last + 1 < len(rows) else float(times.max())
        if last + 1 - first < MIN_SLOW_ROUND_TRIPS or end - start < MIN_SLOW_SHARE * span:
            continue
        judged = rows[first:last + 1]
        fastest = pd.Series(rtt[judged]).groupby(source[judged]).min().median()
        stretches[str(ps)] = SlowStretch(float(fastest), float(np.median(peers[judged])), float(start), float(end),
                                         float(end - start) / span)
    return stretches


def _fastest_near(when: np.ndarray, rtt: np.ndarray, at: np.ndarray, near: float) -> np.ndarray:
    """For each time of ``at``, the fastest of the round trips ``rtt`` (at the times ``when``)
    within ``near`` of it; NaN where none is."""
    order = np.argsort(when, kind="stable")
    when, rtt = when[order], rtt[order]
    low, high = np.searchsorted(when, at - near, "left"), np.searchsorted(when, at + near, "right")
    return _range_min(rtt, low, high)


def _range_min(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The minimum of ``values[low:high]`` for each pair (NaN where empty), from a sparse
    table: level k holds the minimum of each 2**k values in a row.

    >>> _range_min(np.array([5.0, 3.0, 8.0, 1.0, 7.0]), np.array([0, 1, 2, 4]), np.array([2, 3, 5, 4])).tolist()
    [3.0, 3.0, 1.0, nan]
    """
    levels = [values]
    while 1 << len(levels) <= len(values):
        half = 1 << (len(levels) - 1)
        levels.append(np.minimum(levels[-1][:-half], levels[-1][half:]))
    length = high - low
    result = np.full(len(low), np.nan)
    level = np.zeros(len(low), dtype=int)
    level[length > 0] = np.log2(length[length > 0]).astype(int)
    for k in range(len(levels)):
        rows = (length > 0) & (level == k)
        result[rows] = np.minimum(levels[k][low[rows]], levels[k][high[rows] - (1 << k)])
    return result


def _longest_run(flags: np.ndarray) -> tuple[int, int] | None:
    """The first and last index of the longest run of True in ``flags`` (the earliest of the
    longest), or None where none is True."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    if not len(edges):
        return None
    starts, ends = edges[::2], edges[1::2] - 1
    best = int(np.argmax(ends - starts))
    return int(starts[best]), int(ends[best])


def _slow_array(rtt: np.ndarray, peers: np.ndarray) -> np.ndarray:
    """``_slow`` over arrays (False where either is NaN)."""
    with np.errstate(invalid="ignore"):
        return (rtt >= SLOW_RATIO * np.maximum(peers, 1.0)) & (rtt - peers >= MIN_EXTRA_NS)


def slow_ps(links: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """The ps behind a slow link: ``{ps: (its fastest round trip, its peers')}`` (ns), from a
    ``link_latency_table``."""
    if links.empty:
        return {}
    # Probes to workers are answered by the worker's own busy threads, so their round
    # trips measure its load as much as the network; they are left to `straggler`.
    to_ps = links[links["dst"].str.startswith("ps:") & (links["samples"] >= MIN_LINK_SAMPLES)]
    per_dst = to_ps.groupby("dst")["rtt_min_ns"].median()
    if len(per_dst) < 2:
        return {}
    slow = {}
    for dst, rtt in per_dst.items():
        peers = float(np.median(per_dst.drop(dst)))
        if _slow(rtt, peers) and _slow_from_every_source(to_ps, str(dst), peers):
            slow[str(dst)] = (float(rtt), peers)
    return slow


def _slow(rtt: float, peers: float) -> bool:
    return rtt >= SLOW_RATIO * max(peers, 1.0) and rtt - peers >= MIN_EXTRA_NS


def _slow_from_every_source(to_ps: pd.DataFrame, dst: str, peers: float) -> bool:
    """Whether every source that probed ``dst`` finds it slow against the other ps *it* probed
    (or, where it probed no other, against ``peers``).

    A path in front of a ps delays every source alike; a busy host delays the probes of
    whichever thread waited for a core. On two saturated cores ps_fit's clean run had
    worker:1 -> ps:1 at 10.96 ms fastest, while worker:0 -> ps:1 was 2.14 ms against
    0.87 ms to ps:0 from the same worker (docs/findings.md, ``slow_link``).
    """
    for src, own in to_ps.groupby("src"):
        rtt = own.loc[own["dst"] == dst, "rtt_min_ns"]
        if rtt.empty:
            continue
        others = own.loc[own["dst"] != dst, "rtt_min_ns"]
        if not _slow(float(rtt.iloc[0]), float(others.median()) if not others.empty else peers):
            return False
    return True


def _finding(measured: Measurements, dst: str, rtt: float, peers: float, stretch: SlowStretch | None = None) -> Finding:
    extra = rtt - peers
    sources = measured.link_latency[measured.link_latency["dst"] == dst]
    traced = bool((sources["source"] == "transfer").all())
    evidence = {
        "latency_source": "transfer" if traced else "rpc",
        "rtt_ms_min": {f"{row.src}->{row.dst}": round(row.rtt_min_ns / 1e6, 2) for row in sources.itertuples()},
        "rtt_ms_p50": {f"{row.src}->{row.dst}": round(row.rtt_p50_ns / 1e6, 2) for row in sources.itertuples()},
        "rtt_ms_p99": {f"{row.src}->{row.dst}": round(row.rtt_p99_ns / 1e6, 2) for row in sources.itertuples()},
        "peer_rtt_ms_min": round(peers / 1e6, 2),
    }
    if traced:
        speedup, cost = _traced_speedup(measured, dst, extra)
        evidence.update(cost)
        measured_by = (f"Traced tensor transfers (RecvTensor) from {dst} to {task_list(sorted(sources['src']))} take "
                       f"at least {rtt / 1e6:.1f} ms against {peers / 1e6:.1f} ms from the other parameter servers")
    else:
        speedup, cost = _probed_speedup(measured, dst, extra, peers, stretch.share if stretch else 1.0)
        evidence.update(cost)
        measured_by = (f"The RPC probe from {task_list(sorted(sources['src']))} measures round trips of at least "
                       f"{rtt / 1e6:.1f} ms to {dst} against {peers / 1e6:.1f} ms to the other parameter servers")
    when = ""
    if stretch is not None:
        start_ns = float(measured.steps["begin_ns"].min()) if not measured.steps.empty else stretch.start_ns
        since_s, until_s = (stretch.start_ns - start_ns) / 1e9, (stretch.end_ns - start_ns) / 1e9
        when = f" from {max(since_s, 0.0):.0f} s into the run to {until_s:.0f} s ({stretch.share:.0%} of it)"
        evidence.update({"slow_since_s": round(since_s, 1), "slow_until_s": round(until_s, 1),
                         "slow_share": round(stretch.share, 3), "rtt_ms_min_while_slow": round(rtt / 1e6, 2)})
    return Finding(
        kind=KIND,
        severity=Severity.CRITICAL if extra >= CRITICAL_EXTRA_NS else Severity.WARNING,
        title=f"Round trips to {dst} take at least {rtt / 1e6:.1f} ms, {extra / 1e6:.1f} ms more than to its "
              f"peers{when}",
        summary=(
            f"{measured_by}{when}: the network path to {dst} (its host, NIC, a proxy or a congested switch port) "
            "adds latency to every step."
        ),
        tasks=(dst,),
        evidence=evidence,
        recommendation=Recommendation(
            action=f"Fix the network path to {dst}, or move {dst} to a host with a fast link to the workers.",
            change=f"Place {dst} on a host in the workers' rack or fix its link; check with `ping`/`iperf` from a worker host.",
            predicted_speedup=speedup,
        ),
    )


def _probed_speedup(measured: Measurements, dst: str, extra: float, rtt_peers: float,
                    share: float = 1.0) -> tuple[float | None, dict]:
    """The link's cost per step from the probe's round trips, and its evidence; a link slow
    for ``share`` of the run saves that share of it.

    In each closure the ps traffic model with the link's latency lowered to its peers', at
    the round trips a step pays (``whatif.ps_round_trips_per_step``), in its tail up to
    ``TAIL_PS_ROUND_TRIPS`` of them; under ParameterServerStrategy also in
    the coordinator's loop, where the workers waited for it (``closure_gaps``): its round
    trips to ``dst`` estimated from its time per closure. The job's pace
    (``closure_gaps.JobPace``) turns them into the run's throughput; its fixed time (the
    start, ``model.fit``'s epoch ends) shortens as its steps do.
    """
    if measured.workers.empty:
        return None, {}
    steps_per_closure = measured.steps.groupby("task", observed=True)["steps"].mean()
    per_closure = measured.workers["task"].map(steps_per_closure).fillna(1.0).clip(lower=1.0)
    # Inside a closure of several steps each later step pays half a round trip (whatif).
    round_trips = per_closure.map(ps_round_trips_per_step)
    traffic = ps_traffic(measured)
    if traffic is not None:
        fixed = dict(traffic.rtt_ns, **{dst: max(traffic.rtt_ns.get(dst, 0.0) - extra, 0.0)})

        def link_saving(count: float) -> float:  # the model's saving at ``count`` round trips a step
            scale = count / PS_ROUND_TRIPS_PER_STEP
            return (traffic.communication_ns(rtt_ns={ps: scale * rtt for ps, rtt in traffic.rtt_ns.items()})
                    - traffic.communication_ns(rtt_ns={ps: scale * rtt for ps, rtt in fixed.items()}))

        saving = round_trips.map(link_saving)
    else:
        saving = round_trips * extra
    saving = share * saving.clip(lower=0.0, upper=float(measured.workers["mean_ns"].min()))
    # A closure's last parameter-server round trips (its variable updates) finish after
    # its last timestamp: the worker waits for them in the tail before its result reaches
    # the coordinator, once per closure, so a step pays them once per steps in a closure.
    # The fastest tail is what the path costs there (as the fastest probe is the link's),
    # up to ``TAIL_PS_ROUND_TRIPS`` round trips, less what those round trips cost at the
    # peers' latency, which a repaired link still does: the tutorial-style loop behind 25
    # ms had tails of 41 ms at the fastest (1.5 round trips), 47 ms median, 6 ms median
    # without the delay; saving one round trip predicted 2.77x against 5.36x measured.
    tail = closure_tail_ns(measured.steps, measured.run.frame("closure"), quantile=0.0)
    link_tail = measured.workers["task"].map(tail).fillna(0.0) - TAIL_PS_ROUND_TRIPS * rtt_peers
    tail_saving = share * link_tail.clip(lower=0.0, upper=TAIL_PS_ROUND_TRIPS * extra) / per_closure
    pace = measured.pace
    if pace is None:
        return predicted_speedup(measured.workers, measured.workers["mean_ns"] - saving - tail_saving,
                                 measured.synchronous), {}
    per_closure = pace.loop_ns * pace.steps_per_closure
    round_trips, loop_saving = loop_link_saving(measured.link_latency, per_closure, dst, rtt_peers)
    loop_saving *= share / pace.steps_per_closure
    own = pace.own_ns - pd.Series((saving + tail_saving).to_numpy(), index=measured.workers["task"].astype(str))
    own = own.reindex(pace.own_ns.index).fillna(pace.own_ns)
    # The run's start and model.fit's epoch ends read and write the same variables through
    # the same links as its steps: they shorten as the steps do (ps_fit behind 26.7 ms: 3.1
    # s of start and pauses, 2.1 s without the delay; behind 12.7 ms: 2.7 s and 2.2 s).
    shorter = pace.step_time_ns(own, pace.loop_ns - loop_saving) / pace.step_time_ns()
    speedup = pace.speedup(own, pace.loop_ns - loop_saving, pace.fixed_ns * shorter)
    return speedup, {
        "coordinator_loop_ms_per_closure": round(per_closure / 1e6, 2),
        "coordinator_loop_round_trips": round_trips,
    }


def _traced_speedup(measured: Measurements, dst: str, extra: float) -> tuple[float | None, dict]:
    """The link's cost per step, from the traced steps: each worker saves the time its steps
    waited on transfers from ``dst`` beyond what they would at the peers' latency."""
    cost = traced_link_cost(measured, dst, extra)
    if measured.workers.empty or cost.empty:
        return None, {}
    saving = measured.workers["task"].map(cost.set_index("worker")["saving_ns"]).fillna(0.0)
    saving = np.minimum(saving.clip(lower=0.0), measured.workers["mean_ns"])
    speedup = predicted_speedup(measured.workers, measured.workers["mean_ns"] - saving, measured.synchronous)
    step_ms = measured.workers.set_index("task")["mean_ns"] / 1e6
    return speedup, {
        "link_wait_ms_per_step": {row.worker: round(row.wait_ns / 1e6, 2) for row in cost.itertuples()},
        "link_saving_ms_per_step": {row.worker: round(row.saving_ns / 1e6, 2) for row in cost.itertuples()},
        "step_ms": {task: round(float(ms), 2) for task, ms in step_ms.items() if task in set(cost["worker"])},
        "traced_steps": {row.worker: int(row.traced_steps) for row in cost.itertuples()},
    }
