"""The bundled sample jobs: their configuration, registry and summary line.

A job is a module with ``run(config: JobConfig) -> JobSummary`` that runs on the tasks
named by its ``JobSpec.job_roles`` (the chief for ``ps_ctl``); the other tasks of the
cluster run a plain ``tf.distribute.Server``. New jobs plug in by adding a ``JobSpec``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from tfdiag.errors import InvalidOptionError
from tfdiag.sample_jobs.inject import KillWorker, Plan, SlowWorker, parse_injection, parse_tuning

# Upper bounds of the numeric options: a local cluster of more than MAX_TASKS tasks of a
# job does not fit one host, and counts beyond MAX_COUNT overflow TensorFlow's int32 shapes.
MAX_TASKS = 64
MAX_COUNT = 2**31 - 1

SUMMARY_PREFIX = "tfdiag-sample:"
_SUMMARY_RE = re.compile(
    re.escape(SUMMARY_PREFIX) + r" steps=(\d+) wall_s=([0-9.]+) examples_per_s=([0-9.]+)"
    r"(?: steady_examples_per_s=([0-9.]+))?"
)


@dataclass(frozen=True)
class JobSpec:
    """How a sample job is laid out on a cluster.

    ``job_roles`` are the task types that run the job's code (the others serve);
    ``summary_task`` prints the summary line; ``ps``/``chief`` say whether the local
    cluster has those jobs.
    """

    name: str
    module: str
    description: str
    job_roles: tuple[str, ...] = ("chief",)
    summary_task: str = "chief:0"
    ps: bool = True
    chief: bool = True
    single: bool = False  # one process (MirroredStrategy): --workers and --ps do not apply
    # Every step needs every worker (MultiWorkerMirroredStrategy): a lost worker fails the
    # others, so recovering from it means restarting them all from a backup.
    synchronous: bool = False
    chief_worker: bool = False  # worker 0 is the chief: the job cannot lose it
    injections: tuple[str, ...] = ()  # the --inject kinds that apply
    slow_worker_onset: bool = False  # slow-worker=I:MS@STEP: the slow-down can begin mid-run
    tunings: tuple[str, ...] = ()  # the --tune keys that apply
    batch: int = 256  # default examples per step (global batch)
    model_size: int = 256  # default hidden width


_PS_INJECT = ("input-delay", "slow-worker", "shard-skew", "hot-ps", "slow-ps", "kill-worker")
_PIPELINE_TUNE = ("prefetch", "map_parallel", "batch")

JOBS: dict[str, JobSpec] = {
    spec.name: spec
    for spec in (
        JobSpec(
            "ps_ctl",
            "tfdiag.sample_jobs.ps_ctl",
            "ParameterServerStrategy + ClusterCoordinator custom training loop (tf.Module MLP)",
            injections=_PS_INJECT,
            slow_worker_onset=True,
            tunings=_PIPELINE_TUNE + ("partitioner", "steps_per_closure"),
            batch=1024,
            model_size=256,
        ),
        JobSpec(
            "ps_fit",
            "tfdiag.sample_jobs.ps_fit",
            "ParameterServerStrategy + tf-keras model.fit (two-input, two-output click/conversion model)",
            injections=_PS_INJECT,
            tunings=_PIPELINE_TUNE + ("partitioner", "strategy", "mixed_precision"),
            batch=512,
            model_size=256,
        ),
        JobSpec(
            "mwms_fit",
            "tfdiag.sample_jobs.mwms_fit",
            "MultiWorkerMirroredStrategy + tf-keras model.fit (same model and data as ps_fit)",
            job_roles=("worker",),
            summary_task="worker:0",
            ps=False,
            chief=False,
            synchronous=True,
            injections=("input-delay", "slow-input", "slow-worker", "shard-skew", "kill-worker"),
            tunings=_PIPELINE_TUNE + ("autoshard", "strategy", "mixed_precision"),
            batch=512,
            model_size=256,
        ),
        JobSpec(
            "mirrored",
            "tfdiag.sample_jobs.mirrored",
            "MirroredStrategy over all local GPUs (CPU without one), Keras 3 model.fit with a custom layer",
            job_roles=("worker",),
            summary_task="worker:0",
            ps=False,
            chief=False,
            single=True,
            injections=("input-delay",),
            tunings=_PIPELINE_TUNE + ("mixed_precision",),
            batch=1024,
            model_size=256,
        ),
        JobSpec(
            "tf1_session",
            "tfdiag.sample_jobs.tf1_session",
            "TF1 graph: ClusterSpec, Server per task, replica_device_setter, MonitoredTrainingSession (chief = worker 0)",
            job_roles=("worker",),
            summary_task="worker:0",
            chief=False,
            chief_worker=True,
            injections=("input-delay", "slow-worker", "shard-skew", "hot-ps", "slow-ps", "kill-worker"),
            tunings=_PIPELINE_TUNE + ("partitioner",),
            batch=1024,
            model_size=256,
        ),
    )
}

# --tune strategy=ps|mwms runs the same model and data under the other strategy.
STRATEGY_JOBS = {"ps": "ps_fit", "mwms": "mwms_fit"}


def _injection_help(spec: JobSpec, kind: str) -> str:
    if kind == "kill-worker" and spec.synchronous:
        return "kill-worker (+restart only)"
    if kind == "kill-worker" and spec.chief_worker:
        return "kill-worker (worker 1 or above)"
    if kind == "slow-worker" and spec.slow_worker_onset:
        return "slow-worker (@STEP: from a step on)"
    return kind


def applicability_help() -> str:
    """One line per job: which --inject kinds and --tune keys apply (for --help)."""
    lines = []
    for spec in JOBS.values():
        injections = ", ".join(_injection_help(spec, kind) for kind in spec.injections)
        lines.append(f"{spec.name}: {spec.description}. inject: {injections or '-'}; tune: {', '.join(spec.tunings) or '-'}")
    return "\n".join(lines)


def _check_kill(spec: JobSpec, kill: KillWorker, text: str) -> None:
    """Refuses the kills a job cannot survive, saying why."""
    if spec.synchronous and not kill.restart:
        raise InvalidOptionError(
            f"Invalid value for option `--inject`. {spec.name} cannot go on without a worker (every step needs "
            f"all of them); add +restart to restart the workers and resume from the backup. Received: {text!r}"
        )
    if spec.chief_worker and kill.worker == 0:
        raise InvalidOptionError(
            f"Invalid value for option `--inject`. Worker 0 of {spec.name} is the chief, which the others need "
            f"to initialise the model; kill worker 1 or above. Received: {text!r}"
        )


def job_spec(name: str) -> JobSpec:
    """The ``JobSpec`` of a job name, or ``InvalidOptionError`` naming the known jobs."""
    try:
        return JOBS[name]
    except KeyError:
        raise InvalidOptionError(f"Invalid value for argument `JOB`. Expected one of {', '.join(JOBS)}. Received: {name!r}") from None


@dataclass(frozen=True)
class JobConfig:
    """Everything a task of a sample job needs to know; travels as JSON between processes."""

    job: str
    logdir: str
    steps: int = 200
    batch: int = 0  # 0: the job's default
    ps: int = 2
    workers: int = 2
    collect: bool = True
    inject: tuple[str, ...] = ()
    tune: tuple[str, ...] = ()
    model_size: int = 0  # hidden width; 0: the job's default
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for name, low, high in (("steps", 1, MAX_COUNT), ("workers", 1, MAX_TASKS), ("batch", 0, MAX_COUNT),
                                ("model_size", 0, MAX_COUNT), ("ps", 0, MAX_TASKS)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                option = name.replace("_", "-")
                raise InvalidOptionError(
                    f"Invalid value for option `--{option}`. Expected an integer from {low} to {high}. Received: {value!r}"
                )
        # Parsed one by one so that every error quotes the value as it was given.
        injections = [(text, parse_injection(text)) for text in self.inject]
        tunings = [(text, parse_tuning(text)) for text in self.tune]
        object.__setattr__(self, "inject", tuple(injection.spec for _, injection in injections))
        object.__setattr__(self, "tune", tuple(tuning.spec for _, tuning in tunings))
        spec = job_spec(self.job)
        for text, tuning in tunings:
            if tuning.key not in spec.tunings:
                raise InvalidOptionError(
                    f"Invalid value for option `--tune`. {tuning.key} does not apply to {self.job} "
                    f"(it takes: {', '.join(spec.tunings) or 'none'}). Received: {text!r}"
                )
        spec = self.spec  # the job that runs, after --tune strategy=
        for text, injection in injections:
            if injection.kind not in spec.injections:
                raise InvalidOptionError(
                    f"Invalid value for option `--inject`. {injection.kind} does not apply to {spec.name} "
                    f"(it takes: {', '.join(spec.injections) or 'none'}). Received: {text!r}"
                )
            index = getattr(injection, "worker", None)
            if index is not None and not spec.single and index >= self.workers:
                raise InvalidOptionError(
                    f"Invalid value for option `--inject`. There is no worker {index} in a cluster of "
                    f"{self.workers} workers. Received: {text!r}"
                )
            if isinstance(injection, KillWorker):
                _check_kill(spec, injection, text)
            if isinstance(injection, SlowWorker) and injection.from_step and not spec.slow_worker_onset:
                onset_jobs = ", ".join(name for name, job in JOBS.items() if job.slow_worker_onset)
                raise InvalidOptionError(
                    f"Invalid value for option `--inject`. {spec.name} slows a worker from the start; a slow-down "
                    f"beginning at a step (@STEP) applies to {onset_jobs}. Received: {text!r}"
                )
            index = getattr(injection, "ps", None)
            if index is not None and index >= self.ps:
                raise InvalidOptionError(
                    f"Invalid value for option `--inject`. There is no ps {index} in a cluster of {self.ps} ps. "
                    f"Received: {text!r}"
                )
        if spec.ps and not spec.single and self.ps < 1:
            raise InvalidOptionError(f"Invalid value for option `--ps`. {spec.name} needs at least 1 ps. Received: {self.ps!r}")

    @property
    def effective_job(self) -> str:
        """The job that actually runs: ``--tune strategy=ps|mwms`` may switch ps_fit and mwms_fit."""
        strategy = self.plan.tuned("strategy")
        return STRATEGY_JOBS.get(strategy, self.job) if strategy else self.job

    @property
    def spec(self) -> JobSpec:
        return job_spec(self.effective_job)

    @property
    def hidden(self) -> int:
        """The model's hidden width: ``--model-size`` or the job's default."""
        return self.model_size or self.spec.model_size

    @property
    def plan(self) -> Plan:
        return Plan.parse(self.inject, self.tune)

    @property
    def layout(self) -> dict[str, int]:
        """How many tasks each job of the cluster has: ``{"chief": 1, "ps": 2, "worker": 2}``."""
        spec = self.spec
        if spec.single:
            return {"worker": 1}
        layout = {"chief": 1} if spec.chief else {}
        if spec.ps and self.ps:
            layout["ps"] = self.ps
        layout["worker"] = self.workers
        return layout

    @property
    def batch_size(self) -> int:
        """The global batch size: ``--tune batch=N``, else ``--batch``, else the job's default."""
        return int(self.plan.tuned("batch", str(self.batch or self.spec.batch)))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "JobConfig":
        data = json.loads(text)
        data["inject"] = tuple(data.get("inject", ()))
        data["tune"] = tuple(data.get("tune", ()))
        return cls(**data)


