"""InputTimer through DiagnosticsHook: a TF1 step's wait for in-graph and fed input, in real sessions."""

from __future__ import annotations

from tfdiag.analysis.load import load_run

from tests.conftest import in_child_process

DELAY_S = 0.03  # the planted wait per batch
STEPS = 6


def test_in_graph_iterator_wait_is_recorded_and_an_unused_iterator_is_left_alone(tmp_path):
    untouched = in_child_process(_run_in_graph_input, str(tmp_path))
    steps = load_run(tmp_path).frame("step").sort_values("step")
    assert len(steps) == STEPS + 1  # the training steps and the final evaluation run
    steps = steps.iloc[:STEPS]
    waits = steps["input_wait_ns"] / 1e9
    # Every step waits for its delayed element (the planted sleep, less timer granularity),
    # once the element tf.data may have made ahead during the first step is used up...
    assert (waits.iloc[2:] >= 0.8 * DELAY_S).all(), waits.tolist()
    # ...and the wait is part of the step, never more than it.
    assert (steps["input_wait_ns"] <= steps["end_ns"] - steps["begin_ns"]).all()
    # The eval iterator the train op does not use gave no element to the timer's fetches.
    assert untouched == 0


def test_fed_steps_wait_from_the_previous_run_and_unfed_runs_wait_none(tmp_path):
    in_child_process(_run_fed_input, str(tmp_path))
    steps = load_run(tmp_path).frame("step").sort_values("step").reset_index(drop=True)
    assert len(steps) == 2 * STEPS
    fed, unfed = steps.iloc[1:STEPS], steps.iloc[STEPS:]
    # Python prepared each fed batch for DELAY_S between runs: that is the step's input wait,
    # and the step begins where the previous one ended.
    assert (fed["input_wait_ns"] / 1e9 >= 0.9 * DELAY_S).all(), fed["input_wait_ns"].tolist()
    assert (fed["begin_ns"].values == steps["end_ns"].values[:STEPS - 1]).all()
    # The first run has no previous one; runs without a feed do not count the gap.
    assert steps["input_wait_ns"].iloc[0] == 0
    assert (unfed["input_wait_ns"] < DELAY_S * 1e9 / 3).all(), unfed["input_wait_ns"].tolist()


def _delayed(tf, value):
    import time

    def sleep(x):
        time.sleep(DELAY_S)
        return x

    return tf.py_function(sleep, [value], tf.float32)


def _run_in_graph_input(logdir: str) -> int:
    import tensorflow as tf

    from tfdiag.collectors import DiagnosticsHook

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    train = tf.data.Dataset.range(1000).map(lambda i: _delayed(tf, tf.fill([8, 4], tf.cast(i, tf.float32))))
    x = v1.data.make_one_shot_iterator(train).get_next()
    x.set_shape([8, 4])
    evaluation = v1.data.make_one_shot_iterator(tf.data.Dataset.range(1000)).get_next()
    kernel = v1.get_variable("kernel", [4, 2])
    train_op = v1.train.GradientDescentOptimizer(0.01).minimize(tf.reduce_sum(tf.matmul(x, kernel)))
    hook = DiagnosticsHook(logdir, task="worker:0", examples_per_step=8, system_interval_s=None)
    with v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(STEPS):
            session.run(train_op)
        return int(session.run(evaluation))


def _run_fed_input(logdir: str) -> None:
    import time

    import numpy as np
    import tensorflow as tf

    from tfdiag.collectors import DiagnosticsHook

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    x = v1.placeholder(tf.float32, [8, 4])
    kernel = v1.get_variable("kernel", [4, 2])
    train_op = v1.train.GradientDescentOptimizer(0.01).minimize(tf.reduce_sum(tf.matmul(x, kernel)))
    hook = DiagnosticsHook(logdir, task="worker:0", examples_per_step=8, system_interval_s=None)
    with v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
        for _ in range(STEPS):
            time.sleep(DELAY_S)  # "reading and parsing" the next batch
            session.run(train_op, feed_dict={x: np.ones([8, 4], np.float32)})
        for _ in range(STEPS):
            time.sleep(DELAY_S)  # other work between runs that feed nothing
            session.run(kernel)
