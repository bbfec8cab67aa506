"""DiagnosticsCallback with Keras 3 and tf-keras ``model.fit`` in this process."""

from __future__ import annotations

import logging
import math
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from tfdiag.store import log_dir, read_manifest, read_task_file

EPOCHS = 2
BATCH = 16
EXAMPLES = 96  # 6 steps per epoch


def read_steps(run_dir):
    result = read_task_file(log_dir(run_dir) / "worker-0.tfdiag")
    assert not result.skipped and result.truncated_tail is None
    return pa.Table.from_batches(result.batches["step"]).to_pandas()


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(EXAMPLES, 4)).astype("float32"), rng.normal(size=(EXAMPLES, 1)).astype("float32")


def keras3_model():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def tf_keras_model():
    import tf_keras

    model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(4,))])
    model.compile("sgd", "mse")
    return model


@pytest.mark.parametrize("make_model", [keras3_model, tf_keras_model], ids=["keras3", "tf_keras"])
def test_fit_records_one_step_per_batch(tmp_path, monkeypatch, make_model):
    from tfdiag.collectors import DiagnosticsCallback

    monkeypatch.delenv("TF_CONFIG", raising=False)
    x, y = data()
    callback = DiagnosticsCallback(tmp_path, examples_per_step=BATCH)
    make_model().fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[callback])

    steps = read_steps(tmp_path)
    expected = EPOCHS * EXAMPLES // BATCH
    assert len(steps) == expected
    assert steps["step"].tolist() == list(range(expected))
    assert set(steps["task"]) == {"worker:0"} and set(steps["clock_task"]) == {"worker:0"}
    assert (steps["end_ns"] >= steps["begin_ns"]).all()
    assert (steps["begin_ns"].diff().dropna() > 0).all()
    assert (steps["begin_ns"].iloc[1:].to_numpy() >= steps["end_ns"].iloc[:-1].to_numpy()).all()
    assert (steps["examples"] == BATCH).all()
    assert (steps["input_wait_ns"] >= 0).all() and (steps["input_wait_ns"] <= steps["end_ns"] - steps["begin_ns"]).all()
    manifest = read_manifest(tmp_path)
    assert manifest["task"] == "worker:0" and manifest["tensorflow_version"].startswith("2.")


def test_unwritable_logdir_lets_fit_finish(tmp_path, caplog):
    from tfdiag.collectors import DiagnosticsCallback

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    x, y = data()
    callback = DiagnosticsCallback(blocker / "run", examples_per_step=BATCH)
    with caplog.at_level(logging.WARNING, logger="tfdiag"):
        history = keras3_model().fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[callback])
    assert len(history.history["loss"]) == EPOCHS
    assert any("tfdiag" in record.getMessage() for record in caplog.records)


def test_hooks_directly_reset_per_run(tmp_path, monkeypatch):
    """The hooks without Keras: state resets in on_train_begin, so an instance is reusable."""
    from tfdiag.collectors import DiagnosticsCallback

    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}')
    callback = DiagnosticsCallback(tmp_path)
    for _ in range(2):
        callback.on_train_begin()
        for batch in range(3):
            callback.on_train_batch_begin(batch)
            callback.on_train_batch_end(batch)
        assert callback.steps_recorded == 3
        callback.on_train_end()
    assert callback.task == "worker:1"
    assert read_manifest(tmp_path) is None  # worker:1 is not the chief
    result = read_task_file(log_dir(tmp_path) / "worker-1.tfdiag")
    steps = pa.Table.from_batches(result.batches["step"]).to_pandas()
    assert steps["step"].tolist() == [0, 1, 2, 0, 1, 2]
    assert (steps["examples"] == 0).all()


def test_tf_keras_protocol_without_importing_it():
    from tfdiag.collectors import DiagnosticsCallback

    callback = DiagnosticsCallback("unused")
    assert callback._implements_train_batch_hooks()
    assert not callback._implements_test_batch_hooks()
    assert not callback._implements_predict_batch_hooks()
    assert callback._supports_tf_logs


@pytest.mark.parametrize("value", [-1, 1.5, "64"])
def test_bad_examples_per_step_names_the_argument(value):
    from tfdiag.collectors import DiagnosticsCallback
    from tfdiag.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="examples_per_step"):
        DiagnosticsCallback("logs", examples_per_step=value)


