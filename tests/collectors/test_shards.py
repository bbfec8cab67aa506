"""count_examples: totals, per-file counts, label histogram and the auto-shard policy."""

from __future__ import annotations

import pytest

from tfdiag.analysis.load import load_run
from tfdiag.analysis.shards import shard_table

tf = pytest.importorskip("tensorflow")


def read_file(name):
    """A stand-in for a file reader: b.txt holds 30 examples, the others 10; labels cycle 0, 1, 2."""
    n = tf.where(tf.equal(name, "b.txt"), tf.constant(30, tf.int64), tf.constant(10, tf.int64))
    return tf.data.Dataset.range(n).map(lambda i: (tf.cast(i, tf.float32), i % 3))


def test_per_file_total_labels_and_policy(tmp_path):
    from tfdiag.collectors.shards import count_examples, shard_counter

    files = tf.data.Dataset.from_tensor_slices(["a.txt", "b.txt", "c.txt"])
    ds = files.interleave(lambda f: count_examples(read_file(f), tmp_path, task="worker:1", file=f), cycle_length=2)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = count_examples(ds.with_options(options).batch(4), tmp_path, task="worker:1", batched=True,
                        label_fn=lambda x, y: y)
    seen = sum(int(x.shape[0]) for x, _ in ds)
    shard_counter(tmp_path, "worker:1").close()

    run = load_run(tmp_path)
    table = shard_table(run.frame("shard")).set_index("task")
    assert seen == 50 and table.loc["worker:1", "examples"] == 50
    assert table.loc["worker:1", "files"] == {"a.txt": 10, "b.txt": 30, "c.txt": 10}
    assert table.loc["worker:1", "policy"] == "DATA"
    labels = run.frame("label").astype({"label": str}).groupby("label")["examples"].last().to_dict()
    assert labels == {"0": 18, "1": 16, "2": 16}


def test_counting_under_keras_fit(tmp_path, monkeypatch):
    import keras
    import numpy as np

    from tfdiag.collectors.shards import count_examples, shard_counter

    monkeypatch.delenv("TF_CONFIG", raising=False)
    x = np.ones((96, 4), "float32")
    ds = count_examples(tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16), tmp_path, batched=True)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(ds, epochs=2, verbose=0)
    shard_counter(tmp_path, "worker:0").close()
    table = shard_table(load_run(tmp_path).frame("shard"))
    assert table["task"].tolist() == ["worker:0"] and table["examples"].tolist() == [192]


def test_errors_return_the_dataset_unchanged(tmp_path):
    from tfdiag.collectors.shards import count_examples

    ds = tf.data.Dataset.range(3)
    assert count_examples(ds, tmp_path, task="worker:0", label_fn=lambda x: 1 / 0) is ds
