"""What one copy of ``ClusterCoordinator`` closures' timings costs, by how many it carries.

The instrumented coordinator's result thread reads the in-graph timings of finished
closures with ``closure_timing.fetch_stats``: per worker, one ``tf.stack`` of the
closures' stats handles on the worker and one copy of the result. This benchmark starts
``ps_ctl``'s servers (2 ps, 2 workers), plays the coordinator, runs ``N`` timed closures
(their outputs left on the workers, as when the caller drops them), and then times one
``fetch_stats`` of all ``N``: the calling thread's CPU and the process's CPU
(TensorFlow's threads included) per closure, for each ``--sizes`` in turn, ``--rounds``
times, interleaved. ``collectors/closure_recorder.py`` (``FETCH_EVERY_S``) sizes its cadence
by it.

    python benchmarks/timing_copy.py --sizes 1 5 10 40 --rounds 2   # under tools/loopback-only
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from tfdiag.collectors import closure_timing, tf_internals
from tfdiag.collectors.bounded import BoundedCalls

try:
    from overhead_ab import ps_ctl_servers, ps_ctl_training  # run as a script: benchmarks/ is sys.path[0]
except ImportError:
    from benchmarks.overhead_ab import ps_ctl_servers, ps_ctl_training


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 10, 40], help="closures per copy")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with ps_ctl_servers(tempfile.mkdtemp(prefix="tfdiag-timing-copy-")) as (tf, config, strategy, _):
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        _, train, iterator = ps_ctl_training(tf, config, strategy, coordinator, 1)
        timed = closure_timing.instrument(train)
        calls = BoundedCalls("tfdiag-timing-copy")

        def finished(count: int) -> list:
            remotes = []
            for _ in range(count):
                remote = coordinator.schedule(timed, args=(iterator,))
                tf_internals.on_result(remote, lambda: False)  # outputs stay on the workers
                remotes.append(remote)
            coordinator.join()
            return remotes

        closure_timing.fetch_stats([closure_timing.timing_of(r) for r in finished(8)], calls, 30.0)  # warm-up
        print("| closures per copy | round | thread CPU µs per closure | process CPU µs per closure |")
        print("| --- | --- | --- | --- |")
        for round_ in range(args.rounds):
            for size in args.sizes:
                timings = [closure_timing.timing_of(r) for r in finished(size)]
                process, thread = time.process_time(), time.thread_time()
                rows = closure_timing.fetch_stats(timings, calls, 30.0)
                thread, process = time.thread_time() - thread, time.process_time() - process
                assert all(row is not None for row in rows)
                print(f"| {size} | {round_ + 1} | {thread / size * 1e6:.0f} | {process / size * 1e6:.0f} |", flush=True)
    print(f"\nload average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
          f"on {os.cpu_count()} cores", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
