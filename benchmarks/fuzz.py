"""Mutation fuzzer of the reader, the loader, the analysis and every renderer.

A small real run (two workers' step records plus notes, shard counters, RPC probes and
system samples, written through the real ``TaskWriter``) is damaged one way per case:
bit flips, byte splices and truncations of a task file; Arrow payloads damaged (bytes,
or a string column's offsets), swapped
for other schemas or given int64 extremes, with the CRC recomputed so they reach the
decoder; frames duplicated, reordered or given huge lengths; whole files copied; the
manifest malformed; FIFOs, directories, dangling links, link loops and /dev/zero named
``*.tfdiag``. Each damaged run is loaded, analysed and rendered (text, json, markdown,
html, Chrome trace) in a worker process, so a segfault or a hang is seen as such.

Outcomes: ok, skipped-counted (the run reports skipped records), warning (warnings but
no skip), and the failures: crash (the worker died), hang (no answer within
``--timeout``), internal-error (an exception), wrong (a good frame lost, a record counted
twice, or a damaged file that no warning names). Exit status 1 if any failure.

    python benchmarks/fuzz.py --cases 600 --seed 1

Each case runs in a worker process (this file run again with ``--worker``, kept by
``harness.isolated``), replaced after a crash or a hang.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* importable
from benchmarks.harness.isolated import IsolatedWorker  # noqa: E402
from tfdiag.store import TaskWriter, log_dir, write_manifest
from tfdiag.store.framing import HEADER, MAGIC, encode_frame

FAILURES = ("crash", "hang", "internal-error", "wrong")
OUTCOMES = ("ok", "skipped-counted", "warning") + FAILURES
WORKERS = ("worker:0", "worker:1")
STEPS = 40  # per worker, in frames of STEPS_PER_FRAME
STEPS_PER_FRAME = 10
START_NS = 1_700_000_000_000_000_000
MS = 1_000_000
TARGET = "worker-0.tfdiag"  # the task file the byte mutations damage


def write_base_run(run: Path) -> None:
    """The undamaged run every case starts from."""
    write_manifest(run, strategy="MultiWorkerMirroredStrategy", cluster={"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                   tensorflow_version="2.21.0", task="worker:0")
    for index, task in enumerate(WORKERS):
        writer = TaskWriter(run, task, flush_interval_s=3600)
        begin = START_NS + index * MS
        for step in range(STEPS):
            writer.append("step", task=task, step=step, begin_ns=begin, end_ns=begin + (20 + 10 * index) * MS,
                          input_wait_ns=MS, examples=32, clock_task=task, compute_ns=(10 + 10 * index) * MS)
            begin += (21 + 10 * index) * MS
            if (step + 1) % STEPS_PER_FRAME == 0:
                writer.append("shard", task=task, time_ns=begin, examples=32 * (step + 1), file="", policy="DATA")
                writer.append("system", host="h", task=task, time_ns=begin, cpu_pct=50.0, mem_used_frac=0.5,
                              net_sent_bytes=step, net_recv_bytes=step, disk_read_bytes=0, disk_write_bytes=0,
                              cpu_count=2, pid=1000 + index, proc_cpu_pct=25.0, job_cpu_pct=45.0, job_processes=2,
                              wakes=10, late_wakes=index, late_ms=12.5 * index, throttled_ms=0.0)
                peer = WORKERS[1 - index]
                writer.append("rpc", src=task, dst=peer, send_ns=begin, remote_ns=begin + MS, recv_ns=begin + 2 * MS,
                              payload_bytes=0)
                writer.flush()
        writer.append("note", task=task, time_ns=begin, level="info", message="done")
        writer.close()


def split_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, whole frame) of each frame of an undamaged task file."""
    frames, position = [], 0
    while position + HEADER.size <= len(data):
        length = HEADER.unpack_from(data, position)[2]
        frames.append((position, data[position : position + HEADER.size + length]))
        position += HEADER.size + length
    return frames


def step_rows(frame: bytes) -> int:
    """How many step records a frame holds (0 for other kinds)."""
    reader = pa.ipc.open_stream(pa.py_buffer(frame[HEADER.size :]))
    return reader.read_all().num_rows if reader.schema.metadata[b"kind"] == b"step" else 0


def reframe(payload: bytes, records: int) -> bytes:
    """A frame around ``payload`` with its CRC recomputed."""
    return HEADER.pack(MAGIC, 1, len(payload), zlib.crc32(payload), records) + payload


