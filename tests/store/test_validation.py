"""check_frame (through read_task_file): kinds, metadata, column types, record counts, value ranges."""

import pyarrow as pa
import pytest

from tests.store.frames import frame, step_batch, stream
from tfdiag.store import read_task_file
from tfdiag.store.validation import MAX_INT_VALUE


def _read_one(tmp_path, payload, records):
    path = tmp_path / "worker-0.tfdiag"
    path.write_bytes(frame(payload, records))
    return read_task_file(path)


def _with_metadata(**changes):
    batch = step_batch(4)
    metadata = {**batch.schema.metadata, **{key.encode(): value for key, value in changes.items()}}
    return batch.replace_schema_metadata({key: value for key, value in metadata.items() if value is not None})


SCHEMA_VARIANTS = {
    "kind swapped": (stream(_with_metadata(kind=b"rpc")), 4, "not those of 'rpc' records"),
    "unknown kind": (stream(_with_metadata(kind=b"future")), 4, "unknown record kind 'future'"),
    "no kind": (stream(_with_metadata(kind=None)), 4, "no record kind"),
    "non-UTF-8 metadata": (stream(_with_metadata(kind=b"\xff\xfe")), 4, "schema metadata is not UTF-8"),
    "newer schema": (stream(_with_metadata(schema_version=b"99")), 4, "schema version 99 is newer than"),
    "unreadable schema version": (stream(_with_metadata(schema_version=b"one")), 4, "unreadable schema_version"),
    "wrong type": (stream(step_batch(4).set_column(1, "step", pa.array(["1"] * 4))), 4,
                   "column 'step' is string, expected int64"),
    "columns out of order": (stream(step_batch(4).select(["task", "begin_ns", "step"])), 4,
                             "column 'begin_ns' where 'step' records have 'step'"),
    "no batch": (stream(schema=step_batch(1).schema), 0, "no record batch"),
    "count mismatch": (stream(step_batch(4)), 5, "the frame header says 5 records, the payload holds 4"),
}


@pytest.mark.parametrize("name", SCHEMA_VARIANTS)
def test_an_unexpected_schema_is_a_skipped_frame_with_its_reason(tmp_path, name):
    payload, records, reason = SCHEMA_VARIANTS[name]

    result = _read_one(tmp_path, payload, records)

    assert not result.batches
    [skipped] = result.skipped
    assert reason in skipped.reason and skipped.records == records


def test_an_older_writer_without_the_last_columns_is_read(tmp_path):
    old = step_batch(4).select(["task", "step", "begin_ns", "end_ns", "input_wait_ns", "examples", "clock_task"])

    result = _read_one(tmp_path, stream(old), 4)

    assert result.batches["step"][0].num_rows == 4 and not result.skipped


@pytest.mark.parametrize("value", [-(2**63), -1, MAX_INT_VALUE + 1, 2**63 - 1])  # MAX_INT_VALUE + 1 == 2**62
def test_rows_with_out_of_range_ints_are_dropped_and_counted(tmp_path, value):
    batch = step_batch(4, begin_ns=[0, value, 2_000, 3_000])

    result = _read_one(tmp_path, stream(batch), 4)

    assert result.batches["step"][0].column("step").to_pylist() == [0, 2, 3]
    [skipped] = result.skipped
    assert skipped.records == 1 and f"begin_ns = {value}" in skipped.reason


def test_absurd_examples_in_one_record_are_dropped(tmp_path):
    batch = step_batch(3, examples=[8, 2**41, 8])

    result = _read_one(tmp_path, stream(batch), 3)

    assert result.batches["step"][0].column("examples").to_pylist() == [8, 8]
    assert "examples = 2199023255552" in result.skipped[0].reason
