"""The loader's per-file folds (system samples, heartbeats, probes) and the parallel fold."""

from __future__ import annotations

import json
import threading

import numpy as np
import pyarrow as pa
import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis import parallel_fold
from tfdiag.analysis.frames import conform
from tfdiag.analysis.heartbeat_fold import RECENT_BEATS, HeartbeatTail
from tfdiag.analysis.load import RunLoader
from tfdiag.analysis.links import link_table
from tfdiag.analysis.probe_fold import FASTEST_PROBES, ProbeSample, probe_histograms
from tfdiag.analysis.step_stats import PERCENTILE_RELATIVE_ERROR
from tfdiag.analysis.system_fold import JobProcessBuckets, SystemBuckets
from tfdiag.events import KINDS

SECOND = 1_000_000_000


def _batch(kind: str, **columns) -> pa.RecordBatch:
    rows = len(next(iter(columns.values())))
    schema = KINDS[kind].arrow_schema()
    arrays = [pa.array(columns[name], field.type) if name in columns else pa.nulls(rows, field.type)
              for name, field in zip(schema.names, schema)]
    return conform(pa.RecordBatch.from_arrays(arrays, schema=schema), kind)


def _samples(times: np.ndarray, pid: int = 7) -> pa.RecordBatch:
    return _batch("system", host=["h"] * len(times), task=["worker:0"] * len(times), time_ns=times,
                  cpu_pct=np.full(len(times), 50.0), mem_used_frac=np.full(len(times), 0.5),
                  net_sent_bytes=times // SECOND * 1000, pid=[pid] * len(times), wakes=[10] * len(times),
                  late_wakes=[1] * len(times), late_ms=np.full(len(times), 2.0))


def _rows(fold) -> pa.Table:
    fold.settle()  # as the loader does after each read
    return pa.Table.from_batches([batch for batch, _ in fold.batches()])


def test_system_samples_under_the_cap_are_kept_as_they_came():
    fold = SystemBuckets(cap=100)
    batch = _samples(np.arange(50) * 2 * SECOND)
    fold.add(batch, "worker:0")
    assert fold.batches() == [(batch, "worker:0")]


def test_system_buckets_keep_sums_last_counters_and_the_first_sample():
    fold = SystemBuckets(cap=100)
    times = np.arange(10_000) * 2 * SECOND
    for start in range(0, len(times), 500):
        fold.add(_samples(times[start:start + 500]), "worker:0")
    rows = _rows(fold)
    assert len(rows) <= 150
    assert rows["time_ns"][0].as_py() == 0  # the process's first sample alone
    assert sum(rows["wakes"].to_pylist()) == 10 * len(times)
    assert sum(rows["late_ms"].to_pylist()) == pytest.approx(2.0 * len(times))
    assert max(rows["time_ns"].to_pylist()) == times[-1]
    assert max(rows["net_sent_bytes"].to_pylist()) == times[-1] // SECOND * 1000
    assert set(rows["cpu_pct"].to_pylist()) == {50.0}


def test_run_queue_figures_are_summed_per_bucket_and_per_process():
    times = np.arange(10_000) * 2 * SECOND
    fold = SystemBuckets(cap=100)
    for start in range(0, len(times), 500):
        part = times[start:start + 500]
        fold.add(_batch("system", host=["h"] * len(part), task=["worker:0"] * len(part), time_ns=part, pid=[7] * len(part),
                        run_ms=np.full(len(part), 30.0), runq_wait_ms=np.full(len(part), 10.0),
                        hog_pid=[9] * len(part), hog_name=["python3"] * len(part), hog_cpu_pct=np.full(len(part), 40.0)),
                 "worker:0")
    rows = _rows(fold)
    assert len(rows) <= 150 and sum(rows["runq_wait_ms"].to_pylist()) == pytest.approx(10.0 * len(times))
    assert set(rows["hog_cpu_pct"].to_pylist()) == {40.0} and set(rows["hog_name"].to_pylist()) == {"python3"}
    others = JobProcessBuckets(cap=100)
    for start in range(0, len(times), 500):
        part = times[start:start + 500]
        others.add(_batch("job_process", host=["h"] * 2 * len(part), task=["worker:0", "ps:0"] * len(part),
                          time_ns=np.repeat(part, 2), pid=[11, 12] * len(part), run_ms=np.full(2 * len(part), 30.0),
                          runq_wait_ms=np.full(2 * len(part), 5.0)), "chief:0")
    rows = _rows(others).to_pandas()
    assert len(rows) <= 150
    assert rows.groupby("task")["runq_wait_ms"].sum().to_dict() == pytest.approx({"ps:0": 5.0 * len(times),
                                                                                   "worker:0": 5.0 * len(times)})