@dataclass(frozen=True)
class JobSummary:
    """What a job reports at its end.

    ``keep``: TensorFlow objects the job made (its functions, coordinator, model), held
    until the process ends without releasing them (``task.end_without_teardown``).
    Releasing a ``tf.function`` under a cluster's remote eager context removes it from
    the tasks (``context.remove_function``), a blocking call that held ``ps_ctl``'s
    coordinator about 44 s after its last step in 2 of 8 runs of 12,000 steps, with and
    without collectors (docs/sample-jobs.md).
    """

    steps: int
    wall_s: float
    examples: int
    keep: tuple = field(default=(), repr=False, compare=False)
    steady: tuple[int, float] | None = None  # ``StepClock.steady``: (steps, seconds) after the warm-up

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steady_examples_per_s(self) -> float | None:
        """Examples a second after the warm-up (``step_clock``); None where it was not timed."""
        if self.steady is None or self.steady[1] <= 0 or self.steps <= 0:
            return None
        return self.steady[0] * self.examples / self.steps / self.steady[1]

    def line(self) -> str:
        """``tfdiag-sample: steps=N wall_s=S examples_per_s=E [steady_examples_per_s=F]``."""
        steady = self.steady_examples_per_s
        return (f"{SUMMARY_PREFIX} steps={self.steps} wall_s={self.wall_s:.3f} examples_per_s={self.examples_per_s:.1f}"
                + (f" steady_examples_per_s={steady:.1f}" if steady is not None else ""))


class Summary(NamedTuple):
    """A job's summary line, parsed (``JobSummary.line``)."""

    steps: int
    wall_s: float
    examples_per_s: float
    steady_examples_per_s: float | None = None  # after the warm-up; None in a line without it


def parse_summary(text: str) -> Summary | None:
    """The last summary line in ``text``, parsed; None if there is none."""
    matches = _SUMMARY_RE.findall(text)
    if not matches:
        return None
    steps, wall_s, rate, steady = matches[-1]
    return Summary(int(steps), float(wall_s), float(rate), float(steady) if steady else None)
