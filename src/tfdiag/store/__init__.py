"""The run log: per-task files of framed Arrow record batches, plus a manifest.

Layout of a run directory::

    RUN/plugins/tfdiag/manifest.json     written once by the chief or coordinator
    RUN/plugins/tfdiag/<task>.tfdiag     one per task, e.g. worker-0.tfdiag, ps-1.tfdiag

See ``docs/log-format.md`` for the byte layout.
"""

from tfdiag.store.manifest import MANIFEST_NAME, ManifestRead, load_manifest, read_manifest, write_manifest
from tfdiag.store.paths import PLUGIN_DIR, RejectedPath, find_runs, log_dir, task_files
from tfdiag.store.reader import Frame, ReadResult, SkippedRecords, read_task_file
from tfdiag.store.writer import TaskWriter

__all__ = [
    "MANIFEST_NAME",
    "PLUGIN_DIR",
    "Frame",
    "ManifestRead",
    "ReadResult",
    "RejectedPath",
    "SkippedRecords",
    "TaskWriter",
    "find_runs",
    "load_manifest",
    "log_dir",
    "read_manifest",
    "read_task_file",
    "task_files",
    "write_manifest",
]
