"""How many examples one input element holds, whatever its structure, computed in-graph.

A training element may be a tensor, a tuple ``(features, label)``, a dict
``{"features": ..., "label": ...}``, nested tuples of a multi-input model, or hold
``tf.RaggedTensor`` / ``tf.SparseTensor`` components. The examples of a batch are the
leading dimension of its components; :func:`examples_in` takes it from the first
component, in ``tf.nest.flatten`` order, whose leading dimension exists: a dense tensor of
known rank >= 1 (``tf.shape(t)[0]``), a ragged tensor (``nrows()``), a sparse tensor of
rank >= 1 (``dense_shape[0]``). Scalars and tensors of unknown rank are skipped; an element
with none of these gives -1 (unknowable).
"""

from __future__ import annotations

UNKNOWN = -1  # what examples_in gives when no component has a leading dimension


def examples_in(element):
    """The examples in ``element`` as an int64 scalar tensor (-1 when unknowable).

    Works in eager mode and inside a ``tf.function`` (the count is a graph tensor there).

    Example:
        >>> import tensorflow as tf
        >>> int(examples_in({"features": tf.zeros([8, 3]), "label": tf.zeros([8])}))
        8
    """
    import tensorflow as tf  # lazy: the caller has TensorFlow loaded already

    for component in tf.nest.flatten(element):
        count = _leading_dimension(tf, component)
        if count is not None:
            return count
    return tf.constant(UNKNOWN, tf.int64)


def _leading_dimension(tf, component):
    """The leading dimension of one component as an int64 tensor, or None when it has none."""
    if isinstance(component, tf.RaggedTensor):
        return tf.cast(component.nrows(), tf.int64)
    if isinstance(component, tf.SparseTensor):
        rank = component.shape.rank
        return tf.cast(component.dense_shape[0], tf.int64) if rank is None or rank >= 1 else None
    if isinstance(component, tf.Tensor) and component.shape.rank:
        return tf.shape(component, out_type=tf.int64)[0]
    return None
