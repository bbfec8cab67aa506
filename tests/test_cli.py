"""The tfdiag command line, driven through ``main([...])`` on small real runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from tfdiag.cli import main
from tfdiag.store import log_dir

# The JSON report's sections (Report.to_dict; src/tfdiag/tb_plugin/http_api.md, "GET /report").
REPORT_KEYS = ["schema_version", "run", "summary", "workers", "rpc", "shards", "gpus", "faults", "findings"]


@pytest.fixture
def straggler(synthetic_run):
    return synthetic_run("straggler", workers=2, steps=50, slow_worker=1)


@pytest.fixture
def clean(synthetic_run):
    return synthetic_run("clean", workers=2, steps=50)


def test_help_exits_zero(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("analyze", "compare", "export-trace", "sample", "demo"):
        assert command in out


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "usage:" in capsys.readouterr().err


def test_bad_option_is_a_usage_error(capsys, clean):
    assert main(["analyze", str(clean), "--format", "pdf"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_analyze_text(capsys, straggler):
    assert main(["analyze", str(straggler)]) == 0
    captured = capsys.readouterr()
    assert "straggler" in captured.out and "worker:1" in captured.out
    assert captured.err == ""


@pytest.mark.parametrize(("fail_on", "expected"), [("warning", 1), ("critical", 1), (None, 0)])
def test_fail_on_with_a_straggler(capsys, straggler, fail_on, expected):
    # 60 ms against 20 ms: a critical straggler.
    argv = ["analyze", str(straggler)] + (["--fail-on", fail_on] if fail_on else [])
    assert main(argv) == expected


def test_fail_on_with_a_clean_run(capsys, clean):
    assert main(["analyze", str(clean), "--fail-on", "warning"]) == 0


def test_fail_on_critical_ignores_warnings(capsys, synthetic_run):
    run = synthetic_run("mild", workers=2, steps=50, slow_worker=1, slow_ms=10.0)  # 1.5x: a warning
    assert main(["analyze", str(run), "--fail-on", "warning", "-q"]) == 1
    assert main(["analyze", str(run), "--fail-on", "critical", "-q"]) == 0


def test_missing_run_is_one_line_and_exit_2(capsys, tmp_path):
    missing = tmp_path / "no-such-run"
    assert main(["analyze", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("tfdiag: error: ") and str(missing) in lines[0]
    assert "Traceback" not in captured.err


def test_directory_that_is_not_a_run(capsys, tmp_path):
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tfdiag: error: ") and str(tmp_path) in err


def test_debug_shows_the_traceback(capsys, tmp_path):
    assert main(["--debug", "analyze", str(tmp_path / "missing")]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_json_stdout_is_only_json(capsys, straggler):
    assert main(["analyze", str(straggler), "--format", "json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    # The report's sections in order; the later additions (ps, hosts) may follow.
    assert [key for key in data if key in REPORT_KEYS] == REPORT_KEYS
    assert set(data) - set(REPORT_KEYS) <= {"ps", "hosts"}
    assert data["summary"]["primary_bottleneck"] == "straggler"
    assert data["run"]["skipped_records"] == 0


def test_output_file(capsys, straggler, tmp_path):
    target = tmp_path / "report.html"
    assert main(["analyze", str(straggler), "--format", "html", "-o", str(target)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(target) in captured.err
    assert target.read_text().startswith("<!DOCTYPE html>")


def test_unwritable_output_is_exit_2(capsys, straggler, tmp_path):
    assert main(["analyze", str(straggler), "-o", str(tmp_path / "missing-dir" / "r.txt")]) == 2
    assert capsys.readouterr().err.startswith("tfdiag: error: ")


def test_truncated_log_is_reported_and_the_rest_analysed(capsys, synthetic_run):
    run = synthetic_run("truncated", workers=2, steps=100)
    task_file = log_dir(run) / "worker-1.tfdiag"
    size = task_file.stat().st_size
    with open(task_file, "r+b") as f:
        f.truncate(size - 50)
    assert main(["analyze", str(run), "--format", "json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["run"]["skipped_records"] > 0
    assert "tfdiag: warning: " in captured.err and "worker-1.tfdiag" in captured.err
    workers = {worker["task"]: worker for worker in data["workers"]}
    assert workers["worker:0"]["steps"] == 100
    assert 0 < workers["worker:1"]["steps"] < 100


def test_quiet_hides_warnings(capsys, synthetic_run):
    run = synthetic_run("truncated", workers=2, steps=20)
    task_file = log_dir(run) / "worker-0.tfdiag"
    with open(task_file, "r+b") as f:
        f.truncate(task_file.stat().st_size - 10)
    assert main(["analyze", str(run), "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_compare_reports_a_resolved_straggler(capsys, straggler, clean):
    assert main(["compare", str(straggler), str(clean), "--format", "json"]) == 0
    comparison = json.loads(capsys.readouterr().out)
    assert [entry["kind"] for entry in comparison["findings"]["resolved"]] == ["straggler"]
    assert comparison["findings"]["new"] == []
    # 60 ms steps on one worker become 20 ms: more throughput, same median step.
    assert comparison["examples_per_s"]["ratio"] > 1.2
    assert comparison["examples_per_s"]["change_pct"] > 20

    assert main(["compare", str(straggler), str(clean)]) == 0
    text = capsys.readouterr().out
    assert "Resolved findings (1)" in text and "straggler" in text


def test_compare_reports_a_new_finding(capsys, straggler, clean):
    assert main(["compare", str(clean), str(straggler), "--format", "json"]) == 0
    comparison = json.loads(capsys.readouterr().out)
    assert [entry["kind"] for entry in comparison["findings"]["new"]] == ["straggler"]
    assert comparison["examples_per_s"]["change_pct"] < 0


def test_export_trace(capsys, straggler, tmp_path):
    target = tmp_path / "trace.json"
    assert main(["export-trace", str(straggler), "-o", str(target)]) == 0
    trace = json.loads(target.read_text())
    slices = [event for event in trace["traceEvents"] if event["ph"] == "X"]
    assert len(slices) == 2 * 50


def test_export_trace_needs_output(capsys, straggler):
    assert main(["export-trace", str(straggler)]) == 2


def test_analyze_does_not_import_tensorflow(straggler):
    code = (
        "import sys; from tfdiag.cli import main; rc = main(['analyze', sys.argv[1], '-q']);"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')"
        " or m.startswith('tfdiag.sample_jobs')]; print('BAD', bad, file=sys.stderr); sys.exit(rc or bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code, str(straggler)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


class FakeSampleCli:
    """Stands in for ``tfdiag.sample_jobs.cli``: writes a synthetic run instead of training."""

    def __init__(self):
        self.calls = []
        self.returncode = 0

    def add_arguments(self, parser):
        parser.add_argument("job")
        parser.add_argument("--steps", type=int, default=10)

    def run(self, args):
        self.calls.append(("run", args.job, args.steps))
        return 0

    def run_sample(self, job, *, ps=2, workers=2, steps=200, logdir, inject=(), tune=(), collect=True):
        from tests.conftest import write_synthetic_run

        self.calls.append(("run_sample", job, ps, workers, steps, logdir, list(inject)))
        write_synthetic_run(logdir, workers=workers, steps=steps, slow_worker=1)
        return types.SimpleNamespace(returncode=self.returncode, ok=self.returncode == 0, logdir=logdir)


@pytest.fixture
def fake_sample_cli(monkeypatch):
    import tfdiag.sample_jobs

    fake = FakeSampleCli()
    monkeypatch.setitem(sys.modules, "tfdiag.sample_jobs.cli", fake)
    monkeypatch.setattr(tfdiag.sample_jobs, "cli", fake, raising=False)
    return fake


def test_sample_delegates_to_the_sample_jobs(capsys, fake_sample_cli):
    assert main(["sample", "ps_ctl", "--steps", "7"]) == 0
    assert fake_sample_cli.calls == [("run", "ps_ctl", 7)]


def test_demo_runs_analyses_and_writes_html(capsys, fake_sample_cli, tmp_path):
    logdir = tmp_path / "demo"
    assert main(["demo", "--logdir", str(logdir), "--steps", "30"]) == 0
    (call,) = fake_sample_cli.calls
    assert call[:5] == ("run_sample", "ps_ctl", 2, 2, 30)
    assert call[6] == ["slow-worker=1:40@12"]  # from 40 % of the steps on
    run_dir = call[5]
    captured = capsys.readouterr()
    assert "straggler" in captured.out
    html_path = os.path.join(run_dir, "report.html")
    assert os.path.isfile(html_path) and html_path in captured.out
    assert f"tensorboard --logdir {logdir} --host 127.0.0.1" in captured.out
    assert "--bind_all" not in captured.out and '"tfdiag" tab' in captured.out
    assert "running sample job" in captured.err


def test_progress_bar_for_large_runs_only(capsys, monkeypatch, straggler):
    import tfdiag.cli_stderr as cli_stderr

    assert main(["analyze", str(straggler), "-o", os.devnull]) == 0
    assert "reading" not in capsys.readouterr().err  # a small run: no bar
    monkeypatch.setattr(cli_stderr, "PROGRESS_LARGE_BYTES", 1)
    monkeypatch.setattr(cli_stderr, "PROGRESS_TTY_BYTES", 1)
    assert main(["analyze", str(straggler), "-o", os.devnull]) == 0
    assert "reading straggler" in capsys.readouterr().err
    assert main(["analyze", str(straggler), "-o", os.devnull, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_demo_reports_a_failed_job(capsys, fake_sample_cli, tmp_path):
    fake_sample_cli.returncode = 3
    assert main(["demo", "--logdir", str(tmp_path / "demo"), "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert "tfdiag: error: the sample job failed (exit status 3)" in err


# -- untrusted names, closed stdout ---------------------------------------------------------

ANSI_TASK = "worker:\x1b[31m1\x1b[0m"
ANSI_STRATEGY = "Parameter\x1b[2J\x07Server\u202eStrategy\r"


@pytest.fixture
def hostile_run(tmp_path):
    """A straggler run whose slow task and strategy hold terminal escapes, in a directory
    whose name is not UTF-8 (Python holds the byte 0xff as the surrogate U+DCFF)."""
    from tests.runs import RunBuilder

    path = tmp_path / os.fsdecode(b"run-\xff")
    return RunBuilder(path, strategy=ANSI_STRATEGY).steps("worker:0", step_ms=20).steps(ANSI_TASK, step_ms=60).write()


def assert_no_raw_controls(text: str) -> None:
    assert not any(ord(c) < 32 and c not in "\n" or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF for c in text)
    assert "\u202e" not in text


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json"])
def test_untrusted_names_are_escaped_and_written_as_utf8(capsys, hostile_run, tmp_path, fmt):
    target = tmp_path / os.fsdecode(b"report-\xfe.out")
    assert main(["analyze", str(hostile_run), "--format", fmt, "-o", str(target)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_no_raw_controls(captured.err)
    assert "report-\\xfe.out" in captured.err  # the file name as written, escaped
    written = target.read_bytes().decode("utf-8")  # strict: no surrogate reached the file
    if fmt == "json":
        data = json.loads(written)
        assert ANSI_TASK in [worker["task"] for worker in data["workers"]]  # JSON keeps names exactly, as \u escapes
        assert data["run"]["strategy"] == ANSI_STRATEGY and written.isascii()
        return
    if fmt != "html":  # the HTML page inlines plotly.js, which has control characters of its own
        assert_no_raw_controls(written)
    if fmt == "markdown":  # Markdown escapes the backslash and the bracket of the escape
        assert "worker:\\\\x1b\\[31m1" in written and "run-\\\\xff" in written
    else:
        assert "worker:\\x1b[31m1" in written and "run-\\xff" in written


def test_untrusted_names_on_the_terminal(capsys, hostile_run):
    assert main(["analyze", str(hostile_run)]) == 0
    captured = capsys.readouterr()
    assert_no_raw_controls(captured.out + captured.err)
    assert "straggler" in captured.out and "worker:\\x1b[31m1\\x1b[0m" in captured.out
    assert main(["compare", str(hostile_run), str(hostile_run)]) == 0
    captured = capsys.readouterr()
    assert_no_raw_controls(captured.out + captured.err)
    assert "run-\\xff" in captured.out


def test_errors_escape_the_path_they_name(capsys, tmp_path):
    missing = tmp_path / "no\x1b[2Jrun\udcff"
    assert main(["analyze", str(missing)]) == 2
    err = capsys.readouterr().err
    assert_no_raw_controls(err)
    assert err.count("\n") == 1 and "no\\x1b[2Jrun\\xff" in err


def run_cli(args, **popen):
    return subprocess.Popen([sys.executable, "-m", "tfdiag.cli", *args], stderr=subprocess.PIPE, **popen)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_reader_gone_exits_141_quietly(straggler, fmt):
    """``tfdiag analyze RUN | head -0``: the pipe's reader is gone before the report is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    process = run_cli(["analyze", str(straggler), "--format", fmt], stdout=write_end)
    os.close(write_end)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141
    assert err == b""


