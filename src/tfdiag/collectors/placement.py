"""Variable placement: name, bytes and holding task of every variable.

``record_placement`` accepts whatever holds the variables: a Keras model, a
``tf.Module``, a list or dict of variables, or an object with a ``variables``
attribute. A ``ShardedVariable`` (ParameterServerStrategy with a
``variable_partitioner``) is recorded shard by shard. The holding task is parsed from
``variable.device`` (``/job:ps/replica:0/task:1/device:CPU:0`` → ``ps:1``); a variable
without a job in its device is held by the recording task itself.
"""

from __future__ import annotations

import logging
import os

from tfdiag.events import task_of_device

logger = logging.getLogger("tfdiag")


def _flatten(holder) -> list:
    """The variables held by ``holder`` (model, module, list, dict, variable)."""
    if holder is None:
        return []
    if isinstance(holder, dict):
        return [v for value in holder.values() for v in _flatten(value)]
    if isinstance(holder, (list, tuple, set)):
        return [v for value in holder for v in _flatten(value)]
    if _is_variable(holder):
        return [holder]
    variables = getattr(holder, "variables", None)
    if callable(variables):  # older Keras: a method
        variables = variables()
    if variables is not None and variables is not holder:
        return _flatten(list(variables))
    return []


def _is_variable(value) -> bool:
    # tf.Variable and its shards have ``device``; a Keras 3 variable wraps one in ``value``.
    return hasattr(value, "dtype") and hasattr(value, "shape") and (
        hasattr(value, "device") or hasattr(value, "variables") or hasattr(value, "value"))


def _device(variable) -> str:
    device = getattr(variable, "device", None)
    if device is None:
        try:
            device = getattr(variable.value, "device", None)
        except Exception:  # noqa: BLE001 - an uninitialised Keras variable
            device = None
    return str(device or "")


def _shards(variable) -> list:
    """The shards of a ShardedVariable, or ``[variable]``."""
    shards = getattr(variable, "variables", None)
    if isinstance(shards, (list, tuple)) and shards and shards[0] is not variable:
        return list(shards)
    return [variable]


def _dtype_size(dtype) -> int:
    size = getattr(dtype, "size", None)  # tf.DType
    if isinstance(size, int):
        return size
    try:
        import numpy as np

        return int(np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize)
    except Exception:  # noqa: BLE001 - e.g. a string dtype
        return 0


def _identity(shard):
    """What tells the TensorFlow variable behind ``shard`` apart: its resource handle where it
    has one (a Keras 3 variable, an aggregating wrapper and the ``tf.Variable`` a traced
    function captured share it), else the object itself."""
    try:
        handle = getattr(shard, "handle", None)
    except Exception:  # noqa: BLE001 - an uninitialised Keras variable, a graph without handles
        handle = None
    return handle if handle is not None else shard


def _shard_rows(holder, default_task: str, known=frozenset()):
    """``(identity, row)`` per variable shard of ``holder``, each shard once, none whose
    identity's ``id`` is in ``known``."""
    seen = set()
    for variable in _flatten(holder):
        for shard in _shards(variable):
            identity = _identity(shard)
            if id(identity) in seen or id(identity) in known:
                continue
            seen.add(id(identity))
            shape = [int(d) if d is not None else -1 for d in list(getattr(shard, "shape", []) or [])]
            elements = 1
            for d in shape:
                elements *= max(d, 0)
            device = _device(shard)
            name = str(getattr(shard, "path", None) or getattr(shard, "name", "") or "")
            yield identity, {
                "variable": name,
                "task": task_of_device(device) or default_task,
                "bytes": elements * _dtype_size(getattr(shard, "dtype", None)),
                "shape": "[" + ",".join(str(d) for d in shape) + "]",
            }


def variable_rows(holder, default_task: str = "") -> list[dict]:
    """One ``placement`` row per variable (per shard): ``variable``, ``task``, ``bytes``, ``shape``."""
    return [row for _, row in _shard_rows(holder, default_task)]


class PlacementLog:
    """A task's ``placement`` records: each variable (shard) written once, however often seen.

    The same variable reaches a task by several paths (the user's ``variables=``, the
    variables each scheduled function captured, a later ``record_placement``), under
    different names (a Keras 3 path, the ``tf.Variable``'s name); one record each keeps
    the file free of repeats. Variables are told apart by their resource handle, held here
    (not the variable, whose memory its handle does not keep) so that its ``id`` is never reused.
    """

    def __init__(self, writer):
        self.writer = writer
        self._recorded: dict[int, object] = {}

    def record(self, variables) -> list[dict]:
        """Writes the rows of ``variables`` not recorded before; returns them (empty after an
        error, which is logged, never raised)."""
        try:
            rows = []
            for identity, row in _shard_rows(variables, self.writer.task, known=self._recorded):
                self._recorded[id(identity)] = identity
                self.writer.append("placement", **row)
                rows.append(row)
            return rows
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot record variable placement (%r).", error)
            return []


def record_placement(variables, logdir=None, *, task: str | None = None, writer=None) -> list[dict]:
    """Records where every variable lives: one ``placement`` record per variable or shard.

    Args:
        variables: a Keras model, ``tf.Module``, list/dict of variables or one variable.
        logdir: the run directory (used when ``writer`` is not given).
        task: the recording task (default: from ``TF_CONFIG``; ``chief:0`` if none);
            variables with no job in their device are attributed to it.
        writer: an open ``TaskWriter`` to append to instead of opening one.

    Returns:
        The rows written (empty after an error, which is logged, never raised).

    Example:
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = make_model()
        >>> record_placement(model, "logs/run1")  # doctest: +SKIP
    """
    try:
        from tfdiag.collectors import identity

        task = task or (writer.task if writer is not None else identity.resolve_task(default="chief:0"))
        rows = variable_rows(variables, default_task=task)
        own = writer is None
        if own:
            if not logdir:
                raise ValueError("record_placement needs `logdir` or `writer`")
            from tfdiag.collectors import writers

            writer = writers.acquire(os.fspath(logdir), task)
        for row in rows:
            writer.append("placement", **row)
        if own:
            writers.release(writer)
        return rows
    except Exception as error:  # noqa: BLE001 - a collector never breaks training
        logger.warning("tfdiag: cannot record variable placement (%r).", error)
        return []
