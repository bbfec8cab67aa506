"""``tfdiag watch RUN``: follow a running job in the terminal until it closes, fails or hangs.

Every ``interval_s`` the run's new records are read (``RunLoader``: only what was
appended), the run is analysed, and the view printed: the job's status
(``analysis.job_status``), each worker's progress, the current findings. On a terminal
the view is redrawn in place; elsewhere (a CI log) it is printed when it changes. The
exit status says how the job ended, so a scheduler's health check or CI can act on it:

* 0: every task closed its collectors (or ``timeout_s`` passed while it ran well);
* 1: the job failed (a task ended on an error: the finding names the task to blame) or
  went silent (every task stopped writing without closing);
* 3: the job hangs (a critical ``stalled`` finding).

Example:
    $ tfdiag watch logs/run1 --interval 5
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from tfdiag.analysis import RunLoader, analyze
from tfdiag.analysis.job_status import CLOSED, FAILED, HUNG, RUNNING, SILENT, JobStatus, job_status
from tfdiag.report.safe_text import printable, printable_lines

EXIT_STATUS = {CLOSED: 0, RUNNING: 0, FAILED: 1, SILENT: 1, HUNG: 3}
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def watch(path: str, show: Callable[[str], None], *, interval_s: float = 5.0, timeout_s: float | None = None,
          redraw: bool = False, clock: Callable[[], float] = time.monotonic) -> JobStatus:
    """Follows the run at ``path`` until it closes, fails or hangs (or ``timeout_s``),
    passing each new view to ``show``; returns the last status. Waits for a run that does
    not exist yet (a watch started before its job)."""
    deadline = None if timeout_s is None else clock() + timeout_s
    loader, shown, status = None, None, JobStatus(RUNNING, "waiting for the run to appear")
    if not Path(path).exists():
        show(f"tfdiag watch {printable(path)}: waiting for the run to appear\n")
    while True:
        if loader is None and (Path(path) / "plugins" / "tfdiag").is_dir():
            loader = RunLoader(path)
        if loader is not None:
            run = loader.refresh()
            report = analyze(run)
            status = job_status(report, run, time.time_ns())
            view = render_view(path, status, report.findings)
            # Redrawn in place every time; in a log, only when the status or the findings change.
            key = view if redraw else (status.state, status.reason, [f.title for f in report.findings])
            if key != shown:
                show(CLEAR_SCREEN + view if redraw else view)
                shown = key
            if status.state != RUNNING:
                return status
        if deadline is not None and clock() >= deadline:
            return status
        time.sleep(interval_s)


def render_view(path: str, status: JobStatus, findings) -> str:
    """The watch's view of one moment, as text.

    >>> print(render_view("logs/run1", JobStatus("running", "2 tasks writing",
    ...       [{"task": "worker:0", "steps": 120, "idle_s": 0.1}]), []), end="")
    tfdiag watch logs/run1: running (2 tasks writing)
      worker:0  120 steps, last 0.1 s ago
      no findings
    """
    lines = [f"tfdiag watch {path}: {status.state} ({status.reason})"]
    width = max((len(worker["task"]) for worker in status.progress), default=0)
    for worker in status.progress:
        idle = "" if worker["idle_s"] is None else f", last {worker['idle_s']:.1f} s ago"
        lines.append(f"  {worker['task']:<{width}}  {worker['steps']:,} steps{idle}")
    lines += [f"  [{f.severity.value.upper()}] {f.kind}: {f.title}" for f in findings] or ["  no findings"]
    return printable_lines("\n".join(lines) + "\n")
