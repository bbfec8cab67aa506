"""The bundled sample jobs: their configuration, registry and summary line.

A job is a module with ``run(config: JobConfig) -> JobSummary`` that runs on the tasks
named by its ``JobSpec.job_roles`` (the chief for ``ps_ctl``); the other tasks of the
cluster run a plain ``tf.distribute.Server``. New jobs plug in by adding a ``JobSpec``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from tfdiag.errors import InvalidOptionError
from tfdiag.sample_jobs.inject import Plan

SUMMARY_PREFIX = "tfdiag-sample:"
_SUMMARY_RE = re.compile(
    re.escape(SUMMARY_PREFIX) + r" steps=(\d+) wall_s=([0-9.]+) examples_per_s=([0-9.]+)"
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


JOBS: dict[str, JobSpec] = {
    spec.name: spec
    for spec in (
        JobSpec(
            "ps_ctl",
            "tfdiag.sample_jobs.ps_ctl",
            "ParameterServerStrategy + ClusterCoordinator custom training loop",
        ),
    )
}


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
    batch: int = 64
    ps: int = 2
    workers: int = 2
    collect: bool = True
    inject: tuple[str, ...] = ()
    tune: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("steps", "batch", "workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidOptionError(f"Invalid value for option `--{name}`. Expected an integer >= 1. Received: {value!r}")
        if not isinstance(self.ps, int) or self.ps < 0:
            raise InvalidOptionError(f"Invalid value for option `--ps`. Expected an integer >= 0. Received: {self.ps!r}")
        plan = Plan.parse(self.inject, self.tune)  # validates; stores normalised specs
        object.__setattr__(self, "inject", tuple(plan.specs["inject"]))
        object.__setattr__(self, "tune", tuple(plan.specs["tune"]))

    @property
    def plan(self) -> Plan:
        return Plan.parse(self.inject, self.tune)

    @property
    def batch_size(self) -> int:
        """The batch size after ``--tune batch=N``."""
        return int(self.plan.tuned("batch", str(self.batch)))

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
    """What a job reports at its end."""

    steps: int
    wall_s: float
    examples: int

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.wall_s if self.wall_s > 0 else 0.0

    def line(self) -> str:
        """``tfdiag-sample: steps=N wall_s=S examples_per_s=E``."""
        return f"{SUMMARY_PREFIX} steps={self.steps} wall_s={self.wall_s:.3f} examples_per_s={self.examples_per_s:.1f}"


def parse_summary(text: str) -> tuple[int, float, float] | None:
    """``(steps, wall_s, examples_per_s)`` from the last summary line in ``text``, or None."""
    matches = _SUMMARY_RE.findall(text)
    if not matches:
        return None
    steps, wall_s, rate = matches[-1]
    return int(steps), float(wall_s), float(rate)
