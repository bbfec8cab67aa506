"""Package names imported on first use: nothing imported before, the module's value after, a clear error for a stranger."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfdiag.lazy_exports import lazy_exports


def test_a_name_is_imported_at_first_use_and_kept():
    namespace = {"__name__": "example"}
    getattr_, dir_ = lazy_exports({"dedent": "textwrap"}, namespace)
    assert "dedent" in dir_() and "dedent" not in namespace
    import textwrap

    assert getattr_("dedent") is textwrap.dedent
    assert namespace["dedent"] is textwrap.dedent


def test_an_unknown_name_names_the_package():
    getattr_, _ = lazy_exports({}, {"__name__": "example"})
    with pytest.raises(AttributeError, match="module 'example' has no attribute 'nope'"):
        getattr_("nope")


def test_importing_the_packages_imports_neither_pandas_nor_tensorflow():
    code = ("import sys, tfdiag.analysis, tfdiag.collectors; "
            "print(sorted(m for m in ('pandas', 'tensorflow') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
