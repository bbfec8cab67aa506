"""Runs a test job as the chief of a local cluster of ps_ctl's servers (one process per task)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster


def run_as_chief(job: Path, logdir, *args, ps: int, workers: int, timeout_s: float = 180) -> tuple[dict, str]:
    """Starts ``ps`` and ``workers`` servers, runs ``python job logdir *args`` with ``TF_CONFIG``
    naming it chief:0, stops the servers; returns (the last JSON line of its stdout, its stderr)."""
    cluster = LocalCluster(JobConfig("ps_ctl", str(logdir), ps=ps, workers=workers))
    try:
        cluster.start(job_tasks=False)
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster.cluster, "task": {"type": "chief", "index": 0}}))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        done = subprocess.run([sys.executable, str(job), str(logdir), *map(str, args)], env=env, capture_output=True,
                              text=True, timeout=timeout_s)
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
