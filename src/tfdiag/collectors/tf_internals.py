"""Every access the collectors and sample jobs make to private state of TensorFlow and Keras, in one place.

The collectors need a few things no public API gives: when a ``ClusterCoordinator``
closure's result came in and where its outputs live (``RemoteValueImpl``), a way to run
a ``tf.function`` from a collector thread that ``ClusterCoordinator``'s cancellation
cannot reach (``call_uncancelled``), the coordinator a tf-keras ``model.fit``
schedules through, a strategy's cluster resolver and worker count, and a Keras
callback's model; the sample jobs, tf.data's in-graph ``sleep``. Each is read here and
nowhere else, and so are the texts TensorFlow prints that the collectors parse (the last
section: the coordinator's log lines about faults, a traced step's RecvTensor labels);
``tests/collectors/test_tf_internals.py`` pins what every attribute means on the
installed TensorFlow against real objects (a ``ClusterCoordinator`` of a local
cluster, its ``RemoteValue``\\ s), so that an upgrade that moves one fails those tests
instead of quietly losing records.

``SUPPORTED_TF_VERSIONS`` is the range those tests have passed on. Outside it,
:func:`check_tf_version` warns once and the collectors still try; every accessor
degrades to "unknown" (None/False) rather than raising where it can, and the callers
turn the collector off when it cannot.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import sys
import weakref

from tfdiag.events import task_name, task_of_device

logger = logging.getLogger("tfdiag")

# (major, minor) of the oldest and newest TensorFlow the private-state tests passed on.
SUPPORTED_TF_VERSIONS = ((2, 21), (2, 21))

# What the instrumented coordinator reads of a RemoteValueImpl
# (tensorflow/python/distribute/coordinator/remote_value.py).
REMOTE_VALUE_STATE = ("_status_available_event", "_status", "_error", "_values", "_has_fetched_to_local",
                      "_fetched_tensors", "_copy_to_local")


def _version_tuple(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string, None when it has no such prefix.

    >>> _version_tuple("2.21.0rc1")
    (2, 21)
    >>> _version_tuple("nightly") is None
    True
    """
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def tf_version_supported(version: str) -> bool:
    """Whether ``version`` lies in ``SUPPORTED_TF_VERSIONS``.

    >>> tf_version_supported("2.21.0"), tf_version_supported("2.22.1"), tf_version_supported("x")
    (True, False, False)
    """
    parsed = _version_tuple(version)
    low, high = SUPPORTED_TF_VERSIONS
    return parsed is not None and low <= parsed <= high


@functools.cache
def check_tf_version() -> bool:
    """Warns once per process when the loaded TensorFlow is outside ``SUPPORTED_TF_VERSIONS``.

    Returns whether it is supported (True when TensorFlow is not loaded: nothing to check).
    """
    tf = sys.modules.get("tensorflow")
    version = str(getattr(tf, "__version__", "")) if tf is not None else ""
    if not version or tf_version_supported(version):
        return True
    (low, high) = SUPPORTED_TF_VERSIONS
    logger.warning("tfdiag: TensorFlow %s is outside the versions whose internals the collectors were tested on "
                   "(%d.%d to %d.%d); they still try, and turn off what they cannot read.",
                   version, *low, *high)
    return False


# -- RemoteValue (ClusterCoordinator.schedule's result) ----------------------------------
def has_remote_value_state(remote) -> bool:
    """Whether ``remote`` has every attribute of ``REMOTE_VALUE_STATE``."""
    return all(hasattr(remote, name) for name in REMOTE_VALUE_STATE)


def closure_finished(remote) -> bool:
    """Whether a closure's result (or its error) is in."""
    return remote._status_available_event.is_set()  # noqa: SLF001


def closure_error(remote) -> BaseException | None:
    """The error a finished closure ended with, None when it succeeded."""
    if remote._error is not None:  # noqa: SLF001
        return remote._error  # noqa: SLF001
    if getattr(remote._status, "name", "") == "ABORTED":  # noqa: SLF001 - its worker failed; no error object
        from tensorflow import errors

        return errors.CancelledError(None, None, "the closure was aborted (its worker failed)")
    return None


