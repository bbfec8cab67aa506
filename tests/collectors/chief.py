"""Runs a test job as the chief of a local cluster of ps_ctl's servers (one process per task)."""

from __future__ import annotations

import json
from pathlib import Path

from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster


def run_as_chief(job: Path, logdir, *args, ps: int, workers: int, timeout_s: float = 180) -> tuple[dict, str]:
    """Starts ``ps`` and ``workers`` servers, runs ``python job logdir *args`` as chief:0 of their
    cluster (forked like the servers, ``LocalCluster.start_program``), stops the servers;
    returns (the last JSON line of its stdout, its stderr)."""
    cluster = LocalCluster(JobConfig("ps_ctl", str(logdir), ps=ps, workers=workers))
    stdout = Path(logdir) / "tasks" / "chief-0.stdout"
    try:
        cluster.start(job_tasks=False)
        chief = cluster.start_program("chief", 0, job, [str(logdir), *map(str, args)], stdout=stdout)
        code = chief.process.wait(timeout=timeout_s)
    finally:
        cluster.stop()
    stderr = chief.log.read_text()
    assert code == 0, stderr[-4000:]
    return json.loads(stdout.read_text().strip().splitlines()[-1]), stderr
