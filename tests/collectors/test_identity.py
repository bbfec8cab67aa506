"""Task identity from TF_CONFIG, and who writes the manifest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfdiag.collectors.identity import resolve_cluster, resolve_task, writes_manifest

CLUSTER = {"chief": ["h:0"], "ps": ["h:1"], "worker": ["h:2", "h:3"]}


def env(task_type, index, cluster=CLUSTER):
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})}


@pytest.mark.parametrize(
    "environ, default, expected",
    [
        ({}, "worker:0", "worker:0"),
        ({}, "chief:0", "chief:0"),
        ({"TF_CONFIG": "not json"}, "worker:0", "worker:0"),
        (env("ps", 1), "worker:0", "ps:1"),
        (env("chief", 0), "worker:0", "chief:0"),
    ],
)
def test_resolve_task(environ, default, expected):
    assert resolve_task(default=default, environ=environ) == expected


def test_resolve_cluster_from_tf_config():
    assert resolve_cluster(environ=env("worker", 0)) == CLUSTER
    assert resolve_cluster(environ={}) == {}


@pytest.mark.parametrize(
    "task, cluster, expected",
    [
        ("worker:0", {}, True),
        ("chief:0", CLUSTER, True),
        ("worker:0", CLUSTER, False),
        ("ps:0", CLUSTER, False),
        ("worker:0", {"worker": ["h:2", "h:3"]}, True),
        ("worker:1", {"worker": ["h:2", "h:3"]}, False),
    ],
)
def test_writes_manifest(task, cluster, expected):
    assert writes_manifest(task, cluster) is expected


def test_import_is_cheap():
    code = "import sys, tfdiag.collectors, tfdiag.sample_jobs; print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
