"""The plugin's HTTP routes, driven through TensorBoard's own WSGI router with werkzeug's client."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.offline
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tfdiag.report.figures import FIGURES
from tfdiag.tb_plugin import metadata
from tfdiag.tb_plugin.plugin import TfdiagPlugin, TfdiagPluginLoader

from tests.tb_plugin.tb_plugin_runs import logdir, make_full_run, make_run, write_steps  # noqa: F401 (logdir is a fixture)

PREFIX = "/data/plugin/tfdiag"


def make_plugin(logdir, **options) -> TfdiagPlugin:
    """The plugin over ``logdir``; a request waits for the refresh it starts (unless
    ``view_wait_s`` says otherwise), so a test reads what is on disk when it asks."""
    options.setdefault("view_wait_s", 60.0)
    return TfdiagPlugin(base_plugin.TBContext(logdir=str(logdir) if logdir is not None else None), **options)


def client_for(plugin: TfdiagPlugin) -> Client:
    return Client(application.TensorBoardWSGI([plugin]))


@pytest.fixture
def plugin(logdir):
    return make_plugin(logdir)


@pytest.fixture
def client(plugin):
    return client_for(plugin)


def get_json(client: Client, url: str, status: int = 200):
    response = client.get(url)
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    return json.loads(response.get_data(as_text=True))


# -- TensorBoard interface ----------------------------------------------------------------


def test_loader_and_metadata(logdir):
    plugin = TfdiagPluginLoader().load(base_plugin.TBContext(logdir=str(logdir)))
    assert isinstance(plugin, TfdiagPlugin)
    assert plugin.plugin_name == metadata.PLUGIN_NAME == "tfdiag"
    frontend = plugin.frontend_metadata()
    assert frontend.es_module_path == "/index.js"
    assert frontend.tab_name == "tfdiag"


def test_is_active_only_with_a_run(tmp_path):
    empty = tmp_path / "empty"
    (empty / "train").mkdir(parents=True)
    assert make_plugin(empty).is_active() is False
    assert make_plugin(tmp_path / "missing").is_active() is False
    assert make_plugin(None).is_active() is False
    make_run(empty / "train")
    assert make_plugin(empty).is_active() is True


def test_is_active_is_cached_then_rechecked(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    cached = make_plugin(root)
    rechecked = make_plugin(root, discovery_ttl_s=0, is_active_ttl_s=0)
    assert not cached.is_active() and not rechecked.is_active()
    make_run(root / "late")
    assert cached.is_active() is False  # within the TTL: no new walk of the logdir
    assert rechecked.is_active() is True


def test_plugins_listing_and_entry(client):
    listing = get_json(client, "/data/plugins_listing")
    assert listing["tfdiag"]["enabled"] is True
    assert listing["tfdiag"]["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/tfdiag/index.js"}
    entry = client.get("/data/plugin_entry.html?name=tfdiag")
    assert entry.status_code == 200
    assert '"./index.js"' in entry.get_data(as_text=True)


# -- /runs ------------------------------------------------------------------------------


def test_runs_lists_runs_relative_to_logdir(client):
    assert get_json(client, PREFIX + "/runs") == ["slow", "sweep/even"]


def test_runs_include_logdir_itself_as_dot(tmp_path):
    make_run(tmp_path / "run")
    client = client_for(make_plugin(tmp_path / "run"))
    assert get_json(client, PREFIX + "/runs") == ["."]
    report = get_json(client, PREFIX + "/report?run=.")
    assert report["summary"]["primary_bottleneck"] == "straggler"


def test_runs_with_no_logdir(tmp_path):
    assert get_json(client_for(make_plugin(None)), PREFIX + "/runs") == []
    assert get_json(client_for(make_plugin(tmp_path / "missing")), PREFIX + "/runs") == []


def test_run_named_like_markup_is_a_plain_string(tmp_path):
    name = "<script>alert(1)</script>"
    make_run(tmp_path / name)
    client = client_for(make_plugin(tmp_path))
    response = client.get(PREFIX + "/runs")
    assert response.mimetype == "application/json"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert json.loads(response.get_data(as_text=True)) == [name]
    response = client.get(PREFIX + "/report", query_string={"run": name})
    assert response.status_code == 200
    assert json.loads(response.get_data(as_text=True))["summary"]["primary_bottleneck"] == "straggler"


# -- /figures ---------------------------------------------------------------------------


def test_figures_lists_every_figure_once_in_view_order(client):
    from tfdiag.report.figures import COMPARE_FIGURES

    listing = get_json(client, PREFIX + "/figures?run=..")  # arguments are ignored
    assert [name for _, names in listing["views"] for name in names] == list(FIGURES)
    assert all(isinstance(title, str) and title for title, _ in listing["views"])
    assert listing["compare"] == list(COMPARE_FIGURES) and set(COMPARE_FIGURES) <= set(FIGURES)


def test_the_frontend_names_no_figure_itself():
    """The chart list comes from /figures only: no figure name is spelled in the JS."""
    static = Path(__file__).parents[2] / "src" / "tfdiag" / "tb_plugin" / "static"
    for script in static.glob("*.js"):
        text = script.read_text()
        assert not [name for name in FIGURES if f"'{name}'" in text or f'"{name}"' in text], script.name


# -- /report ----------------------------------------------------------------------------


def test_report_of_a_straggler_run(client):
    report = get_json(client, PREFIX + "/report?run=slow")
    assert report["schema_version"] == 1
    assert report["run"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert report["run"]["tasks"] == ["worker:0", "worker:1"]
    assert report["summary"]["primary_bottleneck"] == "straggler"
    straggler = report["findings"][0]
    assert straggler["kind"] == "straggler"
    assert straggler["tasks"] == ["worker:1"]
    assert straggler["recommendation"]["predicted_speedup"] > 1.5
    assert {worker["task"] for worker in report["workers"]} == {"worker:0", "worker:1"}


def test_report_of_a_clean_run_in_a_subdirectory(client):
    report = get_json(client, PREFIX + "/report?run=sweep/even")
    assert report["summary"]["primary_bottleneck"] is None
    assert report["findings"] == []


def test_report_missing_or_empty_run_is_400(client):
    assert "run" in get_json(client, PREFIX + "/report", status=400)["error"]
    get_json(client, PREFIX + "/report?run=", status=400)
    get_json(client, PREFIX + "/report?run=slow&run=slow", status=400)
    get_json(client, PREFIX + "/report?run=" + "a" * 5000, status=400)


@pytest.mark.parametrize(
    "run",
    [
        "nope",
        "..",
        "../logs/slow",
        "%2e%2e%2f",
        "%2e%2e%2fslow",
        "/etc",
        "/etc/passwd",
        "sweep",
        "not_a_run",
        "slow/",
        "./slow",
        "slow/plugins/tfdiag",
    ],
)
def test_report_unknown_or_traversing_run_is_404(client, logdir, run):
    body = get_json(client, PREFIX + "/report?run=" + run, status=404)
    assert "error" in body


def test_report_absolute_path_of_a_real_run_is_404(client, logdir):
    response = client.get(PREFIX + "/report", query_string={"run": str(logdir / "slow")})
    assert response.status_code == 404
    response = client.get(PREFIX + "/report", query_string={"run": str(logdir.parent) + "/logs/../logs/slow"})
    assert response.status_code == 404


def test_routes_answer_errors_on_their_own(plugin):
    """Without TensorBoard's router the apps still turn errors into JSON responses."""
    apps = plugin.get_plugin_apps()
    for route, query, status in [("/report", "", 400), ("/report", "run=..", 404), ("/figure", "run=slow", 400)]:
        response = Client(apps[route]).get(route + "?" + query)
        assert response.status_code == status
        assert response.mimetype == "application/json"


