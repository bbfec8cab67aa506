"""Record kinds of the tfdiag log: the contract between collectors and analysis.

Every record a collector writes is one row of one *kind*. A kind is a fixed list of
typed columns; the store writes each kind as Arrow record batches, and the loader
returns one pandas DataFrame per kind. Times are int64 nanoseconds since the Unix
epoch on the clock of the host that measured them (``time.time_ns()`` or
``tf.timestamp()``); durations are int64 nanoseconds. Tasks are named ``job:index``.

Bump ``SCHEMA_VERSION`` when a column is removed or changes meaning; adding a kind or
appending a column keeps the version (old readers ignore what they do not know).
The same table, with the meaning of every column, is in ``docs/log-format.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 1

# Values the collectors and the analysis must agree on.

# Every task that runs a collector writes a heartbeat this often (``src/tfdiag/collectors/heartbeat.py``);
# the analysis judges a silent task by it (``stalled`` counts missed beats in these).
HEARTBEAT_EVERY_S = 5.0
# A sampler's timed wake-up this much later than asked counts as late, its process stopped:
# above the GIL's 5 ms switch interval, well under a CPU quota's stop (tens of ms of its
# 100 ms period), so a late wake-up is a stop, not a busy interpreter.
LATE_WAKE_S = 0.010
# Host names of a cluster address that mean "this host" (``split_address`` strips IPv6 brackets).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# Training steps per scheduled closure: what the bundled ps_ctl job runs (unless tuned) and
# what ``coordinator_bound`` advises: a closure costs the coordinator a dispatch and a result
# round trip, and steps of a few ms, one per closure, leave the workers idle most of the time.
STEPS_PER_CLOSURE = 10

_ARROW_TYPES = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
}


@dataclass(frozen=True)
class RecordKind:
    """One kind of record: a name and its typed columns, in order."""

    name: str
    columns: tuple[tuple[str, str], ...]

    def arrow_schema(self, task: str | None = None) -> pa.Schema:
        """The Arrow schema of this kind; ``task``, the writing task, goes into its metadata."""
        fields = [pa.field(name, _ARROW_TYPES[type_]) for name, type_ in self.columns]
        metadata = {"kind": self.name, "schema_version": str(SCHEMA_VERSION)}
        if task is not None:
            metadata["task"] = task
        return pa.schema(fields, metadata=metadata)


STEP = RecordKind(
    "step",
    (
        ("task", "string"),  # the worker that ran the step
        ("step", "int64"),
        ("begin_ns", "int64"),  # on the clock of `clock_task`
        ("end_ns", "int64"),
        ("input_wait_ns", "int64"),  # time spent waiting for the next input element
        ("examples", "int64"),
        ("clock_task", "string"),  # whose clock begin/end are on
        ("device_ns", "int64"),  # device (GPU) compute time of the step where known, else null
        ("steps", "int64"),  # training steps the record covers (a closure may run several); null: 1
        ("compute_ns", "int64"),  # from the input element to this worker's own gradients; null: not stamped
    ),
)

CLOSURE = RecordKind(
    "closure",
    (
        ("worker", "string"),  # the worker that ran it ("" if it never ran)
        ("closure_id", "int64"),
        ("dispatch_ns", "int64"),  # coordinator clock: schedule() called
        ("result_ns", "int64"),  # coordinator clock: result came in (a failure: seen, within 1 s)
        ("ok", "bool"),
        ("error", "string"),
    ),
)

RPC = RecordKind(
    "rpc",
    (
        ("src", "string"),
        ("dst", "string"),
        ("send_ns", "int64"),  # src clock
        ("remote_ns", "int64"),  # dst clock, read on dst's device
        ("recv_ns", "int64"),  # src clock
        ("payload_bytes", "int64"),  # 0 for a latency probe; N when the probe also moved N bytes
    ),
)

ALLREDUCE = RecordKind(
    "allreduce",
    (
        ("task", "string"),
        ("time_ns", "int64"),
        ("duration_ns", "int64"),
        ("bytes", "int64"),
    ),
)

TRANSFER = RecordKind(
    "transfer",
    (
        ("src", "string"),
        ("dst", "string"),
        ("time_ns", "int64"),
        ("bytes", "int64"),
        ("duration_ns", "int64"),
        ("tensor", "string"),
    ),
)

SYSTEM = RecordKind(
    "system",
    (
        ("host", "string"),
        ("task", "string"),
        ("time_ns", "int64"),
        ("cpu_pct", "float64"),
        ("mem_used_frac", "float64"),
        ("net_sent_bytes", "int64"),  # cumulative counters, as psutil reports them
        ("net_recv_bytes", "int64"),
        ("disk_read_bytes", "int64"),
        ("disk_write_bytes", "int64"),
        ("cpu_count", "int64"),  # the host's logical cores
        ("pid", "int64"),  # the sampling process
        ("proc_cpu_pct", "float64"),  # this process's CPU, percent of all the host's cores
        ("job_cpu_pct", "float64"),  # the job's processes on this host (see docs/log-format.md)
        ("job_processes", "int64"),  # how many processes job_cpu_pct counts
        ("wakes", "int64"),  # the sampler thread's timed wake-ups since the previous sample
        ("late_wakes", "int64"),  # of those, the ones LATE_WAKE_S or more later than asked (the process was stopped)
        ("late_ms", "float64"),  # their summed lateness
        ("throttled_ms", "float64"),  # the cgroup cpu.stat throttled time delta (v1 or v2), ms; NaN without one
        ("run_ms", "float64"),  # this process's threads' time on a CPU since the previous sample (schedstat), ms
        ("runq_wait_ms", "float64"),  # their time runnable, waiting on a run queue (schedstat), ms; NaN unknown
        ("hog_pid", "int64"),  # the busiest process outside the job since the previous sample; null: none scanned
        ("hog_name", "string"),  # its name (/proc/<pid>/stat's comm)
        ("hog_cpu_pct", "float64"),  # its CPU, percent of all the host's cores
        ("pid_start_ns", "int64"),  # when the sampling process started (its pid is not a later process's)
    ),
)

JOB_PROCESS = RecordKind(
    "job_process",
    (
        ("host", "string"),
        ("task", "string"),  # the cluster task listening in that process (a ParameterServerStrategy worker or ps)
        ("time_ns", "int64"),  # when the sampling process read it (every few samples: the figures cover the time since)
        ("pid", "int64"),
        ("run_ms", "float64"),  # its threads' time on a CPU since the previous sample (schedstat), ms
        ("runq_wait_ms", "float64"),  # their time waiting on a run queue, ms
        ("throttled_ms", "float64"),  # its cgroup's throttled time (cpu.stat) since the previous record, ms; NaN: none
        ("probes", "int64"),  # samples that read its state since the previous record
        ("stopped_probes", "int64"),  # of those, the ones that found it stopped (state T or t)
    ),
)

GPU = RecordKind(
    "gpu",
    (
        ("host", "string"),
        ("index", "int64"),
        ("time_ns", "int64"),
        ("util_pct", "float64"),
        ("mem_used_bytes", "int64"),
        ("mem_total_bytes", "int64"),
        ("power_w", "float64"),
        ("sm_clock_mhz", "float64"),
        ("tf_mem_peak_bytes", "int64"),  # TensorFlow's peak allocation on this GPU, null when unknown
    ),
)

SHARD = RecordKind(
    "shard",
    (
        ("task", "string"),
        ("time_ns", "int64"),
        ("examples", "int64"),  # cumulative examples consumed by `task` from `file`
        ("file", "string"),  # "" for the whole dataset
        ("policy", "string"),  # auto-shard policy: AUTO, FILE, DATA, OFF, HINT or ""
    ),
)

PLACEMENT = RecordKind(
    "placement",
    (
        ("variable", "string"),
        ("task", "string"),  # the task that holds it, e.g. ps:0
        ("bytes", "int64"),
        ("shape", "string"),
    ),
)

FAULT = RecordKind(
    "fault",
    (
        ("task", "string"),
        ("time_ns", "int64"),
        ("kind", "string"),  # failure, retry, recovery, restart
        ("message", "string"),
    ),
)

NOTE = RecordKind(
    "note",
    (
        ("task", "string"),
        ("time_ns", "int64"),
        ("level", "string"),  # info or warning
        ("message", "string"),
    ),
)

LABEL = RecordKind(
    "label",
    (
        ("task", "string"),  # the worker that consumed the examples
        ("time_ns", "int64"),
        ("label", "string"),  # the class label, as text
        ("examples", "int64"),  # cumulative examples with this label consumed by `task`
    ),
)

HEARTBEAT = RecordKind(
    "heartbeat",
    (
        ("task", "string"),  # the task that wrote it
        ("time_ns", "int64"),  # the writer's clock
        ("subject", "string"),  # whose progress `progress` counts: the writer itself or a worker it drives
        ("progress", "int64"),  # steps (or closures) `subject` completed so far; null: no progress counter
        ("in_flight", "int64"),  # closures scheduled by the coordinator and not yet finished; null: none tracked
        ("oldest_in_flight_ns", "int64"),  # dispatch time of the oldest of them (writer's clock); null: none
        ("closed", "bool"),  # true on the last row of a task that closed its collectors normally
    ),
)

SESSION = RecordKind(
    "session",
    (
        ("task", "string"),  # the TF1 task whose MonitoredSession this is
        ("begin_ns", "int64"),  # DiagnosticsHook.begin(): the graph is final, the session is being created
        ("ready_ns", "int64"),  # after_create_session(): the session is ready (a non-chief: the chief initialised it)
    ),
)

LIVE_FINDING = RecordKind(
    "live_finding",
    (
        ("task", "string"),  # the task that ran the live analysis (the manifest's writer)
        ("time_ns", "int64"),  # when it was announced, on that task's clock
        ("state", "string"),  # began or cleared
        ("kind", "string"),  # the finding kind (docs/findings.md)
        ("tasks", "string"),  # the tasks the finding names, comma-separated ("" for the whole job)
        ("severity", "string"),  # warning or critical
        ("onset_ns", "int64"),  # the first evaluation that saw it (began) or saw it gone (cleared)
        ("step", "int64"),  # the highest step in the analysed window at onset; null: none yet
        ("predicted_speedup", "float64"),  # throughput ratio if repaired; null: unknown
        ("message", "string"),  # the line logged in the training task
        ("window_s", "float64"),  # seconds of records the announcing analysis judged; null: the screen announced it
    ),
)

EXIT = RecordKind(
    "exit",
    (
        ("task", "string"),
        ("time_ns", "int64"),
        ("reason", "string"),  # exception: one left the program; exit: it ended with its collectors open
        ("error_type", "string"),  # the exception's class, "" for exit
        ("message", "string"),  # its text, head and tail kept (TensorFlow puts the cause last)
        ("blamed", "string"),  # the tasks the text names as failed, comma-separated ("" for none)
    ),
)

LIVENESS = RecordKind(
    "liveness",
    (
        ("task", "string"),  # the task that checked
        ("time_ns", "int64"),  # when the check was sent (that task's clock)
        ("target", "string"),  # the task checked: one that runs no collector (a ps)
        ("status", "string"),  # OK (it answered), DEADLINE_EXCEEDED (no answer: frozen or hung), UNAVAILABLE (gone)
        ("duration_ns", "int64"),  # until the answer or the verdict
    ),
)

KINDS: dict[str, RecordKind] = {
    kind.name: kind
    for kind in (STEP, CLOSURE, RPC, ALLREDUCE, TRANSFER, SYSTEM, JOB_PROCESS, GPU, SHARD, PLACEMENT, FAULT, NOTE, LABEL,
                 HEARTBEAT, SESSION, LIVE_FINDING, EXIT, LIVENESS)
}


def task_name(job: str, index: int) -> str:
    """The canonical task name: ``task_name("worker", 1) == "worker:1"``."""
    return f"{job}:{index}"


def parse_task(task: str) -> tuple[str, int]:
    """``(job, index)`` of a task name; a name without an index is task 0.

    >>> parse_task("ps:1")
    ('ps', 1)
    >>> parse_task("chief")
    ('chief', 0)
    """
    job, _, index = task.partition(":")
    return job, int(index or 0)


def split_address(address: str) -> tuple[str, str]:
    """``(host, port)`` of a cluster address ``host:port``, IPv6 brackets removed; port ``""`` when absent.

    >>> split_address("[::1]:2223")
    ('::1', '2223')
    >>> split_address("localhost")
    ('localhost', '')
    """
    host, separator, port = str(address).rpartition(":")
    return (host.strip("[]"), port) if separator else (port.strip("[]"), "")


def device_of(task: str) -> str:
    """The CPU device of a task, as TensorFlow spells it in a cluster.

    >>> device_of("ps:1")
    '/job:ps/replica:0/task:1/device:CPU:0'
    """
    job, index = parse_task(task)
    return f"/job:{job}/replica:0/task:{index}/device:CPU:0"


def task_of_device(device: str) -> str | None:
    """The task of a device string, None when it names no job.

    >>> task_of_device("/job:ps/replica:0/task:1/device:CPU:0")
    'ps:1'
    >>> task_of_device("/job:worker/task:2")
    'worker:2'
    >>> task_of_device("/device:CPU:0") is None
    True
    """
    job = index = None
    for part in (device or "").split("/"):
        key, _, value = part.partition(":")
        if key == "job":
            job = value
        elif key == "task":
            index = value
    if not job:
        return None
    return task_name(job, int(index or 0))


def cluster_tasks(cluster: dict, jobs=("worker", "ps", "chief", "evaluator")) -> list[str]:
    """Task names of ``cluster`` (``{job: [address, ...]}``) for ``jobs``, in that order.

    >>> cluster_tasks({"ps": ["a:1", "b:1"], "worker": ["c:1"], "chief": ["d:1"]}, jobs=("worker", "ps"))
    ['worker:0', 'ps:0', 'ps:1']
    """
    return [task_name(job, index) for job in jobs for index in range(len(cluster.get(job) or ()))]


def task_file_stem(task: str) -> str:
    """The file name stem of a task's log.

    Characters that are unsafe in a file name become ``_`` (the task's real name travels
    inside the file, in each frame's metadata).

    >>> task_file_stem("worker:1")
    'worker-1'
    >>> task_file_stem("../evil/job:0")
    '_evil_job-0'
    """
    return re.sub(r"[^A-Za-z0-9._-]", "_", task.replace(":", "-")).lstrip(".")
