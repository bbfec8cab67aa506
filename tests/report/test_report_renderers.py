"""The renderers of tfdiag.report on small real runs written through the store."""

from __future__ import annotations

import json
import math
import re

import pytest

from tfdiag.analysis import Finding, Recommendation, Severity, analyze
from tfdiag.errors import InvalidOptionError
from tfdiag.report import FORMATS, render, render_html, render_json, render_markdown, render_text
from tfdiag.report import formatting as fmt
from tfdiag.report.json_format import jsonable

from tests.report.live import add_live_findings
from tests.runs import RunBuilder


@pytest.fixture
def straggler_report(synthetic_run):
    return analyze(synthetic_run("straggler", workers=3, steps=60, slow_worker=1))


@pytest.fixture
def clean_report(synthetic_run):
    return analyze(synthetic_run("clean", workers=2, steps=60))


def test_straggler_run_is_diagnosed(straggler_report):
    # The renderers are only as good as the report: make sure the fixture shows a straggler.
    assert straggler_report.summary["primary_bottleneck"] == "straggler"
    assert straggler_report.primary.tasks == ("worker:1",)


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_every_format_names_bottleneck_tasks_and_speedup(straggler_report, fmt_name):
    output = render(straggler_report, fmt_name)
    speedup = fmt.speedup(straggler_report.primary.recommendation.predicted_speedup)
    assert re.fullmatch(r"\+\d+ %", speedup)
    assert "straggler" in output
    for task in ("worker:0", "worker:1", "worker:2", "ps:0", "chief:0"):
        assert task in output
    if fmt_name == "json":
        data = json.loads(output)
        assert data["summary"]["primary_bottleneck"] == "straggler"
        assert data["findings"][0]["recommendation"]["predicted_speedup"] > 1
    else:
        assert speedup in output


def test_unknown_format_is_an_invalid_option(clean_report):
    with pytest.raises(InvalidOptionError, match="pdf"):
        render(clean_report, "pdf")


def test_text_report_layout(straggler_report):
    text = render_text(straggler_report)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "ParameterServerStrategy" in text
    assert "primary bottleneck" in text.lower()
    # Per-worker table: one row per worker with p50 step time in ms.
    row = next(line for line in text.splitlines() if line.strip().startswith("worker:1 "))
    assert "60.0" in row and "20" in row  # p50 60 ms, 20 steps... at least the p50
    assert "Bring worker:1 up to the speed" in text
    assert "change:" in text


def test_text_report_of_a_clean_run_says_so(clean_report):
    text = render_text(clean_report)
    assert "No bottleneck found" in text
    assert "none: no detector found a problem" in text


def test_text_report_lists_the_findings_announced_during_the_run(tmp_path, clean_report):
    run = add_live_findings(RunBuilder(tmp_path / "run").steps("worker:0").steps("worker:1"))
    text = render_text(analyze(run.write()))
    section = text.split("Findings during the run (2, seconds since the first step)\n", 1)[1].splitlines()
    assert section[0] == "  1.0 s to 3.0 s: [CRITICAL] straggler (worker:1)"
    assert section[1] == "    tfdiag: worker:1 straggler since step 40: worker:1 is 3.0x slower per step"
    assert section[2] == "  4.0 s to still on at the end: [WARNING] input_bound"
    assert "Findings during the run" not in render_text(clean_report)  # no live_finding records: no section


def test_text_report_keeps_width_with_long_task_names(synthetic_run):
    report = analyze(synthetic_run("long", worker_names=["worker:" + "x" * 150, "worker:1"], slow_worker=0))
    assert max(len(line) for line in render_text(report).splitlines()) <= 100


def test_json_is_strict_and_round_trips(straggler_report):
    data = json.loads(render_json(straggler_report))
    design_keys = ["schema_version", "run", "summary", "workers", "rpc", "shards", "gpus", "faults", "findings"]
    assert [key for key in data if key in design_keys] == design_keys
    assert data == json.loads(json.dumps(jsonable(straggler_report.to_dict())))


def test_json_replaces_nan_and_infinity(clean_report):
    clean_report.summary["step_time_ms"] = float("nan")
    clean_report.summary["examples_per_s"] = math.inf
    clean_report.findings.append(
        Finding(
            kind="compute_bound",
            severity=Severity.INFO,
            title="t",
            summary="s",
            tasks=(),
            evidence={"ratio": float("-inf")},
            recommendation=Recommendation("a", "c", None),
        )
    )
    text = render_json(clean_report)
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)  # the default parser would accept NaN; check the values too
    assert data["summary"]["step_time_ms"] is None
    assert data["findings"][0]["evidence"]["ratio"] is None
    assert data["findings"][0]["recommendation"]["predicted_speedup"] is None


def test_markdown_has_worker_table_and_findings(straggler_report):
    markdown = render_markdown(straggler_report)
    assert "| task | steps | p50 ms |" in markdown
    assert "### 1. worker:1 is" in markdown
    assert "(primary bottleneck)" in markdown


def test_html_is_self_contained(straggler_report):
    page = render_html(straggler_report)
    assert page.startswith("<!DOCTYPE html>")
    assert "Plotly" in page and len(page) > 1_000_000  # plotly.js is inlined
    assert not re.search(r"<script[^>]+src=", page)
    assert '<script src="http' not in page
    assert page.count('class="plotly-graph-div"') == 3
    assert "Findings and recommendations" in page


def test_html_without_plotlyjs_is_small(straggler_report):
    assert len(render_html(straggler_report, include_plotlyjs=False)) < 200_000


# Task names become file names, so no "/" here; "<script>" without a closing tag is enough.
HOSTILE = "worker:<script>alert(1)"


def test_untrusted_names_are_escaped(tmp_path, synthetic_run):
    run = synthetic_run("<script>alert(2)", worker_names=[HOSTILE, "worker:1"], slow_worker=0)
    report = analyze(run)
    assert HOSTILE in report.run["tasks"]
    page = render_html(report, include_plotlyjs=False)
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)" in page  # the task name
    assert "&lt;script&gt;alert(2)" in page  # the run path in the title
    markdown = render_markdown(report)
    # Code spans show their content literally (CommonMark), so only prose needs escaping.
    prose = re.sub(r"(`+).*?\1", "", markdown)
    assert "<script>" not in prose and "&lt;script&gt;" in prose


def test_number_formats():
    assert fmt.speedup(1.35) == "+35 %"
    assert fmt.speedup(1.043) == "+4.3 %"
    assert fmt.speedup(None) == "unknown"
    assert fmt.percent(0.4) == "40.0 %"
    assert fmt.ms(float("nan")) == "-"
    assert fmt.change(100.0, 150.0) == (1.5, 50.0)
    assert fmt.change(0, 1.0) == (None, None)


def test_secondary_sections_are_tables_when_present(clean_report):
    clean_report.rpc = [
        {"src": "worker:0", "dst": "ps:1", "samples": 40, "rtt_ms": {"p50": 0.4, "p95": 0.9, "p99": 1.5}, "clock_offset_ms": 0.02}
    ]
    clean_report.faults = [
        {"task": "worker:1", "kind": "failure", "time": 12.5, "message": "x" * 300, "recovered_after_s": None}
    ]
    text = render_text(clean_report)
    assert "RPC latency" in text and "ps:1" in text and "Faults" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "| src | dst | samples |" in render_markdown(clean_report)
    page = render_html(clean_report, include_plotlyjs=False)
    assert "<h2>RPC latency</h2>" in page and "<h2>Faults</h2>" in page
    assert "GPUs" not in text  # empty sections are left out
