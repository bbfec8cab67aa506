"""Small real runs with chosen signals, written through the real store writer.

The one writer of synthetic runs for every test: ``RunBuilder`` collects records, then
writes them as a real job would (``write(by_task=True)``: one file per task). A live
test grows the run: more records, then ``grow()`` appends them to the task files, as a
running job's files grow.
"""

from __future__ import annotations

from pathlib import Path

from tfdiag.store import TaskWriter, write_manifest

START_NS = 1_700_000_000_000_000_000
MS = 1_000_000
EXAMPLES_PER_STEP = 32


class RunBuilder:
    """Collects records for one run, then writes them as the chief would; a later write
    appends only what was added since.

    >>> run = RunBuilder(tmp_path).steps("worker:0", step_ms=20).write()  # doctest: +SKIP
    >>> run.steps_until("worker:0", START_NS + 10**10).grow()  # the job ran on to 10 s  # doctest: +SKIP
    """

    def __init__(self, path, strategy="ParameterServerStrategy", workers=2, ps=2, chief=True):
        self.path = Path(path)
        self.strategy = strategy
        cluster = {
            "chief": ["127.0.0.1:2220"] if chief else [],
            "worker": [f"127.0.0.1:{2230 + i}" for i in range(workers)],
            "ps": [f"127.0.0.1:{2240 + i}" for i in range(ps)],
        }
        self.cluster = {job: addresses for job, addresses in cluster.items() if addresses}
        self.records: list[tuple[str, dict]] = []
        self.written = 0  # how many of ``records`` are in the files
        self.step_begins: dict[str, list[int]] = {}
        self.next_steps: dict[str, tuple[int, int]] = {}  # per task: its next step's number and begin
        self.step_end_ns = START_NS

    def record(self, kind, /, **values):
        """One record of ``kind`` exactly as given (a damaged or hostile one, say)."""
        self.records.append((kind, values))
        return self

    def steps(self, task, count=100, step_ms=20.0, input_ms=0.0, idle_ms=1.0, closures=False, *, first_step=0,
              start_ns=START_NS, jitter_ms=0.0, examples=EXAMPLES_PER_STEP, steps_per_record=None):
        """``count`` steps of ``task`` from ``start_ns``: ``step_ms`` each (plus ``jitter_ms``
        times ``step % 4``), of which ``input_ms`` waiting for input, ``idle_ms`` apart; each
        record covering ``steps_per_record`` training steps (a closure's; None: one)."""
        begin = start_ns
        self.step_begins[task] = []
        for step in range(first_step, first_step + count):
            self.step_begins[task].append(begin)
            end = begin + int((step_ms + jitter_ms * (step % 4)) * MS)
            self.record("step", task=task, step=step, begin_ns=begin, end_ns=end, input_wait_ns=int(input_ms * MS),
                        examples=examples, clock_task=task, steps=steps_per_record)
            if closures:
                self.record("closure", worker=task, closure_id=step, dispatch_ns=begin - MS, result_ns=end + MS,
                            ok=True, error="")
            begin = end + int(idle_ms * MS)
        self.next_steps[task] = (first_step + count, begin)
        self.step_end_ns = max(self.step_end_ns, end) if count else self.step_end_ns
        return self

    def steps_until(self, task, until_ns, step_ms=20.0, idle_ms=1.0, *, start_ns=None):
        """More steps of ``task``, ``step_ms`` each and ``idle_ms`` apart, from ``start_ns``
        (else after its last step, else the run's start): as many as end by ``until_ns``."""
        first_step, begin = self.next_steps.get(task, (0, START_NS))
        begin = begin if start_ns is None else start_ns
        step_ns, period_ns = int(step_ms * MS), int(step_ms * MS) + int(idle_ms * MS)
        count = (until_ns - begin - step_ns) // period_ns + 1 if until_ns >= begin + step_ns else 0
        return self.steps(task, count, step_ms, idle_ms=idle_ms, first_step=first_step, start_ns=begin)

    def rpc(self, src, dst, rtt_ms, count=40, payload_bytes=0, offset_ms=0.0):
        for i in range(count):
            send = START_NS + i * 50 * MS
            rtt = int(rtt_ms * MS * (1 + 0.05 * (i % 5)))
            self.record("rpc", src=src, dst=dst, send_ns=send, remote_ns=send + rtt // 2 + int(offset_ms * MS),
                        recv_ns=send + rtt, payload_bytes=payload_bytes)
        return self

    def transfer(self, src, dst, duration_ms, size=8192, tensors=2, every=10, at_ms=0.1):
        """Traced ``RecvTensor`` transfers, as ``DiagnosticsHook`` writes them: ``tensors``
        concurrent transfers from ``src`` to ``dst``, each ``duration_ms`` long, starting
        ``at_ms`` into every ``every``-th step of the worker among them (call ``steps`` for
        it first)."""
        worker = dst if dst.startswith("worker:") else src
        for begin in self.step_begins[worker][every - 1::every]:
            for tensor in range(tensors):
                self.record("transfer", src=src, dst=dst, time_ns=begin + int(at_ms * MS), bytes=size,
                            duration_ns=int(duration_ms * MS), tensor=f"edge_{tensor}_read")
        return self

    def placement(self, variable, task, size):
        self.record("placement", variable=variable, task=task, bytes=size, shape="")
        return self

    def shard(self, task, examples, policy="DATA"):
        self.record("shard", task=task, time_ns=START_NS, examples=examples, file="", policy=policy)
        return self

    def gpu(self, host, index, util_pct, count=20):
        for i in range(count):
            self.record("gpu", host=host, index=index, time_ns=START_NS + i * 100 * MS, util_pct=util_pct,
                        mem_used_bytes=4 << 30, mem_total_bytes=16 << 30, power_w=150.0,
                        sm_clock_mhz=1500.0)
        return self

    def system(self, host, task, cpu_pct, count=20, every_ms=100.0, net_bytes_per_s=0.0, **columns):
        """``count`` host samples every ``every_ms``; the network counters (sent and received
        alike) grow at ``net_bytes_per_s``; ``columns``, any other of the kind's, alike in each."""
        for i in range(count):
            moved = int(net_bytes_per_s * i * every_ms / 1000)
            self.record("system", host=host, task=task, time_ns=START_NS + int(i * every_ms * MS),
                        cpu_pct=cpu_pct, mem_used_frac=0.5, net_sent_bytes=moved,
                        net_recv_bytes=moved, disk_read_bytes=0, disk_write_bytes=0, **columns)
        return self

    def job_process(self, host, task, pid, wait_share, count=20, every_ms=100.0, run_ms=80.0, throttled_share=0.0,
                    stopped_share=0.0, probes=5):
        """``count`` readings of another process of the job (``job_process``) every ``every_ms``,
        its threads running ``run_ms`` a reading and waiting ``wait_share`` of their demand, its
        cgroup throttled ``throttled_share`` of the time, ``probes`` probes a reading finding it
        stopped ``stopped_share`` of the time."""
        for i in range(count):
            self.record("job_process", host=host, task=task, time_ns=START_NS + int(i * every_ms * MS), pid=pid,
                        run_ms=run_ms, runq_wait_ms=run_ms * wait_share / (1.0 - wait_share),
                        throttled_ms=throttled_share * every_ms, probes=probes,
                        stopped_probes=round(stopped_share * probes))
        return self

    def fault(self, task, kind, at_ms, message="UnavailableError: Socket closed"):
        self.record("fault", task=task, time_ns=START_NS + int(at_ms * MS), kind=kind, message=message)
        return self

    def exit(self, task, at_ms, error_type="UnavailableError", message="", blamed=()):
        """The ``exit`` record of ``task`` ending on ``error_type`` (reason ``exit`` when empty)."""
        return self.record("exit", task=task, time_ns=START_NS + int(at_ms * MS),
                           reason="exception" if error_type else "exit", error_type=error_type, message=message,
                           blamed=",".join(blamed))

    def liveness(self, target, statuses, task="worker:0", every_ms=7_000.0, start_ms=0.0):
        """``liveness`` checks of ``target`` by ``task``, one per status (``"OK"``, ``"DEADLINE_EXCEEDED"``,
        ...), ``every_ms`` apart from ``start_ms``."""
        for i, status in enumerate(statuses):
            self.record("liveness", task=task, time_ns=START_NS + int((start_ms + i * every_ms) * MS), target=target,
                        status=status, duration_ns=2 * MS)
        return self

    def allreduce(self, task, duration_ms, count=50, size=4 << 20):
        for i in range(count):
            self.record("allreduce", task=task, time_ns=START_NS + i * 30 * MS,
                        duration_ns=int(duration_ms * MS), bytes=size)
        return self

    def heartbeats(self, task="chief:0", until_ms=60_000.0, every_ms=5_000.0, subjects=(), in_flight=None,
                   closed=False):
        """``heartbeat`` rows of writer ``task`` from the run's start to ``until_ms``, every ``every_ms``,
        as ``src/tfdiag/collectors/heartbeat.py`` writes them: its own row (with ``in_flight``, a pair
        (closures, oldest dispatch in ms), when given) and one per subject, counting that
        subject's ``steps`` records ended by the beat (a subject equal to ``task`` goes on its
        own row); ``closed`` marks the last beat as the clean-close marker."""
        ends = {}
        for kind, values in self.records:
            if kind == "step":
                ends.setdefault(values["task"], []).append(values["end_ns"])
        times = [START_NS + int(at * MS) for at in _arange(0.0, until_ms, every_ms)]
        count_in_flight, oldest_ms = in_flight if in_flight else (None, None)
        for i, time_ns in enumerate(times):
            last = closed and i == len(times) - 1
            done = {subject: sum(end <= time_ns for end in ends.get(subject, ())) for subject in subjects}
            self.record("heartbeat", task=task, time_ns=time_ns, subject=task, progress=done.get(task),
                        in_flight=count_in_flight,
                        oldest_in_flight_ns=None if oldest_ms is None else START_NS + int(oldest_ms * MS), closed=last)
            for subject in subjects:
                if subject != task:
                    self.record("heartbeat", task=task, time_ns=time_ns, subject=subject,
                                progress=done[subject], in_flight=None,
                                oldest_in_flight_ns=None, closed=last)
        return self

    def write(self, *, manifest=True, by_task=False, frame_records=None):
        """Writes the records added since the last write (all, the first time) and returns the
        run's path: every record through the chief's writer, or with ``by_task`` each through
        the writer of the task it names (one file a task, as a real job writes them); a frame
        every ``frame_records`` records of a writer, else one frame a kind. A writer appends
        to its task's file."""
        if manifest:
            write_manifest(self.path, strategy=self.strategy, cluster=self.cluster, tensorflow_version="2.21.0",
                           task="chief:0", start_time_ns=START_NS)
        writers: dict[str, TaskWriter] = {}
        appended: dict[str, int] = {}
        for kind, values in self.records[self.written:]:
            task = _writer_of(values) if by_task else "chief:0"
            writer = writers.get(task) or writers.setdefault(task, TaskWriter(self.path, task, flush_interval_s=3600))
            writer.append(kind, **values)
            appended[task] = appended.get(task, 0) + 1
            if frame_records and appended[task] % frame_records == 0:
                writer.flush()
        for writer in writers.values():
            writer.close()
        self.written = len(self.records)
        return self.path

    def grow(self, *, frame_records=None):
        """Appends the records added since the last write to their tasks' files, as a running
        job's files grow; returns the run's path."""
        return self.write(manifest=False, by_task=True, frame_records=frame_records)


def scheduled_ahead(run: RunBuilder) -> RunBuilder:
    """Every closure of ``run`` scheduled at its start, as a loop that schedules the whole run
    up front (the tutorial's) does: no worker waits for the coordinator's loop."""
    run.records = [(kind, dict(r, dispatch_ns=START_NS) if kind == "closure" else r) for kind, r in run.records]
    return run


def _writer_of(values: dict) -> str:
    """The task that writes a record in a real job: the one it is about."""
    return values.get("task") or values.get("worker") or values.get("src") or "chief:0"


def _arange(start: float, stop: float, step: float) -> list[float]:
    """``start``, ``start + step``, ... up to and including ``stop``."""
    values = [start]
    while values[-1] + step <= stop:
        values.append(values[-1] + step)
    if values[-1] < stop:
        values.append(stop)
    return values
