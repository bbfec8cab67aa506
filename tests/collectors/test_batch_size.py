"""Examples counted from an input element of any structure, eagerly and in-graph."""

from __future__ import annotations

import pytest

from tfdiag.collectors import closure_timing
from tfdiag.collectors.batch_size import examples_in

tf = pytest.importorskip("tensorflow")


def batched(elements, batch=4):
    """The first batch of a dataset built from ``elements`` (a structure of per-example values)."""
    return next(iter(tf.data.Dataset.from_tensor_slices(elements).batch(batch)))


def in_graph(element):
    """examples_in traced in a tf.function whose input has an unknown batch dimension."""
    def unknown_batch(value):
        spec = tf.type_spec_from_value(value)
        return spec._unbatch()._batch(None) if value.shape.rank else spec

    spec = tf.nest.map_structure(unknown_batch, element)
    return int(tf.function(examples_in, input_signature=[spec])(element))


@pytest.mark.parametrize(
    "element",
    [
        {"features": tf.zeros([6, 3]), "label": tf.zeros([6])},
        ((tf.zeros([6, 2]), tf.zeros([6, 5], tf.int32)), tf.zeros([6])),  # multi-input model: ((a, b), label)
        {"a_scalar": tf.constant(1.0), "z": tf.zeros([6, 2])},  # a scalar first in flatten order is skipped
        tf.ragged.constant([[1], [2, 3], [], [4], [5, 6], [7]]),
        tf.sparse.from_dense(tf.eye(6)),
        {"ids": tf.ragged.constant([[1], [2, 3], [], [4], [5, 6], [7]]), "label": tf.zeros([6])},
    ],
    ids=["dict", "nested-tuple", "scalar-first", "ragged", "sparse", "dict-of-ragged"],
)
def test_examples_are_the_leading_dimension_of_the_first_component_that_has_one(element):
    assert int(examples_in(element)) == 6
    assert in_graph(element) == 6


@pytest.mark.parametrize("element", [tf.constant(3.0), {"a": tf.constant(1), "b": ()}, ()], ids=["scalar", "dict-of-scalars", "empty"])
def test_an_element_without_a_leading_dimension_is_unknowable(element):
    assert int(examples_in(element)) == -1


def test_datasets_of_user_structures_give_their_batch_size():
    features = {"user": tf.range(10), "clicks": tf.ragged.constant([[1]] * 10), "tags": tf.sparse.from_dense(tf.ones([10, 3]))}
    assert int(examples_in(batched((features, tf.zeros([10])), batch=4))) == 4


def test_a_timed_closure_counts_the_examples_of_dict_elements():
    """What instrument_coordinator records for a tutorial-style dataset of dicts."""
    dataset = tf.data.Dataset.from_tensor_slices({"features": tf.zeros([12, 3]), "label": tf.zeros([12])}).batch(4)
    weights = tf.Variable(tf.zeros([3]))

    def two_steps(iterator):
        for _ in range(2):
            batch = next(iterator)
            weights.assign_add(tf.reduce_mean(batch["features"], axis=0) + tf.reduce_mean(batch["label"]))
        return weights.read_value()

    _, stats = closure_timing.instrument(two_steps)(iter(dataset))
    by_name = dict(zip(closure_timing.STATS, stats.numpy()))
    assert (by_name["examples"], by_name["steps"]) == (8.0, 2.0)


def test_a_closure_reading_an_unknowable_element_reports_unknown():
    dataset = tf.data.Dataset.range(5)  # scalar elements: no batch dimension

    def step(iterator):
        return next(iterator)

    _, stats = closure_timing.instrument(step)(iter(dataset))
    assert dict(zip(closure_timing.STATS, stats.numpy()))["examples"] == -1.0