def test_a_restarted_process_keeps_its_first_sample():
    fold = SystemBuckets(cap=100)
    fold.add(_samples(np.arange(300) * 2 * SECOND, pid=7), "worker:0")
    fold.add(_samples(700 * SECOND + np.arange(300) * 2 * SECOND, pid=8), "worker:0")
    rows = _rows(fold).to_pandas()
    assert rows.groupby("pid")["time_ns"].min().to_dict() == {7: 0, 8: 700 * SECOND}


def _beats(times: np.ndarray, progress: np.ndarray, closed: bool = False) -> pa.RecordBatch:
    return _batch("heartbeat", task=["worker:0"] * len(times), time_ns=times, subject=["worker:0"] * len(times),
                  progress=progress, closed=[closed] * len(times))


def test_heartbeats_keep_the_recent_rows_pauses_closes_and_the_last_progress():
    fold = HeartbeatTail(cap=300)
    times = np.r_[np.arange(2000), 3000 + np.arange(2000)] * 5 * SECOND  # a pause: the process restarted
    progress = np.minimum(np.arange(4000), 3000)  # stalled from row 3000 on
    for start in range(0, 4000, 100):
        fold.add(_beats(times[start:start + 100], progress[start:start + 100]), "worker:0")
    fold.add(_beats(times[-1:] + 5 * SECOND, progress[-1:], closed=True), "worker:0")
    rows = _rows(fold).to_pandas()
    assert len(rows) < 2 * RECENT_BEATS + 20
    kept = set(rows["time_ns"])
    assert {times[0], times[1998], times[1999], times[2000], times[2001], times[3000]} <= kept
    assert rows["closed"].any()
    assert rows["time_ns"].max() == times[-1] + 5 * SECOND


def test_probes_keep_the_fastest_round_trips_and_an_even_sample():
    fold = ProbeSample(cap=500)
    send = np.arange(20_000, dtype="int64") * SECOND
    rtt = np.random.default_rng(0).integers(100_000, 1_000_000, len(send))
    for start in range(0, len(send), 1000):
        part = slice(start, start + 1000)
        fold.add(_batch("rpc", src=["chief:0"] * 1000, dst=["ps:0"] * 1000, send_ns=send[part],
                        remote_ns=send[part] + rtt[part] // 2, recv_ns=send[part] + rtt[part],
                        payload_bytes=[0] * 1000), "chief:0")
    rows = _rows(fold).to_pandas()
    assert len(rows) < 2000
    kept_rtt = np.sort((rows["recv_ns"] - rows["send_ns"]).to_numpy())
    assert (kept_rtt[:FASTEST_PROBES] == np.sort(rtt)[:FASTEST_PROBES]).all()
    assert rows["send_ns"].max() == send[-1]


def test_probe_histograms_count_every_round_trip_past_the_cap():
    send = np.arange(20_000, dtype="int64") * SECOND
    rtt = np.random.default_rng(1).gamma(4.0, 100_000, len(send)).astype("int64") + 50_000
    payload = np.where(np.arange(len(send)) % 10 == 0, 1 << 20, 0)
    rtt = rtt + payload * 8
    rows = dict(src=["chief:0"] * len(send), dst=["ps:0"] * len(send), send_ns=send, remote_ns=send + rtt // 2,
                recv_ns=send + rtt, payload_bytes=payload)
    fold = ProbeSample(cap=500)
    for start in range(0, len(send), 1000):
        fold.add(_batch("rpc", **{name: values[start:start + 1000] for name, values in rows.items()}), "chief:0")
    histograms = probe_histograms([fold])
    assert sorted(histograms["probes"]) == [2_000, 18_000]  # every probe, though a few hundred rows are kept
    exact = link_table(pa.Table.from_batches([_batch("rpc", **rows)]).to_pandas()).iloc[0]
    folded = link_table(_rows(fold).to_pandas(), histograms).iloc[0]
    assert folded["samples"] == exact["samples"] == 18_000
    assert folded["rtt_min_ns"] == exact["rtt_min_ns"]
    for name in ("rtt_p50_ns", "rtt_p95_ns", "rtt_p99_ns", "bandwidth_bps"):
        assert folded[name] == pytest.approx(exact[name], rel=PERCENTILE_RELATIVE_ERROR), name
    assert probe_histograms([ProbeSample(cap=500)]) is None  # under the cap the rows are every probe


