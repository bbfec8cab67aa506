"""Task files folded in parallel: one process per core, each folding whole files.

A run's task files are independent until they are merged. ``RunLoader.fold_file`` folds
one file as the loader itself would (its step records into a ``StepAccumulator`` of its
own, its system samples into buckets, every other record kept), and ``refresh`` adopts
the folds in file order, so the run is the one a serial read gives, byte for byte. A
fold process saves the fold it made in the loader's fold cache as the serial read saves
its own (``RunLoader._save``, ``fold_cache``). The same map (a task file to its ``FileFold``) and merge (adopted in file order) would run
on a distributed engine (docs/architecture.md, "Scale").

A child process costs about 0.3 s to start, paid back only by a large read: under
``PARALLEL_BYTES`` of new bytes, with one core, or when a file is read from where a
previous refresh stopped, the loader reads in its own process. Children are forked from
the loader's process when it runs no other Python thread (the CLI, a script: nothing to
import again, and a script without a ``__main__`` guard is not run again); otherwise (the
TensorBoard tab's threads) from a server that imported the loader once (``forkserver``),
since a thread holding a lock at the fork would leave the child waiting on it forever.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from tfdiag.analysis.load import FileFold, RunLoader

# New bytes to read before the files are folded in parallel (about 1.2 M step records).
PARALLEL_BYTES = 128 << 20


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parallel_folds(loader: RunLoader, unread: list[tuple[Path, tuple[int, int], int]],
                   total: int) -> Iterator[FileFold] | None:
    """``RunLoader.fold_file`` of each new file of ``unread`` (path, identity, size), in
    order, folded by ``loader.processes`` processes (None: one per core); None when a
    serial read is cheaper (``PARALLEL_BYTES``, one core, a single file)."""
    processes = min(loader.processes or cores(), len(unread))
    if processes < 2 or total < PARALLEL_BYTES:
        return None
    return _folds(loader.fresh(), unread, processes)


def _folds(template: RunLoader, unread: list[tuple[Path, tuple[int, int], int]],
           processes: int) -> Iterator[FileFold]:
    if threading.active_count() == 1:
        context = multiprocessing.get_context("fork")
    else:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["tfdiag.analysis.load"])
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [pool.submit(template.fold_file, path, identity) for path, identity, _ in unread]
        for future in futures:
            yield future.result()
