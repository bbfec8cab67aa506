"""ps_ctl on a real local cluster (chief + 2 ps + 2 workers as processes)."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from tfdiag.sample_jobs import run_sample
from tfdiag.sample_jobs.ps_ctl import STEPS_PER_CLOSURE
from tfdiag.store import log_dir, read_manifest, read_task_file

from tests.sample_jobs.processes import assert_no_new_children, child_pids

pytestmark = pytest.mark.cluster

STEPS = 60
TIMEOUT_S = 150


def load(run_dir):
    result = read_task_file(log_dir(run_dir) / "chief-0.tfdiag")
    assert not result.skipped
    frame = lambda kind: pa.Table.from_batches(result.batches[kind]).to_pandas()  # noqa: E731
    steps, closures = frame("step"), frame("closure")
    # A closure runs several training steps (ps_ctl.STEPS_PER_CLOSURE); times per step.
    steps["step_ms"] = (steps["end_ns"] - steps["begin_ns"]) / 1e6 / steps["steps"]
    steps["wait_ms"] = steps["input_wait_ns"] / 1e6 / steps["steps"]
    return steps[steps["step"] > 0], closures  # step 0 is the warm-up closure (tracing)


def run(tmp_path, name, **kwargs):
    stderr = io.StringIO()
    before = child_pids()
    kwargs.setdefault("batch", 64)
    result = run_sample("ps_ctl", ps=2, workers=2, steps=STEPS, logdir=tmp_path / name, timeout_s=TIMEOUT_S,
                        stderr=stderr, **kwargs)
    assert result.ok, stderr.getvalue() + "".join(
        f"\n--- {task}\n" + path.read_text()[-3000:] for task, path in result.task_logs.items()
    )
    assert result.steps == STEPS and result.examples_per_s > 0
    assert result.summary_line in stderr.getvalue()
    assert set(result.task_logs) == {"chief:0", "ps:0", "ps:1", "worker:0", "worker:1"}
    assert all(path.parent == tmp_path / name / "tasks" for path in result.task_logs.values())
    assert_no_new_children(before)
    return result


def test_clean_run_records_both_workers(tmp_path):
    result = run(tmp_path, "clean")
    steps, closures = load(result.logdir)
    assert set(steps["task"]) == {"worker:0", "worker:1"}
    assert (steps["task"] == steps["clock_task"]).all()
    closure_count = STEPS // STEPS_PER_CLOSURE + 1  # and the warm-up closure
    assert len(closures) == closure_count and closures["ok"].all()
    assert (closures["result_ns"] >= closures["dispatch_ns"]).all()
    assert sorted(closures["closure_id"]) == list(range(closure_count))
    assert (steps["end_ns"] > steps["begin_ns"]).all()
    assert (steps["steps"] == STEPS_PER_CLOSURE).all()
    assert (steps["examples"] == 64 * STEPS_PER_CLOSURE).all()
    manifest = read_manifest(result.logdir)
    assert manifest["strategy"] == "ParameterServerStrategyV2"
    assert sorted(manifest["cluster"]) == ["chief", "ps", "worker"] and manifest["task"] == "chief:0"


@pytest.mark.alone
def test_injections_show_in_step_records(tmp_path):
    result = run(tmp_path, "injected", inject=["slow-worker=1:40", "input-delay=20"])
    steps, _ = load(result.logdir)
    median = steps.groupby("task")[["step_ms", "wait_ms"]].median()
    slower = median.loc["worker:1", "step_ms"] - median.loc["worker:0", "step_ms"]
    assert 30 <= slower <= 55, median
    assert (median["wait_ms"].between(17, 30)).all(), median
