"""``tfdiag sample JOB``: argparse wiring and the ``run_sample`` function.

``add_arguments(parser)`` adds the options to a (sub)parser; ``run(args)`` runs the
job and returns the exit code. Without ``TF_CONFIG`` in the environment the job runs
on a local cluster of processes on 127.0.0.1; with ``TF_CONFIG`` set, this process is
the one task ``TF_CONFIG`` names in a real cluster (start every task the same way).

Example:
    >>> result = run_sample("ps_ctl", logdir="logs/run1", steps=50, inject=["slow-worker=1:40"])  # doctest: +SKIP
    >>> result.ok, result.steps, result.examples_per_s  # doctest: +SKIP
    (True, 50, 812.4)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfdiag.errors import InvalidOptionError
from tfdiag.sample_jobs.jobs import JOBS, JobConfig, applicability_help, job_spec, parse_summary


@dataclass(frozen=True)
class SampleResult:
    """The outcome of ``run_sample``."""

    returncode: int
    logdir: Path
    steps: int | None = None
    wall_s: float | None = None
    examples_per_s: float | None = None
    summary_line: str | None = None
    task_logs: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Adds the ``tfdiag sample`` arguments to ``parser`` and returns it."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "jobs, and the --inject/--tune options that apply to each:\n"
        + "\n".join("  " + line for line in applicability_help().splitlines())
        + "\n\nSee docs/sample-jobs.md for every option and for launching on several hosts or Kubernetes."
    )
    parser.add_argument("job", metavar="JOB", choices=sorted(JOBS), help="the sample job: " + ", ".join(sorted(JOBS)))
    parser.add_argument("--ps", type=int, default=2, metavar="N", help="parameter-server tasks (default 2; ps jobs)")
    parser.add_argument("--workers", type=int, default=2, metavar="N", help="worker tasks (default 2; not mirrored)")
    parser.add_argument(
        "--steps", type=int, default=200, metavar="N",
        help="training steps (default 200): updates in all for the ps jobs and tf1_session, synchronous steps for "
             "mwms_fit and mirrored",
    )
    parser.add_argument("--batch", type=int, default=0, metavar="N",
                        help="global examples per step (default: the job's, sized for 20-40 ms steps on a CPU)")
    parser.add_argument("--model-size", dest="model_size", type=int, default=0, metavar="N",
                        help="hidden width of the model (default: the job's, 256); raise it to scale the step up")
    parser.add_argument(
        "--logdir", metavar="DIR", default=None,
        help="run directory (default: a new folder under the system temp dir); task logs go to DIR/tasks/",
    )
    parser.add_argument(
        "--inject", metavar="SPEC", action="append", default=[],
        help="plant a bottleneck or fault (repeatable): input-delay=MS, slow-input=I:MS, slow-worker=I:MS[@STEP], "
             "shard-skew=I:F, hot-ps=I, slow-ps=I:MS, kill-worker=I@STEP[+restart]",
    )
    parser.add_argument(
        "--tune", metavar="KEY=VALUE", action="append", default=[],
        help="apply a change the advisor can recommend (repeatable): prefetch=on, map_parallel=on, partitioner=N, "
             "autoshard=data|file|off|auto, batch=N, strategy=ps|mwms, mixed_precision=on",
    )
    parser.add_argument("--no-collect", dest="collect", action="store_false", help="run with every collector off")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="stop the local cluster after S seconds")
    return parser


def run(args: argparse.Namespace) -> int:
    """Runs the job described by parsed ``args``; returns the exit code (2: bad option)."""
    try:
        result = run_sample(
            args.job,
            ps=args.ps,
            workers=args.workers,
            steps=args.steps,
            batch=args.batch,
            model_size=getattr(args, "model_size", 0),
            logdir=args.logdir,
            inject=args.inject,
            tune=args.tune,
            collect=args.collect,
            timeout_s=getattr(args, "timeout", None),
        )
    except InvalidOptionError as error:
        print(f"tfdiag sample: {error}", file=sys.stderr)
        return 2
    if result.ok:
        print(f"tfdiag sample: run directory {result.logdir}", file=sys.stderr)
    return result.returncode


def make_logdir(logdir: Path) -> None:
    """Creates the run directory, or raises ``InvalidOptionError`` naming it and the problem."""
    try:
        logdir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InvalidOptionError(f"Invalid value for option `--logdir`. {str(logdir)!r} is a file, not a directory") from None
    except NotADirectoryError:
        file = next((p for p in logdir.parents if p.is_file()), None)
        raise InvalidOptionError(
            f"Invalid value for option `--logdir`. Cannot create {str(logdir)!r}: {str(file)!r} is a file, not a directory"
        ) from None
    except OSError as error:
        raise InvalidOptionError(
            f"Invalid value for option `--logdir`. Cannot create {str(logdir)!r}: {error.strerror or error}"
        ) from None


def default_logdir(job: str) -> Path:
    return Path(tempfile.gettempdir()) / "tfdiag" / f"{job}-{time.strftime('%Y%m%d-%H%M%S')}"


def run_sample(
    job: str,
    *,
    ps: int = 2,
    workers: int = 2,
    steps: int = 200,
    batch: int = 0,
    model_size: int = 0,
    logdir=None,
    inject=(),
    tune=(),
    collect: bool = True,
    timeout_s: float | None = None,
    stderr=None,
) -> SampleResult:
    """Runs a sample job and returns its ``SampleResult``.

    On a local cluster unless ``TF_CONFIG`` is set, in which case this process runs
    as the task ``TF_CONFIG`` names (servers block until terminated).

    Raises:
        InvalidOptionError: a bad job name, count, ``inject`` or ``tune`` spec, timeout,
            or a ``logdir`` that cannot be created.
    """
    job_spec(job)
    if timeout_s is not None and not 0 < timeout_s < math.inf:
        raise InvalidOptionError(f"Invalid value for option `--timeout`. Expected seconds > 0. Received: {timeout_s!r}")
    logdir = Path(logdir) if logdir else default_logdir(job)
    config = JobConfig(
        job=job, logdir=str(logdir), steps=steps, batch=batch, model_size=model_size, ps=ps, workers=workers,
        collect=collect, inject=tuple(inject or ()), tune=tuple(tune or ()),
    )
    make_logdir(logdir)
    if os.environ.get("TF_CONFIG", "").strip():
        from tfdiag.sample_jobs.task import run_task

        code = run_task(config)
        return SampleResult(returncode=code, logdir=logdir)

    from tfdiag.sample_jobs.launcher import launch

    launched = launch(config, timeout_s=timeout_s, stderr=stderr)
    parsed = parse_summary(launched.summary_line or "")
    return SampleResult(
        returncode=launched.returncode,
        logdir=logdir,
        steps=parsed.steps if parsed else None,
        wall_s=parsed.wall_s if parsed else None,
        examples_per_s=parsed.examples_per_s if parsed else None,
        summary_line=launched.summary_line,
        task_logs=dict(launched.task_logs),
    )


def main(argv=None) -> int:
    """``python -m tfdiag.sample_jobs.cli JOB ...`` (the same as ``tfdiag sample``)."""
    parser = add_arguments(argparse.ArgumentParser(prog="tfdiag sample"))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
