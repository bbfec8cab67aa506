"""The in-graph input-arrival stamps: matched to steps, and detached after a fit."""

from __future__ import annotations

import numpy as np

from tfdiag.collectors.step_input import StepStamps, match_stamps


def test_each_step_gets_its_first_stamp_and_the_rows_of_all_of_them():
    steps = [(100, 200), (200, 300), (300, 400), (400, 500)]
    ready = [50, 120, 130, 310, 450, 600]  # 50 and 600: outside every step (an earlier fit, a later one)
    started = [t - 5 for t in ready]
    rows = [1, 8, 8, 16, 4, 2]
    assert match_stamps(steps, started, ready, rows) == [(115, 120, 16), (None, None, 0), (305, 310, 16), (445, 450, 4)]
    assert match_stamps(steps, [], [], []) == [(None, None, 0)] * 4


def test_a_fit_stamps_each_step_once_per_replica_and_leaves_the_model_as_it_was(tmp_path, monkeypatch):
    import keras

    from tfdiag.collectors import DiagnosticsCallback, step_input

    monkeypatch.delenv("TF_CONFIG", raising=False)
    taken = []
    take = StepStamps.take

    def spy(self):
        result = take(self)
        taken.append(len(result[0]))
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
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # without the callback: nothing is stamped
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])  # and with it again
    assert sum(taken) == 12 and callback.steps_recorded == 4