def worker_outputs(remote):
    """A finished closure's outputs as handles on the worker that ran it."""
    return remote._values  # noqa: SLF001


def local_outputs(remote):
    """A finished closure's outputs copied to this process, None when they were not copied."""
    if remote._has_fetched_to_local and remote._fetched_tensors is not remote._values:  # noqa: SLF001
        return remote._fetched_tensors  # noqa: SLF001
    return None


def on_result(remote, callback) -> None:
    """Calls ``callback()`` in the coordinator's dispatch thread as ``remote``'s result comes in.

    When a closure succeeds, the dispatch thread of its worker calls the RemoteValue's
    ``_copy_to_local`` at once, and runs the worker's next closure only after it. The
    copy it makes there (of every output, to this process) is made only when
    ``callback()`` returns true; otherwise the outputs stay on the worker
    (:func:`worker_outputs`) and :func:`local_outputs` is None. ``remote`` is held
    weakly: the hook keeps nothing alive.
    """
    remote_ref = weakref.ref(remote)

    def copy_to_local():
        held = remote_ref()
        if callback():
            return type(held)._copy_to_local(held)  # noqa: SLF001
        return held._values  # noqa: SLF001 - nobody will read them here

    remote._copy_to_local = copy_to_local  # noqa: SLF001 - RemoteValueImpl's dispatch path calls it


# -- ClusterCoordinator.schedule's tracing -----------------------------------------------
def traced_concrete_function(function, args, kwargs, strategy):
    """The ``ConcreteFunction`` that ``ClusterCoordinator.schedule(function, args, kwargs)``
    runs, looked up as its ``Closure`` does (in ``strategy``'s scope, worker 0's slice of
    per-worker arguments as type specs); None where the lookup traced or failed.

    Ask only after ``schedule`` traced ``function`` for the same arguments: the lookup then
    hits that trace. Outside the scope it would miss and trace anew (a different concrete
    function), and a trace outside ``schedule`` has ParameterServerStrategy warn that
    ``run`` is not being scheduled; the tracing count tells a hit from a trace.
    """
    from tensorflow.python.distribute.coordinator import cluster_coordinator
    from tensorflow.python.util import nest

    def as_spec(value):
        return cluster_coordinator._maybe_as_type_spec(value)  # noqa: SLF001

    try:
        traces = function.experimental_get_tracing_count()
        replica_args = cluster_coordinator._select_worker_slice(0, tuple(args or ()))  # noqa: SLF001
        replica_kwargs = cluster_coordinator._select_worker_slice(0, dict(kwargs or {}))  # noqa: SLF001
        with strategy.scope():
            concrete = function.get_concrete_function(*nest.map_structure(as_spec, replica_args),
                                                      **nest.map_structure(as_spec, replica_kwargs))
    except Exception:  # noqa: BLE001 - the caller schedules the tf.function instead
        return None
    return concrete if function.experimental_get_tracing_count() == traces else None


def traced_variables() -> list:
    """The variables the ``tf.function`` being traced has read so far, nested functions'
    included: its ``FuncGraph``'s watched variables, which become its
    ``ConcreteFunction.variables`` only once the trace ends; [] outside a trace or on any error."""
    try:
        import tensorflow as tf

        watched = getattr(tf.compat.v1.get_default_graph(), "_watched_variables", None)  # noqa: SLF001
        return list(watched) if watched is not None else []
    except Exception:  # noqa: BLE001 - no placement, never a failed trace
        return []