class Case:
    """One damaged copy of the base run, and what loading it must still give."""

    def __init__(self, run: Path, rng: random.Random):
        self.run = run
        self.rng = rng
        self.path = log_dir(run) / TARGET
        self.data = self.path.read_bytes()
        self.frames = split_frames(self.data)
        self.step_total = sum(step_rows(frame) for _, frame in self.frames)
        self.may_lose = 0  # step records of worker:0 that the damage may cost
        self.named = None  # a file name some warning must contain

    def write(self, data: bytes, lost_frames=()) -> None:
        self.path.write_bytes(data)
        self.may_lose = sum(step_rows(frame) for _, frame in lost_frames)
        self.named = TARGET if lost_frames else None

    def pick(self) -> tuple[int, bytes]:
        return self.rng.choice(self.frames)

    def replace(self, chosen: tuple[int, bytes], new: bytes) -> None:
        offset, frame = chosen
        self.write(self.data[:offset] + new + self.data[offset + len(frame) :], [chosen])


def mutate_bitflip(case: Case) -> str:
    data = bytearray(case.data)
    flips = [case.rng.randrange(len(data) * 8) for _ in range(case.rng.randint(1, 8))]
    for bit in flips:
        data[bit // 8] ^= 1 << (bit % 8)
    hit = [(o, f) for o, f in case.frames if any(o <= bit // 8 < o + len(f) for bit in flips)]
    case.write(bytes(data), hit)
    return f"{len(flips)} bit flips"


def mutate_payload(case: Case) -> str:
    """Bit flips or a byte splice inside one payload, CRC recomputed (so the decoder sees it)."""
    chosen = case.pick()
    payload = bytearray(chosen[1][HEADER.size :])
    records = HEADER.unpack_from(chosen[1])[4]
    if case.rng.random() < 0.5:
        for _ in range(case.rng.randint(1, 16)):
            bit = case.rng.randrange(len(payload) * 8)
            payload[bit // 8] ^= 1 << (bit % 8)
        what = "payload bit flips"
    else:
        start = case.rng.randrange(len(payload))
        stop = min(len(payload), start + case.rng.randint(1, 64))
        payload[start:stop] = case.rng.randbytes(case.rng.choice([stop - start, case.rng.randint(0, 128)]))
        what = "payload splice"
    case.replace(chosen, reframe(bytes(payload), records))
    return what


def mutate_offsets(case: Case) -> str:
    """One offset of a string column's offsets buffer overwritten, CRC recomputed: well-formed
    IPC holding invalid Arrow, the damage that crashes compute kernels."""
    chosen = case.rng.choice([item for item in case.frames if step_rows(item[1])])
    payload = chosen[1][HEADER.size :]
    batch = pa.ipc.open_stream(pa.py_buffer(payload)).read_next_batch()
    strings = [i for i, f in enumerate(batch.schema) if f.type == pa.string()]
    column = case.rng.choice(strings)
    offsets = batch.column(column).buffers()[1].to_pybytes()[: 4 * (batch.num_rows + 1)]
    damaged = bytearray(offsets)
    slot = case.rng.randrange(batch.num_rows + 1)
    value = case.rng.choice([-1, 1 << 30, 2**31 - 1, -(2**31), case.rng.randint(0, 1 << 16)])
    struct.pack_into("<i", damaged, 4 * slot, value)
    records = HEADER.unpack_from(chosen[1])[4]
    at = payload.rfind(offsets)  # in the record batch body, after the schema message
    case.replace(chosen, reframe(payload[:at] + bytes(damaged) + payload[at + len(offsets) :], records))
    return f"offset {slot} of {batch.schema.names[column]} = {value}"


def mutate_truncate(case: Case) -> str:
    cut = case.rng.randrange(len(case.data))
    case.write(case.data[:cut], [(o, f) for o, f in case.frames if o + len(f) > cut])
    return f"truncated at {cut}"


def mutate_huge_length(case: Case) -> str:
    offset, frame = chosen = case.pick()
    near = len(frame) + case.rng.randint(1, 4096)
    length = case.rng.choice([0xFFFFFFFF, case.rng.randint(len(frame), 0xFFFFFFFF), near])
    header = bytearray(frame[: HEADER.size])
    struct.pack_into("<I", header, 5, length)
    case.replace(chosen, bytes(header) + frame[HEADER.size :])
    return f"length {length}"


def mutate_duplicate(case: Case) -> str:
    _, frame = case.pick()
    at = case.rng.choice([o for o, _ in case.frames] + [len(case.data)])
    case.write(case.data[:at] + frame + case.data[at:])
    case.named = TARGET + ":"  # "worker-0.tfdiag: skipped ... duplicate"
    return "duplicated frame"


def mutate_reorder(case: Case) -> str:
    frames = [frame for _, frame in case.frames]
    case.rng.shuffle(frames)
    case.write(b"".join(frames))
    return "reordered frames"


def mutate_copy_file(case: Case) -> str:
    shutil.copyfile(case.path, case.path.with_name("worker-0-copy.tfdiag"))
    case.named = "worker-0-copy.tfdiag"
    return "copied task file"


def _schema_variants(batch: pa.RecordBatch) -> dict[str, bytes]:
    def stream(*batches, schema=None):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema or batches[0].schema) as writer:
            for item in batches:
                writer.write_batch(item)
        return sink.getvalue().to_pybytes()

    meta = dict(batch.schema.metadata)
    as_strings = pa.RecordBatch.from_arrays([column.cast(pa.string()) for column in batch.columns],
                                            names=batch.schema.names).replace_schema_metadata(meta)
    dictionary = batch.set_column(0, "task", batch.column(0).dictionary_encode())
    return {
        "kind swapped": stream(batch.replace_schema_metadata({**meta, b"kind": b"rpc"})),
        "unknown kind": stream(batch.replace_schema_metadata({**meta, b"kind": b"future"})),
        "non-UTF-8 metadata": stream(batch.replace_schema_metadata({**meta, b"kind": b"\xff\xfe"})),
        "no metadata": stream(batch.replace_schema_metadata(None)),
        "schema_version 99": stream(batch.replace_schema_metadata({**meta, b"schema_version": b"99"})),
        "columns as strings": stream(as_strings),
        "columns reversed": stream(batch.select(list(reversed(batch.schema.names)))),
        "dictionary column": stream(dictionary),
        "two batches": stream(batch, batch),
        "no batch": stream(schema=batch.schema),
    }


def mutate_schema(case: Case) -> str:
    chosen = case.pick()
    batch = pa.ipc.open_stream(pa.py_buffer(chosen[1][HEADER.size :])).read_next_batch()
    name, payload = case.rng.choice(sorted(_schema_variants(batch).items()))
    records = batch.num_rows * (2 if name == "two batches" else 1)
    case.replace(chosen, reframe(payload, records))
    if name == "two batches":  # read whole: more records, none lost; the copy is a duplicate
        case.may_lose, case.named = -step_rows(chosen[1]), None
    return name


def mutate_int_extremes(case: Case) -> str:
    chosen = case.pick()
    reader = pa.ipc.open_stream(pa.py_buffer(chosen[1][HEADER.size :]))
    batch = reader.read_next_batch()
    ints = [i for i, f in enumerate(batch.schema) if f.type == pa.int64()]
    column = case.rng.choice(ints)
    values = batch.column(column).to_pylist()
    values[case.rng.randrange(len(values))] = case.rng.choice([-(2**63), 2**63 - 1, -1, 2**62 + 1])
    damaged = batch.set_column(column, batch.schema.field(column), pa.array(values, pa.int64()))
    case.replace(chosen, encode_frame(damaged))
    return f"int extreme in {batch.schema.names[column]}"


MANIFESTS = {
    "malformed": b'{"strategy": ',
    "empty": b"",
    "non-UTF-8": b'{"strategy": "\xff\xfe"}',
    "a list": b"[1, 2]",
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "wrong types": json.dumps({"strategy": 3, "cluster": [1], "task": {"a": 1}, "start_time_ns": -5,
                               "schema_version": "1"}).encode(),
    "schema_version 99": json.dumps({"schema_version": 99, "strategy": "MultiWorkerMirroredStrategy"}).encode(),
    "huge ints": json.dumps({"start_time_ns": 10**40, "cluster": {"worker": ["a"] * 3}}).encode(),
}


def mutate_manifest(case: Case) -> str:
    name, content = case.rng.choice(sorted(MANIFESTS.items()))
    (log_dir(case.run) / "manifest.json").write_bytes(content)
    case.named = "manifest.json"
    return f"manifest {name}"


def mutate_special_file(case: Case) -> str:
    directory = log_dir(case.run)
    name = case.rng.choice(["fifo", "directory", "dangling link", "link loop", "/dev/zero link", "link out of the run"])
    target = directory / "odd.tfdiag"
    if name == "fifo":
        os.mkfifo(target)
    elif name == "directory":
        target.mkdir()
    elif name == "dangling link":
        target.symlink_to(directory / "missing")
    elif name == "link loop":
        target.symlink_to(target)
    elif name == "/dev/zero link":
        target.symlink_to("/dev/zero")
    else:
        target.symlink_to(case.run.parent / "base" / PLUGIN_SUBPATH / TARGET)
    case.named = "odd.tfdiag"
    return name


PLUGIN_SUBPATH = os.path.join("plugins", "tfdiag")
MUTATIONS = {
    "bitflip": mutate_bitflip,
    "payload": mutate_payload,
    "arrow-offsets": mutate_offsets,
    "truncate": mutate_truncate,
    "huge-length": mutate_huge_length,
    "duplicate-frame": mutate_duplicate,
    "reorder": mutate_reorder,
    "copy-file": mutate_copy_file,
    "schema": mutate_schema,
    "int-extremes": mutate_int_extremes,
    "manifest": mutate_manifest,
    "special-file": mutate_special_file,
}


def mutation_of(index: int) -> str:
    """Cases cycle through the mutation classes, so a small budget covers each."""
    return list(MUTATIONS)[index % len(MUTATIONS)]


def run_case(base: Path, work: Path, seed: int, index: int, announce=None) -> dict:
    """Damages a copy of ``base`` and pushes it through load, analysis and every renderer."""
    from tfdiag.analysis import analyze, load_run
    from tfdiag.report import RENDERERS, render_chrome_trace
    from tfdiag.report.json_format import dumps

    run = work / f"case-{index}"
    shutil.copytree(base, run, symlinks=True)
    case = Case(run, random.Random(f"{seed}:{index}"))
    mutation = mutation_of(index)
    detail = MUTATIONS[mutation](case)
    outcome = {"index": index, "mutation": mutation, "detail": detail}
    if announce is not None:
        announce(outcome)  # the parent knows the case even if the analysis kills this process
    try:
        loaded = load_run(run)
        report = analyze(loaded)
        for render in RENDERERS.values():
            render(report)
        dumps(render_chrome_trace(report))
    except Exception as error:  # noqa: BLE001 - the fuzzer classifies every exception
        return {**outcome, "outcome": "internal-error", "error": "".join(traceback.format_exception(error))[-2000:]}
    finally:
        shutil.rmtree(run, ignore_errors=True)
    steps = loaded.frame("step")
    counted = {task: int((steps["source"] == task).sum()) for task in WORKERS}
    problems = []
    if counted["worker:1"] != STEPS:
        problems.append(f"worker:1 (undamaged) has {counted['worker:1']} of {STEPS} step records")
    least = STEPS - max(case.may_lose, 0)
    most = STEPS - min(case.may_lose, 0)
    if not least <= counted["worker:0"] <= most:
        problems.append(f"worker:0 has {counted['worker:0']} step records, expected {least}..{most}")
    always_named = ("duplicate-frame", "copy-file", "special-file", "manifest")
    must_name = case.named and (counted["worker:0"] < STEPS or mutation in always_named)
    if must_name and not any(case.named in warning for warning in loaded.warnings):
        problems.append(f"no warning names {case.named}: {loaded.warnings[:5]}")
    if problems:
        return {**outcome, "outcome": "wrong", "error": "; ".join(problems)}
    kind = "skipped-counted" if loaded.skipped else "warning" if loaded.warnings else "ok"
    return {**outcome, "outcome": kind}


def worker_main(base: Path, work: Path, seed: int) -> int:
    """For each case index read from stdin, answers two JSON lines on the original stdout:
    the case (before running it), then its outcome."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything the analysis prints goes to stderr, not into the answers

    def answer(item: dict) -> None:
        answers.write(json.dumps(item) + "\n")

    for line in sys.stdin:
        answer(run_case(base, work, seed, int(line), announce=answer))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="how many damaged runs (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mutations (default 0)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take before it is a hang")
    parser.add_argument("--worker", nargs=2, metavar=("BASE", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(Path(args.worker[0]), Path(args.worker[1]), args.seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tfdiag-fuzz-") as scratch:
        base = Path(scratch) / "base"
        write_base_run(base)
        worker = IsolatedWorker([sys.executable, __file__, "--worker", str(base), scratch, "--seed", str(args.seed)],
                                args.timeout)
        outcomes, by_mutation = Counter(), Counter()
        for index in range(args.cases):
            result = worker.ask(str(index), {"index": index, "mutation": mutation_of(index)})
            outcomes[result["outcome"]] += 1
            by_mutation[(result["mutation"], result["outcome"])] += 1
            if result["outcome"] in FAILURES:
                print(f"case {index} ({result['mutation']}, {result.get('detail')}): {result['outcome']}: "
                      f"{result.get('error')}", file=sys.stderr)
        worker.close()
    print(f"{args.cases} cases, seed {args.seed}, {time.perf_counter() - started:.1f} s")
    print("outcomes: " + ", ".join(f"{name} {outcomes[name]}" for name in OUTCOMES))
    for mutation in MUTATIONS:
        counts = {name: by_mutation[(mutation, name)] for name in OUTCOMES if by_mutation[(mutation, name)]}
        print(f"  {mutation}: " + ", ".join(f"{name} {count}" for name, count in counts.items()))
    return 1 if any(outcomes[name] for name in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
