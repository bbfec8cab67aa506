"""Collector overhead, A/B inside one running job, component by component, against the budget.

``overhead.py`` compares whole runs with and without collectors; on a shared 2-core
machine its pairs scatter by several per cent, more than the effect. This benchmark
removes run-to-run variation: one job runs pairs of adjacent phases, one without
collectors (A) and one with collector components on (B), in the same processes, on the
same model and warm state. Each pair's throughput ratio B/A cancels the slow drift of
the machine's load; the result is their geometric mean with a 95 % confidence interval.

Components (``src/tfdiag/collectors/budget.py`` declares what each may cost): on ``ps_ctl``
``closure_timing`` (the in-graph timestamps of a closure), ``results`` (the wrapper's
bookkeeping, the result thread, its batched timing fetch and the records; needs
``closure_timing``), ``probe``, ``liveness`` (the status checks of the ps, and so the
closer looks they ask of the probe), ``system``, ``heartbeat`` and ``writer`` (records
buffered and flushed; off, they are dropped at ``append``) and ``live``; on
``mwms_fit`` ``hooks`` (the callback's batch hooks and all-reduce probe), ``step_input``
(the in-graph step stamps: B phases run the stamped train function, A phases the plain
one), ``system``, ``heartbeat``, ``writer`` and ``live`` (the chief's live evaluations at
their default cadence, paused in A phases). B phases run every component, or those of
``--only``, or all but those of ``--without``: so each component's share is an A/B
ratio of its own.

CPU accounting that needs no quiet machine: the collector threads charge their CPU
time to their component (``budget.LEDGER``), the benchmark reads the coordinator's
main thread (``schedule``), the processes' CPU and the training tasks' CPU per phase.
The per-component table gives each component's CPU per closure (or step), its share
of a core and of the job's CPU, against its declared budget; the whole (the
collector process's extra CPU, B − A) against the sum of the declared budgets. The
exit status is 1 when the whole exceeds the budget, the throughput ratio (geometric
mean) is under 0.997 or its interval's lower end under 0.99 (issue 15's bars).

``ps_ctl`` (``--closures`` closures of 10 steps a phase): the benchmark starts the
servers (2 ps, 2 workers) and plays the coordinator itself. A phases schedule through
the plain ``ClusterCoordinator``; B phases through ``instrument_coordinator``'s wrapper
(its background collectors skip their work in A phases and keep their cadence). The
records and timings of a B phase's closures not yet read at its end are read then, as
at the end of a run: outside the phase's time, inside its CPU (so a B phase pays at
least one timing copy, whatever the result thread's cadence). ``--calibrate`` runs both
phases of every pair plain (an A/A run).

``mwms_fit`` (``--steps`` steps a phase): both workers run ``model.fit`` on the job's
model and input with a ``DiagnosticsCallback`` whose components run only in B phases
(its all-reduce probe on its time cadence, paced by B phases' steps, as in a run). Each
worker times its phases and counts its CPU.

In both, the first pair traces and warms both paths and is left out (on ``ps_ctl``, the
first pairs until the probe has prepared its functions and made its first full passes
over the links, at most ``WARM_UP_PAIRS``: one-time work of a run's first seconds).

    python benchmarks/overhead_ab.py --job ps_ctl --pairs 240 --closures 40   # under tools/loopback-only
    python benchmarks/overhead_ab.py --job ps_ctl --pairs 40 --only probe
    python benchmarks/overhead_ab.py --job ps_ctl --pairs 40 --calibrate
    python benchmarks/overhead_ab.py --job mwms_fit --pairs 240 --steps 100

The cluster, the statistics and the cost model are shared (``harness``, ``overhead_costs.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* importable
from benchmarks.harness.cluster import cpu_s, load_line, ps_ctl_servers, ps_ctl_training, task_pids  # noqa: E402
from benchmarks.harness.stats import paired_ratio  # noqa: E402
from benchmarks.overhead_costs import Meter, change, cost_model, mean_change, merge_meters, model_table  # noqa: E402
from tfdiag.sample_jobs.jobs import JobConfig  # noqa: E402
from tfdiag.sample_jobs.launcher import LocalCluster  # noqa: E402

# Collectors may cost at most 1 % of throughput (issue #4): the interval's lower end is held to it.
MAX_OVERHEAD = 0.01
# ... and about 0.3 % on the geometric mean (issue 15): what a user leaving them attached should pay.
TARGET_RATIO = 0.997
KINDS = ("plain", "instrumented")
# The components each job can switch, in the order of the table.
COMPONENTS = {"ps_ctl": ("closure_timing", "results", "probe", "liveness", "system", "heartbeat", "writer", "live"),
              "mwms_fit": ("hooks", "step_input", "system", "heartbeat", "writer", "live")}
BUDGET_JOBS = {"ps_ctl": "ps", "mwms_fit": "fit"}
# ps_ctl warms up for at most this many pairs (until the probe's first full passes are done).
WARM_UP_PAIRS = 10
# How an mwms_fit worker's log lines with its phase results and with its progress start.
RESULT_PREFIX = "tfdiag-ab: "
PROGRESS_PREFIX = "tfdiag-ab-progress: "


def phase_kinds(pair: int) -> tuple[str, str]:
    """The order of a pair's phases: plain first in even pairs, instrumented first in odd ones."""
    return KINDS if pair % 2 == 0 else KINDS[::-1]


