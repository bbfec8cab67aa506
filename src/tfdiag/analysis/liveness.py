"""Tasks that stopped answering: the ``liveness`` checks of tasks that run no collector.

A ps of a TF1 session job writes nothing; the task that writes the manifest asks its
server for its status every few seconds (``src/tfdiag/collectors/liveness.py``). A task whose every
check since a moment failed, and at least ``MIN_UNANSWERED`` of them, is *silent* since
then: frozen or hung when the checks went unanswered (``DEADLINE_EXCEEDED``), gone when
nothing listened (``UNAVAILABLE``).
"""

from __future__ import annotations

import pandas as pd

from tfdiag.analysis.align import to_reference_clock

# One unanswered check can be a hiccup (a long garbage collection on the target); two in a
# row, several seconds apart, are a task that is not running.
MIN_UNANSWERED = 2
VERDICTS = {"DEADLINE_EXCEEDED": "frozen or hung", "UNAVAILABLE": "gone"}


def silent_tasks(liveness: pd.DataFrame, offsets: dict[str, int], since_ns: float) -> list[dict]:
    """The targets whose checks since ``since_ns`` all failed: ``{"task", "status",
    "verdict", "unanswered", "last_answer_ns"}`` each (``last_answer_ns`` None when it never
    answered), in the order they went silent.

    >>> checks = pd.DataFrame({"task": "worker:0", "target": "ps:0", "time_ns": [1, 6, 11, 16],
    ...                        "status": ["OK", "OK", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"]})
    >>> silent_tasks(checks, {}, since_ns=10)
    [{'task': 'ps:0', 'status': 'DEADLINE_EXCEEDED', 'verdict': 'frozen or hung', 'unanswered': 2, 'last_answer_ns': 6}]
    """
    if liveness.empty:
        return []
    checks = liveness.assign(time_ns=to_reference_clock(liveness["time_ns"], liveness["task"], offsets))
    silent = []
    for target, own in checks.sort_values("time_ns").groupby(checks["target"].astype(str), sort=True):
        since = own[own["time_ns"] >= since_ns]
        failed = since["status"] != "OK"
        if len(since) < MIN_UNANSWERED or not failed.all():
            continue
        answered = own.loc[own["status"] == "OK", "time_ns"]
        status = str(since["status"].iloc[-1])
        silent.append({"task": target, "status": status, "verdict": VERDICTS.get(status, "not answering"),
                       "unanswered": int(len(since)),
                       "last_answer_ns": int(answered.max()) if not answered.empty else None})
    return sorted(silent, key=lambda task: task["last_answer_ns"] or 0)