# -- /figure ----------------------------------------------------------------------------


def test_step_time_figure(client):
    figure = get_json(client, PREFIX + "/figure?run=slow&name=step_time")
    assert sorted(trace["name"] for trace in figure["data"]) == ["worker:0", "worker:1"]
    assert "step time" in figure["layout"]["yaxis"]["title"]["text"]


@pytest.fixture(scope="module")
def full_client(tmp_path_factory):
    """A logdir with one run holding every signal, and a clean run to compare it with."""
    root = tmp_path_factory.mktemp("full") / "logs"
    make_full_run(root / "full")
    make_run(root / "clean", slow_ms=20.0)
    return client_for(make_plugin(root))


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_registered_figure_is_served(full_client, name):
    figure = get_json(full_client, f"{PREFIX}/figure?run=full&name={name}")
    assert figure["data"], name
    assert figure["layout"]["meta"]["empty"] is False


def test_figures_of_a_run_without_that_signal_are_empty_charts(client):
    figure = get_json(client, PREFIX + "/figure?run=slow&name=rpc_latency_heatmap")
    assert figure["data"] == []
    assert figure["layout"]["meta"]["empty"] is True
    assert figure["layout"]["annotations"][0]["text"] == "no RPC probes recorded"


def test_json_routes_answer_304_to_a_matching_etag(full_client):
    for url in (PREFIX + "/report?run=full", PREFIX + "/figure?run=full&name=step_time"):
        first = full_client.get(url)
        assert first.status_code == 200 and first.headers["ETag"]
        again = full_client.get(url, headers={"If-None-Match": first.headers["ETag"]})
        assert again.status_code == 304
        assert again.get_data() == b""


