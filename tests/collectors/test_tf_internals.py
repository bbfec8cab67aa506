"""What each private attribute the collectors read means, pinned on the installed TensorFlow.

A TensorFlow upgrade that moves or changes one of them fails here, loudly, instead of
leaving the collectors without records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfdiag.collectors import tf_internals

from .chief import run_as_chief

JOB = Path(__file__).with_name("internals_job.py")


def test_the_installed_tensorflow_is_in_the_supported_range():
    tf = pytest.importorskip("tensorflow")
    assert tf_internals.tf_version_supported(tf.__version__), (tf.__version__, tf_internals.SUPPORTED_TF_VERSIONS)


def test_an_unsupported_version_warns_once_and_collectors_still_try(monkeypatch, caplog):
    import types

    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(__version__="9.0.0"))
    tf_internals.check_tf_version.cache_clear()
    try:
        assert tf_internals.check_tf_version() is False
        assert tf_internals.check_tf_version() is False
    finally:
        tf_internals.check_tf_version.cache_clear()
    assert caplog.text.count("outside the versions") == 1


def test_callback_model_of_keras_3_and_tf_keras():
    import keras
    import tf_keras

    for module in (keras, tf_keras):
        model = module.Sequential([module.layers.Dense(1)])
        callback = module.callbacks.Callback()
        callback.set_model(model)
        assert tf_internals.callback_model(callback) is model, module.__name__


def test_dataset_sleep_delays_each_element():
    tf = pytest.importorskip("tensorflow")
    dataset = tf.data.Dataset.range(2).apply(tf_internals.dataset_sleep(60_000))
    start = time.perf_counter()
    assert list(dataset.as_numpy_iterator()) == [0, 1]
    assert time.perf_counter() - start >= 2 * 0.06


@pytest.mark.cluster
def test_remote_values_and_coordinator_of_a_real_cluster(tmp_path):
    facts, _ = run_as_chief(JOB, tmp_path, "ps", ps=1, workers=1, timeout_s=150)
    assert facts == {
        "version_supported": True,
        "resolver_task": ["chief", 0],  # strategy._cluster_resolver (the public property is None)
        "coordinator_found": True,  # strategy._cluster_coordinator is the ClusterCoordinator
        "coordinator_replaced": True,
        "state_present": True,  # every RemoteValueImpl attribute of REMOTE_VALUE_STATE
        "finished_while_running": False,  # _status_available_event: set only once the result is in
        "finished_after_join": True,
        "error_of_success": "None",
        "hook_thread": facts["hook_thread"],
        "outputs_device": "worker:0",  # _values: the outputs, on the worker that ran the closure
        "not_copied": True,  # the hook said no copy: _fetched_tensors is not a copy here
        "read_on_worker": [2.0, 3.0],
        "copied": [2.0, 3.0],  # the hook asked for the copy: _fetched_tensors holds it
        # Closure's lookup (_select_worker_slice, _maybe_as_type_spec), after schedule traced:
        # the concrete function schedule runs, found without tracing, and schedulable itself.
        "concrete_of_scheduled": "ConcreteFunction",
        "lookup_traced": 0,
        "concrete_runs": [2.0, 3.0],
        "finished_failure": True,
        "error_of_failure": "InvalidArgumentError",  # _error
    }
    # _copy_to_local is called by the coordinator's thread for the worker, as the result comes in.
    assert facts["hook_thread"] not in ("", "MainThread"), facts


def test_worker_count_and_resolver_of_multi_worker_mirrored_strategy(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    done = subprocess.run([sys.executable, str(JOB), str(tmp_path), "mwms"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    # extended._num_workers; cluster_resolver (public, from extended._cluster_resolver).
    assert facts == {"version_supported": True, "workers": 1, "resolver": "TFConfigClusterResolver"}


def test_own_executor_runs_the_threads_eager_ops_apart_from_the_executor_it_was_on():
    import tensorflow as tf
    from tensorflow.python.eager import context, executor

    with context.executor_scope(executor.new_executor(enable_async=True)):  # one to tell apart
        with tf_internals.own_executor():
            assert not context.context().executor.is_async()
            assert tf.add(1, 2).numpy() == 3
        assert context.context().executor.is_async()  # the thread's executor is back on leaving


def test_traced_variables_are_the_variables_the_graph_read_so_far():
    tf = pytest.importorskip("tensorflow")
    read, later = tf.Variable(1.0), tf.Variable(2.0)
    seen = []

    @tf.function
    def f():
        value = read + 1.0
        seen.append(tf_internals.traced_variables())
        return value + later

    f()
    assert [[id(v) for v in s] for s in seen] == [[id(read)]]
    assert tf_internals.traced_variables() == []  # eager: no trace


# The chief's error when ps:0 was killed under ParameterServerStrategy (TF 2.21, benchmarks/failures.py
# ps_ctl/kill/ps:0): its own call to ps:0 failed, and its call through worker:0 relayed ps:0's failure.
PS_KILLED_THROUGH_A_WORKER = (
    "Graph execution error:\n\nfailed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:56281: "
    "Failed to connect to remote host: Connection refused\n"
    "Additional GRPC error information from remote target /job:ps/replica:0/task:0/device:CPU:0 while calling "
    "/tensorflow.eager.EagerService/RunComponentFunction:\n:UNKNOWN:Error received from peer  {grpc_status:14, "
    'grpc_message:"failed to connect to all addresses"}\n'
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    "/tensorflow.eager.EagerService/Enqueue:\n:UNKNOWN:Error received from peer  {grpc_status:14, "
    'grpc_message:" failed to connect to all addresses\\nAdditional GRPC error information from remote target '
    "/job:ps/replica:0/task:0/device:CPU:0 while calling /tensorflow.eager.EagerService/RunComponentFunction:\\n"
    ':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:\\"failed to connect\\"}"} '
    "[Op:__inference_instrumented_1367]")


def test_a_worker_that_relayed_a_dead_ps_error_is_not_blamed():
    assert tf_internals.tasks_blamed(PS_KILLED_THROUGH_A_WORKER, "chief:0") == ["ps:0"]
