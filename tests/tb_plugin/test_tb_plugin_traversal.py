"""The plugin refuses every path outside its logdir, on every route and every run argument."""

from __future__ import annotations

import pytest

from tests.tb_plugin.tb_plugin_runs import logdir, make_run  # noqa: F401 (logdir is a fixture)
from tests.tb_plugin.test_tb_plugin_routes import (  # noqa: F401 (client and plugin are fixtures)
    PREFIX, client, client_for, get_json, make_plugin, plugin)


TRAVERSALS = [
    "..",
    "../..",
    "%2e%2e",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "..%2fslow",
    "../logs/slow",
    "./slow",
    "slow/..",
    "slow/../slow",
    "slow/plugins/tfdiag",
    "/etc/passwd",
    "%2fetc%2fpasswd",
    "//etc/passwd",
    "~",
    "~/slow",
    "file:///etc/passwd",
    "slow%00",
]

# Every route with a run argument: (route, the argument under test, the other arguments).
RUN_ARGUMENTS = [
    ("/report", "run", {}),
    ("/figure", "run", {"name": "step_time"}),
    ("/compare", "base", {"new": "slow"}),
    ("/compare", "new", {"base": "slow"}),
    ("/now", "run", {}),
    ("/faults", "run", {}),
]


@pytest.mark.parametrize("route, argument, others", RUN_ARGUMENTS)
@pytest.mark.parametrize("value", TRAVERSALS)
def test_traversal_is_refused_on_every_run_argument(client, logdir, route, argument, others, value):
    query = "&".join([f"{argument}={value}", *(f"{key}={item}" for key, item in others.items())])
    response = client.get(f"{PREFIX}{route}?{query}")
    assert response.status_code in (400, 404), (route, value)
    assert response.mimetype == "application/json"
    assert "root:" not in response.get_data(as_text=True)


@pytest.mark.parametrize("route, argument, others", RUN_ARGUMENTS)
def test_absolute_path_of_a_real_run_is_refused_on_every_run_argument(client, logdir, route, argument, others):
    for value in (str(logdir / "slow"), str(logdir) + "/../logs/slow", str(logdir / "sweep" / "even")):
        response = client.get(PREFIX + route, query_string={argument: value, **others})
        assert response.status_code == 404, (route, argument, value)


@pytest.mark.parametrize("value", TRAVERSALS + ["step_time/..", "STEP_TIME"])
def test_traversal_is_refused_on_the_figure_name(client, value):
    response = client.get(f"{PREFIX}/figure?run=slow&name={value}")
    assert response.status_code == 400
    assert response.mimetype == "application/json"


@pytest.mark.parametrize("value", TRAVERSALS)
def test_runs_ignores_arguments(client, value):
    """/runs takes no argument: whatever a request adds changes nothing."""
    assert get_json(client, f"{PREFIX}/runs?run={value}&logdir={value}") == ["slow", "sweep/even"]


def test_a_run_outside_the_logdir_is_refused(tmp_path):
    outside = make_run(tmp_path / "outside")
    root = tmp_path / "logs"
    make_run(root / "inside")
    client = client_for(make_plugin(root))
    assert get_json(client, PREFIX + "/runs") == ["inside"]
    for value in (str(outside), "../outside", "inside/../../outside"):
        response = client.get(PREFIX + "/report", query_string={"run": value})
        assert response.status_code == 404, value
