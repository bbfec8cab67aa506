"""Arrow batches to the loader's frames (tfdiag.analysis.frames)."""

from __future__ import annotations

import pyarrow as pa

from tfdiag.analysis.frames import conform, empty_frame, source_column, to_pandas
from tfdiag.events import KINDS


def test_a_batch_gets_exactly_its_kinds_columns():
    batch = pa.RecordBatch.from_pydict({"message": ["hi"], "newer_column": [1], "task": ["worker:0"]})
    conformed = conform(batch, "note")
    assert conformed.schema.names == [name for name, _ in KINDS["note"].columns]
    assert conformed.column("task").to_pylist() == ["worker:0"] and conformed.column("time_ns").null_count == 1


def test_strings_become_categoricals_and_the_source_column_names_each_rows_file():
    table = pa.Table.from_batches([conform(pa.RecordBatch.from_pydict({"task": ["a", "b", "a"]}), "note")])
    table = table.append_column("source", source_column(["w1", "w0"], [2, 1]))
    frame = to_pandas(table)
    assert str(frame["task"].dtype) == "category" and frame["source"].tolist() == ["w1", "w1", "w0"]


def test_an_empty_frame_has_the_kinds_columns_and_a_source():
    frame = empty_frame("step")
    assert frame.empty and list(frame.columns) == [name for name, _ in KINDS["step"].columns] + ["source"]
