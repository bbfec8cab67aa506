"""TaskWriter: background flushing, kill-safety and never raising into training."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from tfdiag.store import TaskWriter, read_task_file


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


def test_a_killed_task_loses_at_most_the_last_second(tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        from tfdiag.store import TaskWriter
        writer = TaskWriter({str(tmp_path)!r}, "worker:0")
        step = 0
        start = time.monotonic()
        while True:
            writer.append("step", task="worker:0", step=step, begin_ns=time.time_ns(), end_ns=time.time_ns(),
                          input_wait_ns=0, examples=1, clock_task="worker:0")
            step += 1
            if step % 100 == 0:
                print(step, flush=True)
            time.sleep(0.001)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        last_printed = int(process.stdout.read().split()[-1])
    finally:
        process.kill()
    written = _rows(tmp_path / "plugins" / "tfdiag" / "worker-0.tfdiag")
    # At about 1 ms per step (sleep plus append), one second is at most ~1000 steps.
    assert written > 0
    assert last_printed - written <= 1000


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
