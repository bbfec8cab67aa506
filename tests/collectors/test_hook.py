"""DiagnosticsHook: RecvTensor entries of real step stats, and a real 2 ps + 1 worker TF1 session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdiag.analysis.load import load_run

from tests.conftest import in_child_process

from .chief import run_as_chief

JOB = Path(__file__).with_name("tf1_job.py")
STEPS = 20
TRACE_EVERY = 5  # tf1_job.py traces every 5th step


# The RecvTensor entries of a traced TF 2.21 session.run (1 ps + 1 worker, three variables
# read from the ps), as ``print(run_metadata.step_stats)`` shows them, plus a local transfer
# and an ordinary op. Labels round sizes from 0.1 MiB on ("[0.1MB]" for 153600 bytes).
TRACED_STEP_STATS = """
dev_stats {
  device: "/job:worker/replica:0/task:0/device:CPU:0"
  node_stats {
    node_name: "RecvTensor"
    all_start_micros: 1796050732060427
    op_end_rel_micros: 345
    all_end_rel_micros: 345
    output { tensor_description { allocation_description { requested_bytes: 153600 } } }
    timeline_label: "[0.1MB] [3.6Gb/s] edge_10_Sum_1/ReadVariableOp from /job:ps/replica:0/task:0/device:CPU:0 to /job:worker/replica:0/task:0/device:CPU:0"
  }
  node_stats {
    node_name: "RecvTensor"
    all_start_micros: 1796050732060867
    op_end_rel_micros: 1540
    all_end_rel_micros: 1540
    output { tensor_description { allocation_description { requested_bytes: 400 } } }
    timeline_label: "[400B] [2.077922Mb/s] edge_6_Sum_2/ReadVariableOp from /job:ps/replica:0/task:0/device:CPU:0 to /job:worker/replica:0/task:0/device:CPU:0"
  }
  node_stats {
    node_name: "RecvTensor"
    all_start_micros: 1796050732060883
    op_end_rel_micros: 5554
    all_end_rel_micros: 5554
    output { tensor_description { allocation_description { requested_bytes: 4194304 } } }
    timeline_label: "[4.0MB] [6.0Gb/s] edge_8_Sum/ReadVariableOp from /job:ps/replica:0/task:0/device:CPU:0 to /job:worker/replica:0/task:0/device:CPU:0"
  }
  node_stats {
    node_name: "RecvTensor"
    all_start_micros: 1796050732060900
    all_end_rel_micros: 20
    output { tensor_description { allocation_description { requested_bytes: 8 } } }
    timeline_label: "[8B] x from /job:worker/replica:0/task:0/device:CPU:0 to /job:worker/replica:0/task:0/device:GPU:0"
  }
  node_stats {
    node_name: "MatMul"
    all_start_micros: 1796050732060950
    timeline_label: "MatMul = MatMul(a, b)"
  }
}
"""


def test_parse_recv_label():
    from tfdiag.collectors.tf_internals import parse_recv_label

    assert parse_recv_label("[0B] edge_3_x/NoOp from /job:ps/replica:0/task:1/device:CPU:0 to "
                            "/job:worker/replica:0/task:2/device:CPU:0") == (
        0, "edge_3_x/NoOp", "/job:ps/replica:0/task:1/device:CPU:0", "/job:worker/replica:0/task:2/device:CPU:0")
    # A rounded size is no size: the exact one is the entry's requested_bytes.
    assert parse_recv_label("[4.0MB] [6.0Gb/s] edge_8_Sum/ReadVariableOp from /job:ps/replica:0/task:0/device:CPU:0"
                            " to /job:worker/replica:0/task:0/device:CPU:0")[0] is None
    assert parse_recv_label("MatMul = MatMul(a, b)") is None


def test_transfer_rows_take_exact_bytes_of_every_size_between_tasks():
    tf = pytest.importorskip("tensorflow")
    from google.protobuf import text_format

    from tfdiag.collectors.tf_internals import transfer_rows

    stats = text_format.Parse(TRACED_STEP_STATS, tf.compat.v1.RunMetadata().step_stats)
    rows = transfer_rows(stats)
    assert [(row["tensor"], row["bytes"], row["duration_ns"]) for row in rows] == [
        ("edge_10_Sum_1/ReadVariableOp", 153600, 345_000),
        ("edge_6_Sum_2/ReadVariableOp", 400, 1_540_000),
        ("edge_8_Sum/ReadVariableOp", 4194304, 5_554_000),
    ]
    assert {(row["src"], row["dst"]) for row in rows} == {("ps:0", "worker:0")}
    assert rows[0]["time_ns"] == 1796050732060427_000


def test_transfer_rows_without_requested_bytes_keep_only_exact_label_sizes():
    """An entry without an output allocation: the label's bytes when exact, else no row."""
    tf = pytest.importorskip("tensorflow")
    from google.protobuf import text_format

    from tfdiag.collectors.tf_internals import transfer_rows

    stats = text_format.Parse(TRACED_STEP_STATS, tf.compat.v1.RunMetadata().step_stats)
    for node in stats.dev_stats[0].node_stats:
        del node.output[:]
    assert [(row["tensor"], row["bytes"]) for row in transfer_rows(stats)] == [("edge_6_Sum_2/ReadVariableOp", 400)]


