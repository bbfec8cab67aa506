"""The byte framing of a task file: a header with length, CRC and record count per frame.

A frame is ``MAGIC | u8 version | u32 payload length | u32 CRC-32 of payload |
u32 record count`` (little-endian) followed by the payload, an Arrow IPC stream holding
one record batch of one record kind. The magic lets a reader find the next frame after a
corrupt one; the CRC tells a torn or flipped frame from a good one.
"""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa

MAGIC = b"TFDG"
FORMAT_VERSION = 1
HEADER = struct.Struct("<4sBIII")

# A frame holds the records of one kind that a task appended in half a second (the
# writer's flush interval). 64 MiB is about a million rows of the widest kind, far more
# than any collector appends in that time; a header claiming more is damaged.
MAX_FRAME_BYTES = 64 << 20


def encode_frame(batch: pa.RecordBatch) -> bytes:
    """Serialise one record batch as a frame."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as stream:
        stream.write_batch(batch)
    payload = sink.getvalue().to_pybytes()
    header = HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), zlib.crc32(payload), batch.num_rows)
    return header + payload


def decode_payload(payload: bytes, kinds: frozenset[str] | None = None) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """The schema and every record batch of a frame's payload, each fully validated.

    ``RecordBatch.validate(full=True)`` checks offsets, lengths and UTF-8 of every
    column, so a damaged payload whose CRC was recomputed raises ``pa.ArrowInvalid``
    here instead of crashing a compute kernel later. With ``kinds``, a frame of another
    kind (its schema's ``kind`` metadata) comes back with no batches, unread.
    """
    reader = pa.ipc.open_stream(pa.py_buffer(payload))
    if kinds is not None and (reader.schema.metadata or {}).get(b"kind", b"").decode() not in kinds:
        return reader.schema, []
    batches = list(reader)
    for batch in batches:
        batch.validate(full=True)
    return reader.schema, batches
