"""Parsing of --inject and --tune."""

from __future__ import annotations

import argparse

import pytest

from tfdiag.errors import InvalidOptionError
from tfdiag.sample_jobs import add_arguments, run_sample
from tfdiag.sample_jobs.inject import (
    HotPs,
    InputDelay,
    KillWorker,
    Plan,
    ShardSkew,
    SlowPs,
    SlowWorker,
    Tuning,
    parse_injection,
    parse_tuning,
)
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary, parse_summary


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("input-delay=20", InputDelay(20.0)),
        ("input-delay=2.5", InputDelay(2.5)),
        (" slow-worker=1:40 ", SlowWorker(1, 40.0)),
        ("slow-worker=1:40@2000", SlowWorker(1, 40.0, 2000)),
        ("shard-skew=0:3", ShardSkew(0, 3.0)),
        ("hot-ps=1", HotPs(1)),
        ("slow-ps=0:15", SlowPs(0, 15.0)),
        ("kill-worker=1@50", KillWorker(1, 50, False)),
        ("kill-worker=1@50+restart", KillWorker(1, 50, True)),
        ("input-delay=1000000", InputDelay(1e6)),
        ("input-delay=0.0000001", InputDelay(1e-7)),
    ],
)
def test_parse_injection(spec, expected):
    parsed = parse_injection(spec)
    assert parsed == expected
    assert parse_injection(parsed.spec) == parsed  # specs round-trip


@pytest.mark.parametrize(
    "spec",
    ["", "input-delay", "input-delay=", "input-delay=-3", "input-delay=abc", "slow-worker=1", "slow-worker=a:40",
     "slow-worker=1:40:2", "slow-worker=1:40@", "shard-skew=1:0", "kill-worker=1", "kill-worker=1@x", "warp-drive=9",
     "input-delay=²", "hot-ps=١", "input-delay=1e3", "input-delay=inf", "input-delay=nan", "input-delay=3600001",
     "shard-skew=0:1001", "slow-worker=0:" + "9" * 400],
)
def test_bad_injection_names_option_and_value(spec):
    with pytest.raises(InvalidOptionError) as info:
        parse_injection(spec)
    assert "--inject" in str(info.value) and repr(spec) in str(info.value)


@pytest.mark.parametrize(
    "spec, expected",
    [("prefetch=on", Tuning("prefetch", "on")), ("MAP_PARALLEL=Off", Tuning("map_parallel", "off")),
     ("batch=128", Tuning("batch", "128")), ("autoshard=data", Tuning("autoshard", "data"))],
)
def test_parse_tuning(spec, expected):
    assert parse_tuning(spec) == expected


@pytest.mark.parametrize("spec", ["prefetch", "prefetch=maybe", "batch=0", "batch=x", "turbo=on", "batch=²", "batch=١",
                                  "partitioner=-1"])
def test_bad_tuning_names_option_and_value(spec):
    with pytest.raises(InvalidOptionError, match="--tune") as info:
        parse_tuning(spec)
    assert repr(spec) in str(info.value)


def test_job_config_errors_quote_the_value_as_given():
    given = " INPUT-DELAY=1000000.0"
    config = JobConfig("ps_ctl", "/tmp/x", inject=(given,))
    assert config.inject == ("input-delay=1000000",)
    assert JobConfig.from_json(config.to_json()) == config  # what the tasks receive parses again
    with pytest.raises(InvalidOptionError) as info:
        JobConfig("mirrored", "/tmp/x", inject=(given.replace("INPUT-DELAY", "slow-worker"),))
    assert repr(given.replace("INPUT-DELAY", "slow-worker")) in str(info.value)


def test_a_slow_down_from_a_step_on_applies_where_the_job_can_begin_it_mid_run():
    from tfdiag.sample_jobs.ps_ctl import slow_workers

    config = JobConfig("ps_ctl", "/tmp/x", inject=("slow-worker=1:40@100", "slow-worker=0:5"))
    assert slow_workers(config, 99) == {0: 5000} and slow_workers(config, 100) == {0: 5000, 1: 40000}
    with pytest.raises(InvalidOptionError, match="applies to ps_ctl") as info:
        JobConfig("mwms_fit", "/tmp/x", inject=("slow-worker=1:40@100",))
    assert "'slow-worker=1:40@100'" in str(info.value)


@pytest.mark.parametrize("option, value", [("workers", 65), ("ps", 65), ("steps", 2**31), ("batch", -1),
                                           ("model_size", 2**40), ("steps", True)])
def test_job_config_rejects_counts_out_of_range(option, value):
    with pytest.raises(InvalidOptionError, match=f"--{option.replace('_', '-')}"):
        JobConfig("ps_ctl", "/tmp/x", **{option: value})


def test_plan_lookups():
    plan = Plan.parse(["slow-worker=1:40", "input-delay=5", "slow-worker=0:10"], ["prefetch=on", "prefetch=off"])
    assert plan.of(SlowWorker) == (SlowWorker(1, 40.0), SlowWorker(0, 10.0))
    assert plan.tuned("prefetch") == "off" and not plan.is_on("prefetch")
    assert plan.tuned("batch", "64") == "64"
    assert plan.specs == {"inject": ["slow-worker=1:40", "input-delay=5", "slow-worker=0:10"],
                          "tune": ["prefetch=on", "prefetch=off"]}


def test_job_config_round_trip_and_validation():
    config = JobConfig("ps_ctl", "/tmp/x", inject=("slow-worker=1:40",), tune=("batch=32",))
    assert JobConfig.from_json(config.to_json()) == config
    assert config.batch_size == 32
    with pytest.raises(InvalidOptionError, match="--steps"):
        JobConfig("ps_ctl", "/tmp/x", steps=0)
    with pytest.raises(InvalidOptionError, match="--inject"):
        JobConfig("ps_ctl", "/tmp/x", inject=("nope",))


def test_summary_line_round_trip():
    line = JobSummary(steps=200, wall_s=4.0, examples=12800).line()
    assert line == "tfdiag-sample: steps=200 wall_s=4.000 examples_per_s=3200.0"
    assert parse_summary("noise\n" + line + "\n") == (200, 4.0, 3200.0, None)
    assert parse_summary("nothing here") is None
    # 180 steps after the warm-up in 2.0 s: 64 examples a step
    steady = JobSummary(steps=200, wall_s=4.0, examples=12800, steady=(180, 2.0)).line()
    assert steady == "tfdiag-sample: steps=200 wall_s=4.000 examples_per_s=3200.0 steady_examples_per_s=5760.0"
    assert parse_summary(steady).steady_examples_per_s == 5760.0


def test_cli_arguments():
    args = add_arguments(argparse.ArgumentParser()).parse_args(
        ["ps_ctl", "--steps", "10", "--inject", "input-delay=5", "--inject", "slow-worker=1:40", "--tune", "prefetch=on",
         "--no-collect"]
    )
    assert (args.job, args.steps, args.ps, args.workers, args.collect) == ("ps_ctl", 10, 2, 2, False)
    assert args.inject == ["input-delay=5", "slow-worker=1:40"] and args.tune == ["prefetch=on"]


def test_run_sample_rejects_bad_options_before_starting_anything(tmp_path):
    with pytest.raises(InvalidOptionError, match="JOB"):
        run_sample("no_such_job", logdir=tmp_path)
    with pytest.raises(InvalidOptionError, match="--inject"):
        run_sample("ps_ctl", logdir=tmp_path, inject=["slow-worker=one"])
    assert not (tmp_path / "tasks").exists()
