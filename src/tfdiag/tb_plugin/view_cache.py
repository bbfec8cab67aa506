"""The tab's last answers of a run, saved beside the fold cache, shown while the run is read.

A view's answers (the report's JSON, the fault timeline, the figures the tab asked for:
``RunView.built``) are saved as JSON text (``*.view``) among the fold cache's entries, with the run's fingerprint taken before the read they came from: every task
file's name, inode, size and modification time, the manifest's, the files the reader
rejects, and the code (``tfdiag.analysis.fold_cache.code_version`` and the report and
tab sources). A later session whose run has that fingerprint shows them at once
(``run_view.SavedView``) while it reads and analyses the run, then shows its own view:
the same answers, since the files and the code are the same. Entries are plain JSON,
read only from files this user owns and no one else may write; one that cannot be read
is logged and ignored. They count in the fold cache's size (``FoldCache.trim``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from tfdiag.analysis.fold_cache import FoldCache, code_version, open_private
from tfdiag.store import MANIFEST_NAME, log_dir, task_files
from tfdiag.tb_plugin.responses import JsonBody

logger = logging.getLogger(__name__)


@functools.cache
def _code() -> str:
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(code_version().encode())
    for source in sorted([*package.glob("report/*.py"), *package.glob("tb_plugin/*.py")]):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def fingerprint(run: Path) -> list:
    """What a view of ``run`` depends on (module docstring); taken before the read."""
    files, rejected = task_files(run)
    items: list = [_code(), [item.sentence() for item in rejected]]
    for path in [*files, log_dir(run) / MANIFEST_NAME]:
        try:
            info = path.stat()
        except OSError:
            continue
        items.append([path.name, info.st_ino, info.st_size, info.st_mtime_ns])
    return items


class ViewCache:
    """Saved answers of runs' views, in the fold cache's directory."""

    def __init__(self, folds: FoldCache):
        self.directory = folds.directory  # counted and trimmed with the folds

    def load(self, run: Path, taken: list) -> dict[str, JsonBody] | None:
        """The answers saved for ``run`` at fingerprint ``taken``; None if there are none."""
        entry = self._entry(run)
        try:
            with open_private(entry) as file:
                saved = json.loads(file.read())
            if saved.get("path") != str(run) or saved.get("fingerprint") != taken:
                return None
            os.utime(entry)  # last use, for ``FoldCache.trim``
            return {key: JsonBody.of_text(text) for key, text in saved["bodies"].items()}
        except FileNotFoundError:
            return None
        except Exception as error:  # noqa: BLE001 - whatever is wrong with an entry, the run is read instead
            logger.warning("tfdiag: ignored the saved view %s of %s (%s: %s)", entry, run, type(error).__name__, error)
            return None

    def save(self, run: Path, taken: list, bodies: dict[str, JsonBody]) -> None:
        """Saves ``bodies`` as the answers of ``run`` at fingerprint ``taken``; a failure is logged."""
        data = json.dumps({"path": str(run), "fingerprint": taken,
                           "bodies": {key: body.text for key, body in bodies.items()}}).encode()
        try:
            descriptor, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            try:
                with os.fdopen(descriptor, "wb") as file:
                    file.write(data)
                os.replace(temporary, self._entry(run))
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as error:
            logger.warning("tfdiag: cannot save the view of %s (%s)", run, error)

    def _entry(self, run: Path) -> Path:
        name = f"view\0{os.path.realpath(run)}\0{run}"
        return self.directory / (hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:40] + ".view")
