"""Property-based tests of the reader and the loader (hypothesis).

Run by ``test_reader_properties.py`` in a child pytest, so a crash in Arrow on some
generated input fails that test instead of killing the test session.
"""

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.store.frames import step_frames
from tfdiag.analysis import load_run
from tfdiag.store import log_dir, read_task_file

FRAMES = step_frames(6, rows=3)
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _read(data: bytes):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "worker-0.tfdiag"
        path.write_bytes(data)
        return read_task_file(path), len(data)


def _steps(result) -> list[int]:
    return [batch.column("step")[0].as_py() // 3 for batch in result.batches["step"]]


@SETTINGS
@given(st.binary(max_size=4096))
def test_any_bytes_are_read_without_an_exception(data):
    result, size = _read(data)
    assert 0 <= result.end_offset <= size
    assert all(0 <= item.offset < size for item in result.skipped)


@SETTINGS
@given(st.lists(st.one_of(st.integers(0, len(FRAMES) - 1), st.binary(min_size=1, max_size=200)), max_size=12))
def test_every_good_frame_between_garbage_is_read_in_order(parts):
    data = b"".join(FRAMES[part] if isinstance(part, int) else part for part in parts)
    result, _ = _read(data)
    assert _steps(result) == [part for part in parts if isinstance(part, int)]


@SETTINGS
@given(st.data())
def test_a_cut_keeps_every_frame_before_it(data):
    whole = b"".join(FRAMES)
    cut = data.draw(st.integers(0, len(whole)))
    result, _ = _read(whole[:cut])
    complete, position = 0, 0
    while complete < len(FRAMES) and position + len(FRAMES[complete]) <= cut:
        position += len(FRAMES[complete])
        complete += 1
    assert _steps(result) == list(range(complete))
    assert (result.truncated_tail is not None) == (position < cut)
    assert result.end_offset == position


@SETTINGS
@given(st.lists(st.lists(st.integers(0, len(FRAMES) - 1), max_size=6), min_size=1, max_size=3))
def test_the_loader_counts_each_distinct_frame_once(files):
    with tempfile.TemporaryDirectory() as directory:
        log_dir(directory).mkdir(parents=True)
        for index, frames in enumerate(files):
            (log_dir(directory) / f"worker-{index}.tfdiag").write_bytes(b"".join(FRAMES[i] for i in frames))
        run = load_run(directory)
    distinct = {i for frames in files for i in frames}
    assert len(run.frame("step")) == 3 * len(distinct)
    assert run.skipped_records == 3 * (sum(len(frames) for frames in files) - len(distinct))