@pytest.mark.parametrize("value", [-1, "5", math.nan])
def test_bad_allreduce_every_s_names_the_argument(value):
    from tfdiag.collectors import DiagnosticsCallback
    from tfdiag.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="allreduce_every_s"):
        DiagnosticsCallback("logs", allreduce_every_s=value)


def probe_times(step_seconds, every_s=5.0):
    """The (fake) clock's time at each probe of ``ProbeCadence`` over steps that take
    ``step_seconds(step)`` each, given the mean step time as the probe would read it."""
    from tfdiag.collectors.allreduce_probe import ProbeCadence

    cadence, clock, times, recent = ProbeCadence(every_s), 0.0, [], []
    for step in range(1, 20_000):
        clock += step_seconds(step)
        recent = (recent + [step_seconds(step)])[-50:]
        if step >= cadence.next_step:
            times.append(clock)
            cadence.ran(step, sum(recent) / len(recent))
    return times


@pytest.mark.parametrize("step_s", [0.002, 0.035, 0.4])
def test_the_probe_runs_on_a_time_cadence_whatever_the_step_time(step_s):
    times = probe_times(lambda step: step_s)
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    # The warm-up a few steps in, then rounds 0.5, 1 and 2 s apart, then every 5 s.
    assert times[0] == pytest.approx(5 * step_s)
    assert gaps[:3] == pytest.approx([0.5, 1.0, 2.0], abs=step_s / 2 + 1e-9)
    assert gaps[3:] == pytest.approx([5.0] * len(gaps[3:]), abs=step_s / 2 + 1e-9)
    # A short run still gets rounds: three timed ones within four seconds of the warm-up.
    assert sum(1 for t in times[1:] if t <= times[0] + 4.0) == 3


def test_the_probe_follows_a_change_of_step_time():
    # 10 ms steps for the first 10 s, then 100 ms: gaps of 5 s on either side.
    times = probe_times(lambda step: 0.01 if step <= 1000 else 0.1)
    late = [t for t in times if t > 20]
    assert [later - earlier for earlier, later in zip(late, late[1:])] == pytest.approx([5.0] * (len(late) - 1), abs=0.06)
    assert probe_times(lambda step: 0.0)[:2] == [0.0, 0.0]  # no step time (a clock that stands still): every 5 steps


INPUT_DELAY_S = 0.03


def dict_dataset(tf, delay_s):
    """Batches of ``({"a": [n, 4], "b": [n, 2]}, y)`` whose production sleeps ``delay_s`` each."""
    rng = np.random.default_rng(1)
    features = {"a": rng.normal(size=(EXAMPLES, 4)).astype("float32"),
                "b": rng.normal(size=(EXAMPLES, 2)).astype("float32")}
    labels = rng.normal(size=(EXAMPLES, 1)).astype("float32")

    def sleep():
        time.sleep(delay_s)
        return np.float32(0)

    def slow(x, y):
        return x, y + tf.reshape(tf.py_function(sleep, [], tf.float32), [])  # a slow host-side parse

    # drop_remainder: a static batch size, which the graph optimiser can fold to a constant.
    # No prefetch that tf.data would inject: each element is made only when a step asks.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(BATCH, drop_remainder=True).map(slow)
    return dataset.with_options(options)


def two_input_model(keras):
    a, b = keras.Input((4,), name="a"), keras.Input((2,), name="b")
    model = keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    model.compile("sgd", "mse")
    return model


