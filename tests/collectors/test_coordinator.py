"""instrument_coordinator against real servers: results pass through, failures recorded."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tfdiag.store import log_dir, read_task_file

from .chief import run_as_chief

pytestmark = pytest.mark.cluster

JOB = Path(__file__).with_name("coordinator_job.py")


def test_failing_closure_is_recorded_and_results_pass_through(tmp_path):
    outcome, _ = run_as_chief(JOB, tmp_path, ps=1, workers=1, timeout_s=150)
    assert outcome == {"first": 16.0, "error": "InvalidArgumentError", "third": 16.0, "done": True,
                       "strategy": "ParameterServerStrategyV2", "closures_recorded": 7,
                       # Arguments scheduled twice in a row get their traced concrete function (no
                       # trace-cache lookup per schedule); new ones the tf.function. No trace after the first.
                       "repeated": {"handed": ["Function", "Function", "ConcreteFunction", "Function"],
                                    "values": [16.0] * 4, "traced_again": 0},
                       # closure records within a second of each result; the step records
                       # wait for the batched copy of the timings (FETCH_EVERY_S, or close())
                       "before_close": {"closure": 3, "step": 0}}

    result = read_task_file(log_dir(tmp_path) / "chief-0.tfdiag")
    closures = pa.Table.from_batches(result.batches["closure"]).to_pandas().sort_values("closure_id")
    steps = pa.Table.from_batches(result.batches["step"]).to_pandas().sort_values("step")
    # total's placement, asked for, and scale's, read by the step; each once (total is read too).
    placement = pa.Table.from_batches(result.batches["placement"]).to_pandas()
    assert sorted(map(tuple, placement[["variable", "task", "bytes", "shape"]].values.tolist())) == [
        ("Variable:0", "ps:0", 4, "[]"), ("scale:0", "ps:0", 32, "[4,2]")]
    assert closures["ok"].tolist() == [True, False] + [True] * 5
    assert "closure asked to fail" in closures["error"].iloc[1]
    assert closures["worker"].tolist() == ["worker:0", ""] + ["worker:0"] * 5
    # The first closure was joined and fetched before the next was scheduled: a success's
    # result time, read as the result came in, falls before that dispatch (one seen by the
    # result thread on its next round would not). A failure's is when it was seen.
    first, failed, third = list(closures.itertuples())[:3]
    assert first.dispatch_ns < first.result_ns < failed.dispatch_ns
    assert failed.dispatch_ns < failed.result_ns and third.dispatch_ns < third.result_ns
    assert steps["step"].tolist() == [0, 2, 3, 4, 5, 6]
    assert (steps["examples"] == 8).all() and (steps["task"] == "worker:0").all()
    assert (steps["input_wait_ns"] > 0).all() and (steps["end_ns"] > steps["begin_ns"]).all()
