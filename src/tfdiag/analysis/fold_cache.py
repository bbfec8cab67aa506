"""Task files' folds saved between sessions, so a run read once opens fast the next time.

A ``FileFold`` (``RunLoader.fold_file``: what the loader holds of one task file) is saved
in a private user cache: ``$TFDIAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tfdiag``, else
``~/.cache/tfdiag``; one entry per task file, ``folds/<hash of its path>.fold``. The
TensorBoard tab's loaders and ``tfdiag analyze`` (``compare``, ``export-trace``; not with
``--no-cache``) share it: a later session of either adopts each file's fold instead of
reading the file again, then reads only the bytes appended since (an entry covers a
file's first ``offset`` bytes). Both read with the loader's default caps and spell a run's
path absolute, so an entry one saves is the other's. An entry is the fold as a read from
byte 0 leaves it, before ``RowFold.settle`` (``RunLoader._save``), so appended records are
folded on as a fresh read of the grown file folds them: the same report, byte for byte.

An entry is used only when everything it depends on is unchanged: the same path, the same
file (device and inode), at least ``offset`` bytes, the same size and modification time
when the size is the one saved, the same last ``TAIL_BYTES`` before ``offset``, the same
loader caps and the same code (``code_version``: the analysis and store sources, Python's
and the libraries' versions). An entry that fails these is stale and replaced by the next
save. An entry that cannot be read (a bad header or digest, a class outside ``_ALLOWED``,
a file not owned by this user or writable by others) is damaged or foreign: it is logged,
ignored and rebuilt, never trusted. Entries are pickles, read with an unpickler that
builds only the classes a fold holds, and only from files this user owns.

The cache never stops a read: a directory that cannot be made or written turns it off
(``default``: None), and an entry that cannot be read or saved is the file read instead.
A cache logs its first problem as a warning and later ones at debug level, so a damaged
or full cache says so once, not once per task file.

Bounded: after a read that saved entries, the oldest (by last use) are removed until the
cache holds at most ``TFDIAG_CACHE_MAX_MB`` (default 2,048 MB; 0 turns the cache off).
A file is saved when it holds at least ``min_file_bytes`` (smaller ones fold in less time
than an entry takes to read) and again when it has grown by a quarter since its last save.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfdiag.analysis.load import FileFold

logger = logging.getLogger(__name__)

MAX_MB = 2048  # the default cap (``TFDIAG_CACHE_MAX_MB``)
MIN_FILE_BYTES = 1 << 20  # a file smaller than this is folded faster than its entry is read
GROWTH = 1.25  # a file is saved again once it has grown by this factor since its last save
TAIL_BYTES = 4096  # the bytes before an entry's offset that must be unchanged
_MAGIC = b"tfdiag-fold 1\n"
_DIGEST = 32  # sha256

# What an entry's pickle may build: a fold's classes, and what numpy and pyarrow pickle to.
_ALLOWED = {
    "builtins": {"set", "frozenset", "bytearray", "complex", "slice"},
    "collections": {"deque", "OrderedDict", "defaultdict"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
    "numpy": {"dtype", "ndarray"},
    "numpy._core.numeric": {"_frombuffer"},
    "numpy.core.numeric": {"_frombuffer"},
    "numpy._core.multiarray": {"_reconstruct", "scalar"},
    "numpy.core.multiarray": {"_reconstruct", "scalar"},
    "pyarrow.lib": {"_reconstruct_record_batch", "_reconstruct_table", "_restore_array", "type_for_alias",
                    "chunked_array", "py_buffer", "schema", "field", "dictionary", "timestamp", "list_", "struct",
                    "large_list", "DataType", "Field", "Schema"},
    "tfdiag.analysis.load": {"FileFold", "_TaskFile", "_Kept"},
    "tfdiag.analysis.step_stats": {"StepAccumulator", "_Group"},
    "tfdiag.analysis.system_fold": {"SystemBuckets", "JobProcessBuckets"},
    "tfdiag.analysis.heartbeat_fold": {"HeartbeatTail"},
    "tfdiag.analysis.probe_fold": {"ProbeSample"},
    "tfdiag.store.reader": {"SkippedRecords"},
}


class DamagedEntry(Exception):
    """A cache entry that cannot be trusted (why, in its message)."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if name not in _ALLOWED.get(module, ()):
            raise DamagedEntry(f"it names {module}.{name}, which no fold holds")
        return super().find_class(module, name)


