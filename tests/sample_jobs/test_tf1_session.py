"""tf1_session's own wait for the chief: a non-chief starts as soon as the variables are ready."""

from __future__ import annotations

from tests.conftest import in_child_process

INIT_AFTER_S = 1.0  # the "chief" initialises the variables this long after the wait begins


def test_wait_for_chief_returns_within_a_poll_of_the_initialisation():
    after_start_s, after_init_s, ready = in_child_process(_wait_while_a_chief_initialises)
    assert ready
    assert after_start_s >= 0.0, after_start_s  # it did not return before the chief began initialising
    # Not MonitoredTrainingSession's 30 s between checks: one CHIEF_POLL_S (0.2 s) at most, plus slack.
    # (From the initialisation, not from the wait's start: the wait may begin late on a busy host.)
    assert after_init_s < 2.0, after_init_s


def _wait_while_a_chief_initialises():
    import threading
    import time

    import tensorflow as tf

    from tfdiag.sample_jobs.launcher import pick_free_ports
    from tfdiag.sample_jobs.tf1_session import wait_for_chief

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    [port] = pick_free_ports(1)
    server = tf.distribute.Server({"worker": [f"127.0.0.1:{port}"]}, job_name="worker", task_index=0, start=True)
    kernel = v1.get_variable("kernel", [4, 2])
    init = v1.global_variables_initializer()

    initialising = {}

    def chief():
        time.sleep(INIT_AFTER_S)
        with v1.Session(server.target, graph=init.graph) as session:  # the default graph is per thread
            initialising["began"] = time.monotonic()
            session.run(init)
            initialising["done"] = time.monotonic()

    initialiser = threading.Thread(target=chief, daemon=True)
    initialiser.start()
    wait_for_chief(tf, server, v1.ConfigProto())
    returned = time.monotonic()
    with v1.Session(server.target) as session:
        ready = len(session.run(v1.report_uninitialized_variables([kernel]))) == 0
    initialiser.join(timeout=30)
    return returned - initialising["began"], returned - initialising["done"], ready
