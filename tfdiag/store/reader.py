"""Reading a task file: every good frame, and a (file, offset, reason) for every bad one."""

from __future__ import annotations

import os
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from tfdiag.store.framing import FORMAT_VERSION, HEADER, MAGIC, decode_payload


@dataclass(frozen=True)
class SkippedRecords:
    """Records the reader could not use: where, why, and how many (0 if unknown)."""

    file: str
    offset: int
    reason: str
    records: int

    def sentence(self) -> str:
        count = f"{self.records} records" if self.records else "data"
        return f"{self.file}: skipped {count} at byte {self.offset}: {self.reason}"


@dataclass
class ReadResult:
    """What one read of a task file produced.

    ``end_offset`` is where the next incremental read should start: after the last
    complete frame. ``truncated_tail`` describes an incomplete last frame, which is
    normal while a task is still writing and a lost tail once it has stopped.
    """

    batches: dict[str, list[pa.RecordBatch]] = field(default_factory=lambda: defaultdict(list))
    end_offset: int = 0
    skipped: list[SkippedRecords] = field(default_factory=list)
    truncated_tail: SkippedRecords | None = None


def read_task_file(path: str | os.PathLike, offset: int = 0) -> ReadResult:
    """Reads the frames of a task file from ``offset`` on.

    A frame with a bad CRC or an unreadable payload is reported in ``skipped`` and the
    reader resynchronises on the next frame marker; an incomplete frame at the end is
    reported as ``truncated_tail``.

    Example:
        >>> result = read_task_file("logs/run1/plugins/tfdiag/worker-0.tfdiag")  # doctest: +SKIP
        >>> result.batches["step"][0].num_rows  # doctest: +SKIP
        412
    """
    name = os.fspath(path)
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    view = memoryview(data)
    result = ReadResult(end_offset=offset)
    position = 0
    while position < len(data):
        if len(data) - position < HEADER.size:
            result.truncated_tail = SkippedRecords(name, offset + position, "truncated frame header", 0)
            break
        magic, version, length, crc, records = HEADER.unpack_from(data, position)
        if magic != MAGIC:
            following = data.find(MAGIC, position + 1)
            end = following if following >= 0 else len(data)
            result.skipped.append(SkippedRecords(name, offset + position, f"{end - position} bytes of garbage", 0))
            position = end
            result.end_offset = offset + position
            continue
        start, end = position + HEADER.size, position + HEADER.size + length
        if end > len(data):
            result.truncated_tail = SkippedRecords(
                name, offset + position, f"truncated frame ({len(data) - start} of {length} payload bytes)", records
            )
            break
        reason = _frame_problem(version, view[start:end], crc)
        if reason is None:
            try:
                batch = decode_payload(view[start:end])
                result.batches[batch.schema.metadata[b"kind"].decode()].append(batch)
            except (pa.ArrowException, KeyError, TypeError) as error:
                reason = f"unreadable payload ({error})"
        if reason is not None:
            result.skipped.append(SkippedRecords(name, offset + position, reason, records))
        position = end
        result.end_offset = offset + position
    return result


def _frame_problem(version: int, payload: memoryview, crc: int) -> str | None:
    if version != FORMAT_VERSION:
        return f"unknown frame format version {version}"
    if zlib.crc32(payload) != crc:
        return "CRC mismatch"
    return None
