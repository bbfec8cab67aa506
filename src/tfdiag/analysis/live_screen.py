"""The live findings' cheap screen: per-task windows kept up to date as records arrive.

``LiveScreen.update(now_ns)`` reads what every task file gained since its last call
(``tfdiag.store.read_task_file`` from the last offset) and folds it into small per-task
numpy windows: each worker's recent step records (duration, input wait, steps, own
compute), each link's recent probe round trips (or traced transfer times), and what
``live_stops`` needs (heartbeats, liveness checks, exit records); and keeps the batches of
the last ``KEPT_S`` seconds a verdict reads (``kept``). ``candidates()`` then screens the
windows in a few milliseconds and returns the (kind, task) pairs worth judging: a worker
slower than the others (``straggler``), a link slower than its peers (``slow_link``), a
worker waiting on its input (``input_bound``).

Every screen threshold is looser than the bar of the detector it stands for: the screen
only decides when to judge (``live_verdict`` on the kept batches, ``live.LiveFindings``
for a link; either decides and writes the evidence), so a case the detector would find
must be a candidate first, and a candidate the detector rejects costs one judgement, not
a false line.

Numpy and pyarrow only: no pandas, so that a training process with live findings on (the
default) does not import the analysis until a candidate needs judging.

Example:
    >>> screen = LiveScreen("logs/run1")  # doctest: +SKIP
    >>> screen.update(time.time_ns()); screen.candidates()  # doctest: +SKIP
    [('straggler', 'worker:1')]
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from tfdiag.analysis.live_stops import Stops
from tfdiag.analysis.live_transition import training_step
from tfdiag.store import log_dir, read_task_file, task_files
from tfdiag.store.paths import LOG_SUFFIX

# Seconds of records each screen looks at, ending where every worker's records reach (not
# the wall clock: a coordinator copies each worker's step records in batches, seconds late). Four seconds hold 40 steps of any job that steps at least every 100 ms,
# and a 2x straggler's median step crosses the screen's bar two seconds after its onset.
RECENT_S = 4.0
# A worker's median step, step period or own compute this many times the other workers'
# median is a candidate: below the straggler detector's lowest bar (WARNING_SLOWDOWN,
# 1.25x), so every worker it would name is screened first.
SCREEN_SLOWDOWN = 1.2
# A worker whose recent input wait rose by this share of its step time above the lowest
# share it had so far (or the other workers' median share) is a candidate: half the
# input_bound detector's warning share (0.2). A rise, not a level: a job input-bound from
# its start is the whole-run report's, and a candidate the analysis keeps rejecting costs.
SCREEN_INPUT_SHARE = 0.1
# A link to a ps whose last LINK_SAMPLES round trips were all this much above, and this
# many times, the links' from the same task to the other ps (each peer at the fastest of
# its fresh round trips; the median over the peers) is a candidate: the slow_link detector's bars
# (MIN_EXTRA_NS, 2 ms; SLOW_RATIO, 3x) on its statistic, over fewer round trips (the
# fastest of fewer reads higher: looser for the link judged). A link's fastest round trip
# is what the path costs: load only adds to a probe, and a ps busier than the others
# reads slower at the median (ps_ctl's ps:1 1.5x, every screen) but not at the fastest;
# a link read fast again (a delay that ended) is no candidate, whatever its older readings
# say. Half these bars read a loaded 2-core host's jitter (2-25 ms on any link) as a
# candidate on most screens of a clean ps_ctl run, each a confirmation.
SCREEN_LINK_EXTRA_NS = 2_000_000
SCREEN_LINK_RATIO = 3.0
# A link is screened on its last LINK_SAMPLES round trips (one more than the slow_link
# detector's MIN_LINK_SAMPLES) when all were read in the last LINK_FRESH_S: the probe reads
# each link in turn, every 8-32 s on 2 workers x 2 ps, but looks closer at every ps's link,
# half a second apart, once a ps's answers slow (collectors/rpc_probe.py); older readings
# would keep a delay that ended on the screen for half a minute. Four, not three: on a host
# at load 2-5, the last three rounds of two closer looks read a ps 3x above its peer (7-9 ms
# against 2-5 ms) with no delay on it, each an announced line (ps_tutorial's slow-link run
# at a9c1943; replayed with four, neither came, and 57 of 60 onsets of three runs were
# announced against 58: those runs are its tuning data). On runs it was not fitted on
# (ps_ctl at 27e9085, ps_tutorial at 868c178) three such lines still came in 40 onsets:
# rarer, not gone. LINK_RECENT_S of each link are kept (the probe's pace,
# ``probe_interval_s``).
LINK_SAMPLES = 4
LINK_FRESH_S = 10.0
LINK_RECENT_S = 60.0
# A link is a candidate only once it rose SCREEN_LINK_EXTRA_NS above its usual fastest round
# trip (the median of what the last USUAL_SCREENS screens that read it in line with its
# peers read of it): a rise, not a level, as for the input screen. A ps busier than the
# others can read 3x its peers at the fastest of three round trips on a loaded host all run
# long (ps_ctl's ps:1, 4-8 ms against 1-2 ms, judged and rejected on most screens); a link
# no screen has read in line with its peers yet takes the fastest of its kept round trips
# from before its slow run (``_fastest_before``), and a link slow from the start is the
# whole-run report's. (A slow reading never becomes the usual one: a delay that began
# before the link's usual was known would otherwise hide the next onsets.)
USUAL_SCREENS = 30
# Fewest records of a worker (steps) or a link (round trips) in the recent window for its
# median to be compared: fewer is too noisy to be worth a confirmation.
MIN_SCREEN_RECORDS = 4
# A worker's first seconds of records are not screened: its first steps or closures
# (tracing, warming caches, workers joining one after the other) are slower in every job,
# and a window of a few seconds would take that for a straggler.
WARMUP_S = 10.0
# A worker whose newest step record is this much older than the newest of any worker is
# left out of the straggler and input screens (``live_stops`` judges a worker that stopped).
LAGGING_S = 10.0


# The candidates a verdict (``live_verdict``) judges on the records the screen keeps
# (``kept``); the others (``slow_link``: a window of a few probe round trips) are confirmed
# by the analysis of a longer window (``live.LiveFindings``).
VERDICT_KINDS = frozenset({"straggler", "input_bound"})
# The kinds whose batches are kept as read, for the last KEPT_S seconds: what ``measure``,
# the straggler and input_bound detectors and the advisor read of a window; and how long
# (live.WINDOW_S, the window a verdict analyses, and a margin).
KEPT_KINDS = frozenset({"step", "closure", "rpc", "system", "job_process", "gpu", "fault", "session", "heartbeat"})
KEPT_S = 12.0
# The column that dates each kept kind's rows (window_load.WINDOW_TIME_COLUMNS; default time_ns).
KEPT_TIME_COLUMNS = {"step": "end_ns", "closure": "result_ns", "rpc": "recv_ns", "session": "ready_ns"}
# The kinds the screen reads; the reader passes over the others before checking them.
SCREENED_KINDS = frozenset({"step", "closure", "rpc", "transfer", "heartbeat", "liveness", "exit"}) | KEPT_KINDS


class _Series:
    """Time-stamped numpy columns, appended in batches, older rows dropped; ``version``
    changes whenever its rows do, so a screen over unchanged rows is not computed again."""

    def __init__(self):
        self.chunks: list[tuple[int, tuple[np.ndarray, ...]]] = []  # (newest time, (time_ns, *values)) per batch
        self.version = 0
        self._joined: tuple[np.ndarray, ...] | None = None  # the chunks concatenated, until they change

    def add(self, *columns: np.ndarray) -> None:
        if len(columns[0]):
            self.chunks.append((int(columns[0].max()), columns))
            self._changed()

    def forget_before(self, cutoff_ns: int) -> None:
        kept = [chunk for chunk in self.chunks if chunk[0] >= cutoff_ns]
        if len(kept) != len(self.chunks):
            self.chunks = kept
            self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._joined = None

    def since(self, cutoff_ns: int) -> tuple[np.ndarray, ...] | None:
        if not self.chunks:
            return None
        if self._joined is None:
            parts = [columns for _, columns in self.chunks]
            self._joined = tuple(np.concatenate(column) if len(parts) > 1 else column[0] for column in zip(*parts))
        columns = self._joined
        keep = columns[0] >= cutoff_ns
        return tuple(column[keep] for column in columns) if keep.any() else None

    def newest(self) -> int:
        return max((newest for newest, _ in self.chunks), default=0)


def _median(values: np.ndarray) -> float:
    """The (upper) median, without ``np.median``'s overhead (tens of µs a call, most of a screen)."""
    return float(np.partition(values, len(values) // 2)[len(values) // 2])


def _ints(batch: pa.RecordBatch, name: str, default: int = 0) -> np.ndarray:
    """An int64 column as numpy, nulls as ``default`` (zeros where the batch has no such column)."""
    if name not in batch.schema.names:
        return np.full(batch.num_rows, default, dtype=np.int64)
    column = batch.column(name)
    if column.null_count == len(column):  # a column of nulls (no such stamp): the common case
        return np.full(len(column), default, dtype=np.int64)
    if column.null_count:  # fill_null costs tens of µs: only where some are null
        column = column.fill_null(default)
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _task_of_file(path: Path) -> str:
    """The task a file's name says wrote it (``worker-0.tfdiag``: ``worker:0``), for a frame that names none."""
    return path.name[: -len(LOG_SUFFIX)].replace("-", ":", 1)


def _strings(batch: pa.RecordBatch, name: str) -> np.ndarray:
    column = batch.column(name)
    return (column.fill_null("") if column.null_count else column).to_numpy(zero_copy_only=False)


class LiveScreen:
    """Per-task windows of a running job's records, and the candidates they show.

    Args:
        run_dir: the run directory (``RUN``).
        own_task: the task that runs the screen (never reported silent: it is running).
    """

    def __init__(self, run_dir: str | os.PathLike, own_task: str | None = None):
        self.path = Path(run_dir)
        self.steps: dict[str, _Series] = defaultdict(_Series)  # worker -> (end, duration, wait, steps, compute)
        self.results: dict[str, _Series] = defaultdict(_Series)  # worker -> (closure result, its dispatch)
        self.links: dict[tuple[str, str, str], _Series] = defaultdict(_Series)  # (source, src, dst) -> (time, ns)
        self.lowest_input_share: dict[str, float] = {}  # a worker's lowest recent input-wait share so far
        self.usual_link_ns: dict[tuple, list[int]] = {}  # link -> its fastest recent round trip, screens it was no candidate
        self._slow_since: dict[tuple, int] = {}  # link the last links screen found slow -> its slow run's first round trip
        self.stops = Stops(own_task)
        self.last_step: dict[str, int] = {}  # worker -> its highest step number
        self.steps_per_record: dict[str, int] = {}  # worker -> training steps its latest step records cover
        self.newest_ns: dict[str, int] = {}  # worker -> its newest step record's end
        self.first_ns: dict[str, int] = {}  # worker -> its first step record's or closure result's time
        self.recent_from_ns = 0  # where the step screens' window of the last update begins
        self.now_ns = 0  # the time of the last update
        self.bytes_read = 0
        self.kept: list[tuple[Path, str, str, int, pa.RecordBatch]] = []  # (file, kind, task, newest time, batch)
        self._files: dict[Path, tuple[tuple[int, int], int]] = {}  # path -> ((device, inode), next offset)
        self._listed: tuple[int, list[Path]] = (-1, [])  # (the directory's mtime, its task files)
        self._rows: dict[str, tuple[np.ndarray, ...]] | None = None  # worker_rows of the last update
        self._screened: dict[str, tuple[tuple, list]] = {}  # screen -> (its series' versions, what it found)

    def update(self, now_ns: int) -> None:
        """Reads what the task files gained and drops what no screen reads any more."""
        directory = log_dir(self.path)
        if not directory.is_dir():
            return
        self.stops.before_read(now_ns)
        mtime_ns = directory.stat().st_mtime_ns
        if mtime_ns != self._listed[0]:  # a file was added, removed or renamed: list the run again
            self._listed = (mtime_ns, task_files(self.path)[0])
        for path in self._listed[1]:
            self._read(path)
        self._rows = None
        self.now_ns = now_ns
        self.kept = [item for item in self.kept if item[3] >= now_ns - int(KEPT_S * 1e9)]
        newest = max(self.newest_ns.values(), default=now_ns)
        current = [ns for ns in self.newest_ns.values() if ns >= newest - LAGGING_S * 1e9]
        cutoff = min(current, default=now_ns) - int(RECENT_S * 1e9)
        self.recent_from_ns = cutoff
        for series in self.steps.values():
            series.forget_before(cutoff)
        for series in self.results.values():
            series.forget_before(series.newest() - int(RECENT_S * 1e9))
        for series in self.links.values():
            series.forget_before(series.newest() - int(LINK_RECENT_S * 1e9))

    def _read(self, path: Path) -> None:
        try:
            stat = path.stat()
        except OSError:
            return
        identity, offset = self._files.get(path, ((0, 0), 0))
        if identity != (stat.st_dev, stat.st_ino) or stat.st_size < offset:
            offset = 0  # a new or replaced file (a restarted task): read from its start
            self.kept = [item for item in self.kept if item[0] != path]
        if stat.st_size == offset:
            return
        result = read_task_file(path, offset, SCREENED_KINDS)
        self.bytes_read += result.end_offset - offset
        self._files[path] = ((stat.st_dev, stat.st_ino), result.end_offset)
        for frame in result.frames:
            fold = self._FOLDS.get(frame.kind)
            for batch in frame.batches:
                if not batch.num_rows:
                    continue
                if frame.kind in KEPT_KINDS:
                    newest = int(_ints(batch, KEPT_TIME_COLUMNS.get(frame.kind, "time_ns")).max())
                    self.kept.append((path, frame.kind, frame.task or _task_of_file(path), newest, batch))
                if fold is not None:
                    fold(self, batch)
                else:
                    self.stops.fold(frame.kind, batch)

    def _fold_steps(self, batch: pa.RecordBatch) -> None:
        tasks, end = _strings(batch, "task"), _ints(batch, "end_ns")
        duration = end - _ints(batch, "begin_ns")
        wait, steps = _ints(batch, "input_wait_ns"), np.maximum(_ints(batch, "steps", 1), 1)
        compute, numbers = _ints(batch, "compute_ns", -1), _ints(batch, "step")
        for task in set(tasks.tolist()):
            mine = tasks == task
            self.steps[task].add(end[mine], duration[mine], wait[mine], steps[mine], compute[mine])
            self.last_step[task] = max(self.last_step.get(task, 0), int(numbers[mine].max()))
            self.steps_per_record[task] = int(_median(steps[mine]))
            self.newest_ns[task] = max(self.newest_ns.get(task, 0), int(end[mine].max()))
            self.first_ns.setdefault(task, int(end[mine].min()))

    def training_step(self, task: str) -> int | None:
        """The job's training step at ``task``'s newest step record (``live_transition.training_step``)."""
        if task not in self.last_step:
            return None
        return training_step(self.last_step[task], self.steps_per_record.get(task, 1), closures=bool(self.results))

    def _fold_closures(self, batch: pa.RecordBatch) -> None:
        """A coordinator's closure records come within a second of each result, its step
        records (with the workers' timings) up to FETCH_EVERY_S later: the results show a
        slowed worker first."""
        workers, result, ok = _strings(batch, "worker"), _ints(batch, "result_ns"), _ints(batch, "ok")
        for worker in set(workers.tolist()) - {""}:
            mine = (workers == worker) & (ok == 1)
            self.results[worker].add(result[mine], _ints(batch, "dispatch_ns")[mine])
            if mine.any():
                self.first_ns.setdefault(worker, int(result[mine].min()))

    def _fold_links(self, batch: pa.RecordBatch, source: str) -> None:
        src, dst = _strings(batch, "src"), _strings(batch, "dst")
        if source == "rpc":
            keep = _ints(batch, "payload_bytes") == 0  # latency probes only
            times, took = _ints(batch, "recv_ns"), _ints(batch, "recv_ns") - _ints(batch, "send_ns")
            for target in set(dst[keep].tolist()):
                self.stops.answered(target, int(times[keep & (dst == target)].max()))
            # Probes to workers are answered by their busy threads: their load, left to the
            # straggler screen, as the slow_link detector leaves them.
            keep &= np.char.startswith(dst.astype(str), "ps:")
        else:
            keep = np.ones(batch.num_rows, dtype=bool)
            times, took = _ints(batch, "time_ns"), _ints(batch, "duration_ns")
        for pair in set(zip(src[keep].tolist(), dst[keep].tolist())):
            mine = keep & (src == pair[0]) & (dst == pair[1])
            self.links[(source, *pair)].add(times[mine], took[mine])

    _FOLDS = {"step": _fold_steps, "closure": _fold_closures, "rpc": lambda self, batch: self._fold_links(batch, "rpc"),
              "transfer": lambda self, batch: self._fold_links(batch, "transfer")}

    def candidates(self) -> list[tuple[str, str]]:
        """The (kind, task) pairs the recent window shows, each worth confirming. Each screen
        runs again only when the rows it reads changed (step records come in batches every
        few seconds from a coordinator, round trips at the probe's pace)."""
        found = []
        for name, screen, series in (("steps", lambda: self._stragglers() + self._input_waits(), self.steps),
                                     ("results", self._slow_results, self.results),
                                     ("links", self._slow_links, self.links)):
            versions = (tuple((key, item.version) for key, item in series.items()), tuple(self.first_ns.items()),
                        self.now_ns if name == "links" else None)  # a link's readings age (LINK_FRESH_S)
            if self._screened.get(name, (None,))[0] != versions:
                self._screened[name] = (versions, screen())
            found += self._screened[name][1]
        return sorted(set(found))

    def worker_rows(self) -> dict[str, tuple[np.ndarray, ...]]:
        """Each worker's step records of the recent window: (end, duration, wait, steps, compute)."""
        if self._rows is None:
            self._rows = self._worker_rows()
        return self._rows

    def _worker_rows(self) -> dict[str, tuple[np.ndarray, ...]]:
        newest = max(self.newest_ns.values(), default=0)
        current = {task: ns for task, ns in self.newest_ns.items() if ns >= newest - LAGGING_S * 1e9}
        if not current:
            return {}
        reached = min(current.values())
        if reached - max(self.first_ns[task] for task in current) < WARMUP_S * 1e9:
            return {}
        rows = {task: self.steps[task].since(reached - int(RECENT_S * 1e9)) for task in current}
        return {task: tuple(column[row[0] <= reached] for column in row)
                for task, row in rows.items() if row is not None and (row[0] <= reached).any()}

    def _stragglers(self) -> list[tuple[str, str]]:
        rows = self.worker_rows()
        if len(rows) < 2:
            return []
        window_s = RECENT_S
        measures = {}  # task -> (median step, period, median own compute or nan), per training step
        for task, (end, duration, _, steps, compute) in rows.items():
            if len(end) < MIN_SCREEN_RECORDS and steps.sum() * 2 > max(r[3].sum() for r in rows.values()):
                continue  # too few records to judge, and not for being slow
            own = compute[compute >= 0]
            measures[task] = (_median(duration / steps), window_s * 1e9 / steps.sum(),
                              _median(own) if len(own) >= MIN_SCREEN_RECORDS else np.nan)
        found = []
        for task, mine in measures.items():
            others = [value for other, value in measures.items() if other != task]
            if not others:
                continue
            typical = np.median(np.array(others), axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratios = np.array(mine) / typical
            if np.nanmax(np.where(np.isfinite(ratios), ratios, np.nan), initial=0) >= SCREEN_SLOWDOWN:
                found.append(("straggler", task))
        return found

    def _slow_results(self) -> list[tuple[str, str]]:
        """Workers whose closures came back SCREEN_SLOWDOWN times less often than the others'
        over the last RECENT_S of results."""
        newest = max((series.newest() for series in self.results.values()), default=0)
        counts = {}
        for worker, series in self.results.items():
            recent = series.since(newest - int(RECENT_S * 1e9))
            counts[worker] = len(recent[0]) if recent is not None else 0
        if len(counts) < 2 or max(counts.values()) < MIN_SCREEN_RECORDS or \
                newest - max(self.first_ns.get(worker, newest) for worker in counts) < WARMUP_S * 1e9:
            return []
        found = []
        for worker, count in counts.items():
            others = _median(np.array([value for other, value in counts.items() if other != worker]))
            if others >= MIN_SCREEN_RECORDS and others >= SCREEN_SLOWDOWN * max(count, 0.5):
                found.append(("straggler", worker))
        return found

    def _input_waits(self) -> list[tuple[str, str]]:
        shares = {task: wait.sum() / max(duration.sum(), 1)
                  for task, (_, duration, wait, _, _) in self.worker_rows().items() if len(duration) >= MIN_SCREEN_RECORDS}
        found = []
        for task, share in shares.items():
            others = [value for other, value in shares.items() if other != task]
            reference = min(self.lowest_input_share.get(task, share), _median(np.array(others)) if others else 1.0)
            if share - reference >= SCREEN_INPUT_SHARE:
                found.append(("input_bound", task))
            self.lowest_input_share[task] = min(self.lowest_input_share.get(task, share), share)
        return found

    def probe_interval_s(self, targets: frozenset[str] | None = None) -> float | None:
        """The seconds between a link's last ``LINK_SAMPLES`` round trips: the median over
        every link, or the shortest over the links to ``targets``; None before any such link
        has two. The probe looks closer at the links once training slows
        (``collectors/rpc_probe.py``): the link that made a slow-link candidate is probed
        seconds apart, the others up to 32 s, so its window holds its readings since the change."""
        gaps = []
        for (_, _, dst), series in self.links.items():
            recent = series.since(series.newest() - int(LINK_RECENT_S * 1e9))
            if recent is not None and len(recent[0]) >= 2 and (targets is None or dst in targets):
                times = np.sort(recent[0])[-LINK_SAMPLES:]
                gaps.append((times[-1] - times[0]) / (len(times) - 1) / 1e9)
        if not gaps:
            return None
        return min(gaps) if targets is not None else _median(np.array(gaps))

    def slow_since_ns(self, task: str) -> int | None:
        """When the links to ``task`` the screen last found slow began their run of slow round
        trips (the earliest over their sources); None when it found none. A confirmation that
        judges from there on judges what the screen saw, not a round trip from before the
        link turned slow (the detector judges a link by its fastest)."""
        since = [ns for (_, _, dst), ns in self._slow_since.items() if dst == task]
        return min(since) if since else None

    def _slow_links(self) -> list[tuple[str, str]]:
        fresh = {}  # link -> (times, round trips) of its fresh round trips, oldest first, if LINK_SAMPLES
        for key, series in self.links.items():
            recent = series.since(self.now_ns - int(LINK_FRESH_S * 1e9))
            if recent is not None and len(recent[0]) >= LINK_SAMPLES:
                order = np.argsort(recent[0])
                fresh[key] = (recent[0][order], recent[1][order])
        found, self._slow_since = [], {}
        for key, (times, took) in fresh.items():
            # Each peer at the fastest of its fresh round trips: what its path costs.
            peers = [int(other[1].min()) for link, other in fresh.items() if link != key and link[:2] == key[:2]]
            if not peers:
                continue  # one ps alone is never slow_link: judged against the others
            reference = _median(np.array(peers))
            slow = (took - reference >= SCREEN_LINK_EXTRA_NS) & (took >= SCREEN_LINK_RATIO * reference)
            rtt = int(took[-LINK_SAMPLES:].min())
            usual = self.usual_link_ns.setdefault(key, [])
            if not slow[-LINK_SAMPLES:].all():
                usual.append(rtt)  # in line with its peers: what the link usually reads
                del usual[:-USUAL_SCREENS]
                continue
            run = len(slow) - (np.flatnonzero(~slow).max() + 1 if (~slow).any() else 0)
            since = int(times[-run])
            usual_ns = _median(np.array(usual)) if usual else self._fastest_before(key, since)
            if usual_ns is not None and rtt - usual_ns >= SCREEN_LINK_EXTRA_NS:
                found.append(("slow_link", key[2]))
                self._slow_since[key] = since
        return found

    def _fastest_before(self, key: tuple, since_ns: int) -> float | None:
        """The fastest of a link's kept round trips (LINK_RECENT_S) from before ``since_ns``:
        its usual when no screen has yet read it in line with its peers. The probe reads a
        link every 8-32 s, so four fresh round trips of each link come together only when it
        looks closer, and that is once a link turned slow."""
        kept = self.links[key].since(0)
        older = kept[1][kept[0] < since_ns] if kept is not None else ()
        return float(older.min()) if len(older) else None
