"""How long each TF1 ``session.run`` waited for its input, for ``DiagnosticsHook``.

A TF1 step gets its batch one of two ways, and neither is visible to a hook that only
reads the clock around ``session.run``:

- **In-graph ``tf.data``** (a one-shot or initializable iterator whose ``get_next()``
  feeds the model): the iterator's ``IteratorGetNext`` op runs *inside* the step, so the
  wait for the element is part of the step's time. At ``begin()`` (the graph is not
  final yet) :class:`InputTimer` brackets every such op with two ``tf.timestamp()`` ops
  placed with it: one with no inputs, which runs as soon as that task starts the step,
  and one with a control dependency on the ``GetNext``, which runs once the element
  exists. Fetched with the step (two float64 scalars), their difference is the step's
  wait for its element: ``max(ready) - min(start)`` over the iterators the step uses.
  Only iterators the step's own fetches depend on are bracketed in that step: fetching
  the timestamps of another iterator would make the step consume an element it would not
  have taken.
- **Fed batches** (``feed_dict``, numpy made in Python): the batch is prepared between
  two ``session.run`` calls, so a step that feeds data waited for it from the end of
  the previous run to its own start. :meth:`InputTimer.feed_wait_ns` gives that gap for
  runs that feed; runs without a feed count none (the gap is then the caller's own work).

Example:
    >>> timer = InputTimer(tf.compat.v1.get_default_graph())  # doctest: +SKIP
    >>> fetches = timer.fetches(run_context.original_args)  # in before_run  # doctest: +SKIP
    >>> timer.graph_wait_ns(run_values.results)  # in after_run  # doctest: +SKIP
    18432000
"""

from __future__ import annotations

# The ops that hand a tf.data element to the graph (TF 2.21, graph mode).
GET_NEXT_TYPES = frozenset({"IteratorGetNext", "IteratorGetNextSync", "MultiDeviceIteratorGetNextFromShard"})
# Distinct fetch structures remembered with the iterators they depend on (a job runs a few).
MAX_CACHED_FETCHES = 64


class InputTimer:
    """Times the input wait of each step of one TF1 graph (see the module docstring).

    Args:
        graph: the graph the session will run; it must not be finalized yet.
    """

    def __init__(self, graph):
        import tensorflow as tf

        self._graph = graph
        self._brackets: dict[str, tuple] = {}  # GetNext op name -> (start, ready) timestamp tensors
        for op in graph.get_operations():
            if op.type not in GET_NEXT_TYPES:
                continue
            with graph.as_default(), graph.colocate_with(op), tf.name_scope("tfdiag_input"):
                start = tf.timestamp(name="start")
                with tf.control_dependencies([op]):
                    ready = tf.timestamp(name="ready")
            self._brackets[op.name] = (start, ready)
        self._used: dict[tuple, dict] = {}  # fetch names -> the brackets those fetches depend on

    @property
    def iterators(self) -> int:
        """How many ``GetNext`` ops the graph has (0: no in-graph input to time)."""
        return len(self._brackets)

    def fetches(self, run_args) -> dict | None:
        """The timestamp tensors to fetch with a step of ``run_args`` (``SessionRunArgs``), or None."""
        if not self._brackets:
            return None
        ops = _fetched_ops(self._graph, run_args.fetches)
        key = tuple(sorted(op.name for op in ops))
        used = self._used.get(key)
        if used is None:
            upstream = _upstream_names(ops)
            used = {name: pair for name, pair in self._brackets.items() if name in upstream}
            if len(self._used) < MAX_CACHED_FETCHES:
                self._used[key] = used
        return used or None

    @staticmethod
    def graph_wait_ns(results) -> int:
        """The step's wait for its elements from the fetched timestamps (0 without any)."""
        if not results:
            return 0
        starts = [float(start) for start, _ in results.values()]
        readies = [float(ready) for _, ready in results.values()]
        return max(int((max(readies) - min(starts)) * 1e9), 0)

    @staticmethod
    def feed_wait_ns(run_args, previous_end_ns: int | None, begin_ns: int) -> int:
        """The time since the previous run ended, when this run feeds data (else 0)."""
        if previous_end_ns is None or not run_args.feed_dict:
            return 0
        return max(begin_ns - previous_end_ns, 0)


def _fetched_ops(graph, fetches) -> list:
    """The operations named by a (nested) ``session.run`` fetch structure."""
    import tensorflow as tf

    ops = []
    for fetch in tf.nest.flatten(fetches):
        if fetch is None:
            continue
        try:
            element = graph.as_graph_element(fetch) if isinstance(fetch, str) else fetch
        except (KeyError, ValueError, TypeError):  # not of this graph: session.run will say so
            continue
        op = getattr(element, "op", element)
        if isinstance(op, tf.Operation):
            ops.append(op)
    return ops


def _upstream_names(ops) -> set[str]:
    """Names of every op the given ops depend on (data and control inputs), themselves included."""
    seen: set[str] = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
    return seen
