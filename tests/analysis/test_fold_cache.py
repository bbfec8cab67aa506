"""Task files' folds saved between sessions (src/tfdiag/analysis/fold_cache.py)."""

from __future__ import annotations

import json
import logging
import os
import pickle
from pathlib import Path

import pytest

import tfdiag.analysis.load as load
from tfdiag.analysis import analyze, parallel_fold
from tfdiag.analysis.fold_cache import FoldCache, fold_key
from tfdiag.analysis.load import RunLoader

CAPS = {"system": 64, "rpc": 64, "heartbeat": 64}  # small: the folds compact, as a long run's do


@pytest.fixture
def run(tmp_path) -> Path:
    from benchmarks import synth

    run = tmp_path / "run"
    synth.main([str(run), "--workers", "3", "--steps", "3000", "--step-ms", "200", "--jobs", "1", "--frame-rows", "512"])
    return run


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str, int]]:
    """(file name, offset) of every task file read."""
    reads = []
    real = load.read_task_file

    def counting(path, offset=0):
        reads.append((Path(path).name, offset))
        return real(path, offset)

    monkeypatch.setattr(load, "read_task_file", counting)
    return reads


def _cache(tmp_path, **options) -> FoldCache:
    return FoldCache(tmp_path / "cache", **{"min_file_bytes": 0, **options})


def _report(loader: RunLoader) -> str:
    return json.dumps(analyze(loader.refresh()).to_dict(), sort_keys=True, default=str)


def _entries(cache: FoldCache) -> list[Path]:
    return sorted(cache.directory.glob("*.fold"))


def _files(run: Path) -> list[Path]:
    return sorted((run / "plugins" / "tfdiag").glob("*.tfdiag"))


@pytest.mark.parametrize("processes", [1, 2], ids=["serial", "parallel"])
def test_a_saved_fold_gives_the_report_of_a_fresh_read(run, tmp_path, reads, monkeypatch, processes):
    monkeypatch.setattr(parallel_fold, "PARALLEL_BYTES", 0)  # two processes fold (and save) in parallel
    cache = _cache(tmp_path)
    fresh = _report(RunLoader(run, caps=CAPS, processes=1))
    assert _report(RunLoader(run, caps=CAPS, processes=processes, cache=cache)) == fresh
    assert len(_entries(cache)) == len(_files(run))
    reads.clear()
    assert _report(RunLoader(run, caps=CAPS, processes=1, cache=cache)) == fresh
    assert reads == []  # every file's fold came from the cache


def test_small_files_are_not_saved(run, tmp_path):
    cache = _cache(tmp_path, min_file_bytes=max(path.stat().st_size for path in _files(run)) + 1)
    RunLoader(run, caps=CAPS, processes=1, cache=cache).refresh()
    assert _entries(cache) == []


def test_a_grown_file_is_read_from_where_its_saved_fold_ends(run, tmp_path, reads):
    from benchmarks import synth

    cache = _cache(tmp_path)
    RunLoader(run, caps=CAPS, processes=1, cache=cache).refresh()
    sizes = {path.name: path.stat().st_size for path in _files(run)}
    synth.main([str(run), "--steps", "50", "--append", "--jobs", "1", "--frame-rows", "512"])
    reads.clear()
    grown = _report(RunLoader(run, caps=CAPS, processes=1, cache=cache))
    assert sorted(reads) == sorted((name, size) for name, size in sizes.items()
                                   if (run / "plugins" / "tfdiag" / name).stat().st_size > size)
    assert grown == _report(RunLoader(run, caps=CAPS, processes=1))  # a fresh read's, though the folds compacted


def test_a_fold_compacted_after_a_read_is_not_saved_again(run, tmp_path):
    """A live session's folds, compacted at the end of a read (past their caps), would fold
    what comes next unlike a read from byte 0: it keeps the entry its first read saved."""
    from benchmarks import synth

    cache = _cache(tmp_path)
    live = RunLoader(run, caps=CAPS, processes=1, cache=cache)
    live.refresh()
    saved = {entry: entry.stat().st_mtime_ns for entry in _entries(cache)}
    synth.main([str(run), "--steps", "3000", "--append", "--jobs", "1", "--frame-rows", "512"])
    live.refresh()  # grown by far more than a quarter
    assert {entry: entry.stat().st_mtime_ns for entry in _entries(cache)} == saved


