"""RunLoader: all task files into frames, skipped records reported, incremental refresh."""

import pytest

from tfdiag.analysis import RunLoader, load_run
from tfdiag.errors import RunNotFoundError
from tfdiag.store import TaskWriter, write_manifest


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
