"""Public names of a package imported on first use (PEP 562), so importing the package is cheap.

>>> __getattr__, __dir__ = lazy_exports({"analyze": "tfdiag.analysis.engine"}, globals())  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(
    modules: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__`` for ``modules`` (public name -> module that holds it).

    A name is imported at its first use and kept in ``namespace`` (the package's ``globals()``),
    so the next use does not come back here.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(modules[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(modules))

    return __getattr__, __dir__
