"""Scale benchmark: `tfdiag analyze --format json` on a large synthetic run.

Writes the run with ``benchmarks/synth.py`` unless it exists, then runs the analysis in
a fresh process, measuring wall time and peak RSS (the child's own ``ru_maxrss``), and checks
that the analysis never imported TensorFlow.

    python benchmarks/scale.py /tmp/synth-10m --workers 64 --steps 156250
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs the CLI in-process, then reports its own peak RSS and whether TensorFlow got imported.
PROBE = (
    "import json, resource, sys, tfdiag.cli;"
    "code = tfdiag.cli.main(['analyze', sys.argv[1], '--format', 'json', '-o', sys.argv[2]]);"
    "print(json.dumps({'tensorflow': 'tensorflow' in sys.modules,"
    " 'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), file=sys.stderr); sys.exit(code)"
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--steps", type=int, default=156_250)
    args = parser.parse_args(argv)
    run = Path(args.run)
    if not run.exists():
        subprocess.run([sys.executable, str(HERE / "synth.py"), str(run), "--workers", str(args.workers),
                        "--steps", str(args.steps)], check=True)
    output = run / "scale-report.json"
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", PROBE, str(run), str(output)], capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if child.returncode not in (0, 1):
        print(child.stderr, file=sys.stderr)
        return child.returncode
    probe = json.loads(child.stderr.strip().splitlines()[-1])
    peak_mb, imported_tf = probe["peak_mb"], probe["tensorflow"]
    report = json.loads(output.read_text())
    steps = report["summary"]["steps"]
    print(f"| {steps:,} step records, {len(report['workers'])} workers | {wall_s:.1f} s | {peak_mb:,.0f} MB | "
          f"{'yes' if imported_tf else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
