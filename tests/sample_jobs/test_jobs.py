"""Every sample job in small form on a real local cluster, and each injection's effect."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfdiag.analysis import analyze
from tfdiag.sample_jobs import run_sample
from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster
from tfdiag.store import read_manifest

from tests.sample_jobs.processes import assert_no_new_children, child_pids

pytestmark = pytest.mark.cluster

STEPS = 24
TIMEOUT_S = 150
ROOT = Path(__file__).resolve().parents[2]


def sample(logdir, job, **kwargs):
    stderr = io.StringIO()
    before = child_pids()
    kwargs.setdefault("steps", STEPS)
    kwargs.setdefault("ps", 2)
    result = run_sample(job, workers=2, logdir=logdir, timeout_s=TIMEOUT_S, stderr=stderr, **kwargs)
    assert result.ok, stderr.getvalue() + "".join(
        f"\n--- {task}\n" + path.read_text()[-3000:] for task, path in result.task_logs.items()
    )
    assert result.summary_line in stderr.getvalue()
    assert_no_new_children(before)
    return result




def workers_of(logdir) -> dict:
    from tfdiag.report import render_json

    report = json.loads(render_json(analyze(str(logdir))))
    return {w["task"]: w for w in report["workers"]}


def log_lines(result, task, pattern):
    return re.findall(pattern, result.task_logs[task].read_text())


# -- every job, with the injections whose effects each job shows -------------------------
# One run a job serves both the check that every job runs and records every worker and the
# checks of its injections' effects (shard skew and a hot ps do not change either).
RUNS = {
    "ps_ctl": {"batch": 64, "inject": ["shard-skew=1:3", "hot-ps=1"]},
    "ps_fit": {"batch": 64, "inject": ["shard-skew=1:3", "hot-ps=0"]},
    "mwms_fit": {"batch": 256, "inject": ["shard-skew=1:2"]},
    "mirrored": {},
    "tf1_session": {},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The run of each job in ``RUNS``, made on first use."""
    made = {}

    def run_of(job):
        if job not in made:
            made[job] = sample(tmp_path_factory.mktemp(job) / "run", job, **RUNS[job])
        return made[job]

    return run_of


@pytest.mark.parametrize("job", sorted(RUNS))
def test_every_job_runs_and_records_every_worker(runs, job):
    result = runs(job)
    assert result.steps == STEPS and result.examples_per_s > 0
    workers = workers_of(result.logdir)
    expected_workers = {"worker:0"} if job == "mirrored" else {"worker:0", "worker:1"}
    assert set(workers) == expected_workers, workers
    assert all(w["steps"] > 0 for w in workers.values())
    if job in ("mwms_fit", "mirrored"):  # synchronous: every worker runs every step
        assert all(w["steps"] == STEPS for w in workers.values()), workers
    assert read_manifest(result.logdir)["strategy"]


def test_shard_skew_gives_worker_more_examples_per_step(runs):
    workers = workers_of(runs("ps_ctl").logdir)
    per_step = {task: w["examples"] / w["steps"] for task, w in workers.items()}
    assert per_step["worker:0"] == pytest.approx(64, rel=0.1)
    assert per_step["worker:1"] == pytest.approx(192, rel=0.1)


def test_hot_ps_places_the_big_kernel_on_that_ps(runs):
    devices = log_lines(runs("ps_ctl"), "chief:0", r"variable hot/kernel:0 \[\d+, 4096\] on (\S+)")
    assert devices and "/job:ps/replica:0/task:1/" in devices[0]


def test_a_hot_ps_is_found_without_the_job_naming_its_variables(runs):
    # ps_ctl attaches tfdiag as the README does (no variables=): the coordinator records
    # the placement of the variables its scheduled function reads.
    findings = {f.kind: f for f in analyze(str(runs("ps_ctl").logdir)).findings}
    hot = findings["ps_hotspot"]
    assert hot.tasks == ("ps:1",) and hot.evidence["bytes_source"] == "placement", hot


def test_ps_fit_counts_each_workers_examples_and_puts_the_hot_block_on_one_ps(runs):
    # DiagnosticsCallback is given one batch size; what each worker's closures consumed
    # is counted in-graph. Both 4 MB kernels of the hot block sit on ps 0.
    result = runs("ps_fit")
    workers = workers_of(result.logdir)
    per_step = {task: w["examples"] / w["steps"] for task, w in workers.items()}
    assert per_step["worker:0"] == pytest.approx(64, rel=0.1)
    assert per_step["worker:1"] == pytest.approx(192, rel=0.1)
    hot = log_lines(result, "chief:0", r"variable \S*kernel:0 \[(?:\d+, 4096|4096, \d+)\] on (\S+)")
    assert len(hot) == 2 and all("/job:ps/replica:0/task:0/" in device for device in hot), hot


def test_mwms_shard_skew_is_examples_per_worker(runs):
    workers = workers_of(runs("mwms_fit").logdir)
    assert workers["worker:1"]["examples"] == 2 * workers["worker:0"]["examples"] > 0


def test_partitioner_splits_the_hot_kernel(tmp_path):
    result = sample(tmp_path / "run", "ps_ctl", steps=8, batch=64, inject=["hot-ps=0"], tune=["partitioner=2"])
    devices = log_lines(result, "chief:0", r"variable hot/kernel/part_\d+:0 \[\d+, 4096\] on (\S+)")
    assert len(devices) == 2 and {d.split("/task:")[1][0] for d in devices} == {"0", "1"}, devices


