"""The labelled corpus (benchmarks/corpus/): real trial runs, re-analysed with today's code.

Each run was recorded by ``benchmarks/trials.py`` with a fault planted from outside the job
(or none) and labelled with what was planted and, where it ran, the fix's measured speed-up.
A run whose planted cause was found when recorded must still be found on the planted task,
and no run may gain a false alarm (a warning-level finding the plant does not explain).
No cluster: the analysis reads the kept task files.
"""

from __future__ import annotations

import functools
import json

import pytest

from benchmarks.trial_corpus import CORPUS, verdict_of
from tfdiag.analysis.engine import analyze

RUNS = sorted(path.parent for path in CORPUS.glob("*/label.json"))


@functools.cache
def reanalysed(run) -> tuple[dict, list[dict]]:
    """The run's label and today's findings (each run analysed once per session)."""
    return json.loads((run / "label.json").read_text()), [finding.to_dict() for finding in analyze(run).findings]


def test_the_corpus_covers_clean_runs_and_several_kinds():
    labels = [json.loads((run / "label.json").read_text()) for run in RUNS]
    kinds = {label["planted_kind"] for label in labels}
    assert None in kinds, "a clean run"
    assert len(kinds - {None}) >= 4
    assert sum(p.stat().st_size for run in RUNS for p in run.rglob("*") if p.is_file()) < 5_000_000


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_a_corpus_run_is_diagnosed_at_least_as_well_as_when_recorded(run):
    label, findings = reanalysed(run)
    now, recorded = verdict_of(label, findings), label["recorded"]
    if recorded["recalled"]:
        assert now["recalled"], f"{label['planted_kind']} on {label['planted_task']} no longer found: {findings}"
    assert set(now["false_alarms"]) <= set(recorded["false_alarms"]), now["false_alarms"]


def test_recall_and_precision_over_the_corpus():
    verdicts = [(label, verdict_of(label, findings)) for label, findings in map(reanalysed, RUNS)]
    planted = [(label, now) for label, now in verdicts if label["planted_kind"]]
    recall = sum(bool(now["recalled"]) for _, now in planted) / len(planted)
    precision = sum(not now["false_alarms"] for _, now in verdicts) / len(verdicts)
    assert recall >= sum(bool(label["recorded"]["recalled"]) for label, _ in planted) / len(planted)
    assert precision >= sum(not label["recorded"]["false_alarms"] for label, _ in verdicts) / len(verdicts)
