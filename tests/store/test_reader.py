"""read_task_file: good frames are read, bad ones reported with file, offset and reason."""

from tfdiag.store import TaskWriter, read_task_file
from tfdiag.store.framing import HEADER


def _write_frames(tmp_path, frames=3, rows=10):
    writer = TaskWriter(tmp_path, "worker:0")
    for frame in range(frames):
        for row in range(rows):
            writer.append("step", task="worker:0", step=frame * rows + row, begin_ns=0, end_ns=1,
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
