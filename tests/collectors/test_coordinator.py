"""instrument_coordinator against real servers: results pass through, failures recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster
from tfdiag.store import log_dir, read_task_file

pytestmark = pytest.mark.cluster

JOB = Path(__file__).with_name("coordinator_job.py")


def test_failing_closure_is_recorded_and_results_pass_through(tmp_path):
    config = JobConfig("ps_ctl", str(tmp_path), ps=1, workers=1)
    cluster = LocalCluster(config)
    try:
        cluster.start(job_tasks=False)
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster.cluster, "task": {"type": "chief", "index": 0}}))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        done = subprocess.run([sys.executable, str(JOB), str(tmp_path)], env=env, capture_output=True, text=True,
                              timeout=150)
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stderr[-4000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"first": 16.0, "error": "InvalidArgumentError", "third": 16.0, "done": True,
                       "strategy": "ParameterServerStrategyV2", "closures_recorded": 3}

    result = read_task_file(log_dir(tmp_path) / "chief-0.tfdiag")
    closures = pa.Table.from_batches(result.batches["closure"]).to_pandas().sort_values("closure_id")
    steps = pa.Table.from_batches(result.batches["step"]).to_pandas().sort_values("step")
    assert closures["ok"].tolist() == [True, False, True]
    assert "closure asked to fail" in closures["error"].iloc[1]
    assert closures["worker"].tolist() == ["worker:0", "", "worker:0"]
    assert steps["step"].tolist() == [0, 2]
    assert (steps["examples"] == 8).all() and (steps["task"] == "worker:0").all()
    assert (steps["input_wait_ns"] > 0).all() and (steps["end_ns"] > steps["begin_ns"]).all()