def chosen_components(job: str, only=None, without=None) -> frozenset:
    """The components B phases run: ``only`` those, or all but ``without``, or all."""
    names = COMPONENTS[job]
    for name in (only or []) + (without or []):
        if name not in names:
            raise SystemExit(f"--only/--without: {name!r} is not a component of {job} (one of {', '.join(names)})")
    chosen = frozenset(only) if only else frozenset(names) - frozenset(without or ())
    if "results" in chosen and "closure_timing" not in chosen:
        raise SystemExit("results needs closure_timing (the result thread reads the in-graph timings)")
    return chosen


class PhaseSwitch:
    """Turns collector components on in instrumented phases and off in plain ones.

    Gated components skip their work while off and keep their threads and cadence: the
    RPC probe skips its rounds, the liveness checks theirs (so no closer look is asked in
    a plain phase, to be made in the next instrumented one), the system sampler its
    samples and its timed wake-ups (an mwms_fit worker's 10 a second, which B − A thus
    counts), the heartbeat thread its beats (the closing beat always goes), live findings
    their evaluations, a gated writer drops records at ``append``.
    """

    def __init__(self, components: frozenset):
        self.components = components
        self.running: frozenset = frozenset()

    def set(self, kind: str) -> None:
        self.running = self.components if kind == "instrumented" else frozenset()

    def on(self, name: str) -> bool:
        return name in self.running

    def gate(self, prober=None, sampler=None, writer=None, live=None, liveness=None) -> "PhaseSwitch":
        from tfdiag.collectors import heartbeat

        if live is not None:
            live.paused = lambda: not self.on("live")
        if prober is not None:
            paused = prober.paused
            prober.paused = lambda: not self.on("probe") or paused()
        if sampler is not None:
            sampler.paused = lambda: not self.on("system")
        if liveness is not None:
            check_round = liveness._round  # noqa: SLF001 - a benchmark's switch inside
            liveness._round = lambda checkers: check_round(checkers) if self.on("liveness") else None
        if writer is not None:
            append = writer.append
            writer.append = lambda kind, /, **values: append(kind, **values) if self.on("writer") else None
        beat = heartbeat._beat  # noqa: SLF001 - a benchmark's switch inside
        if not getattr(beat, "gated", False):
            def gated(watched, closed):
                if closed or self.on("heartbeat"):
                    beat(watched, closed)
            gated.gated = True
            heartbeat._beat = gated  # noqa: SLF001
        return self


