"""Every figure of tfdiag.report.figures on a run with all signals, and on an empty one.

Runs are written through the real store writer (``RunBuilder`` of the analysis tests),
analysed once per module, and each figure is checked for its traces, units and labels.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import plotly.io
import pytest

from tfdiag.analysis import analyze
from tfdiag.report import figures, render_html
from tfdiag.report.charts import MAX_POINTS_PER_FIGURE
from tfdiag.report.figures import FIGURES

from tests.report.live import add_live_findings
from tests.runs import RunBuilder

HOSTILE = "w<b>x</b>"  # plotly renders names as HTML-ish text; this must show literally


def add_system(run: RunBuilder, task: str, count: int = 30, rate_bytes_s: float = 2e6) -> RunBuilder:
    """One sampler's records: 10 samples a second, network counters growing at ``rate_bytes_s``."""
    return run.system(f"host-{task}", task, cpu_pct=50.0, count=count, net_bytes_per_s=rate_bytes_s)


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    """A ps run with a straggler, probes, GPU and host samples, shards, placement and faults."""
    run = RunBuilder(tmp_path_factory.mktemp("full") / "run")
    run.steps("worker:0", step_ms=20, input_ms=2).steps("worker:1", step_ms=60, input_ms=2)
    run.rpc("worker:0", "ps:0", 0.3).rpc("worker:0", "ps:1", 0.4).rpc("worker:1", "ps:0", 0.3).rpc("worker:1", "ps:1", 2.0)
    run.rpc("chief:0", "worker:0", 0.2).rpc("chief:0", "worker:1", 0.2)
    run.gpu("host-a", 0, 35.0).gpu("host-a", 1, 80.0)
    run.shard("worker:0", 3200).shard("worker:1", 1600)
    run.placement("dense/kernel", "ps:0", 8 << 20).placement("dense/bias", "ps:0", 4 << 10)
    run.placement(HOSTILE, "ps:1", 1 << 20)
    run.fault("worker:1", "failure", 500).fault("worker:1", "restart", 1500).fault("worker:0", "retry", 800, message="<i>retry</i>")
    add_system(run, "worker:0")
    add_system(run, "worker:1")
    add_live_findings(run)
    path = run.write()
    return analyze(path)


@pytest.fixture(scope="module")
def empty_report(tmp_path_factory):
    """A run whose chief wrote its manifest and nothing else."""
    return analyze(RunBuilder(tmp_path_factory.mktemp("empty") / "run").write())


def decode(value):
    """Plotly's JSON with its base64 typed arrays (``{"dtype", "bdata"}``) as plain lists."""
    if isinstance(value, dict):
        if "bdata" in value and "dtype" in value:
            array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
            if "shape" in value:
                array = array.reshape([int(n) for n in str(value["shape"]).split(",")])
            return [None if isinstance(v, float) and np.isnan(v) else v for v in array.tolist()]
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def as_json(figure) -> dict:
    """The figure as the tab receives it (``plotly.io.to_json``), typed arrays decoded."""
    return decode(json.loads(plotly.io.to_json(figure, validate=False)))


def test_registry_names_and_order():
    assert list(FIGURES) == [
        "step_breakdown", "step_time", "findings_during_run", "rpc_latency_heatmap", "rpc_latency_over_time", "gpu_utilization",
        "host_utilization", "shard_balance", "ps_load", "fault_timeline",
    ]
    assert FIGURES["step_time"] is figures.step_time_over_run


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_has_data_on_a_full_run(full_report, name):
    figure = FIGURES[name](full_report)
    assert not figures.is_empty(figure)
    data = as_json(figure)
    assert data["data"], name
    assert data["layout"]["title"]["text"]


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_of_an_empty_run_explains_itself(empty_report, name):
    figure = FIGURES[name](empty_report)
    assert figures.is_empty(figure)
    data = as_json(figure)
    assert data["data"] == []
    (annotation,) = data["layout"]["annotations"]
    assert annotation["text"].startswith("no ")
    assert data["layout"]["meta"]["message"] == annotation["text"]


def test_step_breakdown_stacks_components_per_worker(full_report):
    data = as_json(figures.step_breakdown(full_report))
    assert data["layout"]["barmode"] == "stack"
    assert [trace["name"] for trace in data["data"]] == ["input wait", "compute", "communication", "synchronisation wait", "idle"]
    by_name = {trace["name"]: trace for trace in data["data"]}
    assert by_name["compute"]["x"] == ["worker:0", "worker:1"]
    # worker:1 computes ~3x longer; the stack adds up to the mean step plus idle time.
    compute = by_name["compute"]["y"]
    assert compute[1] > 2.5 * compute[0]
    assert by_name["input wait"]["y"] == pytest.approx([2.0, 2.0], abs=0.01)
    assert "(ms)" in data["layout"]["yaxis"]["title"]["text"]


