"""One task of a sample job: ``python -m tfdiag.sample_jobs.task --config JSON``.

The task reads its role from ``TF_CONFIG``. Roles listed in the job's ``job_roles`` run
the job (and the summary task prints the summary line to stderr); every other role
runs a ``tf.distribute.Server`` until it is terminated.

Binding: ``tf.distribute.Server`` listens on ``0.0.0.0:PORT`` (gRPC reports ``[::]``) —
the address is hard-coded in TensorFlow's ``GrpcServer::Init`` and no ``ServerDef``,
``ConfigProto`` field or environment variable changes it. The launcher therefore only
*advertises* 127.0.0.1 addresses; keep local clusters on hosts whose firewall closes
those ports.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import socket
import sys
import time

from tfdiag.collectors import identity
from tfdiag.events import parse_task, task_name
from tfdiag.sample_jobs.jobs import JobConfig

# A server listens only once its process has imported TensorFlow, which takes several
# times longer when every task of a local cluster imports it at once on a few cores; the
# job waits this long for every port before giving up.
CLUSTER_WAIT_S = 120.0
# Each finished job's ``JobSummary.keep``: what it made stays referenced until the process
# ends without teardown, so no remote function is removed from the tasks on the way out.
_KEPT: list[tuple] = []


def wait_for_cluster(cluster: dict, own_task: str, timeout_s: float = CLUSTER_WAIT_S) -> None:
    """Blocks until every other task's address accepts a TCP connection."""
    deadline = time.monotonic() + timeout_s
    for job, addresses in cluster.items():
        for index, address in enumerate(addresses):
            if task_name(job, index) == own_task:
                continue
            host, _, port = address.rpartition(":")
            while True:
                try:
                    with socket.create_connection((host, int(port)), timeout=1.0):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"task {job}:{index} at {address} did not start within {timeout_s:.0f} s") from None
                    time.sleep(0.1)


def run_server(task_type: str, task_index: int) -> None:
    """Runs this task's ``tf.distribute.Server`` until the process is terminated."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=task_type, task_index=task_index, protocol="grpc", start=True
    )
    print(f"tfdiag-sample: {task_type}:{task_index} serving at {server.target}", file=sys.stderr, flush=True)
    server.join()


def run_task(config: JobConfig) -> int:
    """Runs this process's part of ``config.job``, as named by ``TF_CONFIG``; returns an exit code."""
    spec = config.spec  # after --tune strategy=
    task = identity.resolve_task(default=spec.summary_task)
    task_type, index = parse_task(task)
    module = __import__(spec.module, fromlist=["run"])
    prepare = getattr(module, "prepare", None)
    if prepare is not None:  # e.g. data files every worker reads
        prepare(config)
    if task_type not in spec.job_roles:
        run_server(task_type, index)
        return 0
    summary = module.run(config)
    _KEPT.append(summary.keep)  # released by no one: the process ends without teardown
    if task == spec.summary_task:
        print(summary.line(), file=sys.stderr, flush=True)
    return 0


def end_without_teardown(exit_code: list[int]) -> None:
    """Registered first, so run last of the ``atexit`` handlers (they run in reverse order):
    once every handler has run (collectors close their files there), ends the process
    without the interpreter's finalisation, where tearing down TensorFlow's remote eager
    context and the ClusterCoordinator takes seconds for no benefit: the servers go next."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code[0])


def configure_logging() -> None:
    """A task's log lines: time, logger, level, message, on stderr. Done before TensorFlow is
    imported (which otherwise gives its logger a handler of its own, and every line twice)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfdiag.sample_jobs.task")
    parser.add_argument("--config", required=True, help="the JobConfig as JSON")
    args = parser.parse_args(argv)
    exit_code = [1]  # what the process ends with unless run_task returns
    atexit.register(end_without_teardown, exit_code)
    configure_logging()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    exit_code[0] = run_task(JobConfig.from_json(args.config))
    return exit_code[0]


if __name__ == "__main__":
    sys.exit(main())
