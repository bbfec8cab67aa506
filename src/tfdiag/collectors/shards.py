"""Data-shard balance: examples each worker consumes, per input file, and (opt-in) per label.

``count_examples(dataset, logdir)`` returns ``dataset`` with a counting ``map`` at its
end. The count lives in-graph in a ``tf.lookup.experimental.MutableHashTable`` (no
Python, no GIL per element); a daemon thread exports the table every ``interval_s``
and appends cumulative ``shard`` records (``file == ""`` for the whole dataset, the
file name for a per-file count) and, with ``label_fn``, ``label`` records.

Per file: count inside the function that reads one file, e.g.::

    files.interleave(lambda f: count_examples(tf.data.TFRecordDataset(f), logdir, file=f))

Where the counter sits matters under MultiWorkerMirroredStrategy: DATA auto-sharding
drops other workers' elements at the *end* of the pipeline, so a counter in the user's
pipeline sees every element. Count after sharding (``policy`` OFF or FILE,
or a per-worker ``dataset.shard``), or use ``DiagnosticsCallback(examples_per_step=)``
whose step records count what each worker trained on. Under ParameterServerStrategy the
instrumented coordinator already writes per-worker ``shard`` records from its closures.

Tables are updated with a lookup and an insert; with ``num_parallel_calls`` on the
counted dataset two elements can race and one count be lost, so count a sequential
stage (e.g. after ``batch``, with ``batched=True``).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from tfdiag.collectors import identity, writers

logger = logging.getLogger("tfdiag")

DEFAULT_INTERVAL_S = 1.0
TOTAL_KEY = ""
_LABEL_PREFIX = "\x00label:"  # keys of the label histogram in the same table
_POLICIES = {0: "OFF", 1: "AUTO", 2: "FILE", 3: "DATA", 4: "HINT"}

_lock = threading.Lock()
_counters: dict[tuple[str, str], "ShardCounter"] = {}


def auto_shard_policy(dataset) -> str:
    """The dataset's auto-shard policy name (``AUTO``, ``FILE``, ``DATA``, ``OFF``, ``HINT``), or ``""``."""
    try:
        policy = dataset.options().experimental_distribute.auto_shard_policy
    except Exception:  # noqa: BLE001
        return ""
    name = getattr(policy, "name", None)
    if name:
        return str(name)
    return _POLICIES.get(int(policy), str(policy)) if policy is not None else "AUTO"


