"""The loader's frames: Arrow record batches conformed to their kind, and pandas frames of them.

A batch keeps exactly its kind's columns (``conform``: a newer writer's extra columns
dropped, an older writer's missing ones null); a frame's string columns become
categoricals (a few tasks' names, not millions of Python strings), each set of categories
made once; every frame carries a ``source`` column, the task file its records came from.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pyarrow as pa

from tfdiag.events import KINDS


def source_column(sources: list[str], lengths: list[int]) -> pa.DictionaryArray:
    """A ``source`` column: ``sources[i]`` repeated ``lengths[i]`` times, dictionary-encoded."""
    names, codes = np.unique(np.asarray(sources, dtype=object), return_inverse=True)
    indices = pa.array(np.repeat(codes.astype("int32"), lengths))
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(names), pa.string()))


@functools.cache
def _plain_schema(kind: str) -> pa.Schema:
    return KINDS[kind].arrow_schema().remove_metadata()


def conform(batch: pa.RecordBatch, kind: str) -> pa.RecordBatch:
    """The batch with exactly its kind's columns: columns a newer writer added are dropped,
    columns an older writer lacks become null."""
    schema = _plain_schema(kind)
    if batch.schema.names == schema.names:
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    columns = [batch.column(name) if name in batch.schema.names else pa.nulls(batch.num_rows, schema.field(name).type)
               for name in schema.names]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """String columns become categoricals (a few tasks' names, not millions of Python strings).

    The frame pyarrow's ``to_pandas`` makes of the dictionary-encoded table, built column by
    column: a categorical's dtype is made once per set of categories (``_categories``),
    where ``to_pandas`` validates them at every call, half the conversion of a live
    window's small frames.
    """
    table = table.combine_chunks()  # one dictionary per column, not one per frame
    columns = {}
    for column_field, column in zip(table.schema, table.columns):
        if column.num_chunks != 1:  # an empty table has none
            return _to_pandas_by_arrow(table)
        array = column.chunk(0)
        if pa.types.is_string(column_field.type):
            array = array.dictionary_encode()
        if pa.types.is_dictionary(array.type):
            codes = array.indices.fill_null(-1).to_numpy(zero_copy_only=False)
            columns[column_field.name] = pd.Categorical.from_codes(codes, dtype=_categories(array.dictionary.to_pylist()))
        else:
            columns[column_field.name] = array.to_numpy(zero_copy_only=False)
    return pd.DataFrame(columns)


def _to_pandas_by_arrow(table: pa.Table) -> pd.DataFrame:
    for index, column_field in enumerate(table.schema):
        if pa.types.is_string(column_field.type):
            table = table.set_column(index, column_field.name, table.column(index).dictionary_encode())
    return table.unify_dictionaries().to_pandas()


# Sets of categories up to this size (task names, kinds: a live window's) keep their dtype.
MAX_CACHED_CATEGORIES = 64


def _categories(values: list[str]) -> pd.CategoricalDtype:
    if len(values) > MAX_CACHED_CATEGORIES:
        return pd.CategoricalDtype(values)
    return _cached_categories(tuple(values))


@functools.lru_cache(maxsize=256)
def _cached_categories(values: tuple[str, ...]) -> pd.CategoricalDtype:
    return pd.CategoricalDtype(values)


def empty_frame(kind: str) -> pd.DataFrame:
    """An empty frame of ``kind``: a shallow copy of one built once (about 1 ms each, and a
    live evaluation asks for several); copy-on-write keeps a change to it off the original."""
    return _built_empty_frame(kind).copy(deep=False)


@functools.cache
def _built_empty_frame(kind: str) -> pd.DataFrame:
    schema = KINDS[kind].arrow_schema()
    frame = schema.empty_table().to_pandas()
    frame["source"] = pd.Series([], dtype="object")
    return frame
