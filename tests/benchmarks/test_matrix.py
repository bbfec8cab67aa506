"""benchmarks/matrix.py: a cell is right only when named and predicted within 25 % of its
measured fix, and a hidden cell only when measured to cost the job nothing."""

from __future__ import annotations

from benchmarks.matrix import Cell, verdict

SLOW_PS = Cell("ps_ctl", "slow-ps", "slow-ps=1:25")
HIDDEN = Cell("mwms_fit", "input-delay", "input-delay=20")
CLEAN = Cell("ps_ctl", "clean", "")


def finding(kind, severity="warning"):
    return {"kind": kind, "severity": severity, "tasks": ["ps:1"]}


def test_a_named_cause_counts_only_with_its_prediction_within_25_percent():
    assert verdict(SLOW_PS, [finding("slow_link")], True, 0.21, 1.67) == (True, "")
    assert verdict(SLOW_PS, [finding("slow_link")], True, 0.74, 0.75) == (False, "prediction off")
    assert verdict(SLOW_PS, [finding("slow_link")], True, None, 1.05) == (False, "no prediction")
    assert verdict(SLOW_PS, [finding("slow_link")], True, None, None) == (False, "fix not measured")
    assert verdict(SLOW_PS, [finding("coordinator_bound")], False, None, 1.6) == (False, "not named")


def test_a_hidden_cell_is_measured_not_asserted():
    assert HIDDEN.fix == ((), "fault removed (hidden: measured)")
    assert verdict(HIDDEN, [finding("input_bound", "info")], False, None, 1.03)[0]
    assert not verdict(HIDDEN, [], False, None, 1.4)[0]  # the job did not absorb it: the fault cost 40 %
    assert not verdict(HIDDEN, [], False, None, None)[0]  # not measured: not right
    assert not verdict(HIDDEN, [finding("input_bound")], False, None, 1.0)[0]


def test_a_clean_cell_is_right_when_quiet():
    assert verdict(CLEAN, [finding("straggler", "info")], False, None, None)[0]
    assert not verdict(CLEAN, [finding("straggler")], False, None, None)[0]
