"""What a decoded frame must be before analysis touches it.

The reader has already checked the CRC and ``RecordBatch.validate(full=True)`` (so the
Arrow structure is sound); this module checks the *meaning*: UTF-8 metadata naming a
known record kind of a schema version this tfdiag reads, the kind's columns in order
with their types (``tfdiag.events.KINDS``), as many rows as the frame header says, and
int64 values in range. A frame that fails is rejected with a reason; rows with
out-of-range values are dropped from an otherwise good frame and counted.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfdiag.events import KINDS, SCHEMA_VERSION

# Every int64 column of the log is a time since the epoch, a duration, a count or an
# index, none of them negative. 2**62 ns is the year 2116 and 2**62 bytes 4 EiB: a
# larger value is damage, and values below 2**62 keep the sum of two (the midpoint of a
# probe's send and receive times, a time plus a clock offset) inside int64.
MAX_INT_VALUE = (1 << 62) - 1
# Tighter bounds where a larger value is absurd even for one record, so that int64 sums
# over every row that fits in memory cannot wrap: a record covers at most 2**32
# training steps (a closure runs tens) and 2**40 examples (a trillion).
_COLUMN_BOUNDS = {"steps": 1 << 32, "examples": 1 << 40}


class FrameRejected(ValueError):
    """A decoded frame that cannot be used; the message is the reason."""


@dataclass(frozen=True)
class CheckedFrame:
    """A frame's records after the checks: its kind, writing task and batches."""

    kind: str
    task: str | None
    batches: list[pa.RecordBatch]
    dropped_rows: int = 0
    drop_reason: str | None = None


def check_frame(schema: pa.Schema, batches: list[pa.RecordBatch], header_records: int) -> CheckedFrame:
    """Checks one decoded frame; raises ``FrameRejected`` with the reason if it is unusable.

    Example:
        >>> checked = check_frame(schema, batches, header_records=10)  # doctest: +SKIP
        >>> checked.kind, checked.dropped_rows  # doctest: +SKIP
        ('step', 0)
    """
    metadata = _metadata(schema)
    kind = metadata.get("kind")
    if kind not in KINDS:
        raise FrameRejected(f"unknown record kind {kind!r} (written by a newer tfdiag?)" if kind else "no record kind")
    _check_schema_version(metadata.get("schema_version"))
    if not batches:
        raise FrameRejected("no record batch in the payload")
    rows = sum(batch.num_rows for batch in batches)
    if rows != header_records:
        raise FrameRejected(f"the frame header says {header_records} records, the payload holds {rows}")
    _check_columns(schema, kind)
    checked = [_in_range(batch, kind) for batch in batches]
    dropped = sum(count for _, count, _ in checked)
    example = next((reason for _, count, reason in checked if count), None)
    reason = f"{dropped} records with out-of-range values ({example})" if dropped else None
    return CheckedFrame(kind, metadata.get("task"), [batch for batch, _, _ in checked], dropped, reason)


def _metadata(schema: pa.Schema) -> dict[str, str]:
    wanted = (b"kind", b"task", b"schema_version")
    try:
        return {key.decode(): value.decode() for key, value in (schema.metadata or {}).items() if key in wanted}
    except UnicodeDecodeError:
        raise FrameRejected("schema metadata is not UTF-8") from None


def _check_schema_version(text: str | None) -> None:
    if text is None:
        return
    try:
        version = int(text)
    except ValueError:
        raise FrameRejected(f"unreadable schema_version {text[:40]!r}") from None
    if version > SCHEMA_VERSION:
        raise FrameRejected(f"schema version {version} is newer than this tfdiag's ({SCHEMA_VERSION}): "
                            "its columns may mean something else")


