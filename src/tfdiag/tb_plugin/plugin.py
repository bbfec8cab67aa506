"""The tfdiag TensorBoard plugin: routes over ``tfdiag.analysis`` and the static frontend.

Routes only: every JSON route is split into ``<x>_route(request)``, which validates the
arguments (400 on a missing or malformed one, 404 on an unknown run) and answers, and
``<x>_impl(...)``, which returns plain data (or a ``JsonBody``, plain data already
serialised and cached with the run's view). Run discovery and each run's background
refresh are in ``runs.py``; a run not read yet answers 202 with its progress. See
``http_api.md`` for the routes.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from tensorboard import errors
from tensorboard.plugins import base_plugin
from werkzeug import Request, Response

from tfdiag.analysis.fold_cache import FoldCache
from tfdiag.errors import RunNotFoundError
from tfdiag.report.compare import compare_reports
from tfdiag.report.figures import COMPARE_FIGURES, FIGURES, VIEWS
from tfdiag.tb_plugin import metadata
from tfdiag.tb_plugin.assets import PLOTLY_ROUTE, STATIC_FILES, Assets
from tfdiag.tb_plugin.responses import MAX_ARG_LENGTH, JsonBody, handles_errors, json_response, required_arg
from tfdiag.tb_plugin.run_view import RunView, SavedView
from tfdiag.tb_plugin.runs import DISCOVERY_TTL_S, REFRESH_INTERVAL_S, RunIndex, RunState, RunStates

# The tab asks TensorBoard's plugin listing whether it is active on every page load;
# is_active re-walks the logdir at most this often.
IS_ACTIVE_TTL_S = 10.0

T = TypeVar("T")

__all__ = ["IS_ACTIVE_TTL_S", "MAX_ARG_LENGTH", "TfdiagPlugin", "TfdiagPluginLoader"]


class TfdiagPlugin(base_plugin.TBPlugin):
    """The tfdiag tab: run list, a run's Report as JSON, its plotly figures, the frontend.

    Example:
        >>> from tensorboard.plugins import base_plugin
        >>> plugin = TfdiagPlugin(base_plugin.TBContext(logdir="logs"))  # doctest: +SKIP
        >>> sorted(plugin.get_plugin_apps())[:3]  # doctest: +SKIP
        ['/compare', '/figure', '/index.js']
    """

    plugin_name = metadata.PLUGIN_NAME

    def __init__(
        self,
        context: base_plugin.TBContext,
        *,
        discovery_ttl_s: float = DISCOVERY_TTL_S,
        refresh_interval_s: float = REFRESH_INTERVAL_S,
        is_active_ttl_s: float = IS_ACTIVE_TTL_S,
        view_wait_s: float = 0.0,
        fold_cache: FoldCache | None = None,
        wall_clock: Callable[[], int] = time.time_ns,
    ):
        """``view_wait_s``: how long a request waits for the refresh it started (tests wait;
        the tab answers at once); ``fold_cache``: default ``FoldCache.default()``."""
        self._index = RunIndex(context.logdir, ttl_s=discovery_ttl_s)
        self._states = RunStates(refresh_interval_s, view_wait_s, fold_cache or FoldCache.default())
        self._assets = Assets()
        self._is_active_ttl_s = is_active_ttl_s
        self._wall_clock = wall_clock  # where a live run stands now (``/now``)
        self._active: bool = False
        self._active_checked_at: float | None = None

    # -- TensorBoard interface -------------------------------------------------------

    def get_plugin_apps(self):
        apps = {
            "/runs": self.runs_route,
            "/figures": self.figures_route,
            "/report": self.report_route,
            "/figure": self.figure_route,
            "/compare": self.compare_route,
            "/now": self.now_route,
            "/faults": self.faults_route,
            "/status": self.status_route,
        }
        apps.update({route: self.static_app(route) for route in (*STATIC_FILES, PLOTLY_ROUTE)})
        return apps

    def is_active(self) -> bool:
        """True iff the logdir holds at least one tfdiag run (a ``plugins/tfdiag`` directory).

        The answer is cached: it is re-checked at most every ``is_active_ttl_s`` seconds
        (default ``IS_ACTIVE_TTL_S``), from run discovery, which walks the logdir at most
        every ``discovery_ttl_s`` seconds.
        """
        now = time.monotonic()
        if self._active_checked_at is None or now - self._active_checked_at >= self._is_active_ttl_s:
            self._active = bool(self._index.runs())
            self._active_checked_at = now
        return self._active

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=metadata.TAB_NAME)

    # -- /runs -----------------------------------------------------------------------

    @handles_errors
    def runs_route(self, request: Request) -> Response:
        """``GET /runs`` → JSON list of run names."""
        return json_response(self.runs_impl())

    def runs_impl(self) -> list[str]:
        """The names of every run under the logdir, sorted ("." is the logdir itself)."""
        return list(self._index.runs())

    # -- /figures --------------------------------------------------------------------

    @handles_errors
    def figures_route(self, request: Request) -> Response:
        """``GET /figures`` → the views of a run and the charts of a comparison."""
        return json_response(self.figures_impl())

    def figures_impl(self) -> dict:
        """``{"views": [[title, [figure name, ...]], ...], "compare": [figure name, ...]}``."""
        return {
            "views": [[title, [name for name, _ in charts]] for title, charts in VIEWS],
            "compare": list(COMPARE_FIGURES),
        }

    # -- /report ---------------------------------------------------------------------

    @handles_errors
    def report_route(self, request: Request) -> Response:
        """``GET /report?run=NAME`` → the run's report as the tab shows it (with an ETag)."""
        return json_response(self.report_impl(required_arg(request, "run")), request=request)

    def report_impl(self, run: str) -> JsonBody:
        """``runs.tab_report`` of run ``run``, serialised; ``NotFoundError`` for an unknown run."""
        return self._with_view(run, lambda view: view.report_body())

    # -- /now -----------------------------------------------------------------------

    @handles_errors
    def now_route(self, request: Request) -> Response:
        """``GET /now?run=NAME`` → where the run stands now (polled while it runs)."""
        return json_response(self.now_impl(required_arg(request, "run")))

    def now_impl(self, run: str) -> dict:
        """``live_view.now_view`` of run ``run`` at the wall clock's time."""
        return self._with_view(run, lambda view: view.now(self._wall_clock()))

    # -- /faults ---------------------------------------------------------------------

    @handles_errors
    def faults_route(self, request: Request) -> Response:
        """``GET /faults?run=NAME`` → the run's faults and last words in time order (with an ETag)."""
        return json_response(self.faults_impl(required_arg(request, "run")), request=request)

    def faults_impl(self, run: str) -> JsonBody:
        """``live_view.fault_timeline`` of run ``run``, serialised."""
        return self._with_view(run, lambda view: view.faults_body())

    # -- /figure ---------------------------------------------------------------------

    @handles_errors
    def figure_route(self, request: Request) -> Response:
        """``GET /figure?run=NAME&name=FIGURE`` → the plotly figure JSON (with an ETag)."""
        run = required_arg(request, "run")
        name = required_arg(request, "name")
        if name not in FIGURES:
            raise errors.InvalidArgumentError(f"unknown figure {name!r}; expected one of {', '.join(FIGURES)}")
        return json_response(self.figure_impl(run, name), request=request)

    def figure_impl(self, run: str, name: str) -> JsonBody:
        """Figure ``name`` of run ``run`` as plotly JSON text (``plotly.io.to_json``)."""
        return self._with_view(run, lambda view: view.figure_body(name))

    # -- /compare --------------------------------------------------------------------

    @handles_errors
    def compare_route(self, request: Request) -> Response:
        """``GET /compare?base=NAME&new=NAME`` → ``compare_reports`` of the two runs."""
        return json_response(self.compare_impl(required_arg(request, "base"), required_arg(request, "new")))

    def compare_impl(self, base: str, new: str) -> dict:
        """``compare_reports`` of two discovered runs, with the run names as ``base``/``new``
        (and, as before, ``base_run``/``new_run``)."""
        views = [self._with_view(run, lambda view: view) for run in (base, new)]
        comparison = compare_reports(views[0].report, views[1].report)
        comparison["base"] = comparison["base_run"] = base
        comparison["new"] = comparison["new_run"] = new
        return comparison

    # -- /status ---------------------------------------------------------------------

    @handles_errors
    def status_route(self, request: Request) -> Response:
        """``GET /status`` → where each run asked for so far stands (``RunState.status``)."""
        return json_response(self.status_impl())

    def status_impl(self) -> dict:
        """``{"runs": [RunState.status() of each run asked for, by name]}``."""
        return {"runs": sorted((state.status() for state in self._states.all()), key=lambda status: status["run"])}

    # -- static files ----------------------------------------------------------------

    def static_app(self, route: str):
        """The WSGI app serving asset ``route`` (a key of ``STATIC_FILES`` or plotly.js).

        Each asset gets its own app bound to its route, so nothing from the request
        chooses what is read.
        """

        @Request.application
        def app(request: Request) -> Response:
            asset = self._assets.get(route)
            if asset is None:
                return json_response({"error": "not found"}, status=404)
            use_gzip = "gzip" in request.accept_encodings
            response = Response(asset.gzipped if use_gzip else asset.body, content_type=asset.content_type)
            if use_gzip:
                response.headers["Content-Encoding"] = "gzip"
            response.headers["Vary"] = "Accept-Encoding"
            response.headers["X-Content-Type-Options"] = "nosniff"
            response.headers["Cache-Control"] = asset.cache_control
            response.set_etag(asset.etag + ("-gz" if use_gzip else ""))
            return response.make_conditional(request)

        return app

    # -- helpers ---------------------------------------------------------------------

    def _state(self, run: str) -> RunState:
        """The live state of the discovered run named ``run``; ``NotFoundError`` if there is none."""
        path = self._index.lookup(run)
        if path is None:
            raise errors.NotFoundError(f"no tfdiag run named {run!r} under the logdir")
        return self._states.get(path, run)

    def _with_view(self, run: str, use: Callable[[RunView | SavedView], T]) -> T:
        """``use`` of run ``run``'s published view; ``NotFoundError`` if the run is unknown or
        went away meanwhile, ``Loading`` (202) before its first read is done."""
        state = self._state(run)
        try:
            return use(state.view())
        except RunNotFoundError:
            self._states.forget(state.path)
            raise errors.NotFoundError(f"run {run!r} is gone from the logdir") from None


class TfdiagPluginLoader(base_plugin.TBLoader):
    """Loads ``TfdiagPlugin``; it needs only the logdir, not the data provider."""

    def load(self, context: base_plugin.TBContext):
        return TfdiagPlugin(context)
