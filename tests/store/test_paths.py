"""task_files, open_regular, find_runs: only regular files inside the run are read; links never lead out or loop."""

import os

import pytest

from tests.conftest import in_child_process
from tfdiag.store import find_runs, log_dir, task_files
from tfdiag.store.paths import NotARegularFile, open_regular


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    log_dir(run).mkdir(parents=True)
    (log_dir(run) / "worker-0.tfdiag").write_bytes(b"")
    return run


def _odd_names(run, outside):
    directory = log_dir(run)
    os.mkfifo(directory / "fifo.tfdiag")
    (directory / "dir.tfdiag").mkdir()
    (directory / "dangling.tfdiag").symlink_to(directory / "missing")
    (directory / "loop.tfdiag").symlink_to(directory / "loop.tfdiag")
    (directory / "zero.tfdiag").symlink_to("/dev/zero")
    (directory / "outside.tfdiag").symlink_to(outside)
    (directory / "inside.tfdiag").symlink_to(directory / "worker-0.tfdiag")


def test_only_regular_files_inside_the_run_are_listed(run, tmp_path):
    outside = tmp_path / "elsewhere.tfdiag"
    outside.write_bytes(b"")
    _odd_names(run, outside)

    readable, rejected = task_files(run)

    assert [path.name for path in readable] == ["inside.tfdiag", "worker-0.tfdiag"]
    reasons = {item.path.name: item.reason for item in rejected}
    assert reasons["fifo.tfdiag"] == "a FIFO, not a regular file"
    assert reasons["dir.tfdiag"] == "a directory, not a regular file"
    assert reasons["dangling.tfdiag"] == "a dangling symbolic link"
    assert reasons["loop.tfdiag"] == "a symbolic link loop"
    assert reasons["zero.tfdiag"].startswith("a symbolic link out of the run directory (to /dev/zero)")
    assert reasons["outside.tfdiag"].startswith("a symbolic link out of the run directory")
    assert all(item.sentence().startswith(f"{item.path}: not read: ") for item in rejected)


def test_the_files_of_a_log_directory_linked_out_of_the_run_are_not_read(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "worker-0.tfdiag").write_bytes(b"")
    run = tmp_path / "run"
    log_dir(run).parent.mkdir(parents=True)
    log_dir(run).symlink_to(elsewhere)
    readable, rejected = task_files(run)
    assert readable == [] and [item.path.name for item in rejected] == ["worker-0.tfdiag"]
    assert rejected[0].reason == f"a symbolic link out of the run directory (to {elsewhere / 'worker-0.tfdiag'})"


def _open_fifo(path):
    try:
        open_regular(path)
    except NotARegularFile as error:
        return str(error)
    return "opened"


def test_opening_a_fifo_neither_blocks_nor_succeeds(tmp_path):
    fifo = tmp_path / "x.tfdiag"
    os.mkfifo(fifo)

    assert in_child_process(_open_fifo, fifo, timeout_s=30).endswith("a FIFO, not a regular file")


def test_open_regular_refuses_a_link_out_of_the_run(run, tmp_path):
    outside = tmp_path / "secret"
    outside.write_text("x")
    link = log_dir(run) / "worker-1.tfdiag"
    link.symlink_to(outside)

    with pytest.raises(NotARegularFile, match="out of the run directory"):
        open_regular(link, run)


def test_find_runs_does_not_follow_links_out_of_the_logdir_or_round_a_loop(tmp_path):
    logdir, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    log_dir(logdir / "a").mkdir(parents=True)
    log_dir(elsewhere / "b").mkdir(parents=True)
    (logdir / "link-out").symlink_to(elsewhere, target_is_directory=True)
    (logdir / "a" / "loop").symlink_to(logdir, target_is_directory=True)

    assert find_runs(logdir) == [logdir / "a"]
