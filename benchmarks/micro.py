"""Micro-benchmarks: what one mechanism of the collectors costs, a case each.

Each case measures the figure a constant or a design choice of ``src/tfdiag/collectors/`` rests on
(``benchmarks/costs/``); ``python benchmarks/micro.py CASE --help`` describes one.

    python benchmarks/micro.py closure_outputs --rounds 6 --closures 1000   # under tools/loopback-only
    python benchmarks/micro.py schedule_cost --rounds 6 --closures 200      # under tools/loopback-only
    python benchmarks/micro.py timing_copy --sizes 1 5 10 40 --rounds 2     # under tools/loopback-only
    python benchmarks/micro.py timing_ops --blocks 40 --calls 100
    python benchmarks/micro.py stamp_cost --blocks 200 --steps 50 --model-size 16 --batch 16
    python benchmarks/micro.py probe_cost --rounds 50 --steady 150          # under tools/loopback-only
    python benchmarks/micro.py probe_cadence RUN...
    python benchmarks/micro.py liveness_calls RUN...
    python benchmarks/micro.py collector_cost --baseline REV
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* importable
from benchmarks.costs import closures, collectors, probe, steps  # noqa: E402

CASES = closures.CASES | steps.CASES | probe.CASES | collectors.CASES


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cases = parser.add_subparsers(dest="case", required=True, metavar="CASE")
    for name, (add_arguments, run) in CASES.items():
        description = inspect.cleandoc(run.__doc__)
        case = cases.add_parser(name, help=description.split("\n\n")[0], description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        add_arguments(case)
        case.set_defaults(run=run)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