@pytest.mark.parametrize(
    "query, status",
    [
        ("run=slow", 400),
        ("name=step_time", 400),
        ("run=slow&name=nope", 400),
        ("run=slow&name=../../etc/passwd", 400),
        ("run=slow&name=%2e%2e%2fstep_time", 400),
        ("run=slow&name=/etc/passwd", 400),
        ("run=slow&name=step_time&name=step_time", 400),
        ("run=..&name=step_time", 404),
        ("run=/etc&name=step_time", 404),
    ],
)
def test_figure_bad_arguments(client, query, status):
    get_json(client, PREFIX + "/figure?" + query, status=status)


# -- /compare ---------------------------------------------------------------------------


def test_compare_two_runs(full_client):
    comparison = get_json(full_client, PREFIX + "/compare?base=full&new=clean")
    assert (comparison["base_run"], comparison["new_run"]) == ("full", "clean")
    assert comparison["primary_bottleneck"] == {"base": "straggler", "new": None}
    assert "straggler" in [entry["kind"] for entry in comparison["findings"]["resolved"]]
    assert comparison["findings"]["new"] == []
    assert comparison["examples_per_s"]["change_pct"] > 100
    assert comparison["step_time_ms"]["ratio"] < 1


@pytest.mark.parametrize(
    "query, status",
    [
        ("", 400),
        ("base=slow", 400),
        ("new=slow", 400),
        ("base=slow&new=", 400),
        ("base=slow&new=slow&new=slow", 400),
        ("base=slow&new=nope", 404),
        ("base=nope&new=slow", 404),
    ],
)
def test_compare_bad_arguments(client, query, status):
    get_json(client, PREFIX + "/compare?" + query, status=status)


# -- live refresh and caching ---------------------------------------------------------------