def test_step_time_over_run_is_svg_when_short(full_report):
    data = as_json(figures.step_time_over_run(full_report))
    assert sorted(trace["name"] for trace in data["data"]) == ["worker:0", "worker:1"]
    assert {trace["type"] for trace in data["data"]} == {"scatter"}
    assert data["layout"]["yaxis"]["title"]["text"] == "step time (ms)"
    slow = next(trace for trace in data["data"] if trace["name"] == "worker:1")
    assert np.median(slow["y"]) == pytest.approx(60.0)


def test_rpc_heatmap_shows_p50_and_p99_per_link(full_report):
    data = as_json(figures.rpc_latency_heatmap(full_report))
    p50, p99 = data["data"]
    assert p50["type"] == p99["type"] == "heatmap"
    assert p50["x"] == ["ps:0", "ps:1", "worker:0", "worker:1"]
    assert p50["y"] == ["chief:0", "worker:0", "worker:1"]
    slow = p50["z"][2][1]  # worker:1 -> ps:1
    assert slow == pytest.approx(2.2, rel=0.1)
    assert p99["z"][2][1] >= slow
    assert p50["z"][0][0] is None  # chief:0 never probed ps:0
    assert data["layout"]["coloraxis"]["colorbar"]["title"]["text"] == "ms"


def test_rpc_latency_over_time_per_link(full_report):
    data = as_json(figures.rpc_latency_over_time(full_report))
    names = [trace["name"] for trace in data["data"]]
    assert "worker:1 → ps:1" in names and len(names) == 6
    assert "(ms)" in data["layout"]["yaxis"]["title"]["text"]


def test_rpc_latency_over_time_groups_many_links_by_destination(tmp_path):
    run = RunBuilder(tmp_path / "run", workers=20)
    for index in range(20):
        run.rpc(f"worker:{index}", "ps:0", 0.3, count=5).rpc(f"worker:{index}", "ps:1", 0.3, count=5)
    data = as_json(figures.rpc_latency_over_time(analyze(run.write())))
    assert [trace["name"] for trace in data["data"]] == ["all → ps:0", "all → ps:1"]
    assert len(data["data"][0]["x"]) == 100


def test_gpu_utilization(full_report):
    data = as_json(figures.gpu_utilization(full_report))
    assert len(data["data"]) == 4  # 2 GPUs x (utilisation, memory)
    util = [trace for trace in data["data"] if trace["yaxis"] == "y"]
    assert [trace["name"] for trace in util] == ["host-a GPU 0", "host-a GPU 1"]
    assert util[1]["y"][0] == 80.0
    memory = [trace for trace in data["data"] if trace["yaxis"] == "y2"]
    assert memory[0]["y"][0] == pytest.approx((4 << 30) / 1e9)
    assert data["layout"]["yaxis"]["title"]["text"] == "utilisation (%)"
    assert data["layout"]["yaxis2"]["title"]["text"] == "memory used (GB)"


def test_host_utilization_rates_from_cumulative_counters(full_report):
    data = as_json(figures.host_utilization(full_report))
    assert len(data["data"]) == 6  # 2 samplers x (CPU, memory, network)
    network = [trace for trace in data["data"] if trace["yaxis"] == "y3"]
    assert network[0]["name"] == "worker:0 (host-worker:0)"
    rates = [value for value in network[0]["y"] if value is not None]
    assert rates == pytest.approx([4.0] * 29)  # 2 MB/s sent + 2 MB/s received
    assert data["layout"]["yaxis3"]["title"]["text"] == "network (MB/s)"


def test_shard_balance_from_shards_then_from_steps(full_report, tmp_path):
    data = as_json(figures.shard_balance(full_report))
    (bars,) = data["data"]
    assert bars["x"] == ["worker:0", "worker:1"] and bars["y"] == [3200, 1600]
    assert "shard counters" in data["layout"]["title"]["text"]
    steps_only = analyze(RunBuilder(tmp_path / "run").steps("worker:0", count=10).write())
    data = as_json(figures.shard_balance(steps_only))
    assert data["data"][0]["y"] == [320] and "step records" in data["layout"]["title"]["text"]