def _run(tmp_path, workers: int = 3):
    from benchmarks import synth

    run = tmp_path / "run"
    synth.main([str(run), "--workers", str(workers), "--steps", "3000", "--step-ms", "200", "--jobs", "1",
                "--frame-rows", "512"])
    return run


@pytest.mark.parametrize("threads", [False, True], ids=["fork", "forkserver"])
def test_the_parallel_fold_reports_what_the_serial_one_does(tmp_path, monkeypatch, threads):
    run = _run(tmp_path)
    if threads:  # another thread runs (the TensorBoard tab's): children come from the forkserver
        done = threading.Event()
        threading.Thread(target=done.wait, daemon=True).start()
    monkeypatch.setattr(parallel_fold, "PARALLEL_BYTES", 0)
    caps = {"system": 64, "rpc": 64, "heartbeat": 64}
    serial = analyze(RunLoader(run, caps=caps, processes=1).refresh()).to_dict()
    parallel_run = RunLoader(run, caps=caps, processes=2)
    parallel = analyze(parallel_run.refresh()).to_dict()
    assert json.dumps(parallel, sort_keys=True, default=str) == json.dumps(serial, sort_keys=True, default=str)
    assert parallel_run.refresh() is parallel_run.refresh()  # the incremental refresh still works
    if threads:
        done.set()


def _analyze(run, tmp_path, name: str, *options: str) -> bytes:
    """``tfdiag analyze RUN --format json``'s report (the CLI, the user's fold cache unless ``--no-cache``)."""
    from tfdiag.cli import main

    output = tmp_path / f"{name}.json"
    assert main(["analyze", str(run), "--format", "json", "-q", "-o", str(output), *options]) in (0, 1)
    return output.read_bytes()


@pytest.mark.parametrize("processes", [1, 2], ids=["serial", "parallel"])
def test_a_cached_analyze_reports_what_an_uncached_one_does(tmp_path, monkeypatch, processes):
    """Cold (saving), warm (every fold adopted) and warm after the run grew (the saved folds
    and the appended bytes): the uncached report, byte for byte, folded serially or by fold
    processes; with small caps, so the folds compact during a read and after it, as a wide
    run's do."""
    from benchmarks import synth
    from tfdiag.analysis import fold_cache, load
    from tfdiag.analysis.row_fold import RowFold

    run = _run(tmp_path)
    monkeypatch.setattr(fold_cache, "MIN_FILE_BYTES", 0)  # every file saved
    monkeypatch.setattr(RowFold, "cap_for", classmethod(lambda cls, files: 64))
    monkeypatch.setattr(parallel_fold, "PARALLEL_BYTES", 0 if processes > 1 else 1 << 60)
    monkeypatch.setattr(parallel_fold, "cores", lambda: processes)
    uncached = _analyze(run, tmp_path, "uncached", "--no-cache")
    entries = list(fold_cache.FoldCache.default().directory.glob("*.fold"))
    assert entries == []  # --no-cache saves nothing
    assert _analyze(run, tmp_path, "cold") == uncached
    files = sorted((run / "plugins" / "tfdiag").glob("*.tfdiag"))
    assert len(list(fold_cache.FoldCache.default().directory.glob("*.fold"))) == len(files)
    reads = []
    real = load.read_task_file
    monkeypatch.setattr(load, "read_task_file", lambda path, offset=0: reads.append((path.name, offset)) or real(path, offset))
    assert _analyze(run, tmp_path, "warm") == uncached
    assert reads == []
    sizes = {path.name: path.stat().st_size for path in files}
    synth.main([str(run), "--steps", "40", "--append", "--jobs", "1", "--frame-rows", "512"])
    assert _analyze(run, tmp_path, "grown-uncached", "--no-cache") != uncached
    reads.clear()
    assert _analyze(run, tmp_path, "grown") == (tmp_path / "grown-uncached.json").read_bytes()
    grown = [(path.name, sizes[path.name]) for path in files if path.stat().st_size > sizes[path.name]]
    assert grown and sorted(reads) == grown  # the warm analyze read only what was appended