# -- tf.function calls from collector threads ------------------------------------------------
def call_uncancelled(function) -> list:
    """Runs ``function``, a ``ConcreteFunction`` of no arguments, eagerly; returns its flat outputs.

    A plain call takes its cancellation manager from a process-wide global
    (``tensorflow/python/eager/cancellation.py``), which ``ClusterCoordinator`` sets while
    any of its worker threads dispatches a closure. A call from another thread in that
    moment runs under the closure queue's manager, and when it fails (a probe of a
    worker that just died) TensorFlow cancels that manager: every closure after it
    fails with ``CancelledError: RemoteExecuteNode::RunAsync``, which the coordinator
    does not take for a worker failure, and the run ends. This call names the function
    directly, as ``context.call_function`` does, with no cancellation manager.
    """
    from tensorflow.python.eager import context, execute

    atomic = function._inference_function  # noqa: SLF001 - the AtomicFunction a call runs
    signature = atomic.cached_definition.signature
    if signature.input_arg or function.captured_inputs:
        raise ValueError(f"call_uncancelled runs functions of no inputs; {function.name} has "
                         f"{len(signature.input_arg)}")
    ctx = context.context()
    attrs = tuple(itertools.chain(*ctx.function_call_options.as_attrs().items()))
    name = atomic.name.decode("utf-8") if isinstance(atomic.name, bytes) else atomic.name
    return execute.execute(name, num_outputs=len(signature.output_arg), inputs=[], attrs=attrs, ctx=ctx)


def own_executor():
    """Runs the calling thread's eager ops on a synchronous executor of its own, while in scope.

    An op on a worker's device is a node of the calling thread's executor until the
    worker answers; and every ``ClusterCoordinator`` dispatch thread, as it leaves its
    worker's executor after each closure, waits for every node of the executor it was on
    before: the process-wide default one (``context.executor_scope`` wraps it in an
    ``Executor`` whose ``__del__`` waits). A timing copy from a frozen worker on that
    executor stopped every worker's closures until the worker ran again
    (docs/reliability.md); on an executor of its own it holds up only the calling thread,
    when it leaves the scope. The executor is of the kind ``ClusterCoordinator`` gives
    each worker.
    """
    from tensorflow.python.eager import context, executor

    return context.executor_scope(executor.new_executor(enable_async=False))


# -- ClusterCoordinator under tf-keras model.fit -----------------------------------------
def cluster_coordinator_of(model, strategy):
    """The ``ClusterCoordinator`` tf-keras ``model.fit`` schedules through, None if none.

    tf-keras looks up ``model._cluster_coordinator`` at each train step; the
    coordinator is one object per strategy (``strategy._cluster_coordinator``).
    """
    return getattr(model, "_cluster_coordinator", None) or getattr(strategy, "_cluster_coordinator", None)


def replace_cluster_coordinator(model, strategy, coordinator) -> None:
    """Makes ``model.fit`` (and anything asking the strategy) schedule through ``coordinator``."""
    if model is not None:
        model._cluster_coordinator = coordinator  # noqa: SLF001
    strategy._cluster_coordinator = coordinator  # noqa: SLF001


