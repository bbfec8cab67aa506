"""Runs one drawn trial (``trial_space.Trial``) on a local cluster: hogs, the fault, its fix.

Every fault comes from outside the job or from the job's own code path: the launcher's
injections (``--inject`` of the sample jobs; its delaying proxy for user jobs too), a stop
duty cycle, a cgroup CPU quota or a stop put on a task's process
(``benchmarks/harness/faults.py``), the user jobs' own options (a slow reader, a raised exception). Background hogs are busy-loop
processes started before the job and killed after it. An outside fault of a ``mid`` onset
starts once the job has done ``trial_space.ONSET_SHARE`` of its steps, read from its records
as they are written (``_after_onset``); the fault run records when it started against the
training (``describe_onset``), which the judge reads. The fix run, when drawn, runs the
same job with the trial's fix: the sample job's ``--tune`` for the planted kind
(``src/tfdiag/sample_jobs/advice.py``) with the fault kept, or the fault removed. From
``REPEAT_SEEDS`` on, the pair runs twice in mirrored order (fault, fix, fix, fault, or the
reverse: a drift of the host's load weighs on both sides alike): the second pair's rates
(``repeat``) tell how far one pair's speed-up is from another's on this host, the floor
under any prediction error measured with it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.harness import faults
from benchmarks.harness.progress import Progress, training_span
from benchmarks.trial_space import DUTY_ON_MS, ONSET_SHARE, ONSET_TIMEOUT_S, REPEAT_SEEDS, Trial
from benchmarks.userjobs import gen_fit, ps_embed, ps_tutorial, tf1_feed
from benchmarks.userjobs.runner import run_cluster
from tfdiag.analysis.detectors.stalled import STALL_FLOOR_S
from tfdiag.analysis.engine import analyze
from tfdiag.sample_jobs.advice import tune_options
from tfdiag.sample_jobs.jobs import JOBS, JobConfig
from tfdiag.sample_jobs.proxy import SWITCH_ENV_VAR
from tfdiag.sample_jobs.zygote import die_with

RUN_TIMEOUT_S = 240
FAILING_TIMEOUT_S = 120  # a job whose task raised may hang in a collective: ended after this
HUNG_STEPS_FACTOR = 50  # a job to be hung runs far more steps than the stop lets it
HANG_GIVE_UP_S = 100.0
PROGRESS_POLL_S = 0.25  # how often a mid-run onset reads the job's progress
# A stop-duty trial held by a cgroup (``trial_space.HOLDERS``): the worker's CPU over the
# DEMAND_S before its onset (read every METER_S), divided by the strength, is its quota,
# renewed every QUOTA_PERIOD_MS (a container runtime's default CFS period).
DEMAND_S = 1.0
METER_S = 0.1
QUOTA_PERIOD_MS = 100.0
MIN_DEMAND_CORES = 0.01
USER_COMMANDS = {"ps_embed": ps_embed.TASK_COMMAND, "gen_fit": gen_fit.TASK_COMMAND,
                 "tf1_feed": tf1_feed.TASK_COMMAND, "ps_tutorial": ps_tutorial.TASK_COMMAND}
# The finding each fault must produce (docs/benchmarks.md, "Randomized trials").
EXPECTED_KIND = {"stop-duty": "straggler", "proxy": "slow_link", "input": "input_bound",
                 "shard-skew": "shard_imbalance", "hot-ps": "ps_hotspot", "kill": "task_failure",
                 "stop": "stalled", "exception": "task_failure"}


def _inject(trial: Trial, steps: int) -> tuple[str, ...]:
    """The launcher's ``--inject`` entries of the fault (the proxy serves user jobs too)."""
    index = int(trial.task.rpartition(":")[2] or 0)
    if trial.fault == "proxy":
        return (faults.slow_ps(index, trial.ms),)
    if trial.spec.kind != "sample":
        return ()
    if trial.fault == "input":
        return (f"slow-input={index}:{trial.ms:.1f}" if trial.task else f"input-delay={trial.ms:.1f}",)
    if trial.fault == "shard-skew":
        return (f"shard-skew={index}:{trial.strength:.2f}",)
    if trial.fault == "hot-ps":
        return ("hot-ps=0",)
    if trial.fault == "kill":
        return (f"kill-worker=1@{steps // 4}+restart",)
    return ()


