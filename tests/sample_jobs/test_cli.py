"""``tfdiag sample``'s argument paths: every bad value ends in a one-line error, exit 2."""

from __future__ import annotations

import argparse
import string

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tfdiag.errors import InvalidOptionError
from tfdiag.sample_jobs import cli
from tfdiag.sample_jobs.inject import INJECTION_KINDS, TUNING_VALUES
from tfdiag.sample_jobs.jobs import JobConfig


def run_cli(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["ps_ctl", "--tune", "batch=²"], "'batch=²'"),
    (["ps_ctl", "--inject", "input-delay=1e+06"], "'input-delay=1e+06'"),
    (["ps_ctl", "--timeout", "nan"], "--timeout"),
    (["ps_ctl", "--timeout", "-1"], "--timeout"),
    (["ps_ctl", "--workers", "100000"], "--workers"),
])
def test_bad_values_are_one_line_errors(argv, expected, capsys, tmp_path):
    code, err = run_cli([*argv, "--logdir", str(tmp_path / "run")], capsys)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_logdir_under_a_file_names_the_file(capsys, tmp_path):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file")
    code, err = run_cli(["ps_ctl", "--logdir", str(blocker / "run")], capsys)
    assert code == 2 and f"{str(blocker)!r} is a file" in err and "internal error" not in err
    code, err = run_cli(["ps_ctl", "--logdir", str(blocker)], capsys)
    assert code == 2 and f"{str(blocker)!r} is a file" in err


# Values built from the characters that make the parsers' edge cases: digits of every
# kind, signs, separators, exponents, letters.
EDGE_TEXT = st.text(alphabet=string.digits + "²١٣.:@+-=eE ,xIN" + "\u00a0", max_size=14)
SPECS = st.one_of(
    EDGE_TEXT,
    st.builds("{}={}".format, st.sampled_from(INJECTION_KINDS), EDGE_TEXT),
    st.builds("{}={}".format, st.sampled_from(sorted(TUNING_VALUES)), EDGE_TEXT),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inject=st.lists(SPECS, max_size=2), tune=st.lists(SPECS, max_size=2), job=st.sampled_from(
    ["ps_ctl", "ps_fit", "mwms_fit", "mirrored", "tf1_session"]))
def test_any_inject_or_tune_value_is_accepted_or_a_clear_error(inject, tune, job):
    """Fuzz: a config is either valid and round-trips through the JSON the tasks get, or
    the error is an ``InvalidOptionError`` naming the option (never another exception)."""
    try:
        config = JobConfig(job, "/tmp/run", inject=tuple(inject), tune=tuple(tune))
    except InvalidOptionError as error:
        assert "--inject" in str(error) or "--tune" in str(error)
        event("rejected")
        return
    event("accepted")
    assert JobConfig.from_json(config.to_json()) == config
    assert config.batch_size > 0 and config.plan.specs == {"inject": list(config.inject), "tune": list(config.tune)}


def test_arguments_parse_with_the_subcommand_parser():
    args = cli.add_arguments(argparse.ArgumentParser()).parse_args(["mwms_fit", "--timeout", "30"])
    assert (args.job, args.timeout) == ("mwms_fit", 30.0)