@pytest.mark.parametrize("change", ["touched", "rewritten", "cut"])
def test_an_entry_of_a_changed_file_is_stale(run, tmp_path, reads, change):
    cache = _cache(tmp_path)
    RunLoader(run, caps=CAPS, processes=1, cache=cache).refresh()
    path = _files(run)[-1]
    data = path.read_bytes()
    if change == "touched":  # same size, another modification time: rewritten in place
        info = path.stat()
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    elif change == "rewritten":  # a new file of the same name
        path.unlink()
        path.write_bytes(data)
    else:
        path.write_bytes(data[: len(data) // 2])
    reads.clear()
    report = _report(RunLoader(run, caps=CAPS, processes=1, cache=cache))
    assert reads == [(path.name, 0)]  # read again from the start; the others from the cache
    assert report == _report(RunLoader(run, caps=CAPS, processes=1))


def test_an_entry_of_other_caps_is_not_used(run, tmp_path, reads):
    cache = _cache(tmp_path)
    RunLoader(run, caps=CAPS, processes=1, cache=cache).refresh()
    reads.clear()
    RunLoader(run, caps={**CAPS, "system": 32}, processes=1, cache=cache).refresh()
    assert sorted(reads) == [(path.name, 0) for path in _files(run)]


@pytest.mark.parametrize("damage", ["flipped", "cut", "empty", "shared"])
def test_a_damaged_entry_is_logged_ignored_and_rebuilt(run, tmp_path, reads, caplog, damage):
    cache = _cache(tmp_path)
    fresh = _report(RunLoader(run, caps=CAPS, processes=1, cache=cache))
    entry = _entries(cache)[0]
    data = bytearray(entry.read_bytes())
    if damage == "flipped":
        data[len(data) // 2] ^= 0xFF
        entry.write_bytes(data)
    elif damage == "cut":
        entry.write_bytes(data[: len(data) // 3])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:  # anyone may write it: not trusted
        entry.chmod(0o666)
    reads.clear()
    with caplog.at_level(logging.WARNING, logger="tfdiag.analysis.fold_cache"):
        assert _report(RunLoader(run, caps=CAPS, processes=1, cache=cache)) == fresh
    assert len(reads) == 1 and reads[0][1] == 0
    assert [record.getMessage() for record in caplog.records if "ignored the fold cache entry" in record.getMessage()]
    if damage == "shared":
        entry.chmod(0o600)
    reads.clear()
    assert _report(RunLoader(run, caps=CAPS, processes=1, cache=cache)) == fresh
    assert reads == []  # saved again when it was read


class _Planted:
    def __reduce__(self):
        return (os.system, ("touch planted",))


def test_an_entry_that_would_run_code_is_refused(run, tmp_path, caplog, monkeypatch):
    """A well-formed entry whose pickle calls a function no fold holds: refused before it runs."""
    monkeypatch.chdir(tmp_path)
    cache = _cache(tmp_path)
    loader = RunLoader(run, caps=CAPS, processes=1, cache=cache)
    loader.refresh()
    path = _files(run)[0]
    fold = cache.load(path, fold_key(loader._caps, loader._steps))
    original = pickle.dumps
    monkeypatch.setattr(pickle, "dumps", lambda value, protocol: original(_Planted(), protocol))
    fold.state.cached = 0
    cache.save(fold, fold_key(loader._caps, loader._steps))
    monkeypatch.setattr(pickle, "dumps", original)
    with caplog.at_level(logging.WARNING, logger="tfdiag.analysis.fold_cache"):
        assert cache.load(path, fold_key(loader._caps, loader._steps)) is None
    assert not (tmp_path / "planted").exists()
    assert "posix.system" in caplog.text or "os.system" in caplog.text


def test_the_least_recently_used_entries_go_past_the_cap(run, tmp_path):
    cache = _cache(tmp_path)
    RunLoader(run, caps=CAPS, processes=1, cache=cache).refresh()
    entries = _entries(cache)
    sizes = {entry: entry.stat().st_size for entry in entries}
    for age, entry in enumerate(entries):  # the first is the least recently used
        os.utime(entry, ns=(10**18 + age * 10**9,) * 2)
    cache.max_bytes = sum(sizes.values()) - 1
    cache.trim()
    assert _entries(cache) == entries[1:]
    cache.max_bytes = 0
    cache.trim()
    assert _entries(cache) == []


def test_the_default_cache_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDIAG_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("TFDIAG_CACHE_MAX_MB", "5")
    cache = FoldCache.default()
    assert cache.directory == tmp_path / "mine" / "folds" and cache.max_bytes == 5 << 20
    assert cache.directory.stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("TFDIAG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert FoldCache.default().directory == tmp_path / "xdg" / "tfdiag" / "folds"
    monkeypatch.setenv("TFDIAG_CACHE_MAX_MB", "0")
    assert FoldCache.default() is None


def test_a_cache_directory_others_may_write_is_not_used(tmp_path, caplog, monkeypatch):
    shared = tmp_path / "shared" / "folds"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    monkeypatch.setenv("TFDIAG_CACHE_DIR", str(tmp_path / "shared"))
    with caplog.at_level(logging.WARNING, logger="tfdiag.analysis.fold_cache"):
        assert FoldCache.default() is None
    assert "no fold cache" in caplog.text