# -- ps_ctl: the benchmark is the coordinator ------------------------------------------
def ps_schedulers(plain, instrumented, train, iterator, components: frozenset) -> dict:
    """How each kind of phase schedules a closure."""
    if "closure_timing" not in components:
        instrumented_schedule = lambda: plain.schedule(train, args=(iterator,))  # noqa: E731
    elif "results" in components:
        instrumented_schedule = lambda: instrumented.schedule(train, args=(iterator,))  # noqa: E731
    else:  # in-graph timing alone: the timed function, its outputs dropped, no bookkeeping
        timed = instrumented._instrumented(train).function  # noqa: SLF001 - a benchmark's switch inside
        instrumented_schedule = lambda: plain.schedule(timed, args=(iterator,))  # noqa: E731
    return {"plain": lambda: plain.schedule(train, args=(iterator,)), "instrumented": instrumented_schedule}


def run_ps_phases(coordinator, schedulers: dict, switch: PhaseSwitch, flush, pairs: int, closures: int,
                  examples_per_closure: int, task_pids) -> dict:
    """Runs ``pairs`` pairs of phases; returns, per kind, each phase's examples/s, wall
    seconds, the training tasks' CPU seconds and this process's ``Meter`` readings."""
    results = {kind: {"rate": [], "wall": [], "task_cpu": [], "meter": []} for kind in KINDS}
    meter = Meter()
    for pair in range(pairs):
        for kind in phase_kinds(pair):
            result, schedule = results[kind], schedulers[kind]
            switch.set(kind)
            tasks_before = cpu_s(task_pids)
            meter.begin()
            start = time.perf_counter()
            for _ in range(closures):
                schedule()
            coordinator.join()
            wall = time.perf_counter() - start
            # The phase's closures' records and timings not yet read are read now, charged to
            # the phase's CPU but not to its time (as at the end of a run), so that the result
            # thread's work never runs into the next phase: a B phase pays at least one timing
            # copy per its closures, whatever FETCH_EVERY_S.
            if kind == "instrumented" and switch.on("results"):
                flush()
            result["meter"].append(meter.end())
            result["task_cpu"].append(cpu_s(task_pids) - tasks_before)
            result["rate"].append(closures * examples_per_closure / wall)
            result["wall"].append(wall)
        print(f"  pair {pair}: " + ", ".join(f"{k}={results[k]['rate'][-1]:.0f}" for k in KINDS),
              file=sys.stderr, flush=True)
    return results


def measure_ps_ctl(pairs: int, closures: int, logdir: str, components: frozenset) -> dict:
    """Starts the servers, runs the phases as the coordinator, and summarises them."""
    with ps_ctl_servers(logdir) as (tf, config, strategy, cluster):
        from tfdiag.collectors import instrument_coordinator, live_thread
        from tfdiag.collectors.rpc_probe import FULL_PASSES
        from tfdiag.sample_jobs import ps_ctl

        plain = tf.distribute.coordinator.ClusterCoordinator(strategy)
        # Live findings run at their default cadence when measured.
        instrumented = instrument_coordinator(plain, logdir,
                                              live_interval_s=live_thread.DEFAULT_INTERVAL_S if "live" in components else 0)
        prober = instrumented.collectors.get("rpc")
        switch = PhaseSwitch(components).gate(prober, instrumented.collectors.get("system"),
                                              instrumented.task_session.writer, instrumented.collectors.get("live"),
                                              instrumented.collectors.get("liveness"))
        steps = ps_ctl.STEPS_PER_CLOSURE
        model, train, iterator = ps_ctl_training(tf, config, strategy, plain, steps)
        instrumented.record_placement(model.variables)
        flush = instrumented.flush_records  # the phase's own records, read at its end
        schedulers = ps_schedulers(plain, instrumented, train, iterator, components)
        pids = task_pids(cluster)
        examples = steps * config.batch_size

        # Warm-up: until the probe has prepared its functions and made its first full passes
        # over the links (one-time work of the first seconds of a run), at most WARM_UP_PAIRS.
        for _ in range(WARM_UP_PAIRS):
            run_ps_phases(plain, schedulers, switch, flush, 1, closures, examples, pids)
            if "probe" in components:
                # B phases without results record no closure, whose first record starts the probe in a run.
                instrumented.task_session.closures.results_began()
            if "probe" not in components or prober.passes >= FULL_PASSES:
                break
        probes_before = prober.records
        results = run_ps_phases(plain, schedulers, switch, flush, pairs, closures, examples, pids)
        probe_records = prober.records - probes_before
        instrumented.close()
    a, b = results["plain"], results["instrumented"]
    summary = {**paired_ratio(a["rate"], b["rate"]),
               "rates": (statistics.median(a["rate"]), statistics.median(b["rate"])),
               "columns": {"training tasks' CPU ms per closure": change(
                               [x / closures for x in a["task_cpu"]], [x / closures for x in b["task_cpu"]], 1e3),
                           "coordinator's CPU ms per closure (means)": mean_change(
                               [m["process"] / closures for m in a["meter"]],
                               [m["process"] / closures for m in b["meter"]], 1e3),
                           "RPC probe records per s": f"{probe_records / sum(b['wall']):.1f}"}}
    return summary | {"model": cost_model(results, closures, "closure", components, "ps")}


