"""Reading a task file: every good frame, and a (file, offset, reason) for every bad one.

Nothing in a task file is trusted. The file is opened without blocking and read only if
it is a regular file; it is read in chunks, never more than one frame plus a chunk at a
time, and only up to ``MAX_TASK_FILE_BYTES``. A frame is used only when its header is
sound, its CRC matches, its Arrow payload passes ``validate(full=True)`` and its content
passes ``tfdiag.store.validation``; anything else is reported and the reader resumes at
the next frame marker.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from tfdiag.store.framing import FORMAT_VERSION, HEADER, MAGIC, MAX_FRAME_BYTES, decode_payload
from tfdiag.store.paths import open_regular
from tfdiag.store.validation import FrameRejected, check_frame

# Loading takes about four times a log's size in memory (docs/benchmarks.md: 2.8 GB for
# 764 MB of logs), so a 2 GiB task file already needs about 8 GB: more than that from one
# task is damage (or /dev/zero) rather than a run. Bytes past the bound are not read.
MAX_TASK_FILE_BYTES = 2 << 30
# How much is read at a time.
CHUNK_BYTES = 8 << 20
# CRC work allowed per read, as a multiple of the bytes read (plus one largest frame). Good
# frames cost 1x; every damaged header that claims a length costs a CRC over it, so a file
# crafted of fake headers would otherwise cost time quadratic in their number.
CRC_WORK_PER_BYTE = 4


class _CrcBudgetSpent(Exception):
    """Raised inside the scanner when the CRC work allowed for one read is used up."""


@dataclass(frozen=True)
class SkippedRecords:
    """Records the reader could not use: where, why, and how many (0 if unknown).

    ``duplicate_of`` names the file that held the same frame first, for a duplicate.
    """

    file: str
    offset: int
    reason: str
    records: int
    duplicate_of: str | None = None

    def sentence(self) -> str:
        count = f"{self.records} records" if self.records else "data"
        return f"{self.file}: skipped {count} at byte {self.offset}: {self.reason}"


@dataclass(frozen=True)
class Frame:
    """One good frame: where it starts, a digest of its payload, and its checked records."""

    offset: int
    digest: bytes
    kind: str
    task: str | None
    batches: list[pa.RecordBatch]

    @property
    def records(self) -> int:
        return sum(batch.num_rows for batch in self.batches)


@dataclass
class ReadResult:
    """What one read of a task file produced.

    ``end_offset`` is where the next incremental read should start: after the last
    complete frame. ``truncated_tail`` describes an incomplete last frame, which is
    normal while a task is still writing and a lost tail once it has stopped.
    ``unread`` says why bytes were not read at all (the file could not be opened, or
    it is larger than ``MAX_TASK_FILE_BYTES``); like the tail it is retried next time.
    """

    batches: dict[str, list[pa.RecordBatch]] = field(default_factory=lambda: defaultdict(list))
    frames: list[Frame] = field(default_factory=list)
    end_offset: int = 0
    skipped: list[SkippedRecords] = field(default_factory=list)
    truncated_tail: SkippedRecords | None = None
    unread: SkippedRecords | None = None


def read_task_file(path: str | os.PathLike, offset: int = 0, kinds: frozenset[str] | None = None) -> ReadResult:
    """Reads the frames of a task file from ``offset`` on; never raises for bad content.

    A frame with a bad header, CRC, payload or content is reported in ``skipped`` and
    the reader resynchronises on the next frame marker; an incomplete frame at the end
    is reported as ``truncated_tail``. With ``kinds``, a sound frame of another kind is
    passed over before its content is checked (most of a frame's reading cost): a reader
    that wants a few kinds of a growing file (the live screen) pays for those only.

    Example:
        >>> result = read_task_file("logs/run1/plugins/tfdiag/worker-0.tfdiag")  # doctest: +SKIP
        >>> result.batches["step"][0].num_rows  # doctest: +SKIP
        412
    """
    name = os.fspath(path)
    result = ReadResult(end_offset=offset)
    try:
        fd = open_regular(path)
    except OSError as error:
        result.unread = SkippedRecords(name, offset, f"cannot read the file ({error.strerror or error})", 0)
        return result
    with os.fdopen(fd, "rb", buffering=0) as file:
        _Scanner(name, file, offset, result, kinds).scan()
    return result


class _Window:
    """The bytes of a file from ``base`` on, read in chunks as the scanner asks for them."""

    def __init__(self, file, start: int):
        self.file = file
        self.base = start
        self.data = bytearray()
        self.eof = False
        self.over_limit = False
        file.seek(start)

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def has(self, end: int) -> bool:
        """Reads until the window reaches ``end``; False if the file (or the bound) ends first."""
        while self.end < end and not self.eof:
            if self.end >= MAX_TASK_FILE_BYTES:
                self.over_limit = os.fstat(self.file.fileno()).st_size > MAX_TASK_FILE_BYTES
                self.eof = True
                break
            chunk = self.file.read(min(max(CHUNK_BYTES, end - self.end), MAX_TASK_FILE_BYTES - self.end))
            if not chunk:
                self.eof = True
            self.data += chunk
        return self.end >= end

    def bytes(self, start: int, end: int) -> bytes:
        with memoryview(self.data) as view:  # one copy, not a bytearray slice and then bytes of it
            return bytes(view[start - self.base : end - self.base])

    def find_magic(self, start: int) -> int | None:
        """The offset of the next frame marker at or after ``start``, or None before the end."""
        while True:
            found = self.data.find(MAGIC, max(start - self.base, 0))
            if found >= 0:
                return self.base + found
            start = max(self.end - len(MAGIC) + 1, start)
            if not self.has(self.end + 1):
                return None
            self.release(start)

    def release(self, before: int) -> None:
        """Forgets the bytes before ``before`` once they make up a chunk (memory stays bounded)."""
        if before - self.base >= CHUNK_BYTES:
            del self.data[: before - self.base]
            self.base = before


class _Scanner:
    """Walks the frames of one file, filling a ReadResult."""

    def __init__(self, name: str, file, offset: int, result: ReadResult, kinds: frozenset[str] | None = None):
        self.name = name
        self.kinds = kinds
        self.window = _Window(file, offset)
        self.result = result
        to_read = max(min(os.fstat(file.fileno()).st_size, MAX_TASK_FILE_BYTES) - offset, 0)
        self.crc_budget = CRC_WORK_PER_BYTE * to_read + MAX_FRAME_BYTES

    def scan(self) -> None:
        position = self.result.end_offset
        try:
            while position is not None:
                self.window.release(position)
                position = self._frame_at(position)
        except _CrcBudgetSpent:
            self.result.truncated_tail = None
            self.result.unread = SkippedRecords(
                self.name, self.result.end_offset, "too many damaged frame headers to check; not read past here", 0
            )
            return
        if self.window.over_limit:
            stop = self.result.end_offset
            self.result.unread = SkippedRecords(
                self.name, stop, f"the file is larger than the {MAX_TASK_FILE_BYTES}-byte bound; not read past here", 0
            )

    def _frame_at(self, position: int) -> int | None:
        """Handles what starts at ``position``; returns where to go on, or None to stop."""
        window = self.window
        if not window.has(position + HEADER.size):
            if window.end > position and not window.over_limit:
                self.result.truncated_tail = SkippedRecords(self.name, position, "truncated frame header", 0)
            return None
        magic, version, length, crc, records = HEADER.unpack_from(window.data, position - window.base)
        if magic != MAGIC:
            return self._skip_to_next_marker(position, "bytes of garbage", 0)
        if version != FORMAT_VERSION:
            return self._skip_to_next_marker(position, f"unknown frame format version {version}", 0)
        if length > MAX_FRAME_BYTES:
            reason = f"frame length {length} exceeds the {MAX_FRAME_BYTES}-byte bound"
            return self._skip_to_next_marker(position, reason, 0)
        end = position + HEADER.size + length
        if not window.has(end):
            if window.over_limit:
                return None
            following = self._next_good_frame(position + 1)
            if following is None:
                reason = f"truncated frame ({window.end - position - HEADER.size} of {length} payload bytes)"
                self.result.truncated_tail = SkippedRecords(self.name, position, reason, records)
                return None
            self._skip(position, following, f"frame length {length} runs past the end of the file", records)
            return following
        payload = window.bytes(position + HEADER.size, end)
        if self._crc(payload) != crc:
            return self._skip_to_next_marker(position, "CRC mismatch", records)
        self._use_payload(position, end, payload, records)
        return end

    def _use_payload(self, position: int, end: int, payload: bytes, records: int) -> None:
        """Decodes and checks a frame whose CRC matched (so its length can be trusted)."""
        try:
            schema, batches = decode_payload(payload, self.kinds)
            if self.kinds is not None and (schema.metadata or {}).get(b"kind", b"").decode() not in self.kinds:
                self.result.end_offset = end  # a sound frame of a kind not asked for
                return
            checked = check_frame(schema, batches, records)
        except FrameRejected as error:
            self._skip(position, end, str(error), records)
            return
        except Exception as error:  # noqa: BLE001 - any failure to decode untrusted bytes is a bad frame
            self._skip(position, end, f"unreadable payload ({type(error).__name__}: {error})", records)
            return
        self.result.end_offset = end
        if checked.dropped_rows:
            self.result.skipped.append(SkippedRecords(self.name, position, checked.drop_reason, checked.dropped_rows))
        digest = hashlib.sha1(payload).digest()[:16]  # hardware-accelerated: twice blake2b's speed here
        frame = Frame(position, digest, checked.kind, checked.task, checked.batches)
        self.result.frames.append(frame)
        self.result.batches[frame.kind].extend(frame.batches)

    def _skip_to_next_marker(self, position: int, reason: str, records: int) -> int | None:
        """Reports the bytes from ``position`` to the next frame marker (or the end) as bad."""
        following = self.window.find_magic(position + 1)
        end = following if following is not None else self.window.end - self._partial_magic_at_end()
        if reason == "bytes of garbage":
            reason = f"{end - position} bytes of garbage"
        self._skip(position, end, reason, records)
        return following

    def _partial_magic_at_end(self) -> int:
        """How many last bytes read could begin a frame marker a writer is still writing."""
        tail = bytes(self.window.data[-(len(MAGIC) - 1) :])
        return next((size for size in range(len(tail), 0, -1) if MAGIC.startswith(tail[-size:])), 0)

    def _crc(self, payload: bytes) -> int:
        self.crc_budget -= len(payload)
        if self.crc_budget < 0:
            raise _CrcBudgetSpent
        return zlib.crc32(payload)

    def _skip(self, position: int, end: int, reason: str, records: int) -> None:
        self.result.skipped.append(SkippedRecords(self.name, position, reason, records))
        self.result.end_offset = max(self.result.end_offset, end)

    def _next_good_frame(self, start: int) -> int | None:
        """The first frame marker at or after ``start`` that begins a whole frame with a good CRC."""
        window = self.window
        candidate = window.find_magic(start)
        while candidate is not None and window.has(candidate + HEADER.size):
            magic, version, length, crc, _ = HEADER.unpack_from(window.data, candidate - window.base)
            end = candidate + HEADER.size + length
            if version == FORMAT_VERSION and length <= MAX_FRAME_BYTES and window.has(end):
                if self._crc(window.bytes(candidate + HEADER.size, end)) == crc:
                    return candidate
            candidate = window.find_magic(candidate + 1)
        return None
