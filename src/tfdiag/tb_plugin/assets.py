"""The frontend files the plugin serves: a fixed list, read from the package, never from a request path."""

from __future__ import annotations

import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import plotly.offline

JS = "text/javascript; charset=utf-8"
CSS = "text/css; charset=utf-8"

# Route -> (file name under src/tfdiag/tb_plugin/static/, content type). Only these are served.
STATIC_FILES: dict[str, tuple[str, str]] = {
    "/index.js": ("index.js", JS),
    "/model.js": ("model.js", JS),
    "/views.js": ("views.js", JS),
    "/style.css": ("style.css", CSS),
}

PLOTLY_ROUTE = "/plotly.min.js"

# Our own files change with the package, so browsers revalidate them (ETag); plotly.js
# only changes with the installed plotly version, which is part of its ETag.
OWN_FILES_CACHE = "no-cache"
PLOTLY_CACHE = "private, max-age=86400"


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes
    content_type: str
    etag: str
    cache_control: str


class Assets:
    """Loads each asset once, on first request, with its gzip form and ETag."""

    def __init__(self):
        self._lock = threading.Lock()
        self._assets: dict[str, Asset] = {}

    def get(self, route: str) -> Asset | None:
        """The asset served at ``route``, or None when the route is not a known asset."""
        if route == PLOTLY_ROUTE:
            return self._load(route, _plotly_js, JS, PLOTLY_CACHE)
        if route in STATIC_FILES:
            name, content_type = STATIC_FILES[route]
            return self._load(route, lambda: _static_file(name), content_type, OWN_FILES_CACHE)
        return None

    def _load(self, route: str, read: Callable[[], bytes], content_type: str, cache_control: str) -> Asset:
        with self._lock:
            asset = self._assets.get(route)
            if asset is None:
                body = read()
                asset = Asset(
                    body=body,
                    gzipped=gzip.compress(body, compresslevel=6, mtime=0),
                    content_type=content_type,
                    etag=hashlib.sha256(body).hexdigest()[:32],
                    cache_control=cache_control,
                )
                self._assets[route] = asset
            return asset


def _static_file(name: str) -> bytes:
    return resources.files("tfdiag.tb_plugin").joinpath("static", name).read_bytes()


def _plotly_js() -> bytes:
    return plotly.offline.get_plotlyjs().encode("utf-8")
