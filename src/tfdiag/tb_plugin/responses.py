"""JSON responses and argument checks shared by the plugin's routes."""

from __future__ import annotations

import functools
import logging
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tensorboard import errors
from werkzeug import Request, Response

from tfdiag.analysis.json_values import jsonable

logger = logging.getLogger(__name__)

# Arguments longer than this are refused before any lookup (run names are paths).
MAX_ARG_LENGTH = 4096

JSON = "application/json"


class Loading(errors.PublicError):
    """The run's first read is not done (202): ``progress`` says how far it is (``RunState.status``)."""

    http_code = 202

    def __init__(self, progress: dict):
        super().__init__(f"run {progress['run']!r} is being read")
        self.progress = progress


@dataclass(frozen=True)
class JsonBody:
    """A serialised JSON answer and its ETag, cached with the Report it came from."""

    text: str
    etag: str

    @classmethod
    def of_text(cls, text: str) -> "JsonBody":
        return cls(text, hashlib.sha1(text.encode("utf-8")).hexdigest()[:24])

    @classmethod
    def of(cls, data: Any) -> "JsonBody":
        return cls.of_text(json.dumps(jsonable(data), allow_nan=False, separators=(",", ":")))


def json_response(data: Any | JsonBody, status: int = 200, request: Request | None = None) -> Response:
    """``data`` as ``application/json`` (never sniffed, always revalidated).

    With a ``JsonBody`` and the ``request``, the response carries its ETag and answers a
    matching ``If-None-Match`` with 304, so the tab's polling moves no bytes when nothing changed.
    """
    body = data if isinstance(data, JsonBody) else JsonBody.of(data)
    response = Response(body.text, status=status, content_type=JSON)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-cache, must-revalidate"
    if isinstance(data, JsonBody) and status == 200:
        response.set_etag(body.etag)
        if request is not None:
            response = response.make_conditional(request)
    return response


def handles_errors(route):
    """Turns TensorBoard's public errors into JSON error responses with their HTTP code.

    TensorBoard's own WSGI app does the same for plugins (as text); doing it here keeps
    the plugin's apps self-contained, so they can be served and tested on their own.
    A run not read yet answers 202 with its progress. Any other exception is a bug (runs.py already turns a run's failures into warnings):
    it is logged with its traceback and answered as a JSON 500.
    """

    @Request.application
    def app(*args) -> Response:  # (request) or, on a method, (self, request)
        try:
            return route(*args)
        except Loading as loading:  # asked again by the tab until it answers 200
            response = json_response(loading.progress, status=202)
            response.headers["Retry-After"] = "1"
            return response
        except errors.PublicError as error:
            return json_response({"error": str(error)}, status=error.http_code)
        except Exception as error:  # noqa: BLE001 - a bug, not the run's content (runs.py guards each run)
            logger.error("tfdiag: internal error in %s", route.__name__, exc_info=error)
            return json_response({"error": f"internal error {type(error).__name__} (see TensorBoard's log)"}, status=500)

    return functools.wraps(route)(app)


def required_arg(request: Request, name: str) -> str:
    """The one non-empty value of query argument ``name``; ``InvalidArgumentError`` otherwise."""
    values = request.args.getlist(name)
    if not values or values[0] == "":
        raise errors.InvalidArgumentError(f"missing argument {name!r}")
    if len(values) > 1:
        raise errors.InvalidArgumentError(f"argument {name!r} given {len(values)} times")
    if len(values[0]) > MAX_ARG_LENGTH or "\x00" in values[0]:
        raise errors.InvalidArgumentError(f"argument {name!r} is malformed")
    return values[0]