@functools.cache
def code_version() -> str:
    """A digest of what shapes a fold: the sources of ``tfdiag.analysis``, ``tfdiag.store``
    and ``tfdiag.events``, and the versions of Python, numpy and pyarrow."""
    import numpy
    import pyarrow

    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(f"{sys.version}|{numpy.__version__}|{pyarrow.__version__}".encode())
    for source in sorted([*package.glob("analysis/**/*.py"), *package.glob("store/*.py"), package / "events.py"]):
        digest.update(source.relative_to(package).as_posix().encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def fold_key(caps: dict[str, int], steps) -> str:
    """The loader settings a fold depends on, with the code (``code_version``)."""
    settings = [sorted(caps.items()), steps.sampled_rows, steps.recent_rows, steps.segments]
    return f"{code_version()}:{json.dumps(settings)}"


class FoldCache:
    """Saved task-file folds under ``directory`` (``folds/`` inside it), at most ``max_bytes``.

    Example:
        >>> cache = FoldCache.default()  # doctest: +SKIP
        >>> RunLoader("logs/run1", cache=cache).refresh()  # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike, max_bytes: int = MAX_MB << 20,
                 min_file_bytes: int = MIN_FILE_BYTES):
        self.directory = Path(directory) / "folds"
        self.max_bytes = max_bytes
        self.min_file_bytes = min_file_bytes
        self._warned = False  # whether a problem was logged as a warning (``_warn``)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(self.directory)
        if not stat.S_ISDIR(info.st_mode) or not _owned(info) or info.st_mode & 0o077:
            raise PermissionError(f"{self.directory} is not a directory private to this user")
        descriptor, probe = tempfile.mkstemp(dir=self.directory, suffix=".tmp")  # OSError if it cannot be written
        os.close(descriptor)
        os.unlink(probe)

    @classmethod
    def default(cls) -> FoldCache | None:
        """The user's cache (module docstring); None when it is turned off or cannot be made (logged)."""
        try:
            max_mb = int(os.environ.get("TFDIAG_CACHE_MAX_MB", MAX_MB))
        except ValueError:
            logger.warning("tfdiag: TFDIAG_CACHE_MAX_MB=%r is not a number; the fold cache is off",
                           os.environ["TFDIAG_CACHE_MAX_MB"])
            return None
        if max_mb <= 0:
            return None
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        directory = os.environ.get("TFDIAG_CACHE_DIR") or os.path.join(home, "tfdiag")
        try:
            return cls(directory, max_mb << 20, MIN_FILE_BYTES)
        except OSError as error:
            logger.warning("tfdiag: no fold cache (%s); each session reads its runs from the start", error)
            return None

    def worth(self, offset: int, cached: int) -> bool:
        """Whether a fold of a file's first ``offset`` bytes is worth saving, ``cached`` of them saved already."""
        return offset >= self.min_file_bytes and offset > cached * GROWTH

    def holds(self, path: Path, key: str) -> bool:
        """Whether the entry of ``path`` says it is still that file's fold for ``key``, by its
        header alone; an entry that cannot be told so is left to ``load`` to judge (True)."""
        try:
            with open_private(self._entry(path)) as file:
                start = file.read(len(_MAGIC) + 4)
                header = json.loads(file.read(int.from_bytes(start[len(_MAGIC):], "big")))
            return header.get("path") == str(path) and header.get("key") == key and _fits(path, header)
        except FileNotFoundError:
            return False
        except Exception:  # noqa: BLE001 - damaged or foreign: ``load`` logs it and the file is read
            return True

    def load(self, path: Path, key: str) -> FileFold | None:
        """The saved fold of ``path`` if it is still that file's (module docstring); None otherwise."""
        entry = self._entry(path)
        try:
            with open_private(entry) as file:
                header, payload = _unpack(file.read())
            if header.get("path") != str(path) or header.get("key") != key or not _fits(path, header):
                return None  # another file's, another version's, or stale: replaced by the next save
            fold = _Unpickler(io.BytesIO(payload)).load()
            if type(fold).__name__ != "FileFold" or fold.path != path or fold.state.offset != header["offset"]:
                raise DamagedEntry("it holds something else than this file's fold")
            os.utime(entry)  # last use, for ``trim``
            return fold
        except FileNotFoundError:
            return None
        except Exception as error:  # noqa: BLE001 - whatever is wrong with an entry, the file is read instead
            self._warn("tfdiag: ignored the fold cache entry %s of %s (%s: %s); the file is read instead",
                       entry, path, type(error).__name__, error)
            return None

    def save(self, fold: FileFold, key: str) -> None:
        """Saves ``fold`` (its state's ``cached`` set to its offset); a failure is logged and leaves nothing."""
        state, path = fold.state, fold.path
        previous, state.cached = state.cached, state.offset
        try:
            info = os.stat(path)
            if (info.st_dev, info.st_ino) != state.identity or info.st_size < state.offset:
                state.cached = previous
                return  # replaced or cut while it was read: the next read saves it
            header = json.dumps({"path": str(path), "key": key, "identity": list(state.identity),
                                 "offset": state.offset, "size": info.st_size, "mtime_ns": info.st_mtime_ns,
                                 "tail": _tail(path, state.offset)}).encode()
            payload = pickle.dumps(fold, protocol=5)
            descriptor, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            try:
                with os.fdopen(descriptor, "wb") as file:
                    file.write(_MAGIC + len(header).to_bytes(4, "big") + header
                               + hashlib.sha256(header + payload).digest() + payload)
                os.replace(temporary, self._entry(path))
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as error:
            state.cached = previous
            self._warn("tfdiag: cannot save the fold of %s in the cache (%s)", path, error)

    def trim(self) -> None:
        """Removes the least recently used entries (and any leftover temporary file) beyond ``max_bytes``."""
        entries = []
        try:
            with os.scandir(self.directory) as listing:
                for item in listing:
                    with contextlib.suppress(OSError):
                        info = item.stat(follow_symlinks=False)
                        if stat.S_ISREG(info.st_mode):
                            entries.append((info.st_mtime_ns, info.st_size, item.path))
        except OSError as error:
            self._warn("tfdiag: cannot list the fold cache %s (%s)", self.directory, error)
            return
        total = sum(size for _, size, _ in entries)
        for _, size, name in sorted(entries):
            if total <= self.max_bytes:
                break
            try:
                os.unlink(name)
                total -= size
            except OSError as error:
                self._warn("tfdiag: cannot remove %s from the fold cache (%s)", name, error)

    def _warn(self, message: str, *args) -> None:
        """Logs a problem: the cache's first as a warning, later ones at debug level."""
        logger.log(logging.DEBUG if self._warned else logging.WARNING, message, *args)
        self._warned = True
    def _entry(self, path: Path) -> Path:
        name = f"{os.path.realpath(path)}\0{path}"
        return self.directory / (hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:40] + ".fold")


