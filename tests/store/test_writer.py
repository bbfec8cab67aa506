"""TaskWriter: background flushing, kill-safety, faults of the log folder, never raising into training."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tfdiag.events import KINDS
from tfdiag.store import TaskWriter, read_task_file
from tfdiag.store import writer as writer_module
from tfdiag.store.framing import encode_frame
from tfdiag.store.writer import DEFAULT_FLUSH_INTERVAL_S

# What a killed writer may lose beyond its flush interval: the last flush's write, on a busy host.
FLUSH_WRITE_SLACK_S = 1.0


def _rows(path, kind="step"):
    return sum(batch.num_rows for batch in read_task_file(path).batches[kind])


def test_records_round_trip_with_their_values(tmp_path):
    writer = TaskWriter(tmp_path, "worker:1")
    for step in range(5):
        writer.append("step", task="worker:1", step=step, begin_ns=step * 10, end_ns=step * 10 + 7,
                      input_wait_ns=2, examples=32, clock_task="worker:1")
    writer.append("fault", task="worker:1", time_ns=99, kind="failure", message="boom")
    writer.close()

    assert writer.path == tmp_path / "plugins" / "tfdiag" / "worker-1.tfdiag"
    batches = read_task_file(writer.path).batches
    steps = batches["step"][0].to_pydict()
    assert steps["step"] == [0, 1, 2, 3, 4]
    assert steps["end_ns"] == [7, 17, 27, 37, 47]
    assert batches["fault"][0].to_pydict()["message"] == ["boom"]


def test_background_thread_flushes_without_close(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0", flush_interval_s=0.05)
    writer.append("note", task="worker:0", time_ns=1, level="info", message="hello")
    deadline = time.monotonic() + 5
    while not writer.path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _rows(writer.path, "note") == 1
    writer.close()


@pytest.mark.alone
def test_a_killed_task_loses_only_what_came_since_its_last_flush(tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        from tfdiag.store import TaskWriter
        writer = TaskWriter({str(tmp_path)!r}, "worker:0")
        step = 0
        while True:
            writer.append("step", task="worker:0", step=step, begin_ns=time.time_ns(), end_ns=time.time_ns(),
                          input_wait_ns=0, examples=1, clock_task="worker:0")
            step += 1
            if step == 100:
                print(step, flush=True)
            time.sleep(0.001)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        process.stdout.readline()  # writing: timed from here, not from a start a loaded host may delay
        time.sleep(2.5)
        killed_ns = time.time_ns()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        process.kill()
    batches = read_task_file(tmp_path / "plugins" / "tfdiag" / "worker-0.tfdiag").batches["step"]
    assert batches
    newest_ns = max(pc.max(batch.column("begin_ns")).as_py() for batch in batches)
    # What came in since the last flush began is lost, and that flush's own write: a flush
    # interval plus the write and the thread's wait for a core (1.1-1.4 s of steps once
    # in a full make test on 2 cores, when this check counted steps at an assumed 1 ms each).
    assert (killed_ns - newest_ns) / 1e9 <= DEFAULT_FLUSH_INTERVAL_S + FLUSH_WRITE_SLACK_S


def test_unwritable_logdir_drops_records_without_raising(tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the run directory should be")
    writer = TaskWriter(blocker, "worker:0")
    for step in range(3):
        writer.append("step", task="worker:0", step=step, begin_ns=0, end_ns=1, input_wait_ns=0,
                      examples=1, clock_task="worker:0")
    writer.close()
    writer.append("step", task="worker:0", step=4, begin_ns=0, end_ns=1, input_wait_ns=0, examples=1,
                  clock_task="worker:0")
    assert writer.dropped_records == 4
    assert "cannot write" in caplog.text
    assert not os.path.isdir(blocker)


def _step(writer, step, size=0):
    """Appends one step record (``size`` extra bytes in ``clock_task`` to make frames large)."""
    writer.append("step", task=writer.task, step=step, begin_ns=step, end_ns=step + 1, input_wait_ns=0,
                  examples=1, clock_task="x" * size)


def _steps_read(path):
    result = read_task_file(path)
    assert not result.skipped and result.truncated_tail is None, (result.skipped, result.truncated_tail)
    return [s for batch in result.batches["step"] for s in batch.column("step").to_pylist()], result


def _run_child(script: str, *args, prefix=()) -> tuple[dict, str]:
    """Runs ``script`` (its fault hooks, then ``WRITE_THROUGH_TROUBLE``) in a child; its JSON and stderr."""
    script = textwrap.dedent(script) + textwrap.dedent(WRITE_THROUGH_TROUBLE)
    done = subprocess.run([*prefix, sys.executable, "-c", script, *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


# Runs in a child after the fault's hooks: appends steps in rounds of 50, calls `trouble()`
# before round TROUBLE_AT and `relief()` before round 6, then closes, calls `finish()` and
# prints what it appended and dropped.
WRITE_THROUGH_TROUBLE = """
    import json, logging, sys, time
    from tfdiag.store import writer as writer_module
    writer_module.RETRY_EVERY_S = 0.2
    logging.basicConfig(level=logging.WARNING)
    writer = writer_module.TaskWriter(sys.argv[1], "worker:0", flush_interval_s=0.05)
    step = 0
    for round_ in range(10):
        if round_ == TROUBLE_AT:
            trouble()
        if round_ == 6:
            relief()
        for _ in range(50):
            writer.append("step", task="worker:0", step=step, begin_ns=step, end_ns=step + 1, input_wait_ns=0,
                          examples=1, clock_task="x" * 200)
            step += 1
        time.sleep(0.3)
    writer.close()
    finish()
    print(json.dumps({"appended": step, "dropped": writer.dropped_records}))
