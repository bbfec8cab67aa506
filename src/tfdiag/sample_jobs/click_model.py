"""The data and model the ``model.fit`` sample jobs share: click and conversion prediction.

Data: ``DATA_FILES`` binary record files under ``LOGDIR/data/`` (written once, by
whichever task needs them first; each file is written under a temporary name and
renamed, so tasks racing on one host agree). One record is ``HISTORY`` float32 user
history features, ``CONTEXT`` float32 live-context features, then the two labels,
click and conversion (0/1, drawn from a fixed logistic model so there is something to
learn). The pipeline is what a user would write for fixed-length records::

    files → interleave(FixedLengthRecordDataset) → repeat → batch → map(decode) → prefetch?

Decoding runs on whole batches (one ``decode_raw`` per batch), so the pipeline costs
about a millisecond per step; ``input-delay=MS`` adds a map that sleeps MS per batch.

Model: a Keras functional model with two inputs (``history``, ``context``) and two
outputs (``click``, ``conversion``) — a history tower, a context tower, a shared trunk
of ``hidden`` units, two sigmoid heads. ``keras`` is passed in, so the same builder
serves tf-keras (ps_fit, mwms_fit) and Keras 3 (mirrored).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

HISTORY = 64
CONTEXT = 16
RECORD_FLOATS = HISTORY + CONTEXT + 2
RECORD_BYTES = 4 * RECORD_FLOATS
DATA_FILES = 8
RECORDS_PER_FILE = 4096
SEED = 1234
# hot-ps: a dense layer of HOT_UNITS units on the trunk and one back to its width; at the
# default width each kernel is 256 x 4096 float32 = 4 MB, read and updated every step.
HOT_UNITS = 4096


def write_data(logdir, files: int = DATA_FILES, records: int = RECORDS_PER_FILE, sizes=None) -> list[str]:
    """Writes (if missing) the record files and returns their paths, sorted.

    ``sizes`` overrides the record count of each file (a list of ``files`` ints).
    """
    folder = Path(logdir) / "data"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    w_click = rng.normal(size=HISTORY + CONTEXT).astype(np.float32) / np.sqrt(HISTORY + CONTEXT)
    w_conv = rng.normal(size=HISTORY + CONTEXT).astype(np.float32) / np.sqrt(HISTORY + CONTEXT)
    paths = []
    for index in range(files):
        count = sizes[index] if sizes else records
        path = folder / f"part-{index:03d}-of-{files:03d}.bin"
        paths.append(str(path))
        if path.exists() and path.stat().st_size == count * RECORD_BYTES:
            continue
        file_rng = np.random.default_rng(SEED + 1 + index)
        x = file_rng.normal(size=(count, HISTORY + CONTEXT)).astype(np.float32)
        click = (file_rng.random(count) < 1 / (1 + np.exp(-2 * (x @ w_click)))).astype(np.float32)
        conv = click * (file_rng.random(count) < 1 / (1 + np.exp(-2 * (x @ w_conv)))).astype(np.float32)
        rows = np.concatenate([x, click[:, None], conv[:, None]], axis=1)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        rows.astype("<f4").tofile(tmp)
        os.replace(tmp, path)
    return paths


def decode_batch(tf, raw):
    """A batch of raw records → ``({"history", "context"}, {"click", "conversion"})``."""
    values = tf.reshape(tf.io.decode_raw(raw, tf.float32, little_endian=True), [-1, RECORD_FLOATS])
    features = {"history": values[:, :HISTORY], "context": values[:, HISTORY:HISTORY + CONTEXT]}
    labels = {"click": values[:, -2:-1], "conversion": values[:, -1:]}
    return features, labels


def make_dataset(tf, files, batch, plan, *, seed: int = 0, delay_us: int = 0, options=None):
    """The input pipeline over ``files``, ``batch`` examples per element, repeated forever.

    ``batch`` may be a scalar tensor (a per-worker batch size under ParameterServerStrategy).
    """
    from tfdiag.sample_jobs.common import sleep_us

    parallel = tf.data.AUTOTUNE if plan.is_on("map_parallel") else None
    dataset = tf.data.Dataset.from_tensor_slices(list(files)).shuffle(len(files), seed=seed)
    dataset = dataset.interleave(
        lambda path: tf.data.FixedLengthRecordDataset(path, RECORD_BYTES), cycle_length=2, block_length=64
    )
    dataset = dataset.repeat().batch(batch, drop_remainder=True)
    dataset = dataset.map(lambda raw: decode_batch(tf, raw), num_parallel_calls=parallel)
    if delay_us:
        dataset = dataset.map(lambda x, y: (sleep_us(tf, delay_us, x), y), num_parallel_calls=parallel)
    if plan.is_on("prefetch"):
        dataset = dataset.prefetch(tf.data.AUTOTUNE)
    return dataset.with_options(options) if options is not None else dataset


def build_model(keras, hidden: int, *, extra_layers=(), hot_scope=None, output_dtype="float32"):
    """The two-input, two-output click/conversion model (uncompiled).

    ``extra_layers`` are applied to the trunk input in order (e.g. an injected per-worker
    delay, or a custom layer); ``hot_scope`` (a context manager factory) wraps the
    creation of the hot block (``hot_wide`` to HOT_UNITS units and ``hot_narrow`` back,
    a 4 MB kernel each), which exists only when it is given.
    """
    history = keras.Input(shape=(HISTORY,), name="history")
    context = keras.Input(shape=(CONTEXT,), name="context")
    h = keras.layers.Dense(hidden, activation="relu", name="history_tower")(history)
    c = keras.layers.Dense(hidden // 2, activation="relu", name="context_tower")(context)
    x = keras.layers.Concatenate(name="join")([h, c])
    for layer in extra_layers:
        x = layer(x)
    x = keras.layers.Dense(hidden, activation="relu", name="trunk1")(x)
    x = keras.layers.Dense(hidden, activation="relu", name="trunk2")(x)
    if hot_scope is not None:
        # Both 4 MB kernels of the hot block in the scope: one built outside it went to the
        # other ps by round robin, and the two ps then held equal shares.
        with hot_scope():
            wide = keras.layers.Dense(HOT_UNITS, activation="relu", name="hot_wide")
            wide.build((None, hidden))
            narrow = keras.layers.Dense(hidden, name="hot_narrow")
            narrow.build((None, HOT_UNITS))
        x = narrow(wide(x))
    click = keras.layers.Dense(1, activation="sigmoid", name="click", dtype=output_dtype)(x)
    conversion = keras.layers.Dense(1, activation="sigmoid", name="conversion", dtype=output_dtype)(x)
    return keras.Model(inputs={"history": history, "context": context},
                       outputs={"click": click, "conversion": conversion}, name="click_conversion")


def compile_model(keras, model, learning_rate: float = 0.01):
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss={"click": "binary_crossentropy", "conversion": "binary_crossentropy"},
        loss_weights={"click": 1.0, "conversion": 0.5},
    )
    return model


def standard_callbacks(keras, logdir, *, monitor: str = "loss", keras3: bool = False):
    """EarlyStopping, ModelCheckpoint (weights, into ``LOGDIR/checkpoints/``), ReduceLROnPlateau.

    Keras 3 saves weights only to ``*.weights.h5``; tf-keras writes a TF checkpoint,
    which also works with variables on parameter servers.
    """
    checkpoints = Path(logdir) / "checkpoints"
    name = "weights-{epoch:02d}.weights.h5" if keras3 else "weights-{epoch:02d}"
    return [
        keras.callbacks.EarlyStopping(monitor=monitor, patience=3, min_delta=0.0),
        keras.callbacks.ModelCheckpoint(str(checkpoints / name), monitor=monitor,
                                        save_weights_only=True, save_freq="epoch"),
        keras.callbacks.ReduceLROnPlateau(monitor=monitor, factor=0.5, patience=2, min_lr=1e-4),
    ]


def epochs_for(steps: int, epochs: int = 5) -> tuple[int, int]:
    """``(epochs, steps_per_epoch)`` that run ``steps`` steps in up to ``epochs`` epochs."""
    epochs = max(1, min(epochs, steps))
    while steps % epochs:
        epochs -= 1
    return epochs, steps // epochs
