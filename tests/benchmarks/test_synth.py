"""The scale benchmark's synthetic runs are real runs: the reader takes every frame, and a
grown run continues each worker's steps and clock."""

from __future__ import annotations

from benchmarks import synth
from tfdiag.analysis import analyze
from tfdiag.analysis.load import RunLoader


def test_a_synthetic_run_reads_back_whole_and_grows_where_it_stopped(tmp_path):
    run = tmp_path / "run"
    synth.main([str(run), "--workers", "3", "--steps", "500", "--ps", "2", "--frame-rows", "64", "--jobs", "1"])
    loader = RunLoader(run)
    first = loader.refresh()
    assert not first.skipped and not first.warnings
    assert first.step_counters["rows"].tolist() == [500, 500, 500]
    links = {(row.src, row.dst) for row in first.frame("rpc").itertuples()}
    assert links == {(f"worker:{w}", f"ps:{p}") for w in range(3) for p in range(2)}
    synth.main([str(run), "--steps", "100", "--frame-rows", "64", "--jobs", "1", "--append"])
    grown = loader.refresh()
    counters = grown.step_counters.set_index("task")
    assert counters["rows"].tolist() == [600, 600, 600] and not grown.skipped
    steps = RunLoader(run).refresh().frame("step")
    for _, rows in steps.groupby("task", observed=True):
        assert rows["step"].tolist() == list(range(600))  # under the row cap: every row, in order
        assert (rows["begin_ns"].diff().dropna() > 0).all()
    report = analyze(grown)
    assert report.summary["steps"] == 1800 and [w["steps"] for w in report.workers] == [600, 600, 600]