"""


def _check_gap(path, outcome, stderr, error_text, trouble_at=3):
    steps, result = _steps_read(path)
    before = 50 * trouble_at
    assert steps == sorted(steps) and steps[:before] == list(range(before))  # everything before the fault
    assert steps[-50:] == list(range(outcome["appended"] - 50, outcome["appended"]))  # resumed
    assert len(steps) + outcome["dropped"] == outcome["appended"]  # each record written or counted
    assert stderr.count("cannot write") == 1 and error_text in stderr  # logged once, not per record or retry
    notes = [m for batch in result.batches["note"] for m in batch.column("message").to_pylist()]
    assert len(notes) == 1 and f"{outcome['dropped']} records of worker:0 were dropped" in notes[0]


def test_file_size_limit_cuts_the_torn_frame_and_writing_resumes(tmp_path):
    # RLIMIT_FSIZE: a write past the limit fails with EFBIG (Python ignores SIGXFSZ), often
    # after part of a frame went out.
    script = """
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        TROUBLE_AT = 3
        def trouble():
            writer.flush()
            resource.setrlimit(resource.RLIMIT_FSIZE, (writer.path.stat().st_size + 3000, hard))
        def relief():
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        def finish():
            pass
    """
    outcome, stderr = _run_child(script, tmp_path)
    assert outcome["dropped"] > 0
    _check_gap(tmp_path / "plugins" / "tfdiag" / "worker-0.tfdiag", outcome, stderr, "File too large")


def _mount_namespace_available() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _mount_namespace_available(), reason="needs root and a private mount namespace")
@pytest.mark.parametrize("fault, error_text, trouble_at",
                         [("full", "No space left", 3), ("read-only", "Read-only file system", 0)])
def test_full_or_read_only_filesystem_then_recovery(tmp_path, fault, error_text, trouble_at):
    # A 256 KiB tmpfs in a private mount namespace: filled by a spare file while the
    # writer runs, then the spare removed; or read-only from the start (a file already
    # open stays writable on a read-only remount), then remounted writable.
    volume = tmp_path / "volume"
    volume.mkdir()
    script = f"""
        import os, shutil, subprocess
        volume = {str(volume)!r}
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", volume], check=True)
        TROUBLE_AT = {trouble_at}
        def trouble():
            writer.flush()
            if {fault!r} == "full":
                with open(os.path.join(volume, "spare"), "wb") as spare:
                    try:
                        spare.write(b"0" * (1 << 20))
                    except OSError:
                        pass
            else:
                subprocess.run(["mount", "--bind", volume, volume], check=True)
                subprocess.run(["mount", "-o", "remount,bind,ro", volume], check=True)
        def relief():
            if {fault!r} == "full":
                os.remove(os.path.join(volume, "spare"))
            else:
                subprocess.run(["mount", "-o", "remount,bind,rw", volume], check=True)
        def finish():
            shutil.copy(writer.path, {str(tmp_path / "copy.tfdiag")!r})
    """
    outcome, stderr = _run_child(script, volume / "run", prefix=("unshare", "-m"))
    assert outcome["dropped"] > 0
    _check_gap(tmp_path / "copy.tfdiag", outcome, stderr, error_text, trouble_at)


def test_a_deleted_log_folder_is_recreated_and_logged_once(tmp_path, caplog):
    writer = TaskWriter(tmp_path / "run", "worker:0", flush_interval_s=0.05)
    for step in range(5):
        _step(writer, step)
    writer.flush()
    shutil.rmtree(tmp_path / "run")
    for step in range(5, 8):
        _step(writer, step)
    writer.flush()
    _step(writer, 8)
    writer.close()
    steps, _ = _steps_read(writer.path)
    assert steps == [5, 6, 7, 8] and writer.dropped_records == 0
    assert caplog.text.count("was deleted") == 1


def test_a_torn_tail_is_cut_off_before_appending(tmp_path, caplog):
    first = TaskWriter(tmp_path, "worker:0")
    for step in range(3):
        _step(first, step)
    first.close()
    whole = first.path.stat().st_size
    torn = encode_frame(pa.RecordBatch.from_pylist([{"step": 99}], schema=KINDS["step"].arrow_schema("worker:0")))
    with open(first.path, "ab") as f:
        f.write(torn[: len(torn) // 2])  # what SIGKILL mid-write leaves
    assert read_task_file(first.path).truncated_tail is not None
    second = TaskWriter(tmp_path, "worker:0")  # the task restarted, same file
    _step(second, 3)
    second.close()
    steps, _ = _steps_read(first.path)
    assert steps == [0, 1, 2, 3] and first.path.stat().st_size > whole
    assert caplog.text.count("incomplete frame") == 1


def test_a_full_buffer_drops_and_counts_new_records(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "MAX_BUFFERED_RECORDS", 10)
    writer = TaskWriter(tmp_path, "worker:0", flush_interval_s=60)  # the thread does not flush
    for step in range(15):
        _step(writer, step)
    writer.close()
    steps, _ = _steps_read(writer.path)
    assert steps == list(range(10)) and writer.dropped_records == 5


def test_many_writers_at_once_then_sigkill(tmp_path):
    # Eight tasks, each in its own process, append ~2000 records a second and are killed
    # together, mid-write for some; every file stays readable up to its last whole frame,
    # and each loses at most its last second of records.
    script = textwrap.dedent(
        """
        import sys, time
        from tfdiag.store import TaskWriter
        writer = TaskWriter(sys.argv[1], sys.argv[2], flush_interval_s=0.1)
        step = 0
        while True:
            writer.append("step", task=writer.task, step=step, begin_ns=step, end_ns=step, input_wait_ns=0,
                          examples=1, clock_task="x" * 200)
            step += 1
            if step % 20 == 0:
                print(step, flush=True)
                time.sleep(0.01)
        """
    )
    folder = tmp_path / "plugins" / "tfdiag"
    processes = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), f"worker:{i}"], stdout=subprocess.PIPE,
                                  text=True) for i in range(8)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(folder.glob("*.tfdiag"))) < 8:
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        for process in processes:
            process.send_signal(signal.SIGKILL)
    for i, process in enumerate(processes):
        process.wait(timeout=10)
        appended = int(process.stdout.read().split()[-1])
        result = read_task_file(folder / f"worker-{i}.tfdiag")
        assert not result.skipped  # at most a torn last frame
        steps = [s for batch in result.batches["step"] for s in batch.column("step").to_pylist()]
        assert steps == list(range(len(steps))) and steps
        # At most 2000 records a second: the last second's at most (the documented promise).
        assert appended - len(steps) <= 2000


def test_close_does_not_wait_on_a_hung_write_beyond_its_bound(tmp_path, caplog):
    writer = TaskWriter(tmp_path, "worker:0", flush_interval_s=60)
    _step(writer, 0)
    writer._file_lock.acquire()  # what a write stuck on a hung filesystem holds
    try:
        started = time.monotonic()
        writer.close(timeout_s=0.2)
        assert time.monotonic() - started < 2
    finally:
        writer._file_lock.release()
    assert writer.dropped_records == 1 and caplog.text.count("did not finish") == 1
