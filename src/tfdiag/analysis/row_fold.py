"""One task file's records of one kind: kept as they came under a cap, compacted past it.

The base of the loader's folds (``load.FOLDS``): a fold holds a file's record batches as
they came while it holds at most ``cap`` rows, so a short run (every test's) is analysed
exactly as its rows. Past the cap it compacts, per writing task: what it kept before and
the rows since go through the kind's ``_compacted``, which returns a bounded table of the
kind's columns (and any column of its own it keeps per row, dropped from what it shows).
Rows that came after the last compaction are shown as they came, after the compacted ones.

A wide run's cap is small (``cap_for``: what every file holds adds up), and a compaction
costs about the same for 256 rows as for 2,048, so while one read goes on a fold takes up
to ``ROWS`` rows before it compacts, and ``settle`` (the loader calls it after each read)
brings what it holds back under ``cap``: a day of a sample a second is 40 compactions of
a file, not 340. A file is read whole in the loader's process or in a fold process alike,
so the serial and the parallel fold compact at the same rows. A compaction in ``settle``
falls where a read ended, so the loader saves a file's fold before it (``fold_cache``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class RowFold:
    """Record batches of one kind from one task file, compacted past ``cap`` rows."""

    ROWS = 4096  # the default cap
    RUN_ROWS: int | None = None  # rows a whole run's files keep uncompacted, shared among them; None: ROWS each

    @classmethod
    def cap_for(cls, files: int) -> int:
        """A file's cap in a run of ``files`` task files: ``ROWS``, less in a run so wide that
        its files together would keep more than ``RUN_ROWS``, never under an eighth of it."""
        if cls.RUN_ROWS is None:
            return cls.ROWS
        return max(min(cls.ROWS, cls.RUN_ROWS // max(files, 1)), cls.ROWS // 8)
    OWN_COLUMN: str | None = None  # a column of the fold's own, kept per row past the cap

    def __init__(self, cap: int | None = None):
        self.cap = cap or self.ROWS
        self._read_cap = max(self.cap, self.ROWS)  # rows taken during one read before it compacts
        self._raw: list[tuple[pa.RecordBatch, str]] = []  # rows since the last compaction, in file order
        self._raw_rows = 0
        self._kept: dict[str, pa.Table] | None = None  # writing task -> its compacted rows; None: never compacted

    def add(self, batch: pa.RecordBatch, source: str) -> None:
        """Folds a batch of the kind's records (its columns) written by ``source``."""
        self._raw.append((batch, source))
        self._raw_rows += batch.num_rows
        if self._raw_rows > self._read_cap:
            self._compact()

    def settle(self) -> bool:
        """After a read: compacts when more than ``cap`` rows came since the last compaction
        (True: then the records folded next are compacted unlike a read from byte 0 would),
        else makes each run of one writer's batches one batch (a collector flushes a row or
        two a frame, and a small batch's columns cost more than their rows)."""
        if self._raw_rows > self.cap:
            self._compact()
            return True
        runs: list[tuple[list[pa.RecordBatch], str]] = []
        for batch, source in self._raw:
            if runs and runs[-1][1] == source:
                runs[-1][0].append(batch)
            else:
                runs.append(([batch], source))
        if len(runs) == len(self._raw):
            return False
        self._raw = []
        for batches, source in runs:
            if len(batches) > 1 and sum(batch.num_rows for batch in batches):
                batches = pa.Table.from_batches(batches).combine_chunks().to_batches()
            self._raw += [(batch, source) for batch in batches]
        return False

    def batches(self) -> list[tuple[pa.RecordBatch, str]]:
        """The rows held, each batch with its writing task."""
        if self._kept is None:
            return list(self._raw)
        own = [self.OWN_COLUMN] if self.OWN_COLUMN else []
        kept = [(batch, source) for source, table in self._kept.items() for batch in table.drop_columns(own).to_batches()]
        return kept + self._raw

    def _compact(self) -> None:
        tables = {source: [table] for source, table in (self._kept or {}).items()}
        for batch, source in self._raw:
            tables.setdefault(source, []).append(self._fresh(pa.Table.from_batches([batch])))
        self._kept = {source: self._compacted(pa.concat_tables(parts)).combine_chunks()
                      for source, parts in tables.items()}
        self._raw, self._raw_rows = [], 0

    def _fresh(self, table: pa.Table) -> pa.Table:
        """New rows as the compaction reads them (with ``OWN_COLUMN``, where there is one)."""
        return table

    def _compacted(self, table: pa.Table) -> pa.Table:
        """The rows to keep of one writer's kept and new rows."""
        raise NotImplementedError


def group_codes(table: pa.Table, names: tuple[str, ...]) -> np.ndarray:
    """One int64 per row naming its combination of the string columns ``names`` (a null is
    a value of its own): rows of one group share it, and sorting by it sorts by group."""
    code = np.zeros(len(table), "int64")
    for name in names:
        column = table[name]
        if column.null_count == 0 and len(pc.unique(column)) == 1:  # a task file's usual case: one value
            continue  # (a hash of the strings costs a third of encoding them)
        own = pc.dictionary_encode(column).combine_chunks()
        code = code * (len(own.dictionary) + 1) + own.indices.fill_null(-1).to_numpy(zero_copy_only=False) + 1
    return code