def _check_columns(schema: pa.Schema, kind: str) -> None:
    """The kind's columns come first, in order and with their types (an older writer may lack
    the last ones, a newer one may add more after them)."""
    accepted = _ACCEPTED.get(kind)
    # A writer sends the same schema in every frame of a kind: one C++ comparison with the
    # last schema accepted for it stands for the checks below (tens of µs a frame).
    if accepted is not None and schema.equals(accepted, check_metadata=True):
        return
    _check_fields(schema, kind)
    _ACCEPTED[kind] = schema


# kind -> the last schema that passed _check_fields.
_ACCEPTED: dict[str, pa.Schema] = {}


def _check_fields(schema: pa.Schema, kind: str) -> None:
    names = schema.names
    if len(set(names)) != len(names):
        raise FrameRejected("duplicate column names")
    expected = _schema(kind)
    if not names or names[0] != expected.names[0]:
        raise FrameRejected(f"columns {names[:3]} are not those of {kind!r} records")
    for field, wanted in zip(schema, expected):
        if field.name != wanted.name:
            raise FrameRejected(f"column {field.name!r} where {kind!r} records have {wanted.name!r}")
        if field.type != wanted.type:
            raise FrameRejected(f"column {wanted.name!r} is {field.type}, expected {wanted.type}")


def _in_range(batch: pa.RecordBatch, kind: str) -> tuple[pa.RecordBatch, int, str | None]:
    """The batch without rows whose int64 values lie outside [0, their bound].

    One maximum over the columns without nulls (and one ``min_max`` per column with some)
    decides; the row mask is built only for a batch that has a value out of range (a
    damaged one).
    """
    bounds = _int_bounds(kind)
    offending, whole = [], {}  # whole: bound -> (name, values) of its columns without nulls
    for name, column in zip(batch.schema.names, batch.columns):
        bound = bounds.get(name)
        if bound is None or not len(column) or column.null_count == len(column):
            continue
        if column.null_count:
            if _outside(column, bound):
                offending.append(name)
        else:
            whole.setdefault(bound, []).append((name, column.to_numpy()))
    for bound, columns in whole.items():
        # One unsigned maximum over the columns of a bound (a negative value reads as a huge
        # one), a few µs; each column checked alone only when it exceeds the bound.
        if int(np.concatenate([values for _, values in columns]).view(np.uint64).max()) > bound:
            offending += [name for name, values in columns if int(values.view(np.uint64).max()) > bound]
    offending.sort(key=list(bounds).index)
    if not offending:
        return batch, 0, None
    masks = {name: pc.fill_null(pc.or_(pc.less(batch.column(name), 0), pc.greater(batch.column(name), bounds[name])),
                                False) for name in offending}
    name = offending[0]
    example = f"{name} = {batch.column(name).filter(masks[name])[0].as_py()}"
    bad = masks[name]
    for mask in list(masks.values())[1:]:
        bad = pc.or_(bad, mask)
    return batch.filter(pc.invert(bad)), pc.sum(bad.cast(pa.int64())).as_py(), example


def _outside(column: pa.Array, bound: int) -> bool:
    """Whether a value of ``column`` lies outside [0, bound] (nulls are in range)."""
    if column.null_count == 0:  # numpy reads the values in place: cheaper than a compute call
        values = column.to_numpy()
        if not len(values):
            return False
        # One pass: no bit at or above the bound's top bit set (a negative value sets the sign bit).
        if int(np.bitwise_or.reduce(values.view(np.uint64))) >> ((bound + 1).bit_length() - 1) == 0:
            return False
        return int(values.min()) < 0 or int(values.max()) > bound
    if column.null_count == len(column):
        return False
    low, high = pc.min_max(column).values()
    return low.as_py() < 0 or high.as_py() > bound


@functools.cache
def _schema(kind: str) -> pa.Schema:
    return KINDS[kind].arrow_schema()


@functools.cache
def _int_bounds(kind: str) -> dict[str, int]:
    """The int64 columns of ``kind`` and the largest value each may hold."""
    return {name: _COLUMN_BOUNDS.get(name, MAX_INT_VALUE) for name, type_name in KINDS[kind].columns
            if type_name == "int64"}