# -- strategies ----------------------------------------------------------------------------
def strategy_resolver(strategy):
    """A strategy's cluster resolver, None when it has none.

    The public ``strategy.cluster_resolver`` reads ``strategy.extended._cluster_resolver``,
    which MultiWorkerMirroredStrategy sets; ParameterServerStrategy keeps its resolver in
    ``strategy._cluster_resolver`` instead, and its public property returns None.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        resolver = getattr(strategy, "_cluster_resolver", None)
    return resolver


def strategy_worker_count(strategy) -> int | None:
    """How many workers a MultiWorkerMirroredStrategy spans, None when it does not say."""
    count = getattr(getattr(strategy, "extended", None), "_num_workers", None)
    return int(count) if count is not None else None


# -- sample jobs' accessors -------------------------------------------------------------
def dataset_sleep(microseconds):
    """``tf.data``'s testing ``sleep`` transformation: each element comes ``microseconds`` late.

    The sample jobs plant their delays with it: a non-busy, in-graph sleep that runs
    where the dataset runs (on the remote worker under ParameterServerStrategy). Nothing
    public does that, and a job cannot plant a delay without it: when TensorFlow moves
    it, this raises ``ImportError`` rather than degrading.
    """
    from tensorflow.python.data.experimental.ops import testing

    return testing.sleep(microseconds)


# -- Keras callbacks -------------------------------------------------------------------------
def callback_model(callback):
    """The model a Keras callback is attached to (Keras 3 keeps it in ``_model``; tf-keras in ``model``)."""
    return getattr(callback, "_model", None) or getattr(callback, "model", None)


# -- TensorFlow's error texts ----------------------------------------------------------------
# Where an error names the task that failed (TF 2.21): the coordination service's verdict
# on tasks that stopped beating, and gRPC's note on the peer that reset a connection.
_UNHEALTHY_TASKS = re.compile(r"following tasks are unhealthy[^:]*:((?:\s*/job:[^\s,]+)+)")
_REMOTE_TARGET = re.compile(r"from remote target (/job:[^\s,]+)")
# ... and a note quoted inside another target's message: its newline is escaped.
_RELAYED_TARGET = re.compile(r"\\n\s*Additional GRPC error information from remote target (/job:[^\s,]+)")


def tasks_blamed(error_text: str, own_task: str | None = None) -> list[str]:
    """The tasks an error's text names as failed (not ``own_task``), in the order named.

    >>> tasks_blamed("Collective ops is aborted by: ... The following tasks are unhealthy "
    ...              "(stopped sending heartbeats):\\n/job:worker/replica:0/task:1\\nThe tasks have crashed.")
    ['worker:1']
    >>> tasks_blamed("Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling")
    ['ps:0']
    >>> tasks_blamed("Detected at node Foo on /job:worker/replica:0/task:0", "worker:0")
    []
    """
    text = error_text or ""
    devices = [device for group in _UNHEALTHY_TASKS.findall(text) for device in group.split()]
    devices += _failed_remote_targets(text)
    tasks = (task_of_device(device) for device in devices)
    return [task for task in dict.fromkeys(tasks) if task and task != own_task]


def _failed_remote_targets(text: str) -> list[str]:
    """The remote targets an error's gRPC notes name as failed. A target whose own quoted
    message (its newlines escaped, ``\\n``) names a further remote target only relayed that
    one's failure (the coordinator's call through worker 0 to a ps that died): the further
    target is named instead.

    >>> _failed_remote_targets("error\\nAdditional GRPC error information from remote target /job:ps/task:0 while A"
    ...     "\\nAdditional GRPC error information from remote target /job:worker/task:0 while B: {grpc_message:"
    ...     "\\"refused\\\\nAdditional GRPC error information from remote target /job:ps/task:0 while C\\"}")
    ['/job:ps/task:0', '/job:ps/task:0']
    """
    relayed = {m.start(1): m[1] for m in _RELAYED_TARGET.finditer(text)}
    named = [(m.start(1), m[1]) for m in _REMOTE_TARGET.finditer(text) if m.start(1) not in relayed]
    if not named:
        return list(relayed.values())
    failed = []
    for (at, target), (end, _) in zip(named, named[1:] + [(len(text), None)]):
        failed += [inner for position, inner in relayed.items() if at < position < end] or [target]
    return failed


# -- TensorFlow's gRPC server ----------------------------------------------------------------
# Every ``tf.distribute.Server`` answers the worker service's status request (its devices).
WORKER_STATUS_METHOD = "/tensorflow.WorkerService/GetStatus"


def server_status(address: str):
    """A function ``check(timeout_s) -> status`` asking the TensorFlow server at ``address``
    for its status over one kept channel: ``"OK"``, or the gRPC code of the failure
    (``DEADLINE_EXCEEDED``: no answer in time, the process frozen or hung; ``UNAVAILABLE``:
    nothing listens). An empty request is a valid ``GetStatusRequest``; the answer is not read."""
    import grpc  # TensorFlow's own dependency; here only, on the checking thread

    call = grpc.insecure_channel(address).unary_unary(WORKER_STATUS_METHOD)

    def check(timeout_s: float) -> str:
        try:
            call(b"", timeout=timeout_s)
            return "OK"
        except grpc.RpcError as error:
            return error.code().name

    return check


# == TensorFlow's text formats ==============================================================
# What TensorFlow prints rather than holds: the ClusterCoordinator's log lines about
# failed workers (``fault_log``) and the RecvTensor entries of a traced step's StepStats
# (``hook``). Like the private attributes above, each format is read here and nowhere else.

# -- the ClusterCoordinator's log lines --------------------------------------------------------
# (pattern, fault kind, how to get the task from the match)
_PATTERNS = (
    (re.compile(r"^Worker (\S+) failed with"), "failure", lambda m: task_of_device(m[1])),
    (re.compile(r"^Worker (\S+) has been recovered"), "recovery", lambda m: task_of_device(m[1])),
    (re.compile(r"^\[Worker (\d+)\] Putting back a closure after it failed"), "retry", lambda m: task_name("worker", int(m[1]))),
    (re.compile(r"^Parameter server failure detected at PS task (\d+)"), "failure", lambda m: task_name("ps", int(m[1]))),
    (re.compile(r"^Remote function on worker (\S+) failed with"), "retry", lambda m: task_of_device(m[1])),
    (re.compile(r"^Cluster successfully recovered"), "recovery", lambda m: ""),
)


def parse_fault(message: str) -> tuple[str, str] | None:
    """``(kind, task)`` of a coordinator log line, or None when it is not about a fault.

    >>> parse_fault("Worker /job:worker/replica:0/task:1 failed with UnavailableError()")
    ('failure', 'worker:1')
    >>> parse_fault("[Worker 0] Putting back a closure after it failed.")
    ('retry', 'worker:0')
    >>> parse_fault("Waiting for all global closures to be finished.") is None
    True
    """
    for pattern, kind, task in _PATTERNS:
        match = pattern.match(message)
        if match:
            return kind, task(match) or ""
    return None


# -- RecvTensor entries of a traced TF1 step (StepStats) ----------------------------------------
# "[<size>] [<rate>] <tensor> from <device> to <device>"; older TensorFlow prints no rate.
_RECV_LABEL = re.compile(r"^\[([^\]]*)\]\s+(?:\[[^\]]*\]\s+)?(\S+) from (\S+) to (\S+)")
_EXACT_SIZE = re.compile(r"^(\d+)B$")


def parse_recv_label(label: str) -> tuple[int | None, str, str, str] | None:
    """``(bytes, tensor, src device, dst device)`` of a RecvTensor ``timeline_label``.

    ``bytes`` is None where the label rounds the size (``[4.0MB]``).

    >>> parse_recv_label("[8192B] [595.78Mb/s] edge_5_matmul/ReadVariableOp from "
    ...                  "/job:ps/replica:0/task:0/device:CPU:0 to /job:worker/replica:0/task:0/device:CPU:0")
    (8192, 'edge_5_matmul/ReadVariableOp', '/job:ps/replica:0/task:0/device:CPU:0', '/job:worker/replica:0/task:0/device:CPU:0')
    """
    match = _RECV_LABEL.match(label or "")
    if match is None:
        return None
    exact = _EXACT_SIZE.match(match[1])
    return (int(exact[1]) if exact else None), match[2], match[3], match[4]


def transfer_rows(step_stats) -> list[dict]:
    """``transfer`` rows of the RecvTensor entries of a ``StepStats`` proto between two tasks.

    Bytes are the entry's ``requested_bytes``, else the label's exact size; an entry with
    neither (never seen) is left out rather than given a rounded size.
    """
    rows = []
    for device in step_stats.dev_stats:
        for node in device.node_stats:
            if node.node_name != "RecvTensor" and not node.timeline_label.startswith("["):
                continue
            parsed = parse_recv_label(node.timeline_label)
            if parsed is None:
                continue
            label_bytes, tensor, src_device, dst_device = parsed
            size = _allocated_bytes(node)
            size = label_bytes if size is None else size
            src, dst = task_of_device(src_device), task_of_device(dst_device)
            if size is None or not src or not dst or src == dst:
                continue
            start_ns = node.all_start_nanos or node.all_start_micros * 1000
            duration_ns = (node.all_end_rel_nanos or node.all_end_rel_micros * 1000)
            rows.append({"src": src, "dst": dst, "time_ns": int(start_ns), "bytes": size,
                         "duration_ns": int(duration_ns), "tensor": tensor})
    return rows


def _allocated_bytes(node) -> int | None:
    """The exact bytes of a RecvTensor entry: its output's ``requested_bytes``; None without
    one, or when 0 (proto3 cannot tell 0 from unset; the label then says ``[0B]``)."""
    if not node.output:
        return None
    return int(node.output[0].tensor_description.allocation_description.requested_bytes) or None
