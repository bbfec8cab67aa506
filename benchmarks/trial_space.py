"""The declared space of ``benchmarks/trials.py``: what a seed draws, and the holdout.

A trial is drawn from its seed alone (``draw(seed)``, ``random.Random(seed)``), so a seed
names the same trial on every machine and a results file can be resumed or re-run.

Space, in the order it is drawn:

* **job** — the bundled sample jobs (``ps_ctl``, ``ps_fit``, ``mwms_fit``,
  ``tf1_session``, ``mirrored``) and user-style jobs: the three written for this
  benchmark (``ps_embed``, ``gen_fit``, ``tf1_feed``: HOLDOUT, but at ``TUNED_SEEDS``)
  drawn half of the time, and ``ps_tutorial``, on which thresholds were fitted.
* **fault** — among those the job takes (``JobSpec``/``UserJob.faults``):
  ``none``; ``stop-duty`` (a random worker held from outside at a strength uniform in 1.2-5:
  SIGSTOP/SIGCONT letting it run ``DUTY_ON_MS`` in every ``DUTY_ON_MS * strength``, or, for
  half the seeds from ``QUOTA_SEEDS``, a cgroup CPU quota of 1/strength of the CPU it used
  in the second before a mid-run onset: ``holder``, drawn apart so earlier seeds name the
  trials they always named); ``proxy``
  (a delaying proxy of 2-40 ms round trip in front of a random ps); ``input`` (slow input
  of 5-60 ms a batch: every worker, or one worker where the job can slow one);
  ``shard-skew`` (a worker gets 1.5-4x the data); ``hot-ps`` (a large unpartitioned
  variable on ps 0); ``kill`` (worker 1 killed a quarter into the run and restarted);
  ``stop`` (a worker stopped mid-run and kept stopped: a hung job, analysed while it hangs);
  ``exception`` (the user's code raises on a worker, or the coordinator, mid-run).
* **onset** — ``start`` or ``mid`` for ``stop-duty`` and ``proxy``; ``kill``, ``stop`` and
  ``exception`` are mid-run by nature, the other faults start with the job. A mid-run onset
  is one of progress, not of time: the fault starts once the job has done ``ONSET_SHARE``
  of its steps (``JobDef.onset_steps``), as its own records say while they are written
  (``benchmarks/harness/progress.py``; ``kill`` and ``exception`` count their own steps in
  the job: a quarter, a third), or after ``ONSET_TIMEOUT_S`` if they never say so. A fixed
  delay did not fit every run: on the 2-core host the same job's training took from 3.6 s
  (seed 1029, ``ps_tutorial``, against a 5-s onset) to tens of seconds, and a TF1
  non-chief waits 30 s for the chief's variables or not at all (seeds 1032, 1036 and 1037,
  ``tf1_feed``: training over before a 32-s onset), so those faults never ran. Each trial
  records when its fault started against its training (``trial_run``: ``onset``), and the
  judge counts one that started after the last step apart (``trial_judge``: never ran).
* **hogs** — 0, 1 or 2 busy-loop processes beside the job (its whole run).
* **fix** — for a faulty trial whose fix can be run, with probability ``FIX_SHARE``: the
  fix run interleaved with the fault run (order drawn), measuring the real speed-up.

Not in the space yet: a delaying proxy in front of a worker (the launcher's proxy sits in
front of ps only), faults on a ps process (stop, kill), slow compute planted inside a user
job, GPU faults.

HOLDOUT: every trial of a fresh job, and every trial of seed ``HOLDOUT_SEEDS`` or above,
but never a seed of ``TUNED_SEEDS``: the trials rules were fitted on.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from tfdiag.events import STEPS_PER_CLOSURE

HOLDOUT_SEEDS = 1000
# Seeds whose trials were used to fit rules (ps_hotspot's and input_bound's warning bars,
# the straggler's waiting evidence; docs/benchmarks.md) or to find a detector's defect
# (1110, 1138, 1148: slow_link's whole-run fastest round trip hid a path that turned slow
# mid-run; 1145: straggler's floor of 50 wake-ups left out a worker that woke less because
# it was stopped; 1159: a worker's last steps before its exception, read over the run's last
# quarter, asked the straggler's part judgement for its overlap guard; 1089: a worker
# stopped over a gen_fit run's last 2 s had no sample after its onset, as every sampler
# dropped its last seconds at its close; 1266: a 1.25x median of 21 steps over a ps_fit
# run's last quarter, 2 standard errors from its peer's, asked for the straggler's noise
# guard; 1260, 1264, 1274: gen_fit stop duty cycles whose fixes measured far more than the
# stopped share of the late wake-ups predicted, where the peers' probes saw the stops; 1351:
# a straggler over a ps_embed run's last quarter, 34 steps against 47, predicting 1.035x
# there, asked for the part findings' warning bar; 1589: a worker moved into a cgroup quota
# mid-run read as starved by its neighbours, the reading after the move uncounted; 2374,
# 2380: ps_embed paths that turned slow mid-run, each link probed once or twice a window of
# slow_link's ten; 2354: a tf1_feed worker stopped 43 % of its stepping beside a peer that
# stepped 27 times, asked for the straggler's hold rule; 1341, 2382: tf1_feed stragglers
# predicted 1.7x against 3.1-3.2x measured, asked for the run's steps in the asynchronous
# prediction; 2397, 2420: tf1_feed workers with slow input, named stragglers too, with the
# advice to replace their host, asked for the straggler's input rule; 2389, 2396: paths that
# turned slow mid-run under probes too sparse for slow_link's windows, asked for its stretch
# of round trips): no longer holdout, whatever their job.
TUNED_SEEDS = frozenset(range(1000, 1022)) | {1064, 1089, 1110, 1138, 1145, 1148, 1159, 1260, 1264, 1266, 1274,
                                              1341, 1351, 1589, 2354, 2374, 2380, 2382, 2389, 2396, 2397,
                                              2420}
FRESH_JOBS = ("ps_embed", "gen_fit", "tf1_feed")
FIX_SHARE = 0.4
DUTY_ON_MS = 25.0
# From this seed on, half the stop-duty trials hold their worker by a cgroup CPU quota (the
# way a container's CPU limit throttles it) instead of signals; no rule was fitted on them.
QUOTA_SEEDS = 1521
# From this seed on, a trial's fault and fix runs run twice, the second pair in mirrored order
# (``trial_run.run_trial``): what one pair's measured speed-up is worth on this host.
REPEAT_SEEDS = 2201
HOLDERS = ("signals", "cgroup")
STRENGTH = (1.2, 5.0)
PROXY_MS = (2.0, 40.0)
INPUT_MS = (5.0, 60.0)
SKEW = (1.5, 4.0)
# A mid-run onset: once the job has done this share of its steps (``JobDef.onset_steps``) ...
ONSET_SHARE = 1 / 3
# ... or, where its records never show that many, this long after its processes started
# (their start and a TF1 non-chief's 30-s wait for the chief's variables take up to about a
# minute on the loaded 2-core host; RUN_TIMEOUT_S ends a job at 240 s).
ONSET_TIMEOUT_S = 150.0


@dataclass(frozen=True)
class JobDef:
    """One job of the space: how it runs and which faults it takes."""

    name: str
    kind: str  # "sample" (tfdiag sample) or "user" (a script of benchmarks/userjobs)
    shape: str  # the sample job whose cluster layout it has
    steps: int  # short: tens of seconds of training on the 2-core host; the job's, over all its workers
    faults: tuple[str, ...]
    synchronous: bool = False  # every worker runs every step: each worker's records count the job's steps
    one_slow_input: bool = False  # its input can be slowed on one worker
    closure_steps: int = 1  # under a ClusterCoordinator: the training steps of a closure (fault run)

    @property
    def onset_steps(self) -> int:
        """The job's steps before a mid-run onset: ``ONSET_SHARE`` of ``steps`` (of the nominal
        run, also for a ``stop`` trial, whose job is given far more steps to hang in).

        >>> JOB_DEFS["ps_tutorial"].onset_steps, JOB_DEFS["tf1_feed"].onset_steps
        (667, 500)
        """
        return math.ceil(self.steps * ONSET_SHARE - 1e-9)


_COMMON = ("none", "stop-duty")
# Steps as the jobs' records count them: a ClusterCoordinator job's closures share the
# steps among its workers (ps_ctl runs STEPS_PER_CLOSURE a closure, the others one), a TF1
# job's workers share them too (each records its own), a MultiWorkerMirrored job's workers
# each run all of them, and mirrored has one worker.
JOB_DEFS = {job.name: job for job in (
    JobDef("ps_ctl", "sample", "ps_ctl", 400, _COMMON + ("proxy", "input", "shard-skew", "hot-ps", "kill", "stop"),
           closure_steps=STEPS_PER_CLOSURE),
    JobDef("ps_fit", "sample", "ps_fit", 200, _COMMON + ("proxy", "input", "shard-skew", "hot-ps", "kill")),
    JobDef("mwms_fit", "sample", "mwms_fit", 150, _COMMON + ("input", "shard-skew", "kill"),
           synchronous=True, one_slow_input=True),
    JobDef("tf1_session", "sample", "tf1_session", 400, _COMMON + ("proxy", "input", "shard-skew", "hot-ps", "kill")),
    JobDef("mirrored", "sample", "mirrored", 200, ("none", "input")),
    JobDef("ps_tutorial", "user", "ps_ctl", 2000, _COMMON + ("proxy", "stop")),
    JobDef("ps_embed", "user", "ps_ctl", 900, _COMMON + ("proxy", "hot-ps", "exception")),
    JobDef("gen_fit", "user", "mwms_fit", 150, _COMMON + ("input", "exception"),
           synchronous=True, one_slow_input=True),
    JobDef("tf1_feed", "user", "tf1_session", 1500, _COMMON + ("proxy", "input", "exception"), one_slow_input=True),
)}
# ps_embed ran 300 steps up to seed 1012 (results record each run's steps): its 5.6 s of
# training ended before the mid-run onset of then, 6 s after the first records (seeds 1011,
# 1012); seeds 1029, 1032, 1036 and 1037 met the same end (see the onset above), and
# ps_tutorial's 500 steps (about 4 s) left a mid-run fault 1.6 s: it runs 2,000 from seed 1029 on.
# Draw weights of the faults (relative); "stop" hangs a job for a minute, so it is rare.
FAULT_WEIGHTS = {"none": 4, "stop-duty": 5, "proxy": 3, "input": 3, "shard-skew": 2, "hot-ps": 2,
                 "kill": 2, "stop": 1, "exception": 2}


@dataclass(frozen=True)
class Trial:
    """One drawn trial; ``task`` is the task the fault is planted on ("" for none or every worker)."""

    seed: int
    job: str
    fault: str
    task: str
    strength: float | None  # stop-duty: the slowdown of the task's wall time; skew: data factor
    ms: float | None  # proxy round trip, input cost per batch
    onset: str  # "start" or "mid"
    hogs: int
    fix: bool
    fix_first: bool
    holder: str = "signals"  # stop-duty: "signals" (SIGSTOP/SIGCONT) or "cgroup" (a CPU quota)

    @property
    def holdout(self) -> bool:
        return is_holdout(self.seed, self.job)

    @property
    def spec(self) -> JobDef:
        return JOB_DEFS[self.job]

    def to_dict(self) -> dict:
        return {**asdict(self), "holdout": self.holdout}

    def label(self) -> str:
        detail = (f" x{self.strength:.2f}" if self.strength else "") + (f" {self.ms:.0f}ms" if self.ms else "")
        detail += " by cgroup" if self.holder == "cgroup" else ""
        return (f"seed {self.seed}: {self.job} {self.fault}{' ' + self.task if self.task else ''}{detail}"
                f" onset={self.onset} hogs={self.hogs}{' +fix' if self.fix else ''}")


def is_holdout(seed: int, job: str) -> bool:
    """Whether the trial of ``seed`` on ``job`` is holdout: a fresh job or a seed from
    ``HOLDOUT_SEEDS``, never one of ``TUNED_SEEDS``.

    >>> is_holdout(1030, "ps_ctl"), is_holdout(1005, "gen_fit"), is_holdout(3, "gen_fit")
    (True, False, True)
    """
    return (job in FRESH_JOBS or seed >= HOLDOUT_SEEDS) and seed not in TUNED_SEEDS


def draw(seed: int) -> Trial:
    """The trial seed ``seed`` names."""
    rng = random.Random(seed)
    fresh = rng.random() < 0.5
    names = FRESH_JOBS if fresh else tuple(n for n in JOB_DEFS if n not in FRESH_JOBS)
    job = JOB_DEFS[rng.choice(names)]
    fault = rng.choices(job.faults, weights=[FAULT_WEIGHTS[f] for f in job.faults])[0]
    worker = rng.randrange(2)
    task, strength, ms, onset = "", None, None, "start"
    if fault == "stop-duty":
        task, strength, onset = f"worker:{worker}", round(rng.uniform(*STRENGTH), 2), rng.choice(("start", "mid"))
    elif fault == "proxy":
        task, ms, onset = f"ps:{rng.randrange(2)}", round(rng.uniform(*PROXY_MS), 1), rng.choice(("start", "mid"))
    elif fault == "input":
        ms = round(rng.uniform(*INPUT_MS), 1)
        task = f"worker:{worker}" if job.one_slow_input else ""
    elif fault == "shard-skew":
        task, strength = "worker:1", round(rng.uniform(*SKEW), 2)
    elif fault == "hot-ps":
        task = "ps:0"
    elif fault in ("kill", "stop"):
        task, onset = "worker:1", "mid"
    elif fault == "exception":
        task, onset = ("chief:0" if job.name == "ps_embed" else "worker:1"), "mid"
    hogs = rng.choice((0, 0, 1, 2))
    fixable = fault not in ("none", "stop", "exception")
    fix = fixable and rng.random() < FIX_SHARE
    fix_first = rng.random() < 0.5
    holder = "signals"
    if fault == "stop-duty" and seed >= QUOTA_SEEDS:
        holder = random.Random(f"{seed}/holder").choice(HOLDERS)
        onset = "mid" if holder == "cgroup" else onset  # its quota is a share of the CPU used before
    return Trial(seed, job.name, fault, task, strength, ms, onset, hogs, fix, fix_first, holder)


def parse_seeds(text: str) -> list[int]:
    """``"A..B"`` (inclusive) or ``"A,B,C"`` as a list of seeds.

    >>> parse_seeds("3..5"), parse_seeds("7,9")
    ([3, 4, 5], [7, 9])
    """
    if ".." in text:
        low, high = text.split("..")
        return list(range(int(low), int(high) + 1))
    return [int(part) for part in text.split(",") if part]
