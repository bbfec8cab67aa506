"""read_task_file: good frames are read, bad ones reported with file, offset and reason."""

import os
import struct

import pytest

from tests.conftest import in_child_process
from tests.store.frames import bad_offsets_payload, frame, step_batch, step_frames, stream
from tfdiag.store import TaskWriter, read_task_file, reader
from tfdiag.store.framing import HEADER, MAX_FRAME_BYTES


def _write_frames(tmp_path, frames=3, rows=10):
    writer = TaskWriter(tmp_path, "worker:0")
    for index in range(frames):
        for row in range(rows):
            writer.append("step", task="worker:0", step=index * rows + row, begin_ns=0, end_ns=1,
                          input_wait_ns=0, examples=1, clock_task="worker:0")
        writer.flush()
    writer.close()
    return writer.path


def _frame_offsets(path):
    data = path.read_bytes()
    offsets, position = [], 0
    while position < len(data):
        offsets.append(position)
        position += HEADER.size + HEADER.unpack_from(data, position)[2]
    return offsets


def test_truncated_tail_is_reported_and_the_rest_read(tmp_path):
    path = _write_frames(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-7])

    result = read_task_file(path)

    assert sum(b.num_rows for b in result.batches["step"]) == 20
    assert result.truncated_tail.records == 10
    assert result.truncated_tail.offset == _frame_offsets(path)[2]
    assert "truncated frame" in result.truncated_tail.reason
    assert result.end_offset == _frame_offsets(path)[2]


def test_corrupt_frame_in_the_middle_is_skipped_and_later_frames_read(tmp_path):
    path = _write_frames(tmp_path)
    second = _frame_offsets(path)[1]
    data = bytearray(path.read_bytes())
    data[second + HEADER.size + 20] ^= 0xFF
    path.write_bytes(bytes(data))

    result = read_task_file(path)

    assert [b.to_pydict()["step"][0] for b in result.batches["step"]] == [0, 20]
    [skipped] = result.skipped
    assert (skipped.file, skipped.offset, skipped.reason, skipped.records) == (str(path), second, "CRC mismatch", 10)


def test_garbage_between_frames_is_skipped_up_to_the_next_frame(tmp_path):
    path = _write_frames(tmp_path, frames=2)
    first_end = _frame_offsets(path)[1]
    data = path.read_bytes()
    path.write_bytes(data[:first_end] + b"\x00garbage\x00" + data[first_end:])

    result = read_task_file(path)

    assert sum(b.num_rows for b in result.batches["step"]) == 20
    assert result.skipped[0].offset == first_end
    assert "garbage" in result.skipped[0].reason


