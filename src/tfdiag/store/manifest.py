"""The run manifest: cluster spec, strategy, start time and versions, written by the chief.

Reading trusts nothing: the file must be a regular file of at most ``MAX_MANIFEST_BYTES``
holding a UTF-8 JSON object; each known field must have its type (a wrong one is dropped
with a warning), and a ``schema_version`` newer than this tfdiag's is warned about. An
unreadable manifest is a warning, never an error: analysis goes on without it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from tfdiag import __version__
from tfdiag.events import SCHEMA_VERSION
from tfdiag.store.paths import log_dir, open_regular

MANIFEST_NAME = "manifest.json"

# A manifest is a cluster spec and a few fields: a few kB even for hundreds of tasks.
MAX_MANIFEST_BYTES = 1 << 20
# Largest int a time field may hold (the same bound as task-file values, the year 2116).
_MAX_TIME_NS = (1 << 62) - 1


@dataclass
class ManifestRead:
    """A validated manifest (None if missing or unreadable) and what was wrong with it."""

    manifest: dict | None
    warnings: list[str] = field(default_factory=list)


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
    """The validated manifest as a dict, or None when the run has none (yet) or it is unreadable."""
    return load_manifest(run_dir).manifest


def load_manifest(run_dir: str | os.PathLike) -> ManifestRead:
    """Reads and validates a run's manifest; every problem becomes a warning naming the file.

    Example:
        >>> read = load_manifest("logs/run1")  # doctest: +SKIP
        >>> read.manifest["strategy"], read.warnings  # doctest: +SKIP
        ('ParameterServerStrategy', [])
    """
    path = log_dir(run_dir) / MANIFEST_NAME
    if not os.path.lexists(path):
        return ManifestRead(None)
    try:
        document = json.loads(_read_bounded(path, run_dir))
    except FileNotFoundError:
        return ManifestRead(None)
    except (OSError, ValueError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)[:200]
        return ManifestRead(None, [f"{path}: manifest not used: {reason}"])
    if not isinstance(document, dict):
        return ManifestRead(None, [f"{path}: manifest not used: a JSON {type(document).__name__}, not an object"])
    warnings = [f"{path}: {problem}" for problem in _field_problems(document)]
    valid = {key: value for key, value in document.items() if _FIELD_CHECKS.get(key, _any)(value)}
    return ManifestRead(valid, warnings)


def _read_bounded(path, run_dir) -> str:
    fd = open_regular(path, run_dir)
    with os.fdopen(fd, "rb", buffering=0) as file:
        data = file.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"larger than {MAX_MANIFEST_BYTES} bytes")
    return data.decode("utf-8")


def _any(value) -> bool:
    return True


def _is_int(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_cluster(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(addresses, list) and all(isinstance(address, str) for address in addresses)
        for addresses in value.values()
    )


_FIELD_CHECKS = {
    "schema_version": lambda value: _is_int(value, 1, 1 << 31),
    "tfdiag_version": lambda value: isinstance(value, str),
    "tensorflow_version": lambda value: isinstance(value, str),
    "strategy": lambda value: isinstance(value, str),
    "task": lambda value: isinstance(value, str),
    "cluster": _is_cluster,
    "start_time_ns": lambda value: _is_int(value, 0, _MAX_TIME_NS),
}


def _field_problems(document: dict) -> list[str]:
    problems = [
        f"manifest field {key!r} ignored: unexpected {type(document[key]).__name__} value"
        for key, check in _FIELD_CHECKS.items()
        if key in document and not check(document[key])
    ]
    version = document.get("schema_version")
    if _FIELD_CHECKS["schema_version"](version) and version > SCHEMA_VERSION:
        problems.append(
            f"manifest schema version {version} is newer than this tfdiag's ({SCHEMA_VERSION}); fields may be misread"
        )
    return problems
