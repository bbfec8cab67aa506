"""``trial_run.run_trial``: which runs a trial makes, in which order, and what it keeps of them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import psutil

from benchmarks import trial_run
from benchmarks.trial_space import REPEAT_SEEDS, Trial


def _runs(monkeypatch, trial: Trial) -> tuple[list[tuple[str, bool]], dict]:
    """The (side, repeat) of each run ``run_trial`` made of ``trial``, in order, and its result;
    each run's rate counts the runs before it, so every side's rate is its own."""
    made = []

    def run_side(trial, side, workdir, repeat=False):
        made.append((side, repeat))
        return {"logdir": f"{workdir}/{side}{repeat}", "exit": 0, "examples_per_s": float(len(made)),
                "steady_examples_per_s": None,
                "wall_s": 1.0, "findings": []}

    monkeypatch.setattr(trial_run, "run_side", run_side)
    return made, trial_run.run_trial(trial, workdir="w")


def test_from_the_repeat_seeds_the_pair_runs_again_in_mirrored_order(monkeypatch):
    trial = Trial(REPEAT_SEEDS, "ps_ctl", "proxy", "ps:0", None, 10.0, "start", 0, True, False)
    made, result = _runs(monkeypatch, trial)
    assert made == [("fault", False), ("fix", False), ("fix", True), ("fault", True)]
    assert result["runs"]["fault"]["examples_per_s"] == 1.0 and result["runs"]["fix"]["examples_per_s"] == 2.0
    assert {side: run["examples_per_s"] for side, run in result["repeat"].items()} == {"fix": 3.0, "fault": 4.0}
    made, _ = _runs(monkeypatch, dataclasses.replace(trial, fix_first=True))
    assert made == [("fix", False), ("fault", False), ("fault", True), ("fix", True)]


def test_before_the_repeat_seeds_or_without_a_fix_one_pair_or_one_run(monkeypatch):
    trial = Trial(REPEAT_SEEDS - 1, "ps_ctl", "proxy", "ps:0", None, 10.0, "start", 0, True, False)
    made, result = _runs(monkeypatch, trial)
    assert made == [("fault", False), ("fix", False)] and "repeat" not in result
    made, result = _runs(monkeypatch, dataclasses.replace(trial, seed=REPEAT_SEEDS, fix=False))
    assert made == [("fault", False)] and "repeat" not in result


def test_hogs_end_with_a_trial_killed_before_it_could_end_them():
    """A batch stopped from outside (SIGKILL, or SIGTERM, which runs no ``finally``) leaves no busy loop."""
    trial = subprocess.Popen([sys.executable, "-c", "from benchmarks.trial_run import hogs\n"
                              "with hogs(1) as pids:\n    print(pids[0], flush=True)\n    input()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hog = psutil.Process(int(trial.stdout.readline()))
    assert hog.is_running()
    trial.kill()
    trial.wait()
    try:
        hog.wait(timeout=10)  # psutil.TimeoutExpired if the busy loop outlived its trial
    finally:
        if hog.is_running():
            hog.kill()
