"""The in-graph stamps of ``model.fit`` steps (input arrival, this worker's own gradients):
matched to steps, taken before the optimizer's cross-worker reduction, detached after a fit."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

from tfdiag.analysis.load import load_run
from tfdiag.collectors.step_input import StepStamps, match_stamps

DELAY_S = 0.03


def test_each_step_gets_its_first_stamp_and_the_rows_of_all_of_them():
    steps = [(100, 200), (200, 300), (300, 400), (400, 500)]
    ready = [50, 120, 130, 310, 450, 600]  # 50 and 600: outside every step (an earlier fit, a later one)
    started = [t - 5 for t in ready]
    gradients = [t + 7 for t in ready[:-2]] + [None, None]  # a step that applied no gradients: None
    rows = [1, 8, 8, 16, 4, 2]
    assert match_stamps(steps, started, ready, gradients, rows) == [
        (115, 120, 127, 16), (None, None, None, 0), (305, 310, 317, 16), (445, 450, None, 4)]
    assert match_stamps(steps, [], [], [], []) == [(None, None, None, 0)] * 4


def test_a_fit_stamps_each_step_once_per_replica_and_leaves_the_model_as_it_was(tmp_path, monkeypatch):
    import keras

    from tfdiag.collectors import DiagnosticsCallback, step_input

    monkeypatch.delenv("TF_CONFIG", raising=False)
    taken = []
    take = StepStamps.take

    def spy(self):
        result = take(self)
        taken.append(len(result[0]))
        assert len(set(map(len, result))) == 1
        return result

    monkeypatch.setattr(StepStamps, "take", spy)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32")
    callback = DiagnosticsCallback(tmp_path)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[callback])
    assert sum(taken) == 8  # one stamp per step (one replica), drained in batches
    assert len(taken) < 8 + 2  # not one read per step
    assert "train_step" not in vars(model) and not hasattr(model, step_input._STATE_ATTRIBUTE)
    assert "apply_gradients" not in vars(model.optimizer)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # without the callback: nothing is stamped
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])  # and with it again
    assert sum(taken) == 12 and callback.steps_recorded == 4


def _keras(name):
    if name == "tf_keras":
        return pytest.importorskip("tf_keras")
    import keras

    return keras


def _delayed(tf, value):
    """``value`` once ``DELAY_S`` has passed, in-graph (a host call that sleeps)."""
    delay = tf.py_function(lambda: time.sleep(DELAY_S) or np.float32(0), [], tf.float32)
    delay.set_shape([])
    return value + tf.cast(delay, value.dtype) * 0


def _fit_and_read(tmp_path, keras, model, **compile_kwargs):
    from tfdiag.collectors import DiagnosticsCallback

    if "optimizer" not in compile_kwargs:
        compile_kwargs["optimizer"] = keras.optimizers.SGD()
    model.compile(loss="mse", **compile_kwargs)
    x, y = np.zeros((96, 4), "float32"), np.zeros((96, 1), "float32")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[DiagnosticsCallback(tmp_path)])
    steps = load_run(str(tmp_path)).frame("step").sort_values("step")
    return steps, model


@pytest.mark.parametrize("keras_name", ["keras", "tf_keras"])
def test_the_gradients_stamp_is_taken_before_the_optimizer_applies_them(tmp_path, keras_name, monkeypatch):
    # The cross-worker reduction runs inside the optimizer's apply_gradients: an optimizer
    # that waits DELAY_S in there must leave compute_ns short and the step long.
    import tensorflow as tf

    monkeypatch.delenv("TF_CONFIG", raising=False)
    keras = _keras(keras_name)

    class SlowApply(keras.optimizers.SGD):
        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            return super().apply_gradients([(_delayed(tf, g), v) for g, v in grads_and_vars], *args, **kwargs)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    steps, model = _fit_and_read(tmp_path, keras, model, optimizer=SlowApply())
    timed = steps[steps["step"] > 0]
    assert steps["compute_ns"].iloc[0] != steps["compute_ns"].iloc[0]  # the first step: none (null)
    assert timed["compute_ns"].notna().all()
    assert ((timed["end_ns"] - timed["begin_ns"]) >= DELAY_S * 1e9).all()
    assert timed["compute_ns"].median() < DELAY_S * 1e9 / 2
    assert "apply_gradients" not in vars(model.optimizer)


@pytest.mark.parametrize("keras_name", ["keras", "tf_keras"])
def test_the_gradients_stamp_waits_for_the_gradients(tmp_path, keras_name, monkeypatch):
    # A forward pass that takes DELAY_S: the gradients exist only after it.
    import tensorflow as tf

    monkeypatch.delenv("TF_CONFIG", raising=False)
    keras = _keras(keras_name)

    class Slow(keras.layers.Layer):
        def call(self, inputs):
            return _delayed(tf, inputs)

    model = keras.Sequential([keras.Input((4,)), Slow(), keras.layers.Dense(1)])
    steps, _ = _fit_and_read(tmp_path, keras, model)
    assert steps.loc[steps["step"] > 0, "compute_ns"].min() >= DELAY_S * 1e9


def test_no_gradients_stamp_under_xla(tmp_path, monkeypatch):
    import keras

    monkeypatch.delenv("TF_CONFIG", raising=False)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    steps, model = _fit_and_read(tmp_path, keras, model, jit_compile=True)
    assert len(steps) == 6 and steps["compute_ns"].isna().all()  # absent, never zero
    assert "apply_gradients" not in vars(model.optimizer)


@pytest.mark.alone
@pytest.mark.cluster
def test_a_fast_worker_stamps_its_gradients_before_waiting_for_a_slow_peer(tmp_path, monkeypatch):
    # mwms_fit with worker 1 sleeping 30 ms in its forward pass: worker 0 computes in a few
    # ms and then waits in the all-reduce; worker 1's compute holds the sleep. Live findings
    # off: worker 0 runs them, and their confirmations of the planted straggler (~0.2 s of
    # CPU each, several in this 30-step job) lengthened worker 0's own compute past the bound
    # below in one full make test (median 16.9 ms); the stamps are what this test checks.
    from tfdiag.sample_jobs import run_sample

    monkeypatch.setenv("TFDIAG_LIVE_FINDINGS", "off")

    stderr = io.StringIO()
    result = run_sample("mwms_fit", workers=2, steps=30, logdir=tmp_path / "run", inject=["slow-worker=1:30"],
                        timeout_s=150, stderr=stderr)
    assert result.ok, stderr.getvalue()
    run = load_run(str(tmp_path / "run"))
    # The all-reduce probe's first round, half a second after its warm-up, at the same step on both workers.
    rounds = run.frame("allreduce").groupby("task").size()
    assert set(rounds.index) == {"worker:0", "worker:1"} and rounds.nunique() == 1 and rounds.iloc[0] >= 1
    steps = run.frame("step")
    steps = steps[steps["compute_ns"].notna()]
    rest = steps["end_ns"] - steps["begin_ns"] - steps["input_wait_ns"] - steps["compute_ns"]
    median = steps.assign(rest=rest).groupby("task")[["compute_ns", "rest"]].median() / 1e6
    assert median.loc["worker:1", "compute_ns"] >= 30 > median.loc["worker:0", "compute_ns"] + 15
    assert median.loc["worker:0", "rest"] >= median.loc["worker:1", "rest"] + 15
