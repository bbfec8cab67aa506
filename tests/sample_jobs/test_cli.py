"""``tfdiag sample``'s argument paths: every bad value ends in a one-line error, exit 2."""

from __future__ import annotations

import argparse
import string

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tfdiag.errors import InvalidOptionError
from tfdiag.sample_jobs import cli
from tfdiag.sample_jobs.inject import TUNING_VALUES, parse_injection
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
INDEX = st.one_of(st.integers(0, 3).map(str), EDGE_TEXT)
NUMBER = st.one_of(st.integers(0, 10**7).map(str), st.floats(0, 10**7).map(lambda f: f"{f:.4f}"), EDGE_TEXT)
# Each kind's own form (I:MS, I@STEP+restart, ...) with edge-case numbers in it.
INJECT_SPECS = st.one_of(
    EDGE_TEXT,
    st.builds("input-delay={}".format, NUMBER),
    st.builds("{}={}:{}".format, st.sampled_from(["slow-worker", "shard-skew", "slow-ps"]), INDEX, NUMBER),
    st.builds("hot-ps={}".format, INDEX),
    st.builds("kill-worker={}@{}{}".format, INDEX, NUMBER, st.sampled_from(["", "+restart", "+RESTART"])),
)
WORDS = st.sampled_from(sorted({w for v in TUNING_VALUES.values() if isinstance(v, tuple) for w in v}))
TUNE_SPECS = st.one_of(EDGE_TEXT, st.builds("{}={}".format, st.sampled_from(sorted(TUNING_VALUES)),
                                            st.one_of(NUMBER, WORDS)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inject=st.lists(INJECT_SPECS, max_size=2), tune=st.lists(TUNE_SPECS, max_size=1), job=st.sampled_from(
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


@settings(max_examples=300, deadline=None)
@given(spec=INJECT_SPECS)
def test_any_inject_value_parses_to_a_spec_that_parses_back(spec):
    """Fuzz: what the tasks receive (the normalised spec) parses to the same injection."""
    try:
        injection = parse_injection(spec)
    except InvalidOptionError as error:
        assert repr(spec) in str(error)
        event("rejected")
        return
    event("accepted")
    assert parse_injection(injection.spec) == injection
