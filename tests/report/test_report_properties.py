"""Property tests of every renderer: any names, any numbers, and the output stays well formed.

Reports are generated directly (every section, steps and timelines) with names drawn from
all of Unicode, lone surrogates (the undecodable bytes of a directory name), control
characters and markup, and numbers including NaN, infinities and int64 extremes. Every
renderer must return without an exception: strict JSON (no NaN) that parses, HTML with
names escaped, text and Markdown without a raw control character, all encodable as UTF-8.

The budget is fixed and the examples derandomised, so ``make test`` spends the same few
seconds on every run.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.io
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tfdiag.analysis.detectors import FINDING_KINDS
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.result import Report
from tfdiag.report import FORMATS, render, render_chrome_trace, render_html
from tfdiag.report.compare import compare_reports, render_comparison
from tfdiag.report.figures import FIGURES
from tfdiag.report.json_format import dumps

EXAMPLES = 15
# No shrinking: a failure reports the example as generated, within the fixed budget.
PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)

MARKUP = "<script>alert(1)</script>"
HOSTILE = [MARKUP, "\x1b[31mred\x1b[0m", "\r\rover", "\udcff\udcfe", "\u202eevil", "a\x00b", "&amp;<b>", "|`*_[x](y)"]
INT64 = np.iinfo(np.int64)

# Names read from task files (Arrow strings are UTF-8): any character but a surrogate.
names = st.one_of(
    st.sampled_from([name for name in HOSTILE if "\udcff" not in name]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
)
# The run's path and the warnings that name files: a directory name is any bytes, which
# Python holds as lone surrogates where they are not UTF-8.
paths = st.one_of(st.sampled_from(HOSTILE), st.text(st.characters(exclude_categories=()), max_size=12))
numbers = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=int(INT64.min), max_value=int(INT64.max)),
    st.sampled_from([0, -1, int(INT64.max), int(INT64.min), float("nan"), float("inf"), -float("inf"), 1e308]),
)
times_ns = st.integers(min_value=int(INT64.min), max_value=int(INT64.max))


def no_raw_controls(text: str) -> bool:
    return not any(
        (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF or c == "\u202e" for c in text
    )


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


@st.composite
def findings(draw):
    return Finding(
        kind=draw(st.sampled_from(FINDING_KINDS)),
        severity=draw(st.sampled_from(list(Severity))),
        title=draw(names),
        summary=draw(names),
        tasks=tuple(draw(st.lists(names, max_size=3))),
        evidence=draw(st.dictionaries(names, st.one_of(numbers, names, st.lists(numbers, max_size=3),
                                                       st.dictionaries(names, numbers, max_size=2)), max_size=3)),
        recommendation=Recommendation(action=draw(names), change=draw(names),
                                      predicted_speedup=draw(st.one_of(st.none(), st.floats(allow_nan=True)))),
    )


@st.composite
def reports(draw) -> Report:
    tasks = draw(st.lists(names, min_size=1, max_size=3))
    task = st.sampled_from(tasks)
    steps = pd.DataFrame({
        "task": pd.Categorical(draw(st.lists(task, max_size=6))),
    })
    count = len(steps)
    for column in ("step", "begin_ns", "end_ns", "duration_ns", "input_wait_ns", "examples"):
        steps[column] = np.array(draw(st.lists(times_ns, min_size=count, max_size=count)), dtype="int64")
    timelines = {
        "rpc": pd.DataFrame({"src": [draw(task)], "dst": [draw(task)], "time_ns": [draw(times_ns)], "rtt_ns": [draw(times_ns)]}),
        "system": pd.DataFrame({
            "host": [draw(names)] * 2, "task": [draw(task)] * 2, "time_ns": [draw(times_ns), draw(times_ns)],
            "cpu_pct": [draw(st.floats()), 1.0], "mem_used_frac": [draw(st.floats()), 0.5],
            "net_sent_bytes": [draw(times_ns), draw(times_ns)], "net_recv_bytes": [0, draw(times_ns)],
        }),
        "gpu": pd.DataFrame({"host": [draw(names)], "index": [draw(st.integers(-5, 5))], "time_ns": [draw(times_ns)],
                             "util_pct": [draw(st.floats())], "mem_used_bytes": [draw(times_ns)]}),
    }
    workers = [
        {"task": draw(task), "steps": draw(numbers), "step_time_ms": {"p50": draw(numbers), "p95": draw(numbers), "mean": draw(numbers)},
         "input_wait_frac": draw(numbers), "examples": draw(numbers),
         "breakdown_ms": {"input": draw(numbers), "compute": draw(numbers), "communication": draw(numbers),
                          "sync_wait": draw(numbers), "idle": draw(numbers)}}
        for _ in range(draw(st.integers(0, 2)))
    ]
    ranked = draw(st.lists(findings(), max_size=3))
    return Report(
        run={"path": draw(paths), "strategy": draw(st.one_of(st.none(), names)), "tasks": tasks,
             "start_time_ns": draw(st.one_of(st.none(), times_ns)), "tensorflow_version": draw(names),
             "tfdiag_version": "0.1.0", "skipped_records": draw(st.integers(0, 2**40)), "warnings": draw(st.lists(paths, max_size=2))},
        summary={"primary_bottleneck": ranked[0].kind if ranked else None, "step_time_ms": draw(numbers),
                 "examples_per_s": draw(numbers), "steps": draw(numbers), "findings": len(ranked)},
        workers=workers,
        rpc=[{"src": draw(task), "dst": draw(task), "samples": draw(numbers),
              "rtt_ms": {"p50": draw(numbers), "p95": draw(numbers), "p99": draw(numbers)}, "clock_offset_ms": draw(numbers)}],
        shards=[{"task": draw(task), "examples": draw(numbers), "policy": draw(names), "source": draw(names)}],
        gpus=[{"host": draw(names), "index": draw(numbers), "util_pct": {"mean": draw(numbers), "p50": draw(numbers)},
               "mem_used_frac": draw(numbers)}],
        faults=[{"task": draw(task), "kind": draw(st.sampled_from(["failure", "retry", "restart", "recovery"]) | names),
                 "time": draw(numbers), "time_ns": draw(st.one_of(st.none(), times_ns)), "message": draw(names),
                 "recovered_after_s": draw(st.one_of(st.none(), st.floats(-1e6, 1e6)))}],
        findings=ranked,
        ps=[{"task": draw(task), "variables": draw(numbers), "bytes": draw(numbers), "bytes_share": draw(numbers),
             "largest": draw(names), "largest_bytes": draw(numbers)}],
        hosts=[{"host": draw(names), "task": draw(task), "cpu_pct": {"mean": draw(numbers), "peak": draw(numbers)},
                "mem_used_frac_peak": draw(numbers), "net_mb_s": draw(numbers), "disk_mb_s": draw(numbers)}],
        steps=steps,
        timelines=timelines,
    )


@PROPERTY_SETTINGS
@given(reports())
def test_every_renderer_writes_well_formed_output(report):
    for fmt in FORMATS:
        # The HTML page without the plotly.js bundle, which has control characters of its own.
        output = render_html(report, include_plotlyjs=False) if fmt == "html" else render(report, fmt)
        output.encode("utf-8")  # strict: no lone surrogate left
        if fmt == "json":
            strict_json(output)
            assert output.isascii()
        else:
            assert no_raw_controls(output), fmt
        if fmt == "html":
            assert MARKUP not in output
        if fmt == "markdown":  # markup shows literally: escaped, or inside a code span
            assert MARKUP not in output.replace(f"`{MARKUP}`", "")
    strict_json(dumps(render_chrome_trace(report)))


@PROPERTY_SETTINGS
@given(reports(), reports())
def test_comparisons_are_well_formed(base, new):
    comparison = compare_reports(base, new)
    strict_json(render_comparison(comparison, "json"))
    text = render_comparison(comparison, "text")
    text.encode("utf-8")
    assert no_raw_controls(text)


@settings(max_examples=8, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(reports())
def test_every_figure_is_strict_json_with_names_escaped(report):
    for name, make in FIGURES.items():
        text = plotly.io.to_json(make(report), validate=False)
        strict_json(text)
        assert MARKUP not in text, name