def test_ps_load_bytes_and_variables(full_report):
    data = as_json(figures.ps_load(full_report))
    size, count = data["data"]
    assert size["x"] == ["ps:0", "ps:1"]
    assert size["y"] == pytest.approx([((8 << 20) + (4 << 10)) / 1e6, (1 << 20) / 1e6])
    assert count["y"] == [2, 1]
    assert "dense/kernel" in size["text"][0]
    assert "&lt;b&gt;" in size["text"][1] and "<b>" not in size["text"][1]


def test_fault_timeline(full_report):
    data = as_json(figures.fault_timeline(full_report))
    markers = {trace["name"]: trace for trace in data["data"] if trace["mode"] == "markers"}
    assert set(markers) == {"failure", "restart", "retry"}
    assert markers["failure"]["x"] == pytest.approx([0.5])
    assert markers["failure"]["y"] == ["worker:1"]
    assert markers["retry"]["text"] == ["&lt;i&gt;retry&lt;/i&gt;"]
    recovery = [trace for trace in data["data"] if trace["mode"] == "lines"]
    assert recovery[0]["x"] == pytest.approx([0.5, 1.5])


def test_findings_during_run_draws_each_from_its_onset_to_its_clear(full_report):
    data = as_json(figures.findings_during_run(full_report))
    straggler, input_bound = data["data"]
    assert straggler["y"] == ["straggler (worker:1)"] and input_bound["y"] == ["input_bound"]
    origin = full_report.steps["begin_ns"].min()
    onset_s = (1_700_000_000_000_000_000 + 1000 * 1_000_000 - origin) / 1e9
    assert straggler["base"][0] == pytest.approx(onset_s) and straggler["x"][0] == pytest.approx(2.0)
    assert straggler["marker"]["color"] == "#d32f2f" and straggler["marker"]["pattern"]["shape"] == ""
    last_step_s = (full_report.steps["end_ns"].max() - origin) / 1e9
    assert input_bound["base"][0] + input_bound["x"][0] == pytest.approx(last_step_s)  # still on: to the last step
    assert input_bound["marker"]["pattern"]["shape"] == "/"
    assert "still on when the records end" in input_bound["hovertemplate"]
    assert "cleared at" in straggler["hovertemplate"] and "3.0x slower" in straggler["hovertemplate"]


def test_findings_during_run_escapes_names(tmp_path):
    run = add_live_findings(RunBuilder(tmp_path / "run").steps("worker:0"), tasks=HOSTILE)
    data = as_json(figures.findings_during_run(analyze(run.write())))
    assert data["data"][0]["y"] == ["straggler (w&lt;b&gt;x&lt;/b&gt;)"]
    assert "<b>" not in data["data"][0]["hovertemplate"]


def test_many_workers_are_drawn_as_their_spread_and_the_workers_findings_name(tmp_path):
    run = RunBuilder(tmp_path / "run", workers=64)
    for index in range(64):
        run.steps(f"worker:{index}", count=600, step_ms=60 if index == 17 else 20 + index % 3)
    report = analyze(run.write())
    assert report.primary.kind == "straggler" and report.primary.tasks == ("worker:17",)
    data = as_json(figures.step_time_over_run(report))
    names = [trace["name"] for trace in data["data"]]
    assert names == ["all workers: median", "all workers: p95", "all workers: slowest", "worker:17"]
    median, p95, slowest = (np.array(trace["y"]) for trace in data["data"][:3])
    together = slice(0, len(median) // 4)  # worker:17's 600 steps take 3x the others': it steps alone after them
    assert np.all((median[together] >= 20) & (median[together] <= 23)) and np.all(p95 <= slowest)
    slowest_by = np.array(data["data"][2]["customdata"])  # the slowest step of each moment, by worker
    assert (slowest >= 59).sum() > len(slowest) / 4 and set(slowest_by[slowest >= 59]) == {"worker:17"}
    assert sum(len(trace["x"]) for trace in data["data"]) <= MAX_POINTS_PER_FIGURE


def test_untrusted_names_are_escaped_in_figures(tmp_path):
    run = RunBuilder(tmp_path / "run")
    run.steps(HOSTILE, count=20).rpc(HOSTILE, "ps:0", 0.5).shard(HOSTILE, 100)
    report = analyze(run.write())
    for name, make in FIGURES.items():
        text = plotly.io.to_json(make(report), validate=False)
        assert "<b>" not in text, name


def test_html_report_uses_the_registry_and_skips_empty_figures(full_report, empty_report):
    page = render_html(full_report, include_plotlyjs=False)
    assert page.count('class="plotly-graph-div"') == len(FIGURES)
    empty_page = render_html(empty_report, include_plotlyjs=False)
    assert 'class="plotly-graph-div"' not in empty_page
    assert "No figures" in empty_page
