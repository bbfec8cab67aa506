"""Where a run's tfdiag files live, how runs are found, and how a run's files are opened.

Everything under a logdir is untrusted: a ``*.tfdiag`` name may be a directory, a FIFO,
a device, a dangling link, a link loop or a link out of the run. ``task_files`` lists
only the names that resolve to regular files inside the run directory and gives a
reason for every other one; ``open_regular`` opens without ever blocking (``O_NONBLOCK``,
so a FIFO that slipped in between listing and opening cannot hang the reader) and
refuses anything that is not a regular file once open (``fstat``).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tfdiag.events import task_file_stem

PLUGIN_DIR = os.path.join("plugins", "tfdiag")
LOG_SUFFIX = ".tfdiag"
STACKS_SUFFIX = ".stacks"  # a task's Python stacks, written when it is stuck (src/tfdiag/collectors/stacks.py)


class NotARegularFile(OSError):
    """A path that cannot be read as a log: not a regular file, or a link out of the run."""


@dataclass(frozen=True)
class RejectedPath:
    """A ``*.tfdiag`` name that is not read, and why."""

    path: Path
    reason: str

    def sentence(self) -> str:
        return f"{self.path}: not read: {self.reason}"


def log_dir(run_dir: str | os.PathLike) -> Path:
    """The directory that holds a run's tfdiag files: ``RUN/plugins/tfdiag``."""
    return Path(run_dir) / PLUGIN_DIR


def stacks_path(run_dir: str | os.PathLike, task: str) -> Path:
    """``RUN/plugins/tfdiag/<task>.stacks``: where ``task``'s Python stacks go.

    >>> stacks_path("logs/run1", "worker:1")
    PosixPath('logs/run1/plugins/tfdiag/worker-1.stacks')
    """
    return log_dir(run_dir) / (task_file_stem(task) + STACKS_SUFFIX)


def find_runs(logdir: str | os.PathLike) -> list[Path]:
    """Every run directory under ``logdir`` (``logdir`` itself included), sorted.

    A run is a directory that contains ``plugins/tfdiag``; event files beside it are
    neither needed nor looked at. Symbolic links to directories are not followed (so a
    link cannot lead out of the logdir or round in a loop), and unreadable directories
    are passed over.

    >>> find_runs("logs")  # doctest: +SKIP
    [PosixPath('logs/run1'), PosixPath('logs/sweep/run2')]
    """
    root = Path(logdir)
    runs = []
    for dirpath, dirnames, _ in os.walk(root, followlinks=False):
        if os.path.basename(dirpath) == "tfdiag" and os.path.basename(os.path.dirname(dirpath)) == "plugins":
            runs.append(Path(dirpath).parent.parent)
            dirnames.clear()
    return sorted(runs)


def task_files(run_dir: str | os.PathLike) -> tuple[list[Path], list[RejectedPath]]:
    """The ``*.tfdiag`` files of a run that can be read, sorted, and the names that cannot.

    A name is read when it resolves (links followed) to a regular file inside
    ``run_dir``; a directory, FIFO, device, socket, dangling link, link loop or link
    leading out of the run is returned as a ``RejectedPath`` with the reason.

    Example:
        >>> readable, rejected = task_files("logs/run1")  # doctest: +SKIP
        >>> [path.name for path in readable]  # doctest: +SKIP
        ['chief-0.tfdiag', 'worker-0.tfdiag']
    """
    directory = log_dir(run_dir)
    readable, rejected = [], []
    try:
        entries = sorted((entry for entry in os.scandir(directory) if entry.name.endswith(LOG_SUFFIX)),
                         key=lambda entry: entry.name)
    except OSError as error:
        return [], [RejectedPath(directory, f"cannot list the directory ({error.strerror or error})")]
    root = Path(run_dir).resolve()
    try:
        real_directory = directory.resolve(strict=True)
    except (OSError, RuntimeError):
        real_directory = None  # each name is resolved on its own, and says why it cannot be read
    for entry in entries:
        path = directory / entry.name
        problem = (_file_problem(entry, real_directory, root) if real_directory is not None and not entry.is_symlink()
                   else _path_problem(path, run_dir))
        if problem is None:
            readable.append(path)
        else:
            rejected.append(RejectedPath(path, problem))
    return readable, rejected


def open_regular(path: str | os.PathLike, run_dir: str | os.PathLike | None = None) -> int:
    """Opens ``path`` for reading without blocking and returns the file descriptor.

    Raises ``NotARegularFile`` (an ``OSError``) if ``path`` is not a regular file or, when
    ``run_dir`` is given, resolves outside it; other ``OSError`` as ``os.open`` raises them.

    Example:
        >>> fd = open_regular("logs/run1/plugins/tfdiag/manifest.json")  # doctest: +SKIP
    """
    if run_dir is not None:
        problem = _path_problem(Path(path), run_dir)
        if problem is not None:
            raise NotARegularFile(f"{path}: {problem}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotARegularFile(f"{path}: {_kind_of(mode)}, not a regular file")
    return fd


def _path_problem(path: Path, run_dir: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a file of the run at ``run_dir``, or None."""
    try:
        resolved = path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a link loop so
        return "a symbolic link loop"
    except FileNotFoundError:
        return "a dangling symbolic link" if path.is_symlink() else "no such file"
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a symbolic link loop"
        return f"cannot resolve ({error.strerror or error})"
    root = Path(run_dir).resolve()
    if not resolved.is_relative_to(root):
        return f"a symbolic link out of the run directory (to {resolved})"
    try:
        mode = resolved.stat().st_mode
    except OSError as error:
        return f"cannot stat ({error.strerror or error})"
    if not stat.S_ISREG(mode):
        return f"{_kind_of(mode)}, not a regular file"
    return None


def _file_problem(entry: os.DirEntry, real_directory: Path, root: Path) -> str | None:
    """``_path_problem`` of a directory entry that is no symbolic link, in a directory whose
    real path is known: the entry's real path is that directory's and its name (a thousand
    task files are not each resolved component by component at every refresh)."""
    resolved = real_directory / entry.name
    if not resolved.is_relative_to(root):
        return f"a symbolic link out of the run directory (to {resolved})"
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as error:
        return f"cannot stat ({error.strerror or error})"
    if not stat.S_ISREG(mode):
        return f"{_kind_of(mode)}, not a regular file"
    return None


def _kind_of(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")