@pytest.mark.cluster
def test_tf1_session_transfers_match_variable_sizes(tmp_path):
    outcome, _ = run_as_chief(JOB, tmp_path, STEPS, ps=2, workers=1)
    traces = STEPS // TRACE_EVERY
    assert outcome["steps"] == STEPS and outcome["traces"] == traces
    assert outcome["variable_bytes"] == {"ps:0": 131072 + 16384, "ps:1": 2048}

    run = load_run(tmp_path)
    steps = run.frame("step")
    assert len(steps) == STEPS and (steps["examples"] == 16).all()
    transfer = run.frame("transfer").astype({"src": str, "dst": str})
    # Every traced step reads every variable once from the ps that holds it, and sends each
    # gradient back (same sizes, plus 0-byte control edges). Under load a traced step's
    # RunMetadata can miss some RecvTensor entries (seen in CI), so count each tensor edge
    # once over all traces: the distinct edges from and to each ps carry its variables.
    for column in ("src", "dst"):
        edges = transfer[transfer[column].str.startswith("ps:")].drop_duplicates(subset=[column, "tensor"])
        assert edges.groupby(column)["bytes"].sum().to_dict() == outcome["variable_bytes"], column
    assert (transfer["duration_ns"] >= 0).all() and (transfer["time_ns"] > 0).all()
    # Placement (the job's record_placement and the hook's begin() record the same rows),
    # the session's readiness, the heartbeats' close.
    placement = run.frame("placement").astype({"variable": str, "task": str})
    held = set(placement[["variable", "task"]].itertuples(index=False, name=None))
    assert {("w1:0", "ps:0"), ("b1:0", "ps:1"), ("w2:0", "ps:0")} <= held
    [session] = run.frame("session").itertuples()
    assert session.task == "chief:0" and 0 < session.ready_ns - session.begin_ns < 60e9
    beats = run.frame("heartbeat")
    assert beats["closed"].iloc[-1] and beats["progress"].max() == STEPS


def test_hook_records_placement_session_and_heartbeats_in_a_local_session(tmp_path):
    """begin() records the graph's global variables; after_create_session() the session's readiness."""
    in_child_process(_run_local_session, str(tmp_path))
    run = load_run(tmp_path)
    placement = run.frame("placement")
    assert placement[["variable", "task", "bytes"]].values.tolist() == [["kernel:0", "worker:1", 8192]]
    [session] = run.frame("session").itertuples()
    assert session.task == "worker:1" and 0 <= session.ready_ns - session.begin_ns < 60e9
    beats = run.frame("heartbeat")
    assert beats["progress"].iloc[-1] == 3 and beats["closed"].tolist()[-1]


def _run_local_session(logdir: str) -> None:
    import tensorflow as tf

    from tfdiag.collectors import DiagnosticsHook

    tf.compat.v1.disable_eager_execution()
    kernel = tf.compat.v1.get_variable("kernel", [64, 32])
    hook = DiagnosticsHook(logdir, task="worker:1", system_interval_s=None)
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(3):
            session.run(kernel)


def test_hook_runs_live_findings_in_the_manifest_writer_and_declares_their_cost(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIAG_LIVE_CPU_SHARE", "1")  # the child inherits it: every 0.2 s, whatever the cost
    in_child_process(_run_local_session_with_live_findings, str(tmp_path))
    notes = [m for m in load_run(tmp_path).frame("note")["message"].astype(str) if m.startswith("live findings: ")]
    assert len(notes) == 1 and " evaluations every 0.2 s or more " in notes[0] and int(notes[0].split()[2]) >= 2


def _run_local_session_with_live_findings(logdir: str) -> None:
    import time

    import tensorflow as tf

    from tfdiag.collectors import DiagnosticsHook

    tf.compat.v1.disable_eager_execution()
    kernel = tf.compat.v1.get_variable("kernel", [64, 32])
    hook = DiagnosticsHook(logdir, system_interval_s=None, live_interval_s=0.2)
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(40):
            session.run(kernel)
            time.sleep(0.02)