def _owned(info: os.stat_result) -> bool:
    return info.st_uid == os.geteuid() and not info.st_mode & 0o022


def open_private(entry: Path) -> io.BufferedReader:
    """``entry`` opened for reading, if it is a regular file of this user's that no one else may write."""
    descriptor = os.open(entry, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    file = os.fdopen(descriptor, "rb")
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode) or not _owned(info):
        file.close()
        raise DamagedEntry("it is not a file of this user's that only this user may write")
    return file


def _unpack(data: bytes) -> tuple[dict, bytes]:
    """An entry's header and payload, their digest checked."""
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4 + _DIGEST:
        raise DamagedEntry("not a fold cache entry")
    start = len(_MAGIC) + 4
    length = int.from_bytes(data[len(_MAGIC):start], "big")
    header, digest, payload = data[start:start + length], data[start + length:start + length + _DIGEST], \
        data[start + length + _DIGEST:]
    if hashlib.sha256(header + payload).digest() != digest:
        raise DamagedEntry("its digest does not match its content (cut short or overwritten)")
    decoded = json.loads(header)
    if not isinstance(decoded, dict):
        raise DamagedEntry("its header is not an object")
    return decoded, payload


def _fits(path: Path, header: dict) -> bool:
    """Whether ``path`` is still the file the entry folded, grown or not (module docstring)."""
    info = os.stat(path)
    offset = header["offset"]
    if [info.st_dev, info.st_ino] != header["identity"] or info.st_size < offset:
        return False
    if info.st_size == header["size"] and info.st_mtime_ns != header["mtime_ns"]:
        return False  # rewritten in place
    return _tail(path, offset) == header["tail"]


def _tail(path: Path, offset: int) -> str:
    """A digest of the ``TAIL_BYTES`` of ``path`` before ``offset``."""
    start = max(offset - TAIL_BYTES, 0)
    with open(path, "rb") as file:
        file.seek(start)
        return hashlib.sha256(file.read(offset - start)).hexdigest()
