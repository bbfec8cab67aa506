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
from tfdiag.events import HEARTBEAT_EVERY_S

# One unanswered check can be a hiccup (a long garbage collection on the target); two in a
# row, several seconds apart, are a task that is not running.
MIN_UNANSWERED = 2
# A check comes every HEARTBEAT_EVERY_S: the last answer of a task that froze as the others
# stalled can come after their last progress (worker 1 of ps_ctl answered 0.15 s after its
# last closure, then froze). Two checks' spacing covers it: this, or twice a target's own
# spacing where its checks came further apart (collectors/liveness.round_every_s spaces the
# rounds of a job with many such tasks).
ANSWER_AFTER_STALL_S = 2 * HEARTBEAT_EVERY_S
VERDICTS = {"DEADLINE_EXCEEDED": "frozen or hung", "UNAVAILABLE": "gone"}


def last_answers(liveness: pd.DataFrame, offsets: dict[str, int]) -> pd.Series:
    """Each target's last answered check (its time on the reference clock), by target.

    >>> checks = pd.DataFrame({"task": "chief:0", "target": ["ps:0", "ps:0", "ps:1"], "time_ns": [1, 6, 3],
    ...                        "status": ["OK", "DEADLINE_EXCEEDED", "OK"]})
    >>> last_answers(checks, {}).to_dict()
    {'ps:0': 1, 'ps:1': 3}
    """
    if liveness.empty:
        return pd.Series(dtype="float64")
    answered = liveness[liveness["status"] == "OK"]
    return (to_reference_clock(answered["time_ns"], answered["task"], offsets)
            .groupby(answered["target"].astype(str)).max())


def silent_tasks(liveness: pd.DataFrame, offsets: dict[str, int], since_ns: float) -> list[dict]:
    """The targets that went silent as a stall began at ``since_ns``: every check since their
    last answer failed, at least ``MIN_UNANSWERED`` of them, and that answer came no later
    than ``ANSWER_AFTER_STALL_S`` (or two of its checks' median spacing) after ``since_ns``. ``{"task", "status", "verdict",
    "unanswered", "last_answer_ns"}`` each (``last_answer_ns`` None when it never answered),
    in the order they went silent.

    >>> checks = pd.DataFrame({"task": "worker:0", "target": "ps:0", "time_ns": [1, 6, 11, 16],
    ...                        "status": ["OK", "OK", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"]})
    >>> silent_tasks(checks, {}, since_ns=5)
    [{'task': 'ps:0', 'status': 'DEADLINE_EXCEEDED', 'verdict': 'frozen or hung', 'unanswered': 2, 'last_answer_ns': 6}]
    """
    if liveness.empty:
        return []
    checks = liveness.assign(time_ns=to_reference_clock(liveness["time_ns"], liveness["task"], offsets))
    silent = []
    for target, own in checks.sort_values("time_ns").groupby(checks["target"].astype(str), sort=True):
        answered = own.loc[own["status"] == "OK", "time_ns"]
        last_answer = int(answered.max()) if not answered.empty else None
        unanswered = own if last_answer is None else own[own["time_ns"] > last_answer]
        spacing_ns = float(own["time_ns"].diff().median()) if len(own) > 1 else 0.0
        allowed_ns = max(ANSWER_AFTER_STALL_S * 1e9, 2 * spacing_ns)
        if len(unanswered) < MIN_UNANSWERED or (last_answer is not None and last_answer > since_ns + allowed_ns):
            continue
        status = str(unanswered["status"].iloc[-1])
        silent.append({"task": target, "status": status, "verdict": VERDICTS.get(status, "not answering"),
                       "unanswered": int(len(unanswered)), "last_answer_ns": last_answer})
    return sorted(silent, key=lambda task: task["last_answer_ns"] or 0)
