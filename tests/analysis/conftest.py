"""A builder of small runs with chosen signals, written through the real store writer."""

from __future__ import annotations

import pytest

from tfdiag.store import TaskWriter, write_manifest

START_NS = 1_700_000_000_000_000_000
MS = 1_000_000


class RunBuilder:
    """Collects records for one run, then writes them as the chief would.

    >>> run = RunBuilder(tmp_path).steps("worker:0", step_ms=20).write()  # doctest: +SKIP
    """

    def __init__(self, path, strategy="ParameterServerStrategy", workers=2, ps=2):
        self.path = path
        self.strategy = strategy
        self.cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"] * workers, "ps": ["127.0.0.1:3"] * ps}
        self.records: list[tuple[str, dict]] = []
        self.step_begins: dict[str, list[int]] = {}

    def steps(self, task, count=100, step_ms=20.0, input_ms=0.0, idle_ms=1.0, closures=False):
        begin = START_NS
        self.step_begins[task] = []
        for step in range(count):
            self.step_begins[task].append(begin)
            end = begin + int(step_ms * MS)
            self.records.append(("step", dict(task=task, step=step, begin_ns=begin, end_ns=end,
                                              input_wait_ns=int(input_ms * MS), examples=32, clock_task=task)))
            if closures:
                self.records.append(("closure", dict(worker=task, closure_id=step, dispatch_ns=begin - MS,
                                                     result_ns=end + MS, ok=True, error="")))
            begin = end + int(idle_ms * MS)
        return self

    def rpc(self, src, dst, rtt_ms, count=40, payload_bytes=0, offset_ms=0.0):
        for i in range(count):
            send = START_NS + i * 50 * MS
            rtt = int(rtt_ms * MS * (1 + 0.05 * (i % 5)))
            self.records.append(("rpc", dict(src=src, dst=dst, send_ns=send, remote_ns=send + rtt // 2 + int(offset_ms * MS),
                                             recv_ns=send + rtt, payload_bytes=payload_bytes)))
        return self

    def transfer(self, src, dst, duration_ms, size=8192, tensors=2, every=10, at_ms=0.1):
        """Traced ``RecvTensor`` transfers, as ``DiagnosticsHook`` writes them: ``tensors``
        concurrent transfers from ``src`` to ``dst``, each ``duration_ms`` long, starting
        ``at_ms`` into every ``every``-th step of the worker among them (call ``steps`` for
        it first)."""
        worker = dst if dst.startswith("worker:") else src
        for begin in self.step_begins[worker][every - 1::every]:
            for tensor in range(tensors):
                self.records.append(("transfer", dict(src=src, dst=dst, time_ns=begin + int(at_ms * MS), bytes=size,
                                                      duration_ns=int(duration_ms * MS), tensor=f"edge_{tensor}_read")))
        return self

    def placement(self, variable, task, size):
        self.records.append(("placement", dict(variable=variable, task=task, bytes=size, shape="")))
        return self

    def shard(self, task, examples, policy="DATA"):
        self.records.append(("shard", dict(task=task, time_ns=START_NS, examples=examples, file="", policy=policy)))
        return self

    def gpu(self, host, index, util_pct, count=20):
        for i in range(count):
            self.records.append(("gpu", dict(host=host, index=index, time_ns=START_NS + i * 100 * MS, util_pct=util_pct,
                                             mem_used_bytes=4 << 30, mem_total_bytes=16 << 30, power_w=150.0,
                                             sm_clock_mhz=1500.0)))
        return self

    def system(self, host, task, cpu_pct, count=20, every_ms=100.0):
        for i in range(count):
            self.records.append(("system", dict(host=host, task=task, time_ns=START_NS + int(i * every_ms * MS),
                                                cpu_pct=cpu_pct, mem_used_frac=0.5, net_sent_bytes=0, net_recv_bytes=0,
                                                disk_read_bytes=0, disk_write_bytes=0)))
        return self

    def fault(self, task, kind, at_ms, message="UnavailableError: Socket closed"):
        self.records.append(("fault", dict(task=task, time_ns=START_NS + int(at_ms * MS), kind=kind, message=message)))
        return self

    def allreduce(self, task, duration_ms, count=50, size=4 << 20):
        for i in range(count):
            self.records.append(("allreduce", dict(task=task, time_ns=START_NS + i * 30 * MS,
                                                   duration_ns=int(duration_ms * MS), bytes=size)))
        return self

    def heartbeats(self, task="chief:0", until_ms=60_000.0, every_ms=5_000.0, subjects=(), in_flight=None,
                   closed=False):
        """``heartbeat`` rows of writer ``task`` from the run's start to ``until_ms``, every ``every_ms``,
        as ``collectors/heartbeat.py`` writes them: its own row (with ``in_flight``, a pair
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
            self.records.append(("heartbeat", dict(
                task=task, time_ns=time_ns, subject=task, progress=done.get(task),
                in_flight=count_in_flight, oldest_in_flight_ns=None if oldest_ms is None else START_NS + int(oldest_ms * MS),
                closed=last)))
            for subject in subjects:
                if subject != task:
                    self.records.append(("heartbeat", dict(task=task, time_ns=time_ns, subject=subject,
                                                           progress=done[subject], in_flight=None,
                                                           oldest_in_flight_ns=None, closed=last)))
        return self

    def write(self):
        write_manifest(self.path, strategy=self.strategy, cluster=self.cluster, tensorflow_version="2.21.0",
                       task="chief:0", start_time_ns=START_NS)
        writer = TaskWriter(self.path, "chief:0", flush_interval_s=3600)
        for kind, values in self.records:
            writer.append(kind, **values)
        writer.close()
        return self.path


def _arange(start: float, stop: float, step: float) -> list[float]:
    """``start``, ``start + step``, ... up to and including ``stop``."""
    values = [start]
    while values[-1] + step <= stop:
        values.append(values[-1] + step)
    if values[-1] < stop:
        values.append(stop)
    return values


@pytest.fixture
def builder(tmp_path):
    """``builder(strategy=..., workers=..., ps=...)`` returns a RunBuilder over a fresh directory."""
    count = iter(range(1000))
    return lambda **kwargs: RunBuilder(tmp_path / f"run{next(count)}", **kwargs)