def test_help_into_a_closed_pipe_exits_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)
    process = run_cli(["--help"], stdout=write_end)
    os.close(write_end)
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (0, b"")  # argparse ignores the failed write


def test_closed_stdout_exits_141_quietly(straggler):
    """``tfdiag analyze RUN >&-``: no file descriptor 1 at all."""
    process = run_cli(["analyze", str(straggler)], stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141
    assert err == b""


# -- the fold cache -----------------------------------------------------------------------


@pytest.fixture
def saved(monkeypatch, straggler):
    """``straggler`` analysed once, its task files' folds saved in the test's cache."""
    from tfdiag.analysis import fold_cache

    monkeypatch.setattr(fold_cache, "MIN_FILE_BYTES", 0)
    assert main(["analyze", str(straggler), "-q", "-o", os.devnull]) == 0
    assert list(fold_cache.FoldCache.default().directory.glob("*.fold"))
    return straggler


def _json_and_err(capsys, argv) -> tuple[dict, str]:
    assert main(argv) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


@pytest.mark.parametrize("problem", ["not a directory", "cannot be written", "damaged entries", "saves fail"])
def test_a_cache_that_cannot_be_used_is_one_warning(capsys, monkeypatch, tmp_path, saved, problem):
    """The report is the uncached one, stdout pure JSON, and stderr one warning (none with -q)."""
    from tfdiag.analysis import fold_cache

    argv = ["analyze", str(saved), "--format", "json"]
    uncached, _ = _json_and_err(capsys, argv + ["--no-cache"])
    entries = list(fold_cache.FoldCache.default().directory.glob("*.fold"))
    if problem == "not a directory":
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("TFDIAG_CACHE_DIR", str(tmp_path / "a-file"))
    elif problem == "cannot be written":  # as a read-only directory (the tests may run as root)
        monkeypatch.setattr(fold_cache.tempfile, "mkstemp", _fails)
    elif problem == "damaged entries":
        for entry in entries:
            entry.write_bytes(b"tfdiag-fold 1\n" + b"\xff" * 64)
    else:  # a full disk
        for entry in entries:
            entry.unlink()
        monkeypatch.setattr(fold_cache.os, "replace", _fails)
    report, err = _json_and_err(capsys, argv)
    assert report == uncached
    assert len(err.splitlines()) == 1 and err.startswith("tfdiag: warning: ") and "cache" in err
    assert _json_and_err(capsys, argv + ["-q"]) == (uncached, "")


def _fails(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_compare_and_export_trace_read_through_the_cache_too(capsys, monkeypatch, saved, clean, tmp_path):
    import tfdiag.analysis.load as load

    reads = []
    real = load.read_task_file
    monkeypatch.setattr(load, "read_task_file", lambda path, offset=0: reads.append(path) or real(path, offset))
    assert main(["compare", str(saved), str(clean), "-q", "-o", os.devnull]) == 0
    assert main(["export-trace", str(saved), "-q", "-o", os.devnull]) == 0
    assert reads and not any(str(path).startswith(str(saved)) for path in reads)  # only clean's files
    assert main(["compare", str(saved), str(clean), "-q", "-o", os.devnull, "--no-cache"]) == 0
    assert any(str(path).startswith(str(saved)) for path in reads)
