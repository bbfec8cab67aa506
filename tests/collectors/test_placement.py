"""Variable placement rows from variables, modules, Keras models and ShardedVariables."""

from __future__ import annotations

import pyarrow as pa

from tfdiag.collectors.placement import PlacementLog, record_placement, variable_rows
from tfdiag.store import log_dir, read_task_file


class FakeVariable:
    def __init__(self, name, shape, device, dtype="float32"):
        import numpy as np

        self.name, self.shape, self.device, self.dtype = name, shape, device, np.dtype(dtype)


class FakeSharded:
    """Looks like ``ShardedVariable``: ``variables`` lists the shards."""

    def __init__(self, name, shards):
        self.name, self.variables = name, shards
        self.shape = [sum(s.shape[0] for s in shards)] + list(shards[0].shape[1:])
        self.dtype = shards[0].dtype


def test_rows_per_variable_and_per_shard():
    dense = FakeVariable("dense/kernel:0", [64, 32], "/job:ps/replica:0/task:1/device:CPU:0")
    step = FakeVariable("step:0", [], "/job:ps/replica:0/task:0/device:CPU:0", "int64")
    emb = FakeSharded("emb", [FakeVariable(f"emb/part_{i}:0", [500, 16], f"/job:ps/replica:0/task:{i}/device:CPU:0")
                              for i in range(2)])
    local = FakeVariable("local:0", [3], "/job:localhost/replica:0/task:0/device:CPU:0", "float64")
    rows = variable_rows({"model": [dense, emb], "extra": (step, local)})
    assert rows == [
        {"variable": "dense/kernel:0", "task": "ps:1", "bytes": 8192, "shape": "[64,32]"},
        {"variable": "emb/part_0:0", "task": "ps:0", "bytes": 32000, "shape": "[500,16]"},
        {"variable": "emb/part_1:0", "task": "ps:1", "bytes": 32000, "shape": "[500,16]"},
        {"variable": "step:0", "task": "ps:0", "bytes": 8, "shape": "[]"},
        {"variable": "local:0", "task": "localhost:0", "bytes": 24, "shape": "[3]"},
    ]


def test_record_placement_of_a_keras_model_writes_records(tmp_path, monkeypatch):
    import keras

    monkeypatch.delenv("TF_CONFIG", raising=False)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    rows = record_placement(model, tmp_path)
    assert sorted(r["bytes"] for r in rows) == [12, 48]
    assert {r["task"] for r in rows} == {"localhost:0"} or {r["task"] for r in rows} == {"chief:0"}
    batches = read_task_file(log_dir(tmp_path) / "chief-0.tfdiag").batches["placement"]
    assert pa.Table.from_batches(batches).num_rows == 2


def test_record_placement_never_raises(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert record_placement(object(), None) == []
    rows = record_placement([FakeVariable("v:0", [2], "")], blocker, task="worker:0")  # unwritable logdir
    assert rows == [{"variable": "v:0", "task": "worker:0", "bytes": 8, "shape": "[2]"}]


class ListWriter:
    task = "chief:0"

    def __init__(self):
        self.rows = []

    def append(self, kind, **row):
        self.rows.append((kind, row))


def test_placement_log_records_each_variable_once_whatever_the_path_and_name():
    import keras
    import tensorflow as tf

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="dense")], name="net")
    log = PlacementLog(ListWriter())
    first = log.record(model)
    assert sorted(row["variable"] for row in first) == ["net/dense/bias", "net/dense/kernel"]
    # The tf.Variables behind the Keras 3 variables (what a traced function captures), other names.
    underlying = [variable.value for variable in model.variables]
    assert {v.name for v in underlying} == {"net/dense/kernel:0", "net/dense/bias:0"}
    extra = tf.Variable(tf.zeros([3]), name="extra")
    assert log.record([*underlying, model]) == [] and log.record([extra, *underlying]) == [
        {"variable": "extra:0", "task": "localhost:0", "bytes": 12, "shape": "[3]"}]
    assert len(log.writer.rows) == 3


def test_placement_log_never_raises():
    assert PlacementLog(None).record([FakeVariable("v:0", [2], "")]) == []
