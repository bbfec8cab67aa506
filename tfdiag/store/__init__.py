"""The run log: per-task files of framed Arrow record batches, plus a manifest.

Layout of a run directory::

    RUN/plugins/tfdiag/manifest.json     written once by the chief or coordinator
    RUN/plugins/tfdiag/<task>.tfdiag     one per task, e.g. worker-0.tfdiag, ps-1.tfdiag

See ``docs/log-format.md`` for the byte layout.
"""

from tfdiag.store.manifest import MANIFEST_NAME, read_manifest, write_manifest
from tfdiag.store.paths import PLUGIN_DIR, find_runs, log_dir
from tfdiag.store.reader import ReadResult, SkippedRecords, read_task_file
from tfdiag.store.writer import TaskWriter

__all__ = [
    "MANIFEST_NAME",
    "PLUGIN_DIR",
    "ReadResult",
    "SkippedRecords",
    "TaskWriter",
    "find_runs",
    "log_dir",
    "read_manifest",
    "read_task_file",
    "write_manifest",
]