def test_kill_worker_with_restart_finishes_every_step(tmp_path):
    # Long enough after the kill for the restarted worker to start (a few seconds here).
    result = sample(tmp_path / "run", "ps_ctl", steps=400, inject=["kill-worker=1@30+restart"])
    assert result.steps == 400
    chief = result.task_logs["chief:0"].read_text()
    assert "Putting back a closure after it failed" in chief  # the kill hit a running closure
    log = result.task_logs["worker:1"].read_text()
    assert "restarted after kill-worker" in log
    # Whether the coordinator re-admits the restarted worker before the job ends depends
    # on how fast it imports TensorFlow (seconds on a loaded 2-core machine) and on the
    # coordinator's reconnection polling; the contract is that every step finishes.


# Every injection each job lists in `tfdiag sample --help`, composed into one short run
# per job: (steps, the --inject values). Kills come early enough to be recovered from
# (for the ParameterServerStrategy jobs, about when the RPC probe starts its first rounds).
EVERY_INJECTION = {
    "ps_ctl": (40, ["input-delay=2", "slow-worker=1:20", "shard-skew=0:2", "hot-ps=1", "slow-ps=0:5",
                    "kill-worker=1@10+restart"]),
    "ps_fit": (30, ["input-delay=2", "slow-worker=1:20", "shard-skew=0:2", "hot-ps=1", "slow-ps=0:5",
                    "kill-worker=1@10+restart"]),
    "mwms_fit": (20, ["input-delay=2", "slow-input=1:5", "slow-worker=0:20", "shard-skew=1:2", "kill-worker=1@6+restart"]),
    "mirrored": (10, ["input-delay=2"]),
    # A restarted tf1 worker polls for the chief's variables every 0.2 s and rejoins at once.
    "tf1_session": (120, ["input-delay=2", "slow-worker=1:20", "shard-skew=0:2", "hot-ps=1", "slow-ps=0:5",
                          "kill-worker=1@10+restart"]),
}


def test_the_injection_table_covers_every_listed_injection():
    from tfdiag.sample_jobs.jobs import JOBS

    assert set(EVERY_INJECTION) == set(JOBS)
    for job, (_, inject) in EVERY_INJECTION.items():
        assert {spec.partition("=")[0] for spec in inject} == set(JOBS[job].injections), job


@pytest.mark.parametrize("job", sorted(EVERY_INJECTION))
def test_every_listed_injection_runs_and_the_run_is_readable(tmp_path, job):
    from tfdiag.analysis.load import load_run

    steps, inject = EVERY_INJECTION[job]
    stderr = io.StringIO()
    result = run_sample(job, workers=2, ps=2, steps=steps, batch=128, logdir=tmp_path / "run", inject=inject,
                        timeout_s=TIMEOUT_S, stderr=stderr)
    said = stderr.getvalue()
    assert result.ok, said + "".join(f"\n--- {task}\n" + path.read_text()[-3000:]
                                     for task, path in result.task_logs.items())
    if any(spec.startswith("kill-worker") for spec in inject):
        assert "killed worker:1" in said
    if any(spec.endswith("+restart") for spec in inject):
        assert "restarted worker:1" in said
    run = load_run(result.logdir)
    assert not run.skipped and "worker:0" in set(run.frame("step")["task"])


def test_strategy_switch_runs_the_other_strategy(tmp_path):
    result = sample(tmp_path / "run", "ps_fit", steps=10, tune=["strategy=mwms"])
    assert read_manifest(result.logdir)["strategy"] in ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")
    assert set(workers_of(result.logdir)) == {"worker:0", "worker:1"}


@pytest.mark.alone
def test_slow_ps_adds_round_trip_latency_measured_outside_tfdiag(tmp_path):
    config = JobConfig("ps_ctl", str(tmp_path), ps=2, workers=1, inject=("slow-ps=1:25",))
    cluster = LocalCluster(config)
    cluster.start(job_tasks=False)
    try:
        env = dict(os.environ, TF_CONFIG=json.dumps(cluster.tf_config("chief", 0)), TF_CPP_MIN_LOG_LEVEL="2")
        from tfdiag.sample_jobs.task import wait_for_cluster

        wait_for_cluster(cluster.advertised, "chief:0")
        probe = subprocess.run([sys.executable, "-m", "tests.sample_jobs.rtt_probe"], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=120)
    finally:
        cluster.stop()
    assert probe.returncode == 0, probe.stderr[-3000:]
    rtt = json.loads(probe.stdout.strip().splitlines()[-1])
    # One eager remote call is two RPC round trips (run the function, fetch its result),
    # each 25 ms slower through the proxy.
    assert 25 <= rtt["ps:1"] - rtt["ps:0"] < 2 * 25 + 25, rtt


def test_with_tf_config_each_process_runs_one_task_of_a_real_cluster(tmp_path):
    """`tfdiag sample` as one task per process, as on separate hosts: no local launcher."""
    from tfdiag.sample_jobs.launcher import pick_free_ports

    ps_port, worker_port, chief_port = pick_free_ports(3)
    cluster = {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"],
               "chief": [f"127.0.0.1:{chief_port}"]}
    command = [sys.executable, "-m", "tfdiag.cli", "sample", "ps_ctl", "--ps", "1", "--workers", "1", "--steps", "20",
               "--logdir", str(tmp_path / "run")]

    def start(job):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": job, "index": 0}}))
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    servers = [start("ps"), start("worker")]
    try:
        chief = start("chief")
        _, stderr = chief.communicate(timeout=240)
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)
    assert chief.returncode == 0, stderr[-3000:]
    assert re.search(r"tfdiag-sample: steps=20 ", stderr)
    assert set(workers_of(tmp_path / "run")) == {"worker:0"}
    assert read_manifest(tmp_path / "run")["cluster"] == cluster
