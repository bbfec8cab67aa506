"""load_manifest: a bad manifest is a warning naming the file, never an error; bad fields are dropped."""

import json
import os

import pytest

from tests.conftest import in_child_process
from tfdiag.store import MANIFEST_NAME, load_manifest, log_dir, read_manifest, write_manifest
from tfdiag.store.manifest import MAX_MANIFEST_BYTES


def _write(run, content: bytes):
    log_dir(run).mkdir(parents=True, exist_ok=True)
    (log_dir(run) / MANIFEST_NAME).write_bytes(content)


def test_a_written_manifest_reads_back_without_warnings(tmp_path):
    write_manifest(tmp_path, strategy="ParameterServerStrategy", cluster={"ps": ["127.0.0.1:2222"]},
                   tensorflow_version="2.21.0", task="chief:0", job="ps_ctl")

    read = load_manifest(tmp_path)

    assert read.warnings == []
    assert read.manifest["cluster"] == {"ps": ["127.0.0.1:2222"]} and read.manifest["job"] == "ps_ctl"


def test_no_manifest_is_none_without_a_warning(tmp_path):
    assert load_manifest(tmp_path).manifest is None and load_manifest(tmp_path).warnings == []


UNUSABLE = {
    "malformed": (b'{"strategy": ', "Expecting value"),
    "empty": (b"", "Expecting value"),
    "non-UTF-8": (b'{"strategy": "\xff\xfe"}', "can't decode byte 0xff"),
    "a list": (b"[1, 2]", "a JSON list, not an object"),
    "deep nesting": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "too large": (b" " * (MAX_MANIFEST_BYTES + 1), f"larger than {MAX_MANIFEST_BYTES} bytes"),
}


@pytest.mark.parametrize("name", UNUSABLE)
def test_an_unusable_manifest_is_a_warning_naming_the_file(tmp_path, name):
    content, reason = UNUSABLE[name]
    _write(tmp_path, content)

    read = load_manifest(tmp_path)

    assert read.manifest is None
    [warning] = read.warnings
    assert warning.startswith(f"{log_dir(tmp_path) / MANIFEST_NAME}: manifest not used: ") and reason in warning


def test_fields_of_the_wrong_type_are_dropped_with_a_warning_each(tmp_path):
    _write(tmp_path, json.dumps({"strategy": 3, "cluster": {"ps": [1]}, "task": "chief:0", "start_time_ns": -5,
                                 "schema_version": True, "tensorflow_version": "2.21.0"}).encode())

    read = load_manifest(tmp_path)

    assert read.manifest == {"task": "chief:0", "tensorflow_version": "2.21.0"}
    assert sorted(warning.split("'")[1] for warning in read.warnings) == [
        "cluster", "schema_version", "start_time_ns", "strategy"]
    assert all(warning.startswith(str(log_dir(tmp_path) / MANIFEST_NAME)) for warning in read.warnings)


def test_a_newer_schema_version_is_kept_with_a_warning(tmp_path):
    _write(tmp_path, json.dumps({"schema_version": 99, "strategy": "MirroredStrategy"}).encode())

    read = load_manifest(tmp_path)

    assert read.manifest["strategy"] == "MirroredStrategy"
    [warning] = read.warnings
    assert "manifest.json" in warning and "schema version 99 is newer than this tfdiag's (1)" in warning


def _load_fifo_manifest(run):
    return load_manifest(run).warnings


def test_a_fifo_manifest_is_a_warning_not_a_hang(tmp_path):
    log_dir(tmp_path).mkdir(parents=True)
    os.mkfifo(log_dir(tmp_path) / MANIFEST_NAME)

    [warning] = in_child_process(_load_fifo_manifest, tmp_path, timeout_s=30)

    assert "manifest not used" in warning and "a FIFO" in warning


def test_read_manifest_is_the_validated_manifest(tmp_path):
    _write(tmp_path, b"[]")
    assert read_manifest(tmp_path) is None