# -- mwms_fit: every worker runs fit with a phased callback ---------------------------
def phased_callback(keras, inner, steps: int, components: frozenset):
    """A Keras callback that runs ``inner``'s components in instrumented phases only.

    Phases are ``steps`` batches long and alternate as ``phase_kinds`` says; the
    callback records each phase's duration, this process's CPU (``Meter``) and the CPU
    of ``inner``'s hooks on the training thread. With ``step_input`` on, instrumented
    phases run the stamped train function ``inner`` made, plain phases the one before it.
    """

    class Phased(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True
            self.results = {kind: {"seconds": [], "meter": [], "hooks": []} for kind in KINDS}
            self.switch = PhaseSwitch(components)
            self.meter = Meter()
            self.functions = {}
            self._started = None
            self._hooks_s = 0.0

        def kind(self, batch: int) -> str:
            return phase_kinds(batch // (2 * steps))[batch // steps % 2]

        def set_model(self, model):
            super().set_model(model)
            inner.set_model(model)

        def set_params(self, params):
            super().set_params(params)
            inner.set_params(params)

        def on_train_begin(self, logs=None):
            plain_function = self.model.train_function
            inner.on_train_begin(logs)
            stamped = self.model.train_function if "step_input" in components else plain_function
            self.functions = {"plain": plain_function, "instrumented": stamped}
            self.switch.gate(sampler=inner.task_session.collectors.get("system"), writer=inner.task_session.writer,
                             live=inner.task_session.collectors.get("live"))

        def on_train_end(self, logs=None):
            inner.on_train_end(logs)

        def on_train_batch_begin(self, batch, logs=None):
            kind = self.kind(batch)
            if batch % steps == 0:
                self.switch.set(kind)
                self.model.train_function = self.functions[kind]
                self._hooks_s = 0.0
                self.meter.begin()
                self._started = time.perf_counter()
            if self.switch.on("hooks"):
                cpu = time.thread_time()
                inner.on_train_batch_begin(batch, logs)
                self._hooks_s += time.thread_time() - cpu

        def on_train_batch_end(self, batch, logs=None):
            if self.switch.on("hooks"):
                cpu = time.thread_time()
                inner.on_train_batch_end(batch, logs)
                self._hooks_s += time.thread_time() - cpu
            if batch % steps == steps - 1:
                result = self.results[self.kind(batch)]
                result["seconds"].append(time.perf_counter() - self._started)
                result["meter"].append(self.meter.end())
                result["hooks"].append(self._hooks_s)
                if batch % (2 * steps) == 2 * steps - 1:  # a pair done: its rates, for the progress line
                    print(PROGRESS_PREFIX + f"pair {batch // (2 * steps)}: " + ", ".join(
                        f"{kind}={steps / self.results[kind]['seconds'][-1]:.1f} steps/s" for kind in KINDS), flush=True)

    return Phased()


def mwms_worker(config: JobConfig) -> None:
    """One worker's part of the ``mwms_fit`` A/B; prints its phase results on one line."""
    from tfdiag.collectors import DiagnosticsCallback, live_thread
    from tfdiag.sample_jobs import click_model, mwms_fit
    from tfdiag.sample_jobs.common import worker_index_from_tf_config
    from tfdiag.sample_jobs.fit_common import import_tf_keras

    tf, keras = import_tf_keras()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker, workers = worker_index_from_tf_config(), strategy.num_replicas_in_sync
    files = click_model.write_data(config.logdir)
    dataset, local_examples = mwms_fit.make_input(tf, keras, config, files, worker, workers)
    with strategy.scope():
        model = click_model.build_model(keras, config.hidden)
        click_model.compile_model(keras, model)
    steps, pairs = config.extra["steps"], config.extra["pairs"]
    components = frozenset(config.extra["components"])
    # Live findings (off by default in a job) run in the chief at their default cadence when measured.
    inner = DiagnosticsCallback(config.logdir, examples_per_step=local_examples,
                                live_interval_s=live_thread.DEFAULT_INTERVAL_S if "live" in components else 0)
    phased = phased_callback(keras, inner, steps, components)
    model.fit(dataset, epochs=1, steps_per_epoch=2 * steps * pairs, callbacks=[phased], verbose=0)
    print(RESULT_PREFIX + json.dumps(phased.results), flush=True)


def measure_mwms_fit(pairs: int, steps: int, logdir: str, components: frozenset) -> dict:
    """Runs both workers of the A/B and summarises the chief's phases and both workers' CPU."""
    config = JobConfig("mwms_fit", logdir, workers=2,
                       extra={"pairs": pairs + 1, "steps": steps, "components": sorted(components)})
    cluster = LocalCluster(config, task_command=[sys.executable, "-u", __file__, "--mwms-worker"])
    with cluster:  # starts the workers
        done = threading.Event()
        threading.Thread(target=relay_progress, args=(cluster.tasks["worker:0"].log, done), daemon=True).start()
        code = cluster.wait()
        done.set()
        if code != 0:
            raise SystemExit(f"the mwms_fit A/B failed; see {logdir}/tasks/")
    workers = []
    for task in sorted(cluster.tasks.values(), key=lambda t: t.task):
        lines = [line for line in task.log.read_text().splitlines() if line.startswith(RESULT_PREFIX)]
        workers.append({kind: {key: values[1:] for key, values in result.items()}  # the first pair: warm-up
                        for kind, result in json.loads(lines[-1][len(RESULT_PREFIX):]).items()})
    chief = workers[0]
    examples = steps * config.batch_size
    rates = {kind: [examples / s for s in chief[kind]["seconds"]] for kind in KINDS}
    # Both workers' phases, summed phase by phase: the job's CPU.
    results = {kind: {"wall": chief[kind]["seconds"], "task_cpu": [0.0] * pairs,
                      "meter": [merge_meters([w[kind]["meter"][i] for w in workers], [w[kind]["hooks"][i] for w in workers])
                                for i in range(pairs)]} for kind in KINDS}
    return {**paired_ratio(rates["plain"], rates["instrumented"]),
            "rates": (statistics.median(rates["plain"]), statistics.median(rates["instrumented"])),
            "columns": {"workers' CPU ms per step (means)": mean_change(
                [m["process"] / steps for m in results["plain"]["meter"]],
                [m["process"] / steps for m in results["instrumented"]["meter"]], 1e3)},
            "model": cost_model(results, steps, "step", components, "fit", processes=len(workers))}


def relay_progress(log, done: threading.Event, every_s: float = 2.0) -> None:
    """Copies the progress lines of a worker's log to stderr until ``done`` (a long A/B's progress)."""
    with open(log, errors="replace") as lines:
        while not done.wait(every_s):
            for line in lines:
                if line.startswith(PROGRESS_PREFIX):
                    print("  " + line[len(PROGRESS_PREFIX):].rstrip(), file=sys.stderr, flush=True)


def table(job: str, pairs: int, per_phase: str, r: dict) -> str:
    """One markdown table row (with its header) for docs/benchmarks.md."""
    headers = ["job", "pairs", "phase", "examples/s plain → instrumented (medians)",
               "throughput ratio (geometric mean, 95 % CI)", "median pair ratio", *r["columns"]]
    cells = [job, str(pairs), per_phase, f"{r['rates'][0]:.0f} → {r['rates'][1]:.0f}",
             f"{r['ratio']:.3f} ({r['low']:.3f}–{r['high']:.3f})", f"{r['median']:.3f}", *r["columns"].values()]
    return "\n".join("| " + " | ".join(row) + " |" for row in (headers, ["---"] * len(headers), cells))


def verdict(result: dict) -> list[str]:
    """Why the run fails its bars (empty: it passes)."""
    failures = []
    if result["ratio"] < TARGET_RATIO:
        failures.append(f"throughput ratio {result['ratio']:.4f} < {TARGET_RATIO}")
    if result["low"] < 1 - MAX_OVERHEAD:
        failures.append(f"throughput interval's lower end {result['low']:.3f} < {1 - MAX_OVERHEAD:.2f}")
    model = result["model"]
    if model["whole"] > model["allowed"]:
        failures.append(f"the collectors' CPU ({model['whole'] / model['units'] * 1e6:.0f} µs per {model['unit']}) "
                        f"exceeds their budget ({model['allowed'] / model['units'] * 1e6:.0f} µs)")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=("ps_ctl", "mwms_fit"), default="ps_ctl")
    parser.add_argument("--pairs", type=int, default=40, help="pairs of phases (plain, instrumented)")
    parser.add_argument("--closures", type=int, default=40, help="ps_ctl: closures per phase (10 steps each)")
    parser.add_argument("--steps", type=int, default=100, help="mwms_fit: steps per phase")
    switches = parser.add_mutually_exclusive_group()
    switches.add_argument("--only", nargs="+", metavar="COMPONENT", help="B phases run only these components")
    switches.add_argument("--without", nargs="+", metavar="COMPONENT", help="B phases run all but these")
    switches.add_argument("--calibrate", action="store_true", help="both phases of every pair plain (A/A)")
    parser.add_argument("--fetch-every", type=float, default=None, metavar="S",
                        help="ps_ctl: the result thread's timing copies (src/tfdiag/collectors/closure_recorder.py FETCH_EVERY_S)")
    parser.add_argument("--logdir", default=None, help="where the run goes (default: a temp dir)")
    parser.add_argument("--mwms-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)  # an mwms_fit worker's JobConfig
    args = parser.parse_args(argv)
    if args.mwms_worker:
        mwms_worker(JobConfig.from_json(args.config))
        return 0
    if args.fetch_every is not None:
        from tfdiag.collectors import closure_recorder

        closure_recorder.FETCH_EVERY_S = args.fetch_every
    components = frozenset() if args.calibrate else chosen_components(args.job, args.only, args.without)
    logdir = args.logdir or tempfile.mkdtemp(prefix="tfdiag-overhead-ab-")
    started, load = time.monotonic(), os.getloadavg()[0]
    if args.job == "ps_ctl":
        result, per_phase = measure_ps_ctl(args.pairs, args.closures, logdir, components), f"{args.closures} closures"
    else:
        result, per_phase = measure_mwms_fit(args.pairs, args.steps, logdir, components), f"{args.steps} steps"
    per_phase += ", A/A" if args.calibrate else "" if components == frozenset(COMPONENTS[args.job]) else \
        ", B: " + " ".join(sorted(components))
    print(table(args.job, args.pairs, per_phase, result))
    print()
    print(model_table(result["model"]))
    print(f"\ntook {time.monotonic() - started:.0f} s; {load_line(load)}; run in {logdir}")
    failures = [] if args.calibrate else verdict(result)
    for failure in failures:
        print(f"overhead_ab: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
