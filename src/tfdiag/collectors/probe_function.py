"""The RPC probe's ``tf.function``: one round trip between two tasks, timed by the tasks' clocks.

A probe reads ``tf.timestamp()`` on the local task (``send``), then, under ``tf.device``
of a remote task, ``tf.timestamp()`` there (``remote``), then locally again (``recv``);
control dependencies order the three reads, so the remote read happens after ``send``
left and ``recv`` after the remote value arrived. ``recv - send`` is the round trip
through the same channels the training uses, ``remote - (send + recv) / 2`` the clock
offset (Cristian's method, good to within half the round trip). ``rpc_probe`` runs them.
"""

from __future__ import annotations

import contextlib


def _tf():
    import tensorflow as tf  # lazy: only probers that run need TensorFlow

    return tf


def probe_times(tf, local_device: str | None, remote_device: str, payload_elements: int = 0):
    """Traces, inside a ``tf.function``, one probe between ``local_device`` and ``remote_device``.

    A ``local_device`` of None is this task; another device (a worker) makes the probe run
    between it and the remote (worker → ps, driven by the coordinator). Returns a float64
    vector ``[send, remote, recv]`` in seconds, ``send`` and ``recv`` on the local device.
    With ``payload_elements`` > 0 the remote also fills that many float64 and ships them to
    the local device before ``recv`` is read. One probe per function: a probe that
    followed a slow one in the same function would read too short a round trip (see
    ``RpcProber``).
    """
    local = (lambda: tf.device(local_device)) if local_device else contextlib.nullcontext
    with local():
        send = tf.timestamp()
    with tf.device(remote_device), tf.control_dependencies([send]):
        remote = tf.timestamp()
        payload = tf.fill([payload_elements], remote) if payload_elements else None
    arrived = [remote]
    with local():
        if payload is not None:
            arrived.append(tf.identity(payload))  # placed here: the bytes cross the link
        with tf.control_dependencies(arrived):
            recv = tf.timestamp()
    return tf.stack([send, remote, recv])


class _ProbeFn:
    """The Python body of one probe ``tf.function``.

    A callable object, not a lambda: ``tf.function`` counts traces per code object, so
    the probes of several links made from one lambda would trip its "excessive
    retracing" warning although each traces once.
    """

    def __init__(self, local_device: str | None, remote_device: str, payload_elements: int):
        self.local_device = local_device
        self.remote_device = remote_device
        self.payload_elements = payload_elements

    def __call__(self):
        return probe_times(_tf(), self.local_device, self.remote_device, self.payload_elements)


def traced_probe(local_device: str | None, remote_device: str, payload_elements: int):
    """The probe between the two devices as a concrete function, traced now (tracing
    registers it with every task of the cluster)."""
    return _tf().function(_ProbeFn(local_device, remote_device, payload_elements)).get_concrete_function()
