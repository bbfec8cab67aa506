"""Task and device naming: the one place tasks are formatted and parsed."""

import pytest

from tfdiag.events import cluster_tasks, device_of, parse_task, task_name, task_of_device


@pytest.mark.parametrize("task", ["worker:0", "ps:12", "chief:0", "evaluator:3"])
def test_device_and_task_round_trip(task):
    assert task_of_device(device_of(task)) == task
    assert task_name(*parse_task(task)) == task


@pytest.mark.parametrize(
    "device, task",
    [
        ("/job:ps/replica:0/task:1/device:CPU:0", "ps:1"),
        ("/job:worker/task:2/device:GPU:1", "worker:2"),
        ("/job:chief", "chief:0"),  # no task: task 0
        ("/device:CPU:0", None),
        ("", None),
    ],
)
def test_task_of_device(device, task):
    assert task_of_device(device) == task


def test_cluster_tasks_keeps_the_order_of_jobs_asked_for():
    cluster = {"ps": ["a:1", "b:1"], "worker": ["c:1"], "chief": ["d:1"]}
    assert cluster_tasks(cluster, jobs=("worker", "ps")) == ["worker:0", "ps:0", "ps:1"]
    assert cluster_tasks(cluster) == ["worker:0", "ps:0", "ps:1", "chief:0"]
    assert cluster_tasks({}, jobs=("worker",)) == []
