"""RunLoader: all task files into frames, skipped records reported, incremental refresh."""

import os
import shutil
import socket

import psutil
import pytest

from tests.conftest import in_child_process
from tests.store.frames import bad_offsets_payload, frame
from tfdiag.analysis import RunLoader, analyze, load_run
from tfdiag.analysis.processes import GONE, ended_processes
from tfdiag.errors import RunNotFoundError
from tests.runs import START_NS, RunBuilder
from tfdiag.store import log_dir
from tfdiag.store.framing import HEADER


def _task_file(run_dir):
    return log_dir(run_dir) / "worker-0.tfdiag"


def test_loads_every_task_file_with_a_source_column(tmp_path):
    run = RunBuilder(tmp_path, strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    run.steps("worker:0", count=3).steps("worker:1", count=3).write(by_task=True)

    run = load_run(tmp_path)

    steps = run.frame("step")
    assert len(steps) == 6
    assert sorted(steps["source"].unique()) == ["worker:0", "worker:1"]
    assert run.manifest["strategy"] == "MultiWorkerMirroredStrategy"
    assert run.frame("rpc").empty and "src" in run.frame("rpc").columns


def test_refresh_reads_only_appended_frames(tmp_path):
    job = RunBuilder(tmp_path).steps("worker:0", count=1)
    job.grow()
    loader = RunLoader(tmp_path)
    assert len(loader.refresh().frame("step")) == 1
    job.steps("worker:0", count=1, first_step=1).grow()
    read = []
    run = loader.refresh(progress=lambda done, total: read.append(total))
    assert len(run.frame("step")) == 2
    assert read and read[-1] < _task_file(tmp_path).stat().st_size  # only the new frame was read


def test_a_run_whose_process_ended_is_new_though_no_file_changed(tmp_path, sleeper):
    """Each refresh takes this host's process table before it reads (``processes``): a task
    killed since the last one (no file changed: nothing is left to write) reads as ended."""
    started_ns = int(psutil.Process(sleeper.pid).create_time() * 1e9)
    RunBuilder(tmp_path).steps("worker:0", count=3).record(
        "system", task="worker:0", host=socket.gethostname(), pid=sleeper.pid, pid_start_ns=started_ns,
        time_ns=START_NS).write()
    loader = RunLoader(tmp_path)
    first = loader.refresh()
    assert loader.refresh() is first  # its process runs: nothing changed
    assert ended_processes(first.frame("system"), set(), set(), first.processes) == {}
    sleeper.kill()
    sleeper.wait()
    second = loader.refresh()
    assert second is not first and second.processes.taken_ns > first.processes.taken_ns
    assert ended_processes(second.frame("system"), set(), set(), second.processes)["worker:0"].state == GONE
    assert loader.refresh() is second


def test_truncated_file_is_counted_as_skipped(tmp_path):
    RunBuilder(tmp_path).steps("worker:0", count=4).grow(frame_records=1)
    _task_file(tmp_path).write_bytes(_task_file(tmp_path).read_bytes()[:-3])

    run = load_run(tmp_path)

    assert len(run.frame("step")) == 3
    assert run.skipped_records == 1
    assert "worker-0.tfdiag" in run.warnings[0] and "truncated" in run.warnings[0]


def test_a_directory_without_tfdiag_logs_is_refused_with_its_path(tmp_path):
    with pytest.raises(RunNotFoundError, match=str(tmp_path)):
        load_run(tmp_path)


def test_a_manifest_written_later_is_picked_up(tmp_path):
    job = RunBuilder(tmp_path, strategy="ParameterServerStrategy").steps("worker:0", count=1)
    job.grow()
    loader = RunLoader(tmp_path)
    assert loader.refresh().manifest is None
    job.write()
    assert loader.refresh().manifest["strategy"] == "ParameterServerStrategy"


# --- untrusted input: refresh() never raises; duplicates, shrinking files, extremes ---

def _steps_of(run, source):
    steps = run.frame("step")
    return int((steps["source"] == source).sum())


def test_a_copied_task_file_is_counted_once_with_a_warning(synthetic_run):
    run_dir = synthetic_run(workers=2, steps=50)
    original = log_dir(run_dir) / "worker-0.tfdiag"
    shutil.copyfile(original, log_dir(run_dir) / "worker-0 (copy).tfdiag")

    run = load_run(run_dir)

    assert _steps_of(run, "worker:0") == 50 and _steps_of(run, "worker:1") == 50
    duplicates = [item for item in run.skipped if "duplicate of the frame" in item.reason]
    assert sum(item.records for item in duplicates) == 50
    copy = log_dir(run_dir) / "worker-0 (copy).tfdiag"
    # Files are read in name order: the copy's frames come first, the original's are the duplicates.
    assert all(item.file == str(original) and str(copy) in item.reason for item in duplicates)
    assert any(str(original) in warning and "duplicate" in warning for warning in run.warnings)


def test_a_restarted_task_restating_its_placement_is_not_a_warning(tmp_path):
    # A worker restarted after a failure records the same variables again: the frame is
    # byte for byte the first one. It is one fact, not damage.
    for step in (1, 2):  # the task, then the same task restarted
        task = RunBuilder(tmp_path).placement("dense/kernel:0", "ps:0", 4096)
        task.steps("worker:0", count=1, first_step=step).write(manifest=False, frame_records=1)

    run = load_run(tmp_path)

    assert len(run.frame("placement")) == 1
    assert not run.skipped and not run.warnings


def test_the_same_frame_twice_in_one_file_is_counted_once(synthetic_run):
    run_dir = synthetic_run(workers=1, steps=50)
    path = log_dir(run_dir) / "worker-0.tfdiag"
    data = path.read_bytes()
    first_frame = data[: HEADER.size + HEADER.unpack_from(data)[2]]
    path.write_bytes(data + first_frame)

    run = load_run(run_dir)

    assert _steps_of(run, "worker:0") == 50
    [duplicate] = run.skipped
    assert duplicate.offset == len(data) and duplicate.records == 25


def test_frames_of_one_task_in_two_files_are_warned_about(tmp_path):
    job = RunBuilder(tmp_path).steps("worker:0", count=1)
    job.grow()
    _task_file(tmp_path).rename(log_dir(tmp_path) / "renamed.tfdiag")
    job.steps("worker:0", count=1, first_step=1).grow()

    run = load_run(tmp_path)

    assert any("frames written by worker:0 are in 2 files" in warning for warning in run.warnings)


def test_a_file_that_shrank_is_read_again_from_the_start(tmp_path):
    job = RunBuilder(tmp_path).steps("worker:0", count=3, examples=8)
    job.grow(frame_records=1)
    loader = RunLoader(tmp_path)
    assert len(loader.refresh().frame("step")) == 3
    _task_file(tmp_path).write_bytes(b"")
    job.steps("worker:0", count=1, first_step=7, examples=8).grow()

    run = loader.refresh()

    assert run.frame("step")["step"].tolist() == [7]
    assert run.step_counters[["task", "rows", "examples"]].values.tolist() == [["worker:0", 1, 8.0]]  # folded anew
    assert any("worker-0.tfdiag: shrank or was replaced" in warning and "read again from byte 0" in warning
               for warning in run.warnings)


def test_a_replaced_file_is_read_again_from_the_start(tmp_path):
    RunBuilder(tmp_path).steps("worker:0", count=2).grow()
    loader = RunLoader(tmp_path)
    assert len(loader.refresh().frame("step")) == 2
    RunBuilder(tmp_path / "new").steps("worker:0", count=4, first_step=5).grow()
    os.replace(_task_file(tmp_path / "new"), _task_file(tmp_path))  # same name, new inode, larger than before

    run = loader.refresh()

    assert run.frame("step")["step"].tolist() == [5, 6, 7, 8]
    assert any("shrank or was replaced" in warning for warning in run.warnings)


def test_int64_extremes_are_counted_skips_and_sums_do_not_wrap(tmp_path):
    job = RunBuilder(tmp_path)
    for step, examples in enumerate([2**40, 2**40, 2**63 - 1, -(2**63)]):
        job.record("step", task="worker:0", step=step, begin_ns=step * 100, end_ns=step * 100 + 50, input_wait_ns=0,
                   examples=examples, clock_task="worker:0")
    job.grow()

    run = load_run(tmp_path)
    report = analyze(run)

    assert run.frame("step")["examples"].tolist() == [2**40, 2**40]
    assert run.skipped_records == 2 and "examples = " in run.warnings[0]
    assert report.workers[0]["examples"] == 2**41


def _refresh_everything_bad(run_dir):
    run = RunLoader(run_dir).refresh()
    return {"steps": len(run.frame("step")), "warnings": run.warnings, "manifest": run.manifest}


def test_refresh_survives_every_bad_input_class_at_once(synthetic_run, tmp_path):
    run_dir = synthetic_run(workers=2, steps=50)
    directory = log_dir(run_dir)
    (directory / "manifest.json").write_bytes(b"[" * 50_000)
    os.mkfifo(directory / "fifo.tfdiag")
    (directory / "dir.tfdiag").mkdir()
    (directory / "dangling.tfdiag").symlink_to(directory / "missing")
    (directory / "loop.tfdiag").symlink_to(directory / "loop.tfdiag")
    (directory / "zero.tfdiag").symlink_to("/dev/zero")
    (directory / "garbage.tfdiag").write_bytes(os.urandom(10_000))
    (directory / "bad-arrow.tfdiag").write_bytes(frame(bad_offsets_payload(), 10))

    result = in_child_process(_refresh_everything_bad, run_dir, timeout_s=60)

    assert result["steps"] == 100 and result["manifest"] is None
    for name in ("manifest.json", "fifo.tfdiag", "dir.tfdiag", "dangling.tfdiag", "loop.tfdiag", "zero.tfdiag",
                 "garbage.tfdiag", "bad-arrow.tfdiag"):
        assert any(name in warning for warning in result["warnings"]), name


def test_a_run_directory_that_went_away_keeps_its_records_with_a_warning(tmp_path):
    RunBuilder(tmp_path / "run").steps("worker:0", count=1).grow()
    loader = RunLoader(tmp_path / "run")
    assert len(loader.refresh().frame("step")) == 1
    shutil.rmtree(tmp_path / "run")

    run = loader.refresh()

    assert len(run.frame("step")) == 1
    assert any(str(log_dir(tmp_path / "run")) in warning and "cannot list the directory" in warning
               for warning in run.warnings)