def test_incremental_read_from_end_offset_returns_only_new_frames(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    writer.append("note", task="worker:0", time_ns=1, level="info", message="first")
    writer.flush()
    first = read_task_file(writer.path)
    writer.append("note", task="worker:0", time_ns=2, level="info", message="second")
    writer.close()

    second = read_task_file(writer.path, first.end_offset)

    assert [b.to_pydict()["message"] for b in second.batches["note"]] == [["second"]]


def test_frames_of_kinds_not_asked_for_are_passed_over(tmp_path):
    writer = TaskWriter(tmp_path, "worker:0")
    writer.append("note", task="worker:0", time_ns=1, level="info", message="skipped")
    writer.flush()
    writer.append("liveness", task="worker:0", time_ns=2, target="ps:0", status="OK", duration_ns=1)
    writer.close()

    every, some = read_task_file(writer.path), read_task_file(writer.path, kinds=frozenset({"liveness"}))

    assert list(some.batches) == ["liveness"] and len(some.frames) == 1 and not some.skipped
    assert some.end_offset == every.end_offset and set(every.batches) == {"note", "liveness"}


# --- untrusted input: nothing in a task file crashes, hangs or stops the reader ---

def _read_summary(path):
    """read_task_file in a form a child process can send back."""
    result = read_task_file(path)
    return {
        "steps": sum(batch.num_rows for batch in result.batches["step"]),
        "skipped": [(item.offset, item.reason, item.records) for item in result.skipped],
        "unread": result.unread and result.unread.reason,
        "end_offset": result.end_offset,
    }


def test_damaged_arrow_offsets_behind_a_good_crc_are_skipped_not_a_crash(tmp_path):
    good = step_frames(2)
    path = tmp_path / "worker-0.tfdiag"
    path.write_bytes(good[0] + frame(bad_offsets_payload(), 10) + good[1])

    summary = in_child_process(_read_summary, path)

    assert summary["steps"] == 20
    [(offset, reason, records)] = summary["skipped"]
    assert (offset, records) == (len(good[0]), 10)
    assert "unreadable payload" in reason and "ffset" in reason


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "worker-0.tfdiag"
    os.mkfifo(fifo)

    summary = in_child_process(_read_summary, fifo, timeout_s=30)

    assert summary["steps"] == 0 and "a FIFO, not a regular file" in summary["unread"]


def test_a_link_to_dev_zero_is_refused(tmp_path):
    link = tmp_path / "worker-0.tfdiag"
    link.symlink_to("/dev/zero")

    summary = in_child_process(_read_summary, link, timeout_s=30)

    assert "a character device, not a regular file" in summary["unread"]


def test_a_file_over_the_size_bound_is_read_up_to_it(tmp_path, monkeypatch):
    frames = step_frames(3)
    path = tmp_path / "worker-0.tfdiag"
    path.write_bytes(b"".join(frames))
    monkeypatch.setattr(reader, "MAX_TASK_FILE_BYTES", len(frames[0]) + len(frames[1]) + 5)

    result = read_task_file(path)

    assert sum(batch.num_rows for batch in result.batches["step"]) == 20
    assert result.unread.offset == len(frames[0]) + len(frames[1])
    assert "larger than the" in result.unread.reason and result.truncated_tail is None


@pytest.mark.parametrize("length", [0xFFFFFFFF, MAX_FRAME_BYTES + 1, 5_000])
def test_a_huge_or_wrong_length_costs_only_its_frame(tmp_path, length):
    frames = step_frames(3)
    payload = frames[1][HEADER.size:]
    path = tmp_path / "worker-0.tfdiag"
    path.write_bytes(frames[0] + frame(payload, 10, length=length) + frames[2])

    result = read_task_file(path)

    assert [batch.column("step")[0].as_py() for batch in result.batches["step"]] == [0, 20]
    [skipped] = result.skipped
    assert skipped.offset == len(frames[0]) and str(length) in skipped.reason
    assert result.truncated_tail is None and result.end_offset == path.stat().st_size


def test_a_length_that_swallows_later_frames_costs_only_its_own(tmp_path):
    frames = step_frames(4)
    header = bytearray(frames[0][:HEADER.size])
    struct.pack_into("<I", header, 5, len(frames[0]) + len(frames[1]))  # reaches into frame 2
    path = tmp_path / "worker-0.tfdiag"
    path.write_bytes(bytes(header) + b"".join(frames)[HEADER.size:])

    result = read_task_file(path)

    assert [batch.column("step")[0].as_py() for batch in result.batches["step"]] == [10, 20, 30]
    assert [item.reason for item in result.skipped] == ["CRC mismatch"]


def test_every_batch_of_a_frame_is_read(tmp_path):
    first, second = step_batch(3), step_batch(4, first_step=3)
    path = tmp_path / "worker-0.tfdiag"
    path.write_bytes(frame(stream(first, second), 7))

    result = read_task_file(path)

    assert [batch.num_rows for batch in result.batches["step"]] == [3, 4] and not result.skipped


def test_frames_carry_their_offset_and_a_payload_digest(tmp_path):
    frames = step_frames(2)
    path = tmp_path / "worker-0.tfdiag"
    path.write_bytes(frames[0] + frames[1] + frames[0])

    result = read_task_file(path)

    assert [item.offset for item in result.frames] == [0, len(frames[0]), len(frames[0]) + len(frames[1])]
    assert result.frames[0].digest == result.frames[2].digest != result.frames[1].digest


def test_garbage_before_a_frame_being_written_leaves_its_start_for_the_next_read(tmp_path):
    frames = step_frames(2)
    path = tmp_path / "worker-0.tfdiag"
    junk = b"\x00junk" * 5
    path.write_bytes(frames[0] + junk + frames[1][:2])  # the writer has written "TF" so far

    first = read_task_file(path)
    path.write_bytes(frames[0] + junk + frames[1])
    second = read_task_file(path, first.end_offset)

    assert first.end_offset == len(frames[0]) + len(junk)
    assert [batch.column("step")[0].as_py() for batch in second.batches["step"]] == [10]


def test_a_file_of_fake_frame_headers_costs_bounded_time(tmp_path):
    count = 16_000  # each header claims a length reaching to the end of the file
    total = count * HEADER.size
    path = tmp_path / "worker-0.tfdiag"
    lengths = [max(total - (i + 1) * HEADER.size - 1, 0) for i in range(count)]
    path.write_bytes(b"".join(HEADER.pack(b"TFDG", 1, length, 0, 1) for length in lengths))

    result = in_child_process(_read_summary, path, timeout_s=60)

    assert result["steps"] == 0
    assert "too many damaged frame headers" in result["unread"]