def test_live_run_is_reanalysed_only_when_it_changes(tmp_path):
    root = tmp_path / "logs"
    run = make_run(root / "live", slow_ms=20.0)
    plugin = make_plugin(root, refresh_interval_s=0, discovery_ttl_s=0)
    client = client_for(plugin)
    first = get_json(client, PREFIX + "/report?run=live")
    assert first["summary"]["primary_bottleneck"] is None
    state = plugin._state("live")
    assert state.analyses == 1
    get_json(client, PREFIX + "/report?run=live")
    get_json(client, PREFIX + "/figure?run=live&name=step_time")
    assert state.analyses == 1  # nothing new on disk: the cached Report is reused

    # Both workers go on for the same 7.2 s, worker:1 much slower: append to their files
    # (a new writer appends).
    write_steps(run, "worker:0", 20.0, steps=360, first_step=40, start_ns=10**19 // 5)
    write_steps(run, "worker:1", 90.0, steps=80, first_step=40, start_ns=10**19 // 5)
    second = get_json(client, PREFIX + "/report?run=live")
    assert state.analyses == 2
    assert second["summary"]["steps"] == first["summary"]["steps"] + 440
    assert second["summary"]["primary_bottleneck"] == "straggler"


def test_new_run_is_found_without_waiting_for_the_ttl(tmp_path):
    root = tmp_path / "logs"
    make_run(root / "a")
    plugin = make_plugin(root)
    client = client_for(plugin)
    assert get_json(client, PREFIX + "/runs") == ["a"]
    make_run(root / "b")
    # /runs is cached for the TTL, but asking for b by name re-discovers (at most once a second).
    plugin._index._checked_at -= 2
    assert get_json(client, PREFIX + "/report?run=b")["run"]["tasks"] == ["worker:0", "worker:1"]


def test_live_run_reads_only_appended_bytes(tmp_path, monkeypatch):
    """A still-writing run: each refresh reads each file from where the previous one stopped."""
    import tfdiag.analysis.load as load

    reads: list[tuple[str, int]] = []
    real_read = load.read_task_file

    def counting_read(path, offset=0):
        reads.append((Path(path).name, offset))
        return real_read(path, offset)

    monkeypatch.setattr(load, "read_task_file", counting_read)
    root = tmp_path / "logs"
    run = make_run(root / "live", slow_ms=20.0)
    plugin = make_plugin(root, refresh_interval_s=0, discovery_ttl_s=0)
    client = client_for(plugin)
    first = get_json(client, PREFIX + "/report?run=live")
    first_figure = get_json(client, PREFIX + "/figure?run=live&name=step_time")
    assert sorted(reads) == [("worker-0.tfdiag", 0), ("worker-1.tfdiag", 0)]
    loader = plugin._state("live").loader
    sizes = {path.name: path.stat().st_size for path in (run / "plugins" / "tfdiag").glob("*.tfdiag")}
    assert {path.name: offset for path, offset in loader._offsets.items()} == sizes

    reads.clear()
    get_json(client, PREFIX + "/report?run=live")
    assert reads == []  # nothing appended: no file is read again

    write_steps(run, "worker:1", 90.0, steps=30, first_step=40, start_ns=10**19 // 5)
    second = get_json(client, PREFIX + "/report?run=live")
    assert reads == [("worker-1.tfdiag", sizes["worker-1.tfdiag"])]  # only the new bytes of the one file that grew
    assert second["summary"]["steps"] == first["summary"]["steps"] + 30
    second_figure = get_json(client, PREFIX + "/figure?run=live&name=step_time")
    assert second_figure != first_figure


# -- static files -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, mimetype", [("index.js", "text/javascript"), ("model.js", "text/javascript"), ("views.js", "text/javascript"), ("style.css", "text/css")]
)
def test_static_files(client, name, mimetype):
    response = client.get(f"{PREFIX}/{name}")
    assert response.status_code == 200
    assert response.mimetype == mimetype
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    body = response.get_data(as_text=True)
    assert body == (Path(__file__).parents[2] / "src" / "tfdiag" / "tb_plugin" / "static" / name).read_text()
    # A revalidation with the ETag answers 304.
    again = client.get(f"{PREFIX}/{name}", headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304


def test_index_js_exports_render(client):
    assert "export async function render" in client.get(PREFIX + "/index.js").get_data(as_text=True)


def test_plotly_is_served_from_the_installed_package(client):
    response = client.get(PREFIX + "/plotly.min.js")
    assert response.status_code == 200
    assert response.mimetype == "text/javascript"
    assert response.get_data(as_text=True) == plotly.offline.get_plotlyjs()
    gzipped = client.get(PREFIX + "/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert gzipped.headers["Content-Encoding"] == "gzip"
    assert len(gzipped.get_data()) < len(response.get_data()) / 2


@pytest.mark.parametrize(
    "path",
    [
        "/static/index.js",
        "/../plugin.py",
        "/%2e%2e%2fplugin.py",
        "/plugin.py",
        "/index.html",
        "/static%2findex.js",
        "/..%2f..%2fetc%2fpasswd",
        "/etc/passwd",
        "/tb_plugin/static/index.js",
    ],
)
def test_static_refuses_unknown_names(client, path):
    response = client.get(PREFIX + path)
    assert response.status_code == 404
    assert "import" not in response.get_data(as_text=True)
