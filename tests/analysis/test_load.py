"""RunLoader: all task files into frames, skipped records reported, incremental refresh."""

import os
import shutil

import pytest

from tests.conftest import in_child_process
from tests.store.frames import bad_offsets_payload, frame
from tfdiag.analysis import RunLoader, analyze, load_run
from tfdiag.errors import RunNotFoundError
from tfdiag.store import TaskWriter, log_dir, write_manifest
from tfdiag.store.framing import HEADER


def _step(writer, task, step):
    writer.append("step", task=task, step=step, begin_ns=step * 100, end_ns=step * 100 + 50,
                  input_wait_ns=0, examples=8, clock_task=task)


def test_loads_every_task_file_with_a_source_column(tmp_path):
    write_manifest(tmp_path, strategy="MultiWorkerMirroredStrategy", cluster={"worker": ["a", "b"]},
                   tensorflow_version="2.21.0", task="worker:0")
    for task in ("worker:0", "worker:1"):
        writer = TaskWriter(tmp_path, task)
        for step in range(3):
            _step(writer, task, step)
        writer.close()

    run = load_run(tmp_path)

    steps = run.frame("step")
    assert len(steps) == 6
    assert sorted(steps["source"].unique()) == ["worker:0", "worker:1"]
    assert run.manifest["strategy"] == "MultiWorkerMirroredStrategy"
    assert run.frame("rpc").empty and "src" in run.frame("rpc").columns


def test_refresh_reads_only_appended_frames(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    _step(writer, "worker:0", 0)
    writer.flush()
    loader = RunLoader(tmp_path)
    assert len(loader.refresh().frame("step")) == 1
    _step(writer, "worker:0", 1)
    writer.flush()
    read = []
    run = loader.refresh(progress=lambda done, total: read.append(total))
    assert len(run.frame("step")) == 2
    assert read and read[-1] < writer.path.stat().st_size  # only the new frame was read
    writer.close()


def test_truncated_file_is_counted_as_skipped(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    for step in range(4):
        _step(writer, "worker:0", step)
        writer.flush()
    writer.close()
    writer.path.write_bytes(writer.path.read_bytes()[:-3])

    run = load_run(tmp_path)

    assert len(run.frame("step")) == 3
    assert run.skipped_records == 1
    assert "worker-0.tfdiag" in run.warnings[0] and "truncated" in run.warnings[0]


def test_a_directory_without_tfdiag_logs_is_refused_with_its_path(tmp_path):
    with pytest.raises(RunNotFoundError, match=str(tmp_path)):
        load_run(tmp_path)


def test_a_manifest_written_later_is_picked_up(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    _step(writer, "worker:0", 0)
    writer.close()
    loader = RunLoader(tmp_path)
    assert loader.refresh().manifest is None
    write_manifest(tmp_path, strategy="ParameterServerStrategy", cluster={}, tensorflow_version="2.21.0")
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
        writer = TaskWriter(tmp_path, "worker:0")
        writer.append("placement", variable="dense/kernel:0", task="ps:0", bytes=4096, shape="[32,32]")
        writer.flush()
        _step(writer, "worker:0", step)
        writer.close()

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
    for name in ("worker-0.tfdiag", "renamed.tfdiag"):
        writer = TaskWriter(tmp_path, "worker:0")
        writer.path = log_dir(tmp_path) / name
        _step(writer, "worker:0", len(name))
        writer.close()

    run = load_run(tmp_path)

    assert any("frames written by worker:0 are in 2 files" in warning for warning in run.warnings)


def test_a_file_that_shrank_is_read_again_from_the_start(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    for step in range(3):
        _step(writer, "worker:0", step)
        writer.flush()
    writer.close()
    loader = RunLoader(tmp_path)
    assert len(loader.refresh().frame("step")) == 3
    rewriter = TaskWriter(tmp_path, "worker:0")
    with open(writer.path, "r+b") as f:
        f.truncate(0)
    _step(rewriter, "worker:0", 7)
    rewriter.close()

    run = loader.refresh()

    assert run.frame("step")["step"].tolist() == [7]
    assert run.step_counters[["task", "rows", "examples"]].values.tolist() == [["worker:0", 1, 8.0]]  # folded anew
    assert any("worker-0.tfdiag: shrank or was replaced" in warning and "read again from byte 0" in warning
               for warning in run.warnings)


def test_a_replaced_file_is_read_again_from_the_start(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    for step in range(2):
        _step(writer, "worker:0", step)
    writer.close()
    loader = RunLoader(tmp_path)
    assert len(loader.refresh().frame("step")) == 2
    replacement = tmp_path / "new"
    other = TaskWriter(replacement, "worker:0")
    for step in range(5, 9):
        _step(other, "worker:0", step)
    other.close()
    os.replace(other.path, writer.path)  # same name, new inode, larger than before

    run = loader.refresh()

    assert run.frame("step")["step"].tolist() == [5, 6, 7, 8]
    assert any("shrank or was replaced" in warning for warning in run.warnings)


def test_int64_extremes_are_counted_skips_and_sums_do_not_wrap(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    for step, examples in enumerate([2**40, 2**40, 2**63 - 1, -(2**63)]):
        writer.append("step", task="worker:0", step=step, begin_ns=step * 100, end_ns=step * 100 + 50,
                      input_wait_ns=0, examples=examples, clock_task="worker:0")
    writer.close()

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
    writer = TaskWriter(tmp_path / "run", "worker:0")
    _step(writer, "worker:0", 0)
    writer.close()
    loader = RunLoader(tmp_path / "run")
    assert len(loader.refresh().frame("step")) == 1
    shutil.rmtree(tmp_path / "run")

    run = loader.refresh()

    assert len(run.frame("step")) == 1
    assert any(str(log_dir(tmp_path / "run")) in warning and "cannot list the directory" in warning
               for warning in run.warnings)
