"""The run manifest: cluster spec, strategy, start time and versions, written by the chief."""

from __future__ import annotations

import json
import os
import time

from tfdiag import __version__
from tfdiag.events import SCHEMA_VERSION
from tfdiag.store.paths import log_dir

MANIFEST_NAME = "manifest.json"


def write_manifest(run_dir: str | os.PathLike, *, strategy: str, cluster: dict, tensorflow_version: str, **extra) -> None:
    """Writes ``RUN/plugins/tfdiag/manifest.json`` atomically (write, then rename).

    Example:
        >>> write_manifest("logs/run1", strategy="ParameterServerStrategy",
        ...                cluster={"ps": ["127.0.0.1:2222"]}, tensorflow_version="2.21.0")  # doctest: +SKIP
    """
    directory = log_dir(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "tfdiag_version": __version__,
        "tensorflow_version": tensorflow_version,
        "strategy": strategy,
        "cluster": cluster,
        "start_time_ns": time.time_ns(),
        **extra,
    }
    temporary = directory / (MANIFEST_NAME + ".tmp")
    temporary.write_text(json.dumps(manifest, indent=2))
    os.replace(temporary, directory / MANIFEST_NAME)


def read_manifest(run_dir: str | os.PathLike) -> dict | None:
    """The manifest as a dict, or None when the run has none (yet)."""
    path = log_dir(run_dir) / MANIFEST_NAME
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
