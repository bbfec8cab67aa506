"""Writes a large synthetic run in the store's real format, for the scale benchmark.

Every worker gets its own task file (as in a real run), with steps around ``--step-ms``,
and its system sampler reports once a second of simulated time; with ``--real-cadence`` at
the collectors' own cadence over the run's duration: a system sample every
``SAMPLE_EVERY_S`` (2 s; ``--sample-s``) and a heartbeat every ``HEARTBEAT_EVERY_S`` (5 s), each at a
step's begin. The chief's file holds
the RPC probe as ``src/tfdiag/collectors/rpc_probe.py`` runs it: each worker → ps link probed once
plain and once with a 1 MB payload when the probe functions are prepared, two more full
passes, then one link a second, in turn. Records are built as Arrow batches with numpy and framed
by ``tfdiag.store.framing.encode_frame``, the function ``TaskWriter`` frames its records
with (same schema, metadata and bytes per frame), so 100 million records take minutes,
not the hours ``TaskWriter.append`` would take one dict at a time. Workers are written by
``--jobs`` processes. ``--append`` grows an existing run by ``--steps`` more steps per
worker, continuing each worker's step numbers and clock (state in ``RUN/synth.json``), as
a live run grows between two analyses.

A real writer flushes every 0.5 s, so a 20 ms-step worker writes frames of about 25 step
records; ``--frame-rows`` sets the frame size here (the loader's cost per frame is
measured separately in ``benchmarks/scale.py --frame-cost``).

    python benchmarks/synth.py /tmp/big --workers 64 --steps 156250     # 10 million step records
    python benchmarks/synth.py /tmp/big --workers 64 --steps 1000 --append
    python benchmarks/synth.py /tmp/day --workers 1024 --steps 97657 --step-ms 884 --real-cadence --sample-s 1  # a day
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

from tfdiag.events import HEARTBEAT_EVERY_S, KINDS, task_file_stem
from tfdiag.store import write_manifest
from tfdiag.store.framing import encode_frame
from tfdiag.store.paths import LOG_SUFFIX, log_dir

START_NS = 1_700_000_000_000_000_000
SECOND = 1_000_000_000
GAP_NS = 1_000_000  # between one step's end and the next one's begin
PAYLOAD_BYTES = 1 << 20  # what the probe's payload passes move
STATE_NAME = "synth.json"
SAMPLE_EVERY_S = 2  # src/tfdiag/collectors/system.py's cadence (not imported: the analysis side never imports collectors)


def _batch(kind: str, task: str, columns: dict) -> pa.RecordBatch:
    schema = KINDS[kind].arrow_schema(task)
    arrays = [pa.array(columns[name], field.type) if name in columns else pa.nulls(len(next(iter(columns.values()))),
                                                                                     field.type)
              for name, field in zip(schema.names, schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def write_probes(run: str, workers: int, ps: int, probe: dict, until_ns: int, seed: int) -> None:
    """Appends the chief's probes up to ``until_ns``, from where ``probe`` says the last write stopped."""
    links = [(f"worker:{w}", f"ps:{p}") for w in range(workers) for p in range(ps)]
    rng = np.random.default_rng([seed, probe["count"]])
    sends, payloads, which = [], [], []
    if probe["count"] == 0:  # prepare (plain and 1 MB) and two more full passes, 2 ms apart
        for payload in (0, PAYLOAD_BYTES, 0, 0):
            which += range(len(links))
            payloads += [payload] * len(links)
        sends = list(START_NS + 2_000_000 * np.arange(len(which)))
        probe["time_ns"] = int(sends[-1]) + SECOND
    while probe["time_ns"] < until_ns:  # then one link a second
        which.append(probe["count"] % len(links))
        payloads.append(0)
        sends.append(probe["time_ns"])
        probe["time_ns"] += SECOND
        probe["count"] += 1
    probe["count"] = max(probe["count"], 1)
    if not sends:
        return
    sent, payload = np.asarray(sends, np.int64), np.asarray(payloads, np.int64)
    rtt = rng.gamma(4.0, 100_000, len(sent)).astype(np.int64) + payload * 8  # 1 MB: ~8 ms more
    batch = _batch("rpc", "chief:0", {
        "src": [links[i][0] for i in which], "dst": [links[i][1] for i in which], "send_ns": sent,
        "remote_ns": sent + rtt // 2, "recv_ns": sent + rtt, "payload_bytes": payload})
    with open(log_dir(run) / ("chief-0" + LOG_SUFFIX), "ab") as file:
        file.write(encode_frame(batch))


def _first_of_each(begins: np.ndarray, begin_ns: int, period_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(times, steps): the begin of each step that begins a new period of ``period_ns``."""
    periods = (begins - START_NS) // period_ns
    steps = np.flatnonzero(np.diff(periods, prepend=(begin_ns - START_NS) // period_ns - 1))
    return begins[steps], steps


def _every(begins: np.ndarray, end_ns: int, period_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """(times, steps): every multiple of ``period_ns`` since the run's start from the first
    step's begin to ``end_ns``, as a collector's thread samples, and the step running then."""
    first = START_NS + -(-(int(begins[0]) - START_NS) // period_ns) * period_ns
    times = np.arange(first, end_ns, period_ns, dtype=np.int64)
    return times, np.searchsorted(begins, times, "right") - 1


def write_worker(run: str, index: int, first_step: int, begin_ns: int, steps: int, step_ms: float,
                 frame_rows: int, seed: int, real_cadence: bool = False,
                 sample_s: float = SAMPLE_EVERY_S) -> tuple[int, int]:
    """Appends ``steps`` steps of ``worker:index`` (its system samples, and with
    ``real_cadence`` its heartbeats) to its task file.

    Returns (the next step number, the next step's begin time).
    """
    task = f"worker:{index}"
    rng = np.random.default_rng([seed, index, first_step])
    durations = (rng.gamma(16.0, step_ms / 16.0, steps) * 1e6).astype(np.int64)
    waits = (durations * rng.uniform(0.0, 0.1, steps)).astype(np.int64)
    begins = begin_ns + np.concatenate(([0], np.cumsum(durations[:-1] + GAP_NS)))
    numbers = np.arange(first_step, first_step + steps, dtype=np.int64)
    end_ns = int(begins[-1] + durations[-1])
    if real_cadence:  # at the collectors' periods, whatever the steps
        sampled = _every(begins, end_ns, int(sample_s * SECOND))
        beats = _every(begins, end_ns, int(HEARTBEAT_EVERY_S * SECOND))
    else:  # a system sample at the first step of each simulated second
        sampled = _first_of_each(begins, begin_ns, SECOND)
        beats = (sampled[0][:0], sampled[1][:0])
    path = log_dir(run) / (task_file_stem(task) + LOG_SUFFIX)
    with open(path, "ab") as file:
        for start in range(0, steps, frame_rows):
            stop = min(start + frame_rows, steps)
            chunk = slice(start, stop)
            size = stop - start
            frames = [encode_frame(_batch("step", task, {
                "task": [task] * size, "step": numbers[chunk], "begin_ns": begins[chunk],
                "end_ns": begins[chunk] + durations[chunk], "input_wait_ns": waits[chunk],
                "examples": np.full(size, 64, np.int64), "clock_task": [task] * size}))]
            times, at = (values[(sampled[1] >= start) & (sampled[1] < stop)] for values in sampled)
            if len(at):
                frames.append(encode_frame(_batch("system", task, {
                    "host": [task.replace(":", "-")] * len(at), "task": [task] * len(at), "time_ns": times,
                    "cpu_pct": rng.uniform(40, 90, len(at)), "mem_used_frac": np.full(len(at), 0.4),
                    "net_sent_bytes": numbers[at] * 1000, "net_recv_bytes": numbers[at] * 1000,
                    "disk_read_bytes": np.zeros(len(at), np.int64), "disk_write_bytes": np.zeros(len(at), np.int64)})))
            times, at = (values[(beats[1] >= start) & (beats[1] < stop)] for values in beats)
            if len(at):
                frames.append(encode_frame(_batch("heartbeat", task, {
                    "task": [task] * len(at), "time_ns": times, "subject": [task] * len(at),
                    "progress": numbers[at], "closed": np.zeros(len(at), bool)})))
            file.write(b"".join(frames))
    return first_step + steps, end_ns + GAP_NS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run directory to create (or grow, with --append)")
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--steps", type=int, default=156_250, help="steps per worker")
    parser.add_argument("--ps", type=int, default=4)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--frame-rows", type=int, default=4096, help="step records per frame")
    parser.add_argument("--jobs", type=int, default=2, help="processes writing workers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--append", action="store_true", help="grow an existing synthetic run")
    parser.add_argument("--real-cadence", action="store_true",
                        help="system samples every 2 s and heartbeats every 5 s, as the collectors write them")
    parser.add_argument("--sample-s", type=float, default=SAMPLE_EVERY_S,
                        help="with --real-cadence: the system sampler's period (1: the issue's 88 M samples a day)")
    args = parser.parse_args(argv)
    state_path = Path(args.run) / STATE_NAME
    if args.append:
        state = json.loads(state_path.read_text())
    else:
        write_manifest(args.run, strategy="ParameterServerStrategy", tensorflow_version="synthetic", task="chief:0",
                       cluster={"chief": ["host-c:2222"], "worker": [f"host-{i}:2222" for i in range(args.workers)],
                                "ps": [f"host-ps{i}:2222" for i in range(args.ps)]}, start_time_ns=START_NS)
        log_dir(args.run).mkdir(parents=True, exist_ok=True)
        state = {"next": [[0, START_NS]] * args.workers, "ps": args.ps, "probe": {"count": 0, "time_ns": START_NS},
                 "real_cadence": args.real_cadence, "sample_s": args.sample_s}
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(write_worker, args.run, index, first, begin, args.steps, args.step_ms,
                               args.frame_rows, args.seed, state.get("real_cadence", False),
                               state.get("sample_s", SAMPLE_EVERY_S))
                   for index, (first, begin) in enumerate(state["next"])]
        state["next"] = [list(future.result()) for future in futures]
    write_probes(args.run, len(state["next"]), state["ps"], state["probe"], max(end for _, end in state["next"]),
                 args.seed)
    state_path.write_text(json.dumps(state))
    print(f"wrote {len(state['next']) * args.steps} step records to {args.run} in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