@pytest.mark.parametrize("keras_module", ["keras", "tf_keras"])
def test_dict_input_wait_and_examples_are_measured_in_graph(tmp_path, monkeypatch, keras_module):
    import importlib

    import tensorflow as tf

    from tfdiag.collectors import DiagnosticsCallback

    monkeypatch.delenv("TF_CONFIG", raising=False)
    keras = importlib.import_module(keras_module)
    callback = DiagnosticsCallback(tmp_path)  # no examples_per_step: counted from the elements
    two_input_model(keras).fit(dict_dataset(tf, INPUT_DELAY_S), epochs=EPOCHS, verbose=0, callbacks=[callback])

    steps = read_steps(tmp_path)
    assert len(steps) == EPOCHS * EXAMPLES // BATCH
    assert (steps["examples"] == BATCH).all()
    wait_s = steps["input_wait_ns"] / 1e9
    # Every batch's production sleeps INPUT_DELAY_S after the step asked for it (no prefetch);
    # the first step of each fit may trace the function first, so its wait is not counted.
    assert (wait_s[steps["step"] == 0] == 0).all()
    later = wait_s[steps["step"] > 0]
    # (a pipeline may start the next element before it is asked for: some steps wait less)
    assert (later >= INPUT_DELAY_S * 0.5).all() and later.median() >= INPUT_DELAY_S * 0.8, wait_s.tolist()
    assert (steps["input_wait_ns"] <= steps["end_ns"] - steps["begin_ns"]).all()


@pytest.mark.parametrize("keras_module", ["keras", "tf_keras"])
def test_time_before_the_train_function_starts_is_not_input_wait(tmp_path, monkeypatch, keras_module):
    """Work between on_train_batch_begin and the function's start (here another callback's
    30 ms; on a busy host the dispatch) is not counted as waiting for input."""
    import importlib

    import tensorflow as tf

    from tfdiag.collectors import DiagnosticsCallback

    monkeypatch.delenv("TF_CONFIG", raising=False)
    keras = importlib.import_module(keras_module)

    class SlowBegin(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            time.sleep(INPUT_DELAY_S)

    dataset = dict_dataset(tf, 0.0).prefetch(4)
    two_input_model(keras).fit(dataset, epochs=EPOCHS, verbose=0, callbacks=[DiagnosticsCallback(tmp_path), SlowBegin()])
    steps = read_steps(tmp_path)
    durations_s = (steps["end_ns"] - steps["begin_ns"]) / 1e9
    assert (durations_s >= INPUT_DELAY_S).all()  # the slow callback ran inside each recorded step
    wait_s = steps["input_wait_ns"] / 1e9
    assert wait_s.median() < INPUT_DELAY_S / 3, wait_s.tolist()


def test_xla_compiled_model_trains_without_stamps(tmp_path, monkeypatch):
    import keras

    from tfdiag.collectors import DiagnosticsCallback

    monkeypatch.delenv("TF_CONFIG", raising=False)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", jit_compile=True)  # the stamp's queue ops cannot be XLA-compiled: no stamp
    x, y = data()
    history = model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[DiagnosticsCallback(tmp_path)])
    assert len(history.history["loss"]) == 1
    steps = read_steps(tmp_path)
    assert len(steps) == EXAMPLES // BATCH
    assert (steps["input_wait_ns"] == 0).all() and (steps["examples"] == 0).all()


def test_live_findings_run_in_the_manifest_writer_during_fit_and_declare_their_cost(tmp_path, monkeypatch):
    import keras

    from tfdiag.collectors import DiagnosticsCallback

    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("TFDIAG_LIVE_FINDINGS", raising=False)
    monkeypatch.setenv("TFDIAG_LIVE_CPU_SHARE", "1")  # every 0.2 s, whatever an evaluation costs
    x, y = data()
    slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.02))
    live_on = DiagnosticsCallback(tmp_path / "on", live_interval_s=0.2)
    keras3_model().fit(x, y, batch_size=BATCH, epochs=10, verbose=0, callbacks=[live_on, slow])
    monkeypatch.setenv("TFDIAG_LIVE_FINDINGS", "off")  # on by default: the variable turns them off
    off = DiagnosticsCallback(tmp_path / "off")
    keras3_model().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[off])

    def notes(run_dir):
        batches = read_task_file(log_dir(run_dir) / "worker-0.tfdiag").batches
        rows = pa.Table.from_batches(batches["note"]).to_pylist() if "note" in batches else []
        return [row["message"] for row in rows if row["message"].startswith("live findings: ")]

    (note,) = notes(tmp_path / "on")
    assert " evaluations every 0.2 s or more " in note
    assert int(note.split()[2]) >= 2  # 60 steps of 20+ ms: several evaluations
    assert live_on.task_session is None and not any(t.name == "tfdiag-live-findings" for t in threading.enumerate())
    assert notes(tmp_path / "off") == []