class ShardCounter:
    """The in-graph counters of one task and the thread that writes them.

    Args:
        logdir: the run directory.
        task: the consuming worker (default: from ``TF_CONFIG``, else ``worker:0``).
        interval_s: seconds between cumulative records.
    """

    def __init__(self, logdir, task: str | None = None, interval_s: float = DEFAULT_INTERVAL_S):
        import tensorflow as tf

        self.logdir = logdir
        self.task = task or identity.resolve_task()
        self.interval_s = interval_s
        self.policy = ""
        with tf.init_scope():
            self.table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=0)
        self._writer = writers.acquire(logdir, self.task)
        self._last: dict[str, int] = {}
        self._stop = threading.Event()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="tfdiag-shards", daemon=True)
        self._thread.start()

    def count(self, dataset, *, file=None, batched: bool = False, label_fn=None):
        """``dataset`` followed by a counting ``map`` (elements pass through unchanged)."""
        import tensorflow as tf

        if tf.executing_eagerly():  # inside an interleave function the options are not known
            self.policy = auto_shard_policy(dataset) or self.policy
        table = self.table

        def add(key, amount):
            return table.insert(key, table.lookup(key) + amount)

        def counted(*element):
            value = element[0] if len(element) == 1 else element
            tensors = [t for t in tf.nest.flatten(value) if isinstance(t, tf.Tensor)]
            if batched and tensors and tensors[0].shape.rank:
                n = tf.shape(tensors[0], out_type=tf.int64)[0]
            else:
                n = tf.constant(1, tf.int64)
            # A per-file count is not also added to the total: the analysis sums the files
            # of a worker without a total, and a total counted at the end is not doubled.
            key = tf.constant([TOTAL_KEY]) if file is None else tf.reshape(tf.convert_to_tensor(file, tf.string), [1])
            updates = [add(key, tf.reshape(n, [1]))]
            if label_fn is not None:
                labels = tf.reshape(tf.convert_to_tensor(label_fn(*element)), [-1])
                keys, _, counts = tf.unique_with_counts(tf.strings.as_string(labels) if labels.dtype != tf.string
                                                        else labels)
                updates.append(add(tf.strings.join([_LABEL_PREFIX, keys]), tf.cast(counts, tf.int64)))
            with tf.control_dependencies(updates):
                return tf.nest.map_structure(tf.identity, value)

        return dataset.map(counted)

    def snapshot(self) -> dict[str, int]:
        """The current counts: ``{key: examples}``."""
        keys, values = self.table.export()
        return {k.decode("utf-8", "replace"): int(v) for k, v in zip(keys.numpy(), values.numpy())}

    def write(self) -> None:
        """Appends the counts that changed since the last write."""
        now = time.time_ns()
        for key, examples in sorted(self.snapshot().items()):
            if self._last.get(key) == examples:
                continue
            self._last[key] = examples
            if key.startswith(_LABEL_PREFIX):
                self._writer.append("label", task=self.task, time_ns=now, label=key[len(_LABEL_PREFIX):],
                                    examples=examples)
            else:
                self._writer.append("shard", task=self.task, time_ns=now, examples=examples, file=key,
                                    policy=self.policy)

    def close(self) -> None:
        """Writes the final counts and stops the thread."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self._write_safely()
        writers.release(self._writer)
        with _lock:
            for key, counter in list(_counters.items()):
                if counter is self:
                    del _counters[key]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and not self._failed:
            self._write_safely()

    def _write_safely(self) -> None:
        if self._failed:
            return
        try:
            self.write()
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._failed = True
            logger.warning("tfdiag: shard counter stopped after an error: %r", error)


def shard_counter(logdir, task: str | None = None) -> ShardCounter:
    """The process's counter for (``logdir``, ``task``), made on first use."""
    task = task or identity.resolve_task()
    key = (os.path.abspath(os.fspath(logdir)), task)
    with _lock:
        counter = _counters.get(key)
        if counter is None:
            counter = _counters[key] = ShardCounter(logdir, task)
        return counter


def count_examples(dataset, logdir, *, task: str | None = None, file=None, batched: bool = False, label_fn=None):
    """Counts the examples ``dataset`` yields into ``shard`` (and ``label``) records of ``logdir``.

    Args:
        dataset: a ``tf.data.Dataset``.
        logdir: the run directory.
        task: the consuming worker (default: from ``TF_CONFIG``, else ``worker:0``).
        file: the input file this dataset reads (a string or string tensor), for per-file counts.
        batched: elements are batches: count their leading dimension, not 1 per element.
        label_fn: opt-in label histogram: a function of the element returning its
            label(s) (e.g. ``lambda x, y: y``); counted per distinct value.

    Returns:
        ``dataset`` with a counting ``map`` at its end; on any error (logged), ``dataset``.

    Example:
        >>> ds = count_examples(ds.batch(64), "logs/run1", batched=True, label_fn=lambda x, y: y)  # doctest: +SKIP
    """
    try:
        return shard_counter(logdir, task).count(dataset, file=file, batched=batched, label_fn=label_fn)
    except Exception as error:  # noqa: BLE001 - a collector never breaks training
        logger.warning("tfdiag: cannot count the examples of %r (%r); not counted.", dataset, error)
        return dataset


def close_counters() -> None:
    """Writes and closes every counter of this process (also run at exit)."""
    with _lock:
        counters = list(_counters.values())
    for counter in counters:
        counter.close()


import atexit  # noqa: E402

atexit.register(close_counters)
