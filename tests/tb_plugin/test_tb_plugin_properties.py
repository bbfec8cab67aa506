"""Property test of the tab's routes: any run content gets a well-formed answer, never a 500.

Each example writes a real run (``tests/runs.py``, the real store writer) into a directory
whose name is arbitrary bytes, with arbitrary task and strategy names (any Unicode,
control characters, markup), step records whose numbers include int64 extremes and host
samples with NaN and infinite readings, then
asks every JSON route about it over TensorBoard's WSGI router. Every answer must be 200
with strict JSON (no NaN), ASCII only (names arrive as ``\\u`` escapes), and the run must
be found again under the name ``/runs`` gives it. Fixed, derandomised budget.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.runs import RunBuilder
from tests.tb_plugin.test_tb_plugin_routes import PREFIX, client_for, make_plugin

EXAMPLES = 12
INT64 = np.iinfo(np.int64)
HOSTILE = ["<script>alert(1)</script>", "\x1b[31mred\x1b[0m", "\r\rover", "\u202eevil", "a\x00b", "&amp;<b>", ".."]

# Arrow strings are UTF-8: anything but a lone surrogate.
names = st.one_of(st.sampled_from(HOSTILE), st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=10))
# A directory name: any bytes but "/" and NUL (and not "." or "..").
directory_names = st.binary(min_size=1, max_size=10).map(lambda raw: raw.replace(b"/", b"_").replace(b"\0", b"_")).filter(
    lambda raw: raw not in (b".", b"..")
)
int64s = st.one_of(st.integers(int(INT64.min), int(INT64.max)), st.sampled_from([0, -1, int(INT64.max), int(INT64.min)]))
steps = st.lists(st.tuples(names, int64s, int64s, int64s, int64s), min_size=1, max_size=4)
floats = st.one_of(st.floats(), st.sampled_from([float("nan"), float("inf"), -float("inf")]))
samples = st.lists(st.tuples(names, int64s, floats, floats, int64s), min_size=0, max_size=3)


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def write_run(run_dir: Path, strategy: str, records, system) -> None:
    run = RunBuilder(run_dir, strategy=strategy, workers=1, ps=0, chief=False)
    for number, (task, begin_ns, end_ns, wait_ns, examples) in enumerate(records):
        run.record("step", task=task, step=number, begin_ns=begin_ns, end_ns=end_ns, input_wait_ns=wait_ns,
                   examples=examples, clock_task=task)
    for host, time_ns, cpu_pct, mem_used_frac, sent in system:
        run.record("system", host=host, task="worker:0", time_ns=time_ns, cpu_pct=cpu_pct, mem_used_frac=mem_used_frac,
                   net_sent_bytes=sent, net_recv_bytes=0, disk_read_bytes=0, disk_write_bytes=0)
    run.write()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(directory=directory_names, strategy=names, records=steps, system=samples)
def test_every_route_answers_any_run_with_strict_json(directory, strategy, records, system):
    with tempfile.TemporaryDirectory() as logdir:
        write_run(Path(os.fsdecode(os.path.join(os.fsencode(logdir), directory))), strategy, records, system)
        client = client_for(make_plugin(logdir))
        response = client.get(PREFIX + "/runs")
        (name,) = strict_json(response.get_data(as_text=True))
        urls = [("/report", {"run": name}), ("/compare", {"base": name, "new": name})]
        urls += [("/figure", {"run": name, "name": figure}) for figure in ("step_breakdown", "step_time", "host_utilization")]
        for route, query in urls:
            response = client.get(PREFIX + route, query_string=query)
            body = response.get_data(as_text=True)
            assert response.status_code == 200, (route, query, body[:500])
            assert response.mimetype == "application/json"
            assert body.isascii()
            data = strict_json(body)
            if route == "/report":
                assert data["run"]["path"] == name
                assert logdir not in body
