"""``straggler``: one or more workers take much longer per step than the others.

Two ways to be slow: a longer median step (the work itself is slower), or — in
asynchronous training — a longer step *period* (time between step starts), which is
how a worker whose process is stopped or starved between closures (a container CPU
quota, a busy host) shows: its closures take about as long, but it runs far fewer of
them. Synchronous workers wait for each other, so their periods are equal and only their
own compute before the all-reduce can single one out (``sync_steps``) — or, for a worker
whose process is stopped, its sampler's late wake-ups (``_by_stopped_share``).

Workers are compared fairly (``Measurements.compared``, from ``fair_comparison``): over
the time they all ran, only with enough steps, per example where their batches differ,
without their time away after a failure. This module makes the judgements on the named
thresholds and builds the finding.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from tfdiag.analysis import breakdown
from tfdiag.analysis.closure_gaps import paced_speedup
# The fair comparison's thresholds are this judgement's too (docs/findings.md quotes them as straggler's).
from tfdiag.analysis.fair_comparison import MIN_RECORDS, MIN_SPAN_SHARE, OVERLAP_RECORDS  # noqa: F401
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.sync_steps import (
    past_noise,
    shared_ns,
    speedup_with_own,
    step_if_running_as_peers,
    waiting_for_slowest_ms,
)
from tfdiag.analysis.whatif import predicted_speedup, speedup_over_run
from tfdiag.events import LATE_WAKE_S

KIND = "straggler"

# A worker is a straggler when its median step (or, asynchronously, its step period) is at
# least a quarter slower than the other workers' and the gap is larger than scheduling
# noise. Clean sample-job runs on the 2-core CI machine show per-worker medians within
# about 10 % and 2 ms of each other, so 1.25 and 5 ms leave a margin. On a host shared with
# other programs the same bar holds: a worker their load starves is told apart by its run-queue
# wait (``starved``), not by a higher ratio.
WARNING_SLOWDOWN = 1.25
CRITICAL_SLOWDOWN = 2.0
MIN_GAP_NS = 5_000_000
# ... and slower past noise: by more than NOISE_SE standard errors of the difference of
# the two medians (or periods), from the spread of each worker's own records
# (``fair_comparison``). Few records vary: over the last quarter of a ps_fit run with a hot
# ps (trial seed 1266, nothing planted on a worker), 21 steps of one worker had a median
# 1.25x its peer's 24, 2.0 standard errors apart. A run is judged about twelve times (each
# worker, by step and by period, over the whole run and two parts: ``TAIL_SHARES``); three
# standard errors each keep a run's chance of a false pass near 2 % (Bonferroni: 2.9).
NOISE_SE = 3.0
# A slower worker whose slowness its run-queue wait explains is starved by its neighbours
# (``host_contention``), not a straggler to fix in the job. Its wait share w (of the CPU time
# its threads asked for, ``run_queue``) against the typical other worker's w0 explains a
# slowdown of (1 - w0) / (1 - w): it ran that much less of the time it wanted to. It explains
# the worker's slowdown when it accounts for EXPLAINED_PART of it (half: the larger part),
# and w is at least MIN_EXTRA_WAIT_SHARE above w0 (0.05: wait shares of clean peers on the
# 2-core host; see docs/findings.md, host_contention).
EXPLAINED_PART = 0.5
MIN_EXTRA_WAIT_SHARE = 0.05
# ... or where the processes outside the job on the shared host used BUSY_NEIGHBOURS_CORES
# (``Measurements.neighbours``) while the workers stepped and the slower worker waited at
# least as much as its peers: the scheduler divides the cores among every runnable thread,
# and beside that much foreign work one worker's share can stay smaller for seconds with
# no signal in its own process (clean ps_ctl runs beside two CPU hogs: one worker started
# steps up to 1.30x less often). A worker stopped from outside (a quota, SIGSTOP) is not
# runnable while stopped, so its wait share stays at its peers' or below.
BUSY_NEIGHBOURS_CORES = 0.5
# Never starved, whatever its wait: a worker held from outside for HELD_EXTRA_SHARE more of
# its stepping than the typical other worker (``run_queue.held_table``: its cgroup's quota
# throttled it, a sampler found it stopped). A held thread waits on the run queue each time
# it is let go (on this kernel a throttled one's time counts as run-queue wait, and every
# SIGCONT wakes every thread at once onto a busy host's queue), so its wait share looks
# starved; but the fault is the holder, a straggler's to fix. A worker nobody holds is
# never found stopped, and a quota on the whole job throttles its peers alike, so any
# excess is a hold; 0.05 leaves out a stray probe or a brief throttle, and a hold of under
# 5 % of the time explains no more than 1.05x, under WARNING_SLOWDOWN.
HELD_EXTRA_SHARE = 0.05
# A worker held from outside for a share h of its stepping, against h0 for the typical other
# worker (0 for a lone one), could run for (1 - h) / (1 - h0) of the time its peers could:
# its hold alone makes it (1 - h0) / (1 - h) times slower, as a run-queue wait does
# (``starved``). Where the steps compared name no straggler (a lone worker; a TF1 peer that
# waited for the chief and stepped only the run's last seconds; too few steps beside it to
# judge), a hold that makes it WARNING_SLOWDOWN slower and is HELD_EXTRA_SHARE above its
# peers' names it all the same: nothing in a job stops or throttles its own process.
# Examples per step differing by more than this ratio between workers: compare per example.
EXAMPLES_PER_STEP_SPREAD = 1.1
# A synchronous worker whose process could not run (``sync_steps.stopped_shares``) for
# STOPPED_EXTRA_SHARE more of its steps than the typical other worker, at least
# STOPPED_RATIO times as much, and past the two shares' sampling noise
# (``sync_steps.past_noise``: a wake-up is late or not, so a share from n wake-ups varies
# by sqrt(p(1 - p) / n)) is a straggler: every step stands still while it is stopped, so
# 0.15 costs the job 1.18x; where every worker is late often (p = 0.3 on a host at load
# 20) the ratio keeps a host late for every worker alike from naming one. mwms_fit with
# worker 1 stopped 40 ms of every 100 ms: see docs/findings.md. The shares must cover
# MIN_STOPPED_SPAN_S of stepping (20 wake-ups at the sampler's pace), counted in time, not
# in wake-ups: a process wakes less often the longer it is stopped (trial seed 1145: a
# gen_fit worker stopped about 40 % of its 6 s woke 48 times, its peer 59), so a floor of
# 50 wake-ups left out the very worker it was for.
STOPPED_EXTRA_SHARE = 0.15
STOPPED_RATIO = 2.0
MIN_STOPPED_SPAN_S = 2.0
# A fault that begins mid-run and lasts to the end is diluted in the whole run's figures
# (a worker stopped for the last third of a run is 3x slower there, 1.3x over the run).
# Where the whole run names no straggler, the same rules judge the run's last half, then
# its last quarter: a fault over at least the run's last quarter fills one of them. Each
# part is one more judgement chance could pass, so only these two, chosen before any run
# was judged by them; a long run whose step rows are a sample is not judged again.
TAIL_SHARES = (0.5, 0.25)
# A straggler named over a part warns only where its fix is worth making there: predicted
# at least this over the part, the bar of ``input_bound`` and ``ps_hotspot``; else info. Of
# the six part findings the trials recorded (to seed 1378), five named a worker where
# nothing was planted (fix runs 1213, 1291, 1360; 1266; 1351: 34 steps against 47 over the
# 0.67 s the workers overlapped), each predicting 1.01-1.10x over its part.
MIN_PART_WARNING_SPEEDUP = 1.1


def typical_of_others(values: pd.Series) -> pd.Series:
    """For each worker, the median of the other workers' values; NaN for a lone worker,
    who has no others (rather than numpy's median of an empty slice).

    Leaving the worker itself out keeps one straggler of two from setting its own bar.

    >>> typical_of_others(pd.Series([10.0, 12.0, 40.0])).tolist()
    [26.0, 25.0, 11.0]
    >>> typical_of_others(pd.Series([10.0])).tolist()
    [nan]
    """
    array = values.to_numpy(dtype=float)
    count = len(array)
    if count < 2:
        return pd.Series(np.nan, index=values.index, dtype=float)
    # One sort for every worker (a 1,024-worker run has 1,024 of them): the others of the
    # worker at rank r are the sorted values less the r-th, whose j-th is sorted[j + (j >= r)].
    order = np.argsort(array, kind="stable")  # NaN sorts last
    rank = np.empty(count, dtype=np.intp)
    rank[order] = np.arange(count)
    ordered = array[order]
    low, high = (count - 2) // 2, (count - 1) // 2  # the others' middle one or two
    median = (ordered[low + (low >= rank)] + ordered[high + (high >= rank)]) / 2.0
    missing = np.isnan(array)
    median[(missing.sum() - missing) > 0] = np.nan  # a NaN among the others: unknown, as np.median says
    return pd.Series(median, index=values.index)


def starved(measured: Measurements, judged: pd.DataFrame, slowdown: pd.Series, is_slow: pd.Series) -> pd.Series:
    """Of the slower workers (``is_slow``, each ``slowdown`` times its peers), those whose
    run-queue wait explains it (``EXPLAINED_PART``, ``MIN_EXTRA_WAIT_SHARE``) or who waited
    at least as much as their peers beside ``BUSY_NEIGHBOURS_CORES`` of foreign work."""
    share = judged["task"].astype(str).map(dict(zip(measured.run_queue["task"].astype(str),
                                                    measured.run_queue["runq_wait_share"].astype(float))))
    share = share.astype(float)
    known = share.notna()
    if not (is_slow & known).any() or known.sum() < 2:
        return pd.Series(False, index=judged.index)
    typical = pd.Series(np.nan, index=judged.index)
    typical[known] = typical_of_others(share[known])
    explained = (1.0 - typical) / (1.0 - share).clip(lower=1e-6)
    by_wait = (share - typical >= MIN_EXTRA_WAIT_SHARE) & (explained - 1.0 >= EXPLAINED_PART * (slowdown - 1.0))
    around = measured.neighbours
    busy = around is not None and around.others_cores >= BUSY_NEIGHBOURS_CORES
    return is_slow & known & (by_wait | (busy & (share >= typical))) & ~_held_from_outside(measured, judged)


def _fed_slowly(measured: Measurements, judged: pd.DataFrame, slowdown: pd.Series, is_slow: pd.Series) -> pd.Series:
    """Of the slower workers (``is_slow``, each ``slowdown`` times its peers), those whose wait
    for input explains it, for ``input_bound`` to name: a wait of a share w of its steps
    (``breakdown.WARNING_INPUT_FRACTION`` or more) against the typical other worker's w0
    explains a slowdown of (1 - w0) / (1 - w), its steps with the typical wait, and explains
    the worker's where it accounts for ``EXPLAINED_PART`` of it. A worker held from outside
    stays a straggler: a stop lands in its input wait as much as in its compute."""
    shares = dict(zip(measured.workers["task"].astype(str), measured.workers["input_wait_frac"].astype(float)))
    share = judged["task"].astype(str).map(shares).astype(float)
    explained = (1.0 - typical_of_others(share)) / (1.0 - share).clip(lower=1e-6)
    explains = (share >= breakdown.WARNING_INPUT_FRACTION) & (explained - 1.0 >= EXPLAINED_PART * (slowdown - 1.0))
    return is_slow & explains & ~_held_from_outside(measured, judged)


def _held_from_outside(measured: Measurements, judged: pd.DataFrame) -> pd.Series:
    """Workers stopped (``_stopped_more``) or held (``_held_more``) more than their peers: a fault of their own."""
    return _stopped_more(measured, judged) | _held_more(measured, judged)


def _held_more(measured: Measurements, judged: pd.DataFrame) -> pd.Series:
    """Workers held from outside ``HELD_EXTRA_SHARE`` more than the typical other (``Measurements.held``)."""
    held = measured.held
    held = held[held["task"].isin(set(judged["task"].astype(str))) & held["held_share"].notna()]
    if len(held) < 2:
        return pd.Series(False, index=judged.index)
    extra = held["held_share"].astype(float) - typical_of_others(held["held_share"].astype(float))
    return judged["task"].astype(str).isin(set(held.loc[extra.to_numpy() >= HELD_EXTRA_SHARE, "task"]))


def _stopped_more(measured: Measurements, judged: pd.DataFrame) -> pd.Series:
    """Workers whose own sampler saw them stopped (late wake-ups, cgroup throttling:
    ``sync_steps.stopped_shares``) ``STOPPED_EXTRA_SHARE`` more than the typical other: a fault of
    their own, whatever their run-queue wait (a ``SIGSTOP`` wakes every thread to stop, and
    again to go on, each a wait on a busy host's run queue)."""
    shares = _sampled_long_enough(measured.stopped, judged)
    if len(shares) < 2:
        return pd.Series(False, index=judged.index)
    extra = shares["stopped_share"] - typical_of_others(shares["stopped_share"])
    stopped = set(shares.loc[extra >= STOPPED_EXTRA_SHARE, "task"])
    return judged["task"].astype(str).isin(stopped)


def _sampled_long_enough(stopped: pd.DataFrame, judged: pd.DataFrame) -> pd.DataFrame:
    """The ``stopped`` shares of the ``judged`` workers sampled over ``MIN_STOPPED_SPAN_S`` or more."""
    judged_tasks = set(judged["task"].astype(str))
    long_enough = stopped["task"].isin(judged_tasks) & (stopped["span_ns"] >= MIN_STOPPED_SPAN_S * 1e9)
    return stopped[long_enough].reset_index(drop=True)


def _slower(values: pd.Series, typical: pd.Series, scale: pd.Series, bar: float,
            standard_errors: pd.Series | None = None) -> pd.Series:
    """Slower by the ratio ``bar``, by at least ``MIN_GAP_NS`` on the worker's own step
    (``scale``: its examples per step when ``values`` are per example, else 1) and, where
    the values' ``standard_errors`` are known, by more than ``NOISE_SE`` standard errors of
    the difference (the typical other's taken as the others' median error)."""
    slower = (values / typical >= bar) & ((values - typical) * scale >= MIN_GAP_NS)
    if standard_errors is None:
        return slower
    noise = NOISE_SE * np.hypot(standard_errors, typical_of_others(standard_errors))
    return slower & ~(values - typical <= noise)  # an unknown error (NaN) holds nothing back


def detect(measured: Measurements) -> list[Finding]:
    findings = (_judged(measured) or _since_mid_run(measured)) if len(measured.workers) >= 2 else []
    named = {task for finding in findings for task in finding.tasks}
    return findings + _by_hold(measured, named)


def _judged(measured: Measurements) -> list[Finding]:
    """The stragglers of ``measured`` (by own compute where every synchronous worker's is
    stamped, else by step or period), each with what held the workers from outside."""
    own = _own_compute(measured)
    findings = _by_own_compute(measured, own) if own is not None else _by_step_or_period(measured)
    held = measured.held.dropna(subset=["held_share"]) if findings else None
    if held is not None and (held["held_share"] > 0).any():  # what held the workers from outside, if anything
        for finding in findings:
            finding.evidence["held_share"] = {str(row.task): round(float(row.held_share), 3) for row in held.itertuples()}
    return findings


def _since_mid_run(measured: Measurements) -> list[Finding]:
    """The stragglers of the run's last half or, failing that, its last quarter
    (``TAIL_SHARES``), judged by the same rules, among the workers that stepped before it
    (``MIN_RECORDS`` timed step records: a worker that joined or came back within it is in
    its warm-up), where the workers stepped together over ``MIN_SPAN_SHARE`` of it or more
    (a worker that failed or finished early in it leaves too little to compare); the
    prediction is the whole run's."""
    timed = measured.steps[~measured.steps["warmup"].astype(bool)]  # clocks aligned: a part is seconds, offsets ms
    for share in TAIL_SHARES:
        tail = measured.last_part(share)
        if tail is None or len(tail.workers) < 2:
            return []
        start_ns = measured.part_start_ns(share)
        overlap_ns = float(tail.compared["window_ns"].max()) if len(tail.compared) else 0.0
        if overlap_ns < MIN_SPAN_SHARE * (measured.stepping[1] - start_ns):
            continue
        before = timed.loc[timed["end_ns"] < start_ns, "task"].astype(str).value_counts()
        stepped_before = set(before[before >= MIN_RECORDS].index)
        findings = [finding for finding in _judged(tail) if set(finding.tasks) <= stepped_before]
        if findings:
            return [_over_last_part(finding, share) for finding in findings]
    return []


def _over_last_part(finding: Finding, share: float) -> Finding:
    """``finding``, judged over the run's last ``share``, said so; its speed-up ``s`` over that
    part is the whole run's 1 / (1 - share + share / s); info where ``s`` is under
    ``MIN_PART_WARNING_SPEEDUP``."""
    speedup = finding.recommendation.predicted_speedup
    whole_run = 1.0 / (1.0 - share + share / speedup) if speedup else None
    worth_it = speedup is None or speedup >= MIN_PART_WARNING_SPEEDUP
    return dataclasses.replace(
        finding,
        severity=finding.severity if worth_it else Severity.INFO,
        title=f"{finding.title} (over the run's last {share:.0%})",
        summary=f"Over the run's last {share:.0%}: {finding.summary}",
        evidence={**finding.evidence, "judged_last_share": share,
                  **({"predicted_speedup_over_it": round(speedup, 3)} if speedup else {})},
        recommendation=dataclasses.replace(finding.recommendation, predicted_speedup=whole_run),
    )


def _own_compute(measured: Measurements) -> pd.DataFrame | None:
    """Synchronous workers' own compute (``sync_steps``) where every worker's is stamped, else None."""
    if measured.synchronous:
        own = measured.own_times
        if len(own) == len(measured.workers):  # every worker's own compute, stamped before the all-reduce
            return own
    return None


def contended(measured: Measurements) -> pd.DataFrame:
    """The slower workers whose slowness their neighbours explain (``starved``), for
    ``host_contention``: ``task``, ``slowdown``, ``runq_wait_share`` and the typical other
    worker's ``typical_wait_share``; empty when none."""
    columns = ["task", "slowdown", "runq_wait_share", "typical_wait_share"]
    if len(measured.workers) < 2:
        return pd.DataFrame(columns=columns)
    own = _own_compute(measured)
    if own is not None:
        judged = own[own["records"] >= MIN_RECORDS].reset_index(drop=True)
        slowdown, is_slow, _ = _compute_slowdown(measured, judged) if len(judged) >= 2 else (None, None, None)
    else:
        judged = measured.compared
        slowdown, is_slow = _step_or_period(measured, judged)[-2:] if len(judged) >= 2 else (None, None)
    if slowdown is None:
        return pd.DataFrame(columns=columns)
    is_starved = starved(measured, judged, slowdown, is_slow)
    if not is_starved.any():
        # Among them a worker without run-queue samples while it stepped (a TF1 non-chief that
        # trained only its last seconds): no wait share, so no evidence; with fewer than two
        # shares known no worker has a peer to be starved against (``starved``).
        return pd.DataFrame(columns=columns)
    share = judged["task"].astype(str).map(dict(zip(measured.run_queue["task"].astype(str),
                                                    measured.run_queue["runq_wait_share"]))).astype(float)
    typical = typical_of_others(share.dropna()).reindex(judged.index)
    return pd.DataFrame({"task": judged["task"].astype(str), "slowdown": slowdown, "runq_wait_share": share,
                         "typical_wait_share": typical})[is_starved].reset_index(drop=True)


def _per_example(judged: pd.DataFrame) -> tuple[bool, pd.Series]:
    """Whether the workers' examples per step differ by more than ``EXAMPLES_PER_STEP_SPREAD``,
    and each worker's scale: its examples per step then (times are compared per example and
    a gap taken back on the worker's own step), else 1."""
    eps = judged["examples_per_step"]
    per_example = bool((eps > 0).all() and eps.max() / eps.min() > EXAMPLES_PER_STEP_SPREAD)
    return per_example, eps if per_example else pd.Series(1.0, index=judged.index)


def _ms(value) -> float:
    return round(float(value) / 1e6, 2)


def _pct(value) -> str:
    return f"{float(value):.0%}"


def _step_or_period(measured: Measurements, judged: pd.DataFrame) -> tuple:
    """The metric of ``_by_step_or_period``: ``(per_example, scale, typical step, typical period,
    step slowdown, period slowdown, slower by step, slower by period, slowdown, slower)``."""
    per_example, scale = _per_example(judged)
    step, period = judged["p50_ns"] / scale, judged["period_ns"] / scale
    typical, typical_period = typical_of_others(step), typical_of_others(period)
    step_slowdown, period_slowdown = step / typical, period / typical_period
    nan = pd.Series(np.nan, index=judged.index)
    step_se, period_se = (judged.get(column, nan).astype("float64") / scale for column in ("p50_se_ns", "period_se_ns"))
    by_step = _slower(step, typical, scale, WARNING_SLOWDOWN, step_se)
    by_period = _slower(period, typical_period, scale, WARNING_SLOWDOWN, period_se) & (not measured.synchronous)
    if per_example:
        # Slower per example but not per step: a worker with fewer examples per step pays a
        # step's fixed cost over fewer of them (ps_fit shard-skew=1:3: 19.7 ms steps of 512
        # examples on worker 0 against 32.5 ms of 1536 on worker 1). No slow worker.
        by_step &= judged["p50_ns"] > typical_of_others(judged["p50_ns"])
        by_period &= judged["period_ns"] > typical_of_others(judged["period_ns"])
    slowdown = period_slowdown.where(by_period & (period_slowdown > step_slowdown), step_slowdown)
    return (per_example, scale, typical, typical_period, step_slowdown, period_slowdown, by_step, by_period,
            slowdown, by_step | by_period)


def _compute_slowdown(measured: Measurements, judged: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """The metric of ``_by_own_compute``: each worker's compute over the typical other's, whether
    it is slower, and its scale (examples per step where compared per example, else 1)."""
    per_example, scale = _per_example(judged)
    compute = judged["compute_p50_ns"] / scale
    typical = typical_of_others(compute)
    return compute / typical, _slower(compute, typical, scale, WARNING_SLOWDOWN), scale


def _by_step_or_period(measured: Measurements) -> list[Finding]:
    """Workers compared fairly (``Measurements.compared``) by median step and, asynchronously,
    by step period; predicted as if the stragglers stepped (or started steps) like the
    typical other worker."""
    judged = measured.compared
    if len(judged) < 2:
        return []
    per_example, scale, typical, typical_period, step_slowdown, period_slowdown, by_step, by_period, slowdown, is_slow = \
        _step_or_period(measured, judged)
    # Starved by its neighbours: host_contention's; slower for its input: input_bound's. Not stragglers.
    not_its_own = starved(measured, judged, slowdown, is_slow) | _fed_slowly(measured, judged, slowdown, is_slow)
    by_step, by_period = by_step & ~not_its_own, by_period & ~not_its_own
    slow = judged[by_step | by_period]
    if slow.empty:
        return []
    if by_period[slow.index].any():
        # What if the stragglers started steps as often (per example) as the other workers?
        new_period = judged["period_ns"].where(~by_period, typical_period * scale)
        slowdown = period_slowdown.where(by_period, step_slowdown)
    else:
        # What if the stragglers stepped like the typical worker?
        new_mean = judged["mean_ns"].where(~by_step, typical_of_others(judged["mean_ns"] / scale) * scale)
        new_period = judged["period_ns"] - (judged["mean_ns"] - new_mean)
        slowdown = step_slowdown
    if measured.synchronous:  # (only a step can be slower: synchronous periods are equal)
        speedup = predicted_speedup(judged, new_mean, synchronous=True)
    else:  # under ParameterServerStrategy the job's pace (closure_gaps), else each worker's steps in the run
        ratio = new_period.clip(lower=1.0) / judged["period_ns"]
        speedup = (paced_speedup(measured, judged["task"], new_period / judged["period_ns"])
                   or speedup_over_run(measured.workers, judged["task"], ratio))
    typical, typical_period = typical * scale, typical_period * scale
    tasks, worst = tuple(slow["task"]), float(slowdown[slow.index].max())
    names, unit = ", ".join(tasks), "per example" if per_example else "per step"
    # Shares of the whole run's steps (a starved worker runs fewer of them).
    run_steps = dict(zip(measured.workers["task"], measured.workers["steps"].astype(int)))
    total_steps = max(sum(run_steps.values()), 1)
    judged_rows, slow_rows = list(judged.itertuples()), list(slow.itertuples())  # each itertuples() costs
    if by_period[slow.index].all() and not by_step[slow.index].any():  # starved between steps
        title = f"{names} {'starts' if len(tasks) == 1 else 'start'} steps {worst:.1f}x less often than the other workers"
        summary = (
            f"{names} ran {', '.join(f'{run_steps[row.task] / total_steps:.0%}' for row in slow_rows)} of the "
            f"steps, one every {float(slow['period_ns'].max()) / 1e6:.1f} ms against "
            f"{float(typical_period[slow.index].min()) / 1e6:.1f} ms for the other workers, with about the same step "
            "time: it loses its time between steps."
        )
    else:
        title = f"{names} {'is' if len(tasks) == 1 else 'are'} {worst:.1f}x slower {unit} than the other workers"
        summary = (
            f"Median step time of {names} is {float(slow['p50_ns'].max()) / 1e6:.1f} ms against "
            f"{float(typical[slow.index].min()) / 1e6:.1f} ms for the other workers"
            + (" at its number of examples per step" if per_example else "")
            + (", over the time every worker ran." if judged["window_ns"].iloc[0] else ".")
        )
    evidence = {
        "step_time_ms_p50": {row.task: _ms(row.p50_ns) for row in judged_rows},
        "typical_step_ms": _ms(typical[slow.index].min()),
        "step_period_ms": {row.task: _ms(row.period_ns) for row in judged_rows},
        "typical_period_ms": _ms(typical_period[slow.index].min()),
        "slowdown": {row.task: round(float(slowdown[row.Index]), 2) for row in slow_rows},
        "compared": unit,
        "examples_per_step": {row.task: round(float(row.examples_per_step), 1) for row in judged_rows},
        "overlap_s": round(float(judged["window_ns"].iloc[0]) / 1e9, 3) or None,  # None: the whole run
        "steps": run_steps,
        "step_share": {task: round(steps / total_steps, 3) for task, steps in run_steps.items()},
        "compared_steps": {row.task: int(row.steps) for row in judged_rows},
    }
    unjudged = sorted(set(measured.workers["task"]) - set(judged["task"]))
    if unjudged:
        evidence["not_judged"] = {task: f"fewer than {MIN_RECORDS} timed steps over part of the run"
                                  for task in unjudged}
    waits = {task: round(seconds, 1) for task, seconds in (measured.session_waits or {}).items()
             if task in set(measured.workers["task"])}
    if waits:
        evidence["chief_wait_s"] = waits
    change = None if measured.synchronous else (
        f"Fix or replace the host of {names} (check its CPU load, quota, throttling and neighbours); "
        "ParameterServerStrategy already gives it fewer closures, but the job loses what it does not run.")
    return [_finding(tasks, worst, title, summary, evidence, speedup, change=change)]


def _by_own_compute(measured: Measurements, own: pd.DataFrame) -> list[Finding]:
    """Synchronous workers judged by their own compute before the all-reduce (``sync_steps``):
    median compute against the typical other worker's, per example where their batches
    differ; predicted as if the stragglers computed as fast (input waits kept: a slow
    pipeline is ``input_bound``'s). With none slower, by the share of their steps their
    process could not run (``_by_stopped_share``)."""
    judged = own[own["records"] >= MIN_RECORDS].reset_index(drop=True)
    if len(judged) < 2:
        return []
    per_example, _ = _per_example(judged)
    slowdown, is_slow, scale = _compute_slowdown(measured, judged)
    typical = judged["compute_p50_ns"] / scale / slowdown
    is_slow = is_slow & ~starved(measured, judged, slowdown, is_slow)  # starved: host_contention's
    if not is_slow.any():
        return _by_stopped_share(measured, judged)
    new_compute = judged["compute_ns"].where(~is_slow, typical_of_others(judged["compute_ns"] / scale) * scale)
    new_own = judged["input_ns"] + new_compute
    slow = judged[is_slow]
    tasks, names, worst = tuple(slow["task"]), ", ".join(slow["task"]), float(slowdown[is_slow].max())
    unit = "per example" if per_example else "per step"
    rows = list(judged.itertuples())
    return [_finding(
        tasks, worst,
        title=f"{names} {'computes' if len(tasks) == 1 else 'compute'} {worst:.1f}x longer {unit} than the other "
              "workers; every synchronous step waits for it",
        summary=(f"Before the all-reduce, {names} computes for a median {_ms(slow['compute_p50_ns'].max())} ms a step "
                 f"against {_ms((typical * scale)[is_slow].min())} ms for the other workers, which wait for it: every "
                 f"worker's step takes {_ms(judged['step_ns'].max())} ms."),
        evidence={
            "compute_ms_p50": {row.task: _ms(row.compute_p50_ns) for row in rows},
            "typical_compute_ms": _ms((typical * scale)[is_slow].min()),
            "own_ms_mean": {row.task: _ms(row.own_ns) for row in rows},
            "input_wait_ms_mean": {row.task: _ms(row.input_ns) for row in rows},
            "slowdown": {row.task: round(float(slowdown[row.Index]), 2) for row in slow.itertuples()},
            "compared": unit,
            "examples_per_step": {row.task: round(float(row.examples_per_step), 1) for row in rows},
            "step_ms_mean": _ms(judged["step_ns"].max()),
            "shared_ms": _ms(shared_ns(judged)),
            "predicted_step_ms": _ms(shared_ns(judged) + new_own.max()),
            "waiting_for_it_ms_per_step": waiting_for_slowest_ms(judged, set(tasks)),
            "compared_steps": {row.task: int(row.records) for row in rows},
        },
        speedup=speedup_with_own(judged, new_own),
    )]


def _by_stopped_share(measured: Measurements, judged: pd.DataFrame) -> list[Finding]:
    """Synchronous workers whose process could not run for a much larger share of their steps
    than the others' (a CPU quota, ``SIGSTOP``), from their samplers' late wake-ups, cgroup
    throttling and the other workers' probes (``sync_steps.with_probed_shares``); predicted
    as if they had been stopped only as much as the typical other worker."""
    shares = _sampled_long_enough(measured.stopped, judged)
    if len(shares) < 2:
        return []
    share, typical = shares["stopped_share"], typical_of_others(shares["stopped_share"])
    is_stopped = ((share - typical >= STOPPED_EXTRA_SHARE) & (share >= STOPPED_RATIO * typical)
                  & past_noise(share, shares["count"], typical, typical_of_others(shares["count"])))
    if not is_stopped.any():
        return []
    worst = (share - typical)[is_stopped].idxmax()
    step_ns = float(judged["step_ns"].max())
    new_step_ns = step_if_running_as_peers(step_ns, float(share[worst]), float(typical[worst]))
    slow = shares[is_stopped]
    tasks, names = tuple(slow["task"]), ", ".join(slow["task"])
    slowdown = step_ns / max(new_step_ns, 1.0)

    seen = (f"the other workers' probes of its state found it stopped {round(share[worst] * slow['count'][worst])} "
            f"times of {int(slow['count'][worst])}" if slow["by_probes"][worst] else
            f"its sampler woke {LATE_WAKE_S * 1e3:.0f} ms or more late {int(slow['late_wakes'].max())} times of "
            f"{int(slow['wakes'].max())}")
    return [_finding(
        tasks, slowdown,
        title=f"{names} could not run for {_pct(share[is_stopped].max())} of its steps against "
              f"{_pct(typical[is_stopped].min())} for the other workers; every synchronous step waits for it",
        summary=(f"The process of {names} was stopped or throttled (a CPU quota, a stopped process) for about "
                 f"{_pct(share[is_stopped].max())} of the time it stepped: {seen}. The other workers "
                 f"wait for it in every all-reduce, so every worker's step takes {step_ns / 1e6:.1f} ms."),
        evidence={
            "stopped_share": {row.task: round(float(row.stopped_share), 3) for row in shares.itertuples()},
            "stopped_share_from": {row.task: "probes" if row.by_probes else "own sampler" for row in shares.itertuples()},
            "typical_stopped_share": round(float(typical[is_stopped].min()), 3),
            "late_wakes": {row.task: f"{int(row.late_wakes)}/{int(row.wakes)}" for row in shares.itertuples()},
            "late_s": {row.task: round(float(row.late_ms) / 1e3, 2) for row in shares.itertuples()},
            "throttled_s": {row.task: None if math.isnan(row.throttled_ms) else round(float(row.throttled_ms) / 1e3, 2)
                            for row in shares.itertuples()},
            "stopped_s": {row.task: round(float(row.stopped_share * row.span_ns) / 1e9, 2) for row in slow.itertuples()},
            "compute_ms_p50": {row.task: _ms(row.compute_p50_ns) for row in judged.itertuples()},
            "step_ms_mean": round(step_ns / 1e6, 2),
            "predicted_step_ms": round(new_step_ns / 1e6, 2),
            # While it is stopped every other worker waits for it: the step it would save.
            "waiting_for_it_ms_per_step": {row.task: round((step_ns - new_step_ns) / 1e6, 2)
                                           for row in shares.itertuples() if row.task not in tasks},
            "slowdown": {task: round(slowdown, 2) for task in tasks},
        },
        speedup=slowdown,
        action=f"Give {names} the CPU its peers have.",
        change=(f"Lift the CPU quota or throttling of {names} (its container's cpu.max / CPU limit) or move it "
                "off the host that starves it; every synchronous step waits for it."),
    )]


def _by_hold(measured: Measurements, named: set[str]) -> list[Finding]:
    """Workers not in ``named`` whose hold from outside (``Measurements.held``) alone makes them
    ``WARNING_SLOWDOWN`` slower than the typical other worker and is ``HELD_EXTRA_SHARE`` above
    its; predicted as if nothing held them: asynchronously, each worker's steps at its
    period over the time it stepped (a worker that stepped the run's last seconds adds
    those), synchronously every step at the slowest one's pace."""
    held = measured.held.dropna(subset=["held_share"])
    held = held[held["task"].isin(set(measured.workers["task"].astype(str)))].reset_index(drop=True)
    if held.empty:
        return []
    share = held["held_share"].astype(float)
    typical = typical_of_others(share).fillna(0.0)
    slowdown = (1.0 - typical) / (1.0 - share).clip(lower=1e-6)
    is_held = (share - typical >= HELD_EXTRA_SHARE) & (slowdown >= WARNING_SLOWDOWN) & ~held["task"].isin(named)
    if not is_held.any():
        return []
    slow = held[is_held]
    tasks, names, worst = tuple(slow["task"]), ", ".join(slow["task"]), float(slowdown[is_held].max())
    ratio = 1.0 / slowdown[is_held]  # each held worker's period, unheld
    if measured.synchronous:
        speedup = worst
    else:
        speedup = paced_speedup(measured, slow["task"], ratio) or speedup_over_run(measured.workers, slow["task"], ratio)

    rows = list(held.itertuples())
    return [_finding(
        tasks, worst,
        title=f"{names} {'was' if len(tasks) == 1 else 'were'} held from outside for {_pct(share[is_held].max())} of "
              f"{'its' if len(tasks) == 1 else 'their'} stepping against {_pct(typical[is_held].min())} for the "
              "other workers",
        summary=(f"The process of {names} was throttled by its cgroup's CPU quota or stopped by a signal for "
                 f"{_pct(share[is_held].max())} of the time it stepped (its samplers' readings of its cgroup and of its "
                 f"state): that alone makes it {worst:.2f}x slower, whatever its steps compared with the other "
                 "workers' show. Nothing in a job stops or throttles its own process."),
        evidence={
            "held_share": {row.task: round(float(row.held_share), 3) for row in rows},
            "throttled_share": {row.task: None if math.isnan(row.throttled_share) else round(float(row.throttled_share), 3)
                                for row in rows},
            "stopped_share": {row.task: None if math.isnan(row.stopped_share) else round(float(row.stopped_share), 3)
                              for row in rows},
            "typical_held_share": round(float(typical[is_held].min()), 3),
            "slowdown": {row.task: round(float(slowdown[row.Index]), 2) for row in slow.itertuples()},
            "steps": dict(zip(measured.workers["task"].astype(str), measured.workers["steps"].astype(int))),
        },
        speedup=speedup,
        action=f"Lift what holds {names} from outside.",
        change=(f"Raise or remove the CPU quota of {names} (its container's cpu.max / CPU limit), or find what "
                "stops its process (a debugger, a job scheduler's SIGSTOP)."),
    )]


def _finding(tasks: tuple[str, ...], worst: float, title: str, summary: str, evidence: dict, speedup: float | None,
             *, action: str | None = None, change: str | None = None) -> Finding:
    """The straggler finding naming ``tasks``, ``worst`` times slower (critical from
    ``CRITICAL_SLOWDOWN``); by default it advises bringing them up to speed on a fixed host."""
    names = ", ".join(tasks)
    return Finding(
        kind=KIND,
        severity=Severity.CRITICAL if worst >= CRITICAL_SLOWDOWN else Severity.WARNING,
        title=title,
        summary=summary,
        tasks=tasks,
        evidence=evidence,
        recommendation=Recommendation(
            action=action or f"Bring {names} up to the speed of the other workers.",
            change=change or f"Fix or replace the host of {names}; every synchronous step waits for it.",
            predicted_speedup=speedup,
        ),
    )
