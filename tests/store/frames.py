"""Helpers that build task-file bytes for reader tests: real batches, frames with chosen damage."""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa

from tfdiag.events import KINDS
from tfdiag.store.framing import HEADER, MAGIC, encode_frame


def step_batch(rows: int = 10, task: str = "worker:0", first_step: int = 0, **overrides) -> pa.RecordBatch:
    """A step batch with the writer's schema; ``overrides`` replace whole columns."""
    columns = {
        "task": [task] * rows,
        "step": list(range(first_step, first_step + rows)),
        "begin_ns": [1_000 * i for i in range(rows)],
        "end_ns": [1_000 * i + 500 for i in range(rows)],
        "input_wait_ns": [0] * rows,
        "examples": [8] * rows,
        "clock_task": [task] * rows,
        "device_ns": [None] * rows,
        "compute_ns": [None] * rows,
        "steps": [1] * rows,
    }
    columns.update(overrides)
    return pa.RecordBatch.from_pydict(columns, schema=KINDS["step"].arrow_schema(task))


def step_frames(count: int, rows: int = 10, task: str = "worker:0") -> list[bytes]:
    """``count`` distinct step frames of ``rows`` records each."""
    return [encode_frame(step_batch(rows, task, first_step=index * rows)) for index in range(count)]


def stream(*batches: pa.RecordBatch, schema: pa.Schema | None = None) -> bytes:
    """An Arrow IPC stream of ``batches`` (a schema and no batch if none)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema or batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def frame(payload: bytes, records: int, *, length: int | None = None, version: int = 1) -> bytes:
    """A frame around ``payload`` with a correct CRC (and, if given, a false length)."""
    size = len(payload) if length is None else length
    return HEADER.pack(MAGIC, version, size, zlib.crc32(payload), records) + payload


def bad_offsets_payload(rows: int = 10) -> bytes:
    """A step stream whose ``task`` column has offsets far past its data: well-formed IPC,
    invalid Arrow (the kind of damage that crashed ``dictionary_encode``)."""
    payload = stream(step_batch(rows, task="worker:0"))
    offsets = struct.pack(f"<{rows + 1}i", *range(0, 8 * rows + 1, 8))  # "worker:0" is 8 bytes
    damaged = struct.pack(f"<{rows + 1}i", 0, *([1 << 30] * rows))
    assert payload.count(offsets) == 2  # task and clock_task
    return payload.replace(offsets, damaged, 1)
