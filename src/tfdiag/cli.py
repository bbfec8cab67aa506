"""The ``tfdiag`` command line: analyze, compare, export-trace, watch, sample, demo.

Exit status: 0 ok; 1 findings at or above ``--fail-on`` (``watch``: the job failed; 3: it
hangs, ``tfdiag.watch``); 2 bad usage or input (the
message goes to stderr on one line, ``tfdiag: error: ...``; ``--debug`` adds the traceback);
141 when stdout is closed before the output is written (``tfdiag analyze RUN | head -0``):
nothing is printed, as for a command killed by SIGPIPE, whose status a shell reports as
128 + 13 = 141 (Python ignores SIGPIPE, so the CLI exits with that status itself).
(``--help`` and ``--version`` into a closed stdout exit 0 quietly: argparse ignores the
failed write.)

Reports go to stdout (or ``-o FILE``) and nothing else does: progress, warnings and
errors go to stderr. Every name and message from a run is shown with its control
characters and undecodable bytes escaped (``tfdiag.report.safe_text``).

``analyze``, ``compare`` and ``export-trace`` read runs through the fold cache the
TensorBoard tab reads (``tfdiag.analysis.fold_cache``; ``--no-cache``: not), so a run
analysed here opens warm in the tab and a grown run's new analysis reads only what was
appended; a cache that cannot be used is one warning, never a failed command.

``analyze``, ``compare`` and ``export-trace`` never import TensorFlow; ``sample`` and
``demo`` import the sample jobs only when they run (``sample`` also to build its options).

Example:
    $ tfdiag analyze logs/run1 --format html -o report.html
    $ tfdiag compare logs/before logs/after
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Iterator, Sequence

from tfdiag import __version__
from tfdiag.cli_stderr import ProgressBar, logged_warnings, say, warn
from tfdiag.errors import RunNotFoundError, TfdiagError
from tfdiag.report.safe_text import printable, printable_lines

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_STDOUT_CLOSED = 128 + 13  # as a shell reports a command killed by SIGPIPE

REPORT_FORMATS = ("text", "json", "markdown", "html")
SEVERITIES = ("warning", "critical")

NO_CACHE_HELP = "read every task file, without the fold cache the TensorBoard tab shares"

DEMO_JOB = "ps_ctl"
# The demo's fault: worker 1 becomes 40 ms a step slower part-way through the run, so the
# live findings announce it while the job trains and the charts show its onset.
DEMO_SLOW_MS = 40
DEMO_ONSET_FRACTION = 0.4  # of the steps
DEMO_STEPS = 4000  # about 40-60 s of training on a 2-core machine
# The share of a core the demo's live findings may use (``TFDIAG_LIVE_CPU_SHARE``): at the
# default share (src/tfdiag/collectors/budget.py) a confirmation's analysis (~0.2 s of CPU) is followed
# by a minute's pause, so on a loaded 2-core host an onset can go unannounced for longer than
# the demo runs; the demo pays for announcements within seconds.
DEMO_LIVE_CPU_SHARE = "0.02"
DEMO_LOGDIR = "demo-logs"


class CommandError(TfdiagError):
    """A command failed for a reason the user can act on (e.g. an unwritable output file)."""


class StdoutClosedError(Exception):
    """stdout was closed (the reader of a pipe went away, or the command ran with ``>&-``)."""


@contextlib.contextmanager
def _fold_cache(off: bool, quiet: bool) -> Iterator:
    """The fold cache a command reads its runs through (None when ``off``: ``--no-cache``);
    while it is used, the library's warnings go to stderr as the CLI's own (none if ``quiet``)."""
    from tfdiag.analysis.fold_cache import FoldCache

    with logged_warnings(quiet):
        yield None if off else FoldCache.default()


def _analyze_run(path: str, quiet: bool, cache):
    """Analyses ``path`` with a progress bar through ``cache`` (``_fold_cache``), printing the
    run's warnings to stderr. The path is made absolute, as the tab's are (``RunIndex``), so
    both save and adopt the same cache entries."""
    from tfdiag.analysis import analyze

    run = Path(path)
    if not run.exists():
        raise RunNotFoundError(f"{path}: no such run directory")
    if not run.is_dir():
        raise RunNotFoundError(f"{path}: not a directory")
    progress = ProgressBar(printable(f"reading {run.name or path}"), enabled=not quiet)
    try:
        report = analyze(Path(os.path.abspath(run)), progress=progress, cache=cache)
    finally:
        progress.close()
    if not quiet:
        for warning in report.run.get("warnings") or []:
            warn(warning)
    return report


def _write_output(text: str, output: str | None, quiet: bool = False) -> None:
    if output is None or output == "-":
        _to_stdout(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise CommandError(f"{output}: cannot write ({error.strerror or error})") from error
    if not quiet:
        say(f"tfdiag: wrote {output}")


def _to_stdout(text: str) -> None:
    """Writes ``text`` to stdout and flushes it; ``StdoutClosedError`` if stdout is closed."""
    if sys.stdout is None:
        raise StdoutClosedError
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (BrokenPipeError, ValueError) as error:  # ValueError: the stream object was closed
        raise StdoutClosedError from error
    except OSError as error:
        if error.errno != errno.EBADF:  # EBADF: file descriptor 1 is closed
            raise
        raise StdoutClosedError from error


def _fails(report, fail_on: str | None) -> bool:
    if fail_on is None:
        return False
    threshold = SEVERITIES.index(fail_on) + 1  # Severity.rank: info 0, warning 1, critical 2
    return any(finding.severity.rank >= threshold for finding in report.findings)


def cmd_analyze(args: argparse.Namespace) -> int:
    from tfdiag.report import render

    with _fold_cache(args.no_cache, args.quiet) as cache:
        report = _analyze_run(args.run, args.quiet, cache)
    _write_output(render(report, args.format), args.output, args.quiet)
    return EXIT_FINDINGS if _fails(report, args.fail_on) else EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from tfdiag.report.compare import compare_reports, render_comparison

    with _fold_cache(args.no_cache, args.quiet) as cache:
        base = _analyze_run(args.base, args.quiet, cache)
        new = _analyze_run(args.new, args.quiet, cache)
    _write_output(render_comparison(compare_reports(base, new), args.format), args.output, args.quiet)
    return EXIT_OK


def cmd_export_trace(args: argparse.Namespace) -> int:
    from tfdiag.report.json_format import dumps
    from tfdiag.report.trace import render_chrome_trace

    with _fold_cache(args.no_cache, args.quiet) as cache:
        report = _analyze_run(args.run, args.quiet, cache)
    _write_output(dumps(render_chrome_trace(report), indent=None) + "\n", args.output, args.quiet)
    return EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    from tfdiag.watch import EXIT_STATUS, watch

    status = watch(args.run, _to_stdout, interval_s=args.interval, timeout_s=args.timeout,
                   redraw=_stdout_is_tty())
    say(f"tfdiag watch: {status.state}: {status.reason}")
    return EXIT_STATUS[status.state]


def _stdout_is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _sample_cli():
    """``tfdiag.sample_jobs.cli``, imported on demand (it may pull in TensorFlow)."""
    try:
        from tfdiag.sample_jobs import cli as sample_cli
    except ImportError as error:
        if getattr(error, "name", None) in ("tfdiag.sample_jobs.cli", "tfdiag.sample_jobs"):
            raise CommandError("the sample jobs are not installed (no tfdiag.sample_jobs.cli)") from error
        raise CommandError(f"the sample jobs cannot be imported: {error}") from error
    return sample_cli


def cmd_sample(args: argparse.Namespace) -> int:
    return int(_sample_cli().run(args) or 0)


def cmd_demo(args: argparse.Namespace) -> int:
    from tfdiag.report import render_html, render_text

    sample_cli = _sample_cli()
    logdir = Path(args.logdir)
    name = time.strftime(f"{DEMO_JOB}-slow-worker-%Y%m%d-%H%M%S")
    run_dir = logdir / name
    suffix = 1
    while run_dir.exists():  # two demos in the same second
        suffix += 1
        run_dir = logdir / f"{name}-{suffix}"
    onset = int(args.steps * DEMO_ONSET_FRACTION)
    inject = f"slow-worker=1:{DEMO_SLOW_MS}@{onset}"
    say(
        f"tfdiag demo: running sample job {DEMO_JOB!r} on a local cluster (2 ps, 2 workers, {args.steps} steps); "
        f"worker 1 slows down by {DEMO_SLOW_MS} ms a step from step {onset} ({inject}), and tfdiag's live findings "
        f"announce it while the job trains; logs go to {run_dir}"
    )
    os.environ.setdefault("TFDIAG_LIVE_CPU_SHARE", DEMO_LIVE_CPU_SHARE)  # the job's tasks inherit it
    started = time.monotonic()
    result = sample_cli.run_sample(DEMO_JOB, ps=2, workers=2, steps=args.steps, logdir=str(run_dir), inject=[inject])
    returncode = result if isinstance(result, int) else getattr(result, "returncode", 0)
    if returncode:
        raise CommandError(f"the sample job failed (exit status {returncode}); its task logs are under {run_dir}")
    say(f"tfdiag demo: training finished in {time.monotonic() - started:.0f} s; analysing {run_dir}")
    with _fold_cache(False, False) as cache:
        report = _analyze_run(str(run_dir), False, cache)
    html_path = run_dir / "report.html"
    _write_output(render_html(report), str(html_path), quiet=True)
    footer = (
        f"\nHTML report: {html_path}\n"
        f"TensorBoard: tensorboard --logdir {logdir} --host 127.0.0.1   then open the \"tfdiag\" tab\n"
    )
    _write_output(render_text(report) + printable_lines(footer), None)
    return EXIT_OK


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value:g}")
    return value


def _add_sample_parser(subparsers, load_options: bool) -> None:
    help_text = "run a bundled sample job (local cluster on 127.0.0.1, or one task under TF_CONFIG)"
    parser = subparsers.add_parser("sample", help=help_text, description=help_text)
    parser.set_defaults(func=cmd_sample)
    if not load_options:
        return
    try:
        sample_cli = _sample_cli()
    except CommandError as error:
        parser.set_defaults(func=_unavailable(error))
        parser.add_argument("sample_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        return
    sample_cli.add_arguments(parser)


def _unavailable(error: Exception) -> Callable[[argparse.Namespace], int]:
    def fail(args: argparse.Namespace) -> int:
        raise error

    return fail


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser. The ``sample`` options are loaded only when ``argv`` runs ``sample``."""
    parser = argparse.ArgumentParser(
        prog="tfdiag",
        description="Diagnostics for distributed TensorFlow training: find the bottleneck, "
        "get the fix and its predicted speed-up.",
    )
    parser.add_argument("--version", action="version", version=f"tfdiag {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")

    analyze = subparsers.add_parser("analyze", help="analyse a run and report its bottlenecks", description="Analyse a run directory.")
    analyze.add_argument("run", metavar="RUN", help="run directory (the one that contains plugins/tfdiag)")
    analyze.add_argument("--format", choices=REPORT_FORMATS, default="text", help="report format (default: text)")
    analyze.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    analyze.add_argument("--fail-on", choices=SEVERITIES, help="exit 1 if a finding is at least this severe")
    analyze.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no warnings on stderr")
    analyze.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)
    analyze.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    analyze.set_defaults(func=cmd_analyze)

    compare = subparsers.add_parser(
        "compare", help="compare two runs: throughput change, findings resolved and new", description="Compare two runs."
    )
    compare.add_argument("base", metavar="BASE", help="the run before the change")
    compare.add_argument("new", metavar="NEW", help="the run after the change")
    compare.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    compare.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    compare.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no warnings on stderr")
    compare.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)
    compare.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    compare.set_defaults(func=cmd_compare)

    trace = subparsers.add_parser(
        "export-trace", help="write a Chrome trace / Perfetto JSON of a run", description="Export a run as a Chrome trace."
    )
    trace.add_argument("run", metavar="RUN", help="run directory")
    trace.add_argument("-o", "--output", metavar="FILE", required=True, help="trace file to write ('-' for stdout)")
    trace.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no warnings on stderr")
    trace.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)
    trace.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    trace.set_defaults(func=cmd_export_trace)

    watch = subparsers.add_parser(
        "watch", help="follow a running job: progress, findings; exit 0 when it closes, 1 if it fails, 3 if it hangs",
        description="Follow a running job until it closes (exit 0), fails or goes silent (1), or hangs (3).")
    watch.add_argument("run", metavar="RUN", help="run directory (it may not exist yet)")
    watch.add_argument("--interval", type=_positive_float, default=5.0, metavar="S", help="seconds between refreshes (default: 5)")
    watch.add_argument("--timeout", type=_positive_float, metavar="S", help="stop watching after S seconds (exit 0 if the job runs well)")
    watch.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    watch.set_defaults(func=cmd_watch)

    _add_sample_parser(subparsers, load_options=_command_of(argv) == "sample")

    demo = subparsers.add_parser(
        "demo",
        help="run a sample job whose worker slows down mid-run, announced live; analyse it and write the HTML report",
        description="Run the ps_ctl sample job, whose worker 1 slows down part-way through, announced while it "
                    "trains; analyse it and write report.html.",
    )
    demo.add_argument("--logdir", default=DEMO_LOGDIR, metavar="DIR", help=f"where the run goes (default: ./{DEMO_LOGDIR})")
    demo.add_argument("--steps", type=_positive_int, default=DEMO_STEPS, metavar="N",
                      help=f"training steps (default: {DEMO_STEPS})")
    demo.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    demo.set_defaults(func=cmd_demo)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (global options take no values)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def _silence_stdout() -> None:
    """Points file descriptor 1 at /dev/null, so the interpreter's final flush of what is
    still buffered for the closed stdout fails quietly instead of printing an error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI and returns its exit status (the console script exits with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help, --version and usage errors
            return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(args.func(args))
    except TfdiagError as error:
        if debug:
            traceback.print_exc()
        say(f"tfdiag: error: {_one_line(error)}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        say("tfdiag: interrupted")
        return 130
    except StdoutClosedError:
        _silence_stdout()
        return EXIT_STDOUT_CLOSED
    except Exception as error:  # noqa: BLE001 - one line unless --debug
        if debug:
            traceback.print_exc()
        else:
            say(f"tfdiag: error: internal error: {type(error).__name__}: {_one_line(error)} (run with --debug for the traceback)")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