def _extra(trial: Trial, steps: int) -> dict:
    """The user job's options of the fault (``JobConfig.extra``)."""
    index = int(trial.task.rpartition(":")[2] or 0)
    extra = {"steps_per_closure": 1} if trial.job == "ps_tutorial" else {}
    if trial.fault == "input":
        extra.update(slow_worker=index, input_ms=trial.ms)
    elif trial.fault == "hot-ps":
        extra["hot_ps"] = True
    elif trial.fault == "exception":
        extra.update(raise_at=steps // 3, raise_worker=index)
    return extra


def config_for(trial: Trial, logdir: Path, side: str) -> JobConfig:
    """The job's configuration for the fault run (``side="fault"``) or the fix run (``"fix"``)."""
    spec = trial.spec
    steps = spec.steps * (HUNG_STEPS_FACTOR if trial.fault == "stop" else 1)
    ps = 2 if spec.shape in ("ps_ctl", "ps_fit", "tf1_session") else 0
    if spec.kind == "user":
        extra = _extra(trial if side == "fault" else dataclasses.replace(trial, fault="none"), steps)
        inject = _inject(trial, steps) if side == "fault" else ()
        return JobConfig(spec.shape, str(logdir), steps=steps, ps=ps, workers=2, inject=inject, extra=extra)
    inject, tune = _inject(trial, steps), ()
    if side == "fix":
        base = JobConfig(trial.job, str(logdir), steps=steps, ps=ps, workers=2)
        tune = tune_options(EXPECTED_KIND.get(trial.fault), base)
        inject = inject if tune else ()  # a tuning is tried on the fault; otherwise the fault is removed
    return JobConfig(trial.job, str(logdir), steps=steps, ps=ps if JOBS[trial.job].ps else 0, workers=2,
                     inject=inject, tune=tune)


def fix_description(trial: Trial) -> str:
    config = config_for(trial, Path("-"), "fix")
    return " ".join(f"--tune {t}" for t in config.tune) or "fault removed"


def _wait_for_onset(trial: Trial, logdir: Path, ended) -> dict | None:
    """Until the job has done ``JobDef.onset_steps`` of its steps, read from its own records as
    they are written (``harness.progress``), or ``ONSET_TIMEOUT_S`` passed; how the onset came
    (``by``: ``progress`` or ``timeout``, and the job's steps then), or None when ``ended``
    (called with the seconds it may wait) said the job ended first: the fault is never started."""
    spec, progress = trial.spec, Progress(logdir)
    deadline = time.monotonic() + ONSET_TIMEOUT_S
    while True:
        steps = progress.poll().job_steps(spec.synchronous, spec.closure_steps)
        if steps >= spec.onset_steps:
            return {"by": "progress", "onset_step": steps}
        if time.monotonic() >= deadline:
            return {"by": "timeout", "onset_step": steps}
        if ended(PROGRESS_POLL_S):
            return None


def _onset_record(trial: Trial, mid: bool) -> dict:
    """What a trial records of its outside fault's onset before it starts (``onset_time_ns``
    stays None if it never does); ``describe_onset`` adds where that fell in the training."""
    return {"rule": f"{ONSET_SHARE:.3g} of {trial.spec.steps} steps" if mid else "start",
            "target_step": trial.spec.onset_steps if mid else 0, "by": None, "onset_step": None,
            "onset_time_ns": None}


@contextlib.contextmanager
def _after_onset(trial: Trial, logdir: Path, onset: dict, start, stop):
    """``start()`` now (a ``start`` onset), or on a thread once the job has done a share of its
    steps (``_wait_for_onset``: a ``mid`` onset defined by progress, not by a delay, so it falls
    inside training however long that takes); ``stop(handle)`` on exit. ``onset`` gets how and
    when the fault started (nothing, if the job ended first: the fault never ran)."""
    handles, done = [], threading.Event()
    onset.update(_onset_record(trial, trial.onset == "mid"))

    def begin():
        onset["onset_time_ns"] = time.time_ns()
        handles.append(start())

    def later():
        reached = _wait_for_onset(trial, logdir, done.wait)
        if reached is not None and not done.is_set():
            onset.update(reached)
            begin()

    if trial.onset == "mid":
        thread = threading.Thread(target=later, daemon=True)
        thread.start()
    else:
        onset.update(by="start", onset_step=0)
        begin()
    try:
        yield
    finally:
        done.set()
        if trial.onset == "mid":
            thread.join()
        for handle in handles:
            stop(handle)


def describe_onset(onset: dict, logdir: Path, task: str, fault: str) -> dict:
    """``onset`` with where it fell in the run's training, from its step records after the run:
    ``over`` (the steps of the worker ``task`` slows, else the whole job's: a ``stop`` ends its
    worker's steps, and a proxy slows every worker), the training's first and last
    step (``training_first_ns``, ``training_last_ns``), ``after_start_s`` and ``before_end_s``
    (from the first step's begin to the onset, from the onset to the last step's end: negative
    when it came after) and ``steps_after`` (training steps that ended after it)."""
    over = task if task.startswith("worker:") and fault != "stop" else None
    span = training_span(logdir, over)
    if span.last_ns is None and over is not None:  # a worker that never recorded a step: the job's
        over, span = None, training_span(logdir)
    at = onset.get("onset_time_ns")
    known = at is not None and span.last_ns is not None
    return {**onset, "over": over or "job", "training_first_ns": span.first_ns, "training_last_ns": span.last_ns,
            "after_start_s": round((at - span.first_ns) / 1e9, 2) if known else None,
            "before_end_s": round((span.last_ns - at) / 1e9, 2) if known else None,
            "steps_after": span.steps_after(at) if known else None}


def while_running(trial: Trial, logdir: Path, hung: dict, onset: dict):
    """The outside fault of the fault run, as ``run_cluster``'s ``while_running``; ``onset``
    gets when it started (``_after_onset``)."""
    if trial.fault == "stop-duty" and trial.holder == "cgroup":
        return lambda cluster: _cgroup_held(trial, logdir, onset, cluster.tasks[trial.task].process.pid)
    if trial.fault == "stop-duty":
        off_ms = DUTY_ON_MS * (trial.strength - 1)
        return lambda cluster: _after_onset(
            trial, logdir, onset,
            lambda: faults.cpu_quota(cluster.tasks[trial.task].process.pid, DUTY_ON_MS, off_ms),
            lambda quota: quota.stop())
    if trial.fault == "proxy" and trial.onset == "mid":
        switch = logdir / "proxy-delay-on"
        return lambda cluster: _after_onset(trial, logdir, onset, lambda: switch.touch(),
                                            lambda _: switch.unlink(missing_ok=True))
    if trial.fault == "stop":
        return lambda cluster: _hang(cluster, trial, logdir, hung, onset)
    return None


@contextlib.contextmanager
def _cgroup_held(trial: Trial, logdir: Path, onset: dict, pid: int):
    """From the onset, a cgroup CPU quota on ``pid`` of 1/strength of the CPU it used over the
    ``DEMAND_S`` before (read by a meter running since the job started, so the quota starts
    at the onset); ``onset`` gets that demand, the quota, and the time the kernel held it."""
    meter = _CpuMeter(pid)

    def hold() -> faults.cgroup_quota:
        demand = meter.cores()
        onset.update(demand_cores=round(demand, 3), quota_cores=round(demand / trial.strength, 3))
        return faults.cgroup_quota.of_cores(pid, max(demand, MIN_DEMAND_CORES) / trial.strength, QUOTA_PERIOD_MS)

    try:
        with _after_onset(trial, logdir, onset, hold,
                          lambda quota: (onset.update(throttled_s=round(quota.throttled_s(), 2)), quota.stop())):
            yield
    finally:
        meter.stop()


class _CpuMeter:
    """The CPU time of a process and its children, read every ``METER_S`` on a thread of its own."""

    def __init__(self, pid: int):
        self._pid = pid
        self._readings: collections.deque[tuple[float, float]] = collections.deque(maxlen=64)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cpu-meter-{pid}", daemon=True)
        self._thread.start()

    def cores(self) -> float:
        """The cores it used over the ``DEMAND_S`` up to its last reading (the span it has, if shorter)."""
        readings = list(self._readings)
        if len(readings) < 2:
            return 0.0
        end_time, end_cpu = readings[-1]
        start_time, start_cpu = next(((t, c) for t, c in reversed(readings) if end_time - t >= DEMAND_S), readings[0])
        return (end_cpu - start_cpu) / (end_time - start_time)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.is_set():
            self._readings.append((time.monotonic(), faults.cpu_seconds(self._pid)))
            self._done.wait(METER_S)


@contextlib.contextmanager
def _hang(cluster, trial: Trial, logdir: Path, hung: dict, onset: dict):
    """Stops the task mid-run (the mid-run onset of ``_after_onset``) and keeps it stopped;
    analyses the hung run until ``stalled`` appears (or ``HANG_GIVE_UP_S``), keeps that
    report in ``hung``, then ends the job. A job that ended before the onset is left alone."""
    onset.update(_onset_record(trial, mid=True))
    process = cluster.tasks[trial.task].process
    reached = _wait_for_onset(trial, logdir, lambda wait_s: time.sleep(wait_s) or process.poll() is not None)
    if reached is None or process.poll() is not None:
        yield
        return
    onset.update(reached, onset_time_ns=time.time_ns())
    with faults.stall(process.pid):
        stopped = time.monotonic()
        time.sleep(STALL_FLOOR_S + 5)
        while True:
            report = analyze(logdir).to_dict()
            hung.update(report=report, after_s=round(time.monotonic() - stopped, 1))
            if any(f["kind"] == "stalled" for f in report["findings"]) or time.monotonic() - stopped > HANG_GIVE_UP_S:
                break
            time.sleep(5)
        cluster.interrupt(signal.SIGTERM)
        yield


@contextlib.contextmanager
def hogs(count: int):
    """``count`` busy-loop processes beside the job; killed (by pid) on exit, and with the
    trial's process if it is killed first (a stopped batch left one busy on 7 December)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=die_with(os.getpid()))
             for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def run_side(trial: Trial, side: str, workdir: Path, repeat: bool = False) -> dict:
    """Runs the fault or fix run of a trial (``repeat``: its second one, in a logdir of its
    own); its logdir, job rate, exit code, wall time and report."""
    logdir = workdir / f"seed-{trial.seed}-{side}{'-repeat' if repeat else ''}"
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    config = config_for(trial, logdir, side)
    hung: dict = {}
    onset: dict = {}
    fault_side = side == "fault"
    command = USER_COMMANDS.get(trial.job)
    timeout = FAILING_TIMEOUT_S if fault_side and trial.fault == "exception" else RUN_TIMEOUT_S
    mid_proxy = fault_side and trial.fault == "proxy" and trial.onset == "mid"
    if mid_proxy:  # the launcher's proxy delays only while this file exists
        os.environ[SWITCH_ENV_VAR] = str(logdir / "proxy-delay-on")
    started = time.monotonic()
    try:
        code, summary = run_cluster(config, logdir / "launcher.log", timeout, task_command=command,
                                    while_running=while_running(trial, logdir, hung, onset) if fault_side else None)
    finally:
        os.environ.pop(SWITCH_ENV_VAR, None)
    wall_s = time.monotonic() - started
    report = hung.get("report") or analyze(logdir).to_dict()
    return {"logdir": str(logdir), "config": {"inject": list(config.inject), "tune": list(config.tune),
                                              "extra": config.extra, "steps": config.steps},
            "exit": code, "examples_per_s": summary.examples_per_s if summary else None,
            "steady_examples_per_s": summary.steady_examples_per_s if summary else None, "wall_s": round(wall_s, 1),
            "found_after_s": hung.get("after_s"), "findings": findings_of(report),
            "onset": describe_onset(onset, logdir, trial.task, trial.fault) if onset else None}


def findings_of(report: dict) -> list[dict]:
    """A report's findings as a results file keeps them: kind, severity, tasks, title, prediction."""
    return [{k: f[k] for k in ("kind", "severity", "tasks", "title")}
            | {"predicted": f["recommendation"]["predicted_speedup"]} for f in report["findings"]]


def run_trial(trial: Trial, workdir: Path) -> dict:
    """Both runs of a trial (the fix only when drawn, in the drawn order; from ``REPEAT_SEEDS``
    the pair again in the mirrored order, ``repeat``), beside its hogs."""
    sides = ["fault", "fix"] if trial.fix else ["fault"]
    if trial.fix and trial.fix_first:
        sides.reverse()
    repeats = list(reversed(sides)) if trial.fix and trial.seed >= REPEAT_SEEDS else []
    load = [os.getloadavg()[0]]
    runs, repeat = {}, {}
    with hogs(trial.hogs):
        for side, again in [(side, False) for side in sides] + [(side, True) for side in repeats]:
            run = run_side(trial, side, workdir, again)
            if again:
                repeat[side] = {key: run[key] for key in ("logdir", "exit", "examples_per_s", "steady_examples_per_s",
                                                          "wall_s")}
            else:
                runs[side] = run
            load.append(os.getloadavg()[0])
            print(f"  {side}{' again' if again else ''}: exit {run['exit']}, {run['examples_per_s']} examples/s, "
                  f"{run['wall_s']} s, load {load[-1]:.1f}", file=sys.stderr, flush=True)
    return {"runs": runs, "load1": load, "cores": os.cpu_count(),
            "fix_description": fix_description(trial) if trial.fix else None} | ({"repeat": repeat} if repeat else {})
