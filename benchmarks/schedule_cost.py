"""What ``schedule()`` costs the calling thread: plain, instrumented, and instrumented through the ``tf.function``.

``ClusterCoordinator.schedule`` builds a ``Closure``, which for a ``tf.function`` looks
its concrete function up in the trace cache and converts the outputs' structure to a
signature, every call. The instrumented coordinator schedules the concrete function
once the same arguments come twice in a row (``closure_timing.InstrumentedFunction``).
This benchmark starts ``ps_ctl``'s servers (2 ps, 2 workers), plays the coordinator, and
runs phases of ``--closures`` one-step closures, rotating three ways to schedule them:

* ``plain``: ``ClusterCoordinator.schedule`` of ``ps_ctl``'s train step;
* ``instrumented``: ``instrument_coordinator``'s ``schedule`` as it runs;
* ``through_function``: the same, made to schedule the instrumented ``tf.function`` every
  time (as before the concrete function was kept).

Per phase: the calling thread's CPU per ``schedule`` call (``time.thread_time``, the
schedule loop only: the join, the result thread and TensorFlow's threads are not
counted); then each variant against ``plain``, phase by phase (mean difference ± 95 %).
A thread's CPU needs no quiet machine.

    python benchmarks/schedule_cost.py --rounds 10 --closures 200   # under tools/loopback-only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

try:
    from closure_outputs import difference  # run as a script: benchmarks/ is sys.path[0]
    from overhead_ab import ps_ctl_servers, ps_ctl_training
except ImportError:
    from benchmarks.closure_outputs import difference
    from benchmarks.overhead_ab import ps_ctl_servers, ps_ctl_training

VARIANTS = ("plain", "instrumented", "through_function")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="phases of each variant (after one of warm-up)")
    parser.add_argument("--closures", type=int, default=200, help="one-step closures a phase")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    logdir = tempfile.mkdtemp(prefix="tfdiag-schedule-cost-")
    with ps_ctl_servers(logdir) as (tf, config, strategy, cluster):
        from tfdiag.collectors import instrument_coordinator

        plain = tf.distribute.coordinator.ClusterCoordinator(strategy)
        instrumented = instrument_coordinator(plain, logdir, probe_interval_s=None, system_interval_s=None,
                                              live_interval_s=0)
        _, train, iterator = ps_ctl_training(tf, config, strategy, plain, 1)
        through_function = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), logdir,
                                                  probe_interval_s=None, system_interval_s=None, live_interval_s=0)
        forced = through_function._instrumented(train)  # noqa: SLF001 - a benchmark's switch inside
        forced.function_for = lambda args, kwargs: forced.function
        schedulers = {"plain": plain.schedule, "instrumented": instrumented.schedule,
                      "through_function": through_function.schedule}
        cpu_us = {name: [] for name in VARIANTS}
        for round_ in range(args.rounds + 1):
            for name in VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]:
                schedule, start = schedulers[name], time.thread_time()
                for _ in range(args.closures):
                    schedule(train, args=(iterator,))
                spent = time.thread_time() - start
                plain.join()
                if round_:  # the first round traces and warms every path
                    cpu_us[name].append(spent / args.closures * 1e6)
            print(f"  round {round_}: " + ", ".join(f"{n}={cpu_us[n][-1]:.0f}" for n in VARIANTS if cpu_us[n]),
                  file=sys.stderr, flush=True)
        instrumented.close()
        through_function.close()
    print("| variant | calling thread's CPU µs per schedule (median) | vs plain (mean ± 95 %) |")
    print("| --- | --- | --- |")
    for name in VARIANTS:
        versus = "–" if name == "plain" else difference(cpu_us["plain"], cpu_us[name])
        print(f"| {name} | {statistics.median(cpu_us[name]):.0f} | {versus} |")
    print(f"\n{args.rounds} rounds of {args.closures} closures each; load average (1 min) {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
