"""``live_finding`` records for the renderer tests, and the report that shows them.

``with_live_findings`` sets ``report.timelines["live_findings"]`` from the run's records,
as ``tfdiag.analysis.timelines.build_timelines`` is to do (docs/findings.md, "Live
findings"); it changes nothing when the analysis already did it.
"""

from __future__ import annotations

from tfdiag.analysis import load_run
from tfdiag.analysis.live import live_finding_windows

from tests.runs import MS, START_NS, RunBuilder


def add_live_findings(run: RunBuilder, tasks: str = "worker:1") -> RunBuilder:
    """A straggler announced 1 s after the first step that cleared at 3 s, and an
    input_bound one announced at 4 s still on when the records end."""
    def record(state, kind, who, onset_ms, severity="warning", speedup=1.3):
        return ("live_finding", dict(task="chief:0", time_ns=START_NS + (onset_ms + 500) * MS, state=state, kind=kind,
                                     tasks=who, severity=severity, onset_ns=START_NS + onset_ms * MS, step=40,
                                     predicted_speedup=speedup,
                                     message=f"tfdiag: {who} {kind} since step 40: {who} is 3.0x slower per step"))
    run.records += [record("began", "straggler", tasks, 1000, "critical"), record("cleared", "straggler", tasks, 3000),
                    record("began", "input_bound", "", 4000, speedup=None)]
    return run


def with_live_findings(report, run_dir):
    if "live_findings" not in report.timelines:
        report.timelines["live_findings"] = live_finding_windows(load_run(run_dir).frame("live_finding"))
    return report
