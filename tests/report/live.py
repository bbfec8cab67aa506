"""``live_finding`` records for the renderer tests (``build_timelines`` turns them into
``report.timelines["live_findings"]``)."""

from __future__ import annotations

from tests.runs import MS, START_NS, RunBuilder


def add_live_findings(run: RunBuilder, tasks: str = "worker:1") -> RunBuilder:
    """A straggler announced 1 s after the first step that cleared at 3 s, and an
    input_bound one announced at 4 s still on when the records end."""
    def announce(state, kind, who, onset_ms, severity="warning", speedup=1.3):
        run.record("live_finding", task="chief:0", time_ns=START_NS + (onset_ms + 500) * MS, state=state, kind=kind,
                   tasks=who, severity=severity, onset_ns=START_NS + onset_ms * MS, step=40, predicted_speedup=speedup,
                   message=f"tfdiag: {who} {kind} since step 40: {who} is 3.0x slower per step")

    announce("began", "straggler", tasks, 1000, "critical")
    announce("cleared", "straggler", tasks, 3000)
    announce("began", "input_bound", "", 4000, speedup=None)
    return run
