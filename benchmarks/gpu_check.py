"""Checks the GPU findings' predictions on a GPU machine: ``compute_bound`` and ``gpu_underutilized``.

Both predict from a fixed formula no GPU run has checked (docs/findings.md): ``compute_bound``
assumes mixed precision halves the device share of a step; ``gpu_underutilized`` that a
doubled batch takes time per example from 1 to (1 + u) / 2 at utilisation u. This runs the
``mirrored`` sample job (MirroredStrategy over every local GPU, Keras 3 ``fit``, tfdiag's
NVML sampler on) at two sizes — a small model and batch, which should leave the GPU idle
(``gpu_underutilized``), and a large one, which should keep it busy (``compute_bound``) —
each without and with the change its finding recommends (``--tune batch=2B`` or
``--tune mixed_precision=on``), in ``--pairs`` interleaved pairs, and writes per size: the
finding, its predicted speed-up, the measured one (median examples/s of the changed runs over
the plain runs') and the error. Exit status 0 when every prediction is within 25 %, 1 when
one is not, 2 when the machine cannot run the check (no GPU, no NVML).

    python benchmarks/gpu_check.py --out /tmp/gpu-check          # about 5 minutes on one GPU

Needs TensorFlow with CUDA, ``nvidia-ml-py`` and tfdiag installed (``pip install -e .``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* importable
from benchmarks.userjobs.runner import run_cluster  # noqa: E402
from tfdiag.analysis.engine import analyze  # noqa: E402
from tfdiag.sample_jobs.jobs import JobConfig  # noqa: E402

TOLERANCE = 0.25
# (name, model width, global batch, steps): small enough to idle a GPU, large enough to busy one.
SIZES = (("small", 128, 256, 1500), ("large", 4096, 8192, 300))
CHANGES = {"gpu_underutilized": lambda batch: (f"batch={2 * batch}",),
           "compute_bound": lambda batch: ("mixed_precision=on",)}


def preflight() -> str | None:
    """Why this machine cannot run the check, or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML sees no GPU"
    except Exception as error:  # noqa: BLE001 — any NVML failure means no check here
        return f"NVML unavailable: {error}"
    import tensorflow as tf

    return None if tf.config.list_physical_devices("GPU") else "TensorFlow sees no GPU (a CPU-only build?)"


def run(logdir: Path, width: int, batch: int, steps: int, tune=()) -> dict:
    config = JobConfig("mirrored", str(logdir), steps=steps, batch=batch, model_size=width, tune=tuple(tune))
    logdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    code, summary = run_cluster(config, logdir / "launcher.log", 300)
    if code != 0 or summary is None:
        raise RuntimeError(f"mirrored {width}/{batch} {tune} failed (exit {code}); see {logdir}")
    findings = [f.to_dict() for f in analyze(logdir).findings]
    print(f"  {logdir.name}: {summary[2]:.0f} examples/s in {time.monotonic() - started:.0f} s; "
          f"findings {[f['kind'] for f in findings]}", file=sys.stderr, flush=True)
    return {"examples_per_s": summary[2], "findings": findings}


def check_size(out: Path, name: str, width: int, batch: int, steps: int, pairs: int) -> dict:
    plain, changed, finding, tune = [], [], None, ()
    for pair in range(pairs):
        base = run(out / f"{name}-plain-{pair}", width, batch, steps)
        plain.append(base["examples_per_s"])
        if finding is None:
            finding = next((f for f in base["findings"] if f["kind"] in CHANGES), None)
            if finding is None:
                return {"size": name, "finding": None, "plain": plain}
            tune = CHANGES[finding["kind"]](batch)
        changed.append(run(out / f"{name}-changed-{pair}", width, batch, steps, tune)["examples_per_s"])
    predicted = finding["recommendation"]["predicted_speedup"]
    measured = statistics.median(changed) / statistics.median(plain)
    return {"size": name, "finding": finding["kind"], "change": list(tune), "evidence": finding["evidence"],
            "predicted": predicted, "measured": round(measured, 3), "plain": plain, "changed": changed,
            "error": round(abs(predicted - measured) / measured, 3) if predicted else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="logdirs and gpu_check.json go here")
    parser.add_argument("--pairs", type=int, default=2, help="interleaved plain/changed pairs per size")
    args = parser.parse_args(argv)
    why = preflight()
    if why:
        print(f"gpu_check: cannot run here: {why}", file=sys.stderr)
        return 2
    results = [check_size(args.out, *size, args.pairs) for size in SIZES]
    (args.out / "gpu_check.json").write_text(json.dumps(results, indent=1))
    for row in results:
        print(json.dumps({k: row.get(k) for k in ("size", "finding", "change", "predicted", "measured", "error")}))
    checked = [row for row in results if row.get("error") is not None]
    return 0 if checked and all(row["error"] <= TOLERANCE for row in checked) else 1


if __name__ == "__main__":
    sys.exit(main())
