"""The thresholds the docs quote are the constants in the code.

docs/findings.md writes each threshold once as `` `CONSTANT` (value) `` — the constant
bare inside its detector's section, or as `module.CONSTANT` — and this test reads every
such quote, resolves the constant and compares the value. The unit a value is written in
follows the constant's name: `_PCT` holds per cent, `_NS` nanoseconds, `_S` seconds,
`_BYTES` bytes, anything else a plain ratio or count (so "20 %" of a `_FRACTION` is 0.2).
docs/architecture.md quotes a few figures in its own prose: `PHRASES` maps each to its
constant.
"""

from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import pytest

from tfdiag.analysis.detectors import FINDING_KINDS

DOCS = Path(__file__).resolve().parents[1] / "docs"

# `CONSTANT` (value), or `module.CONSTANT` (value): the value a number with an optional unit.
QUOTE = re.compile(r"`(?:(?P<module>[a-z_]+)\.)?(?P<name>[A-Z][A-Z0-9_]+)`\s\((?P<value>\d[\d,]*(?:\.\d+)?)\s?"
                   r"(?P<unit>%|x|µs|ms|s|MB)?[),;:\s]")
SECTION = re.compile(r"^## `(\w+)`", flags=re.MULTILINE)
# A written unit, in the base unit (seconds, bytes, a ratio).
UNITS = {None: 1.0, "x": 1.0, "%": 0.01, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "MB": float(1 << 20)}
# A constant's unit by its name's ending, in the same base units.
SUFFIXES = {"_PCT": 0.01, "_NS": 1e-9, "_MS": 1e-3, "_S": 1.0, "_BYTES": 1.0}
# Modules a bare or module-qualified name may come from, in the order they are tried.
PACKAGES = ("tfdiag.analysis.detectors", "tfdiag.analysis", "tfdiag.collectors")
BARE_MODULES = ("tfdiag.analysis.step_stats", "tfdiag.analysis.closure_gaps", "tfdiag.analysis.live",
                "tfdiag.analysis.advisor")

# docs/architecture.md: a phrase (its figure the group) -> the constant, "module.NAME" under PACKAGES
# or a full module path.
PHRASES = {
    r"log-spaced buckets (\d+) % wide": "step_stats.PERCENTILE_RELATIVE_ERROR",
    r"lies within (\d+) % of the exact one \(`PERCENTILE_RELATIVE_ERROR`": "step_stats.PERCENTILE_RELATIVE_ERROR",
    r"`SAMPLED_ROWS` \(([\d,]+)\)": "step_stats.SAMPLED_ROWS",
    r"`RECENT_ROWS` \(([\d,]+)\)": "step_stats.RECENT_ROWS",
    r"`SEGMENTS` \(([\d,]+)\)": "step_stats.SEGMENTS",
    r"every `flush_interval_s` \((\d+) s by default\)": "tfdiag.store.writer.DEFAULT_FLUSH_INTERVAL_S",
    r"one batch per worker every (\d+) s": "tfdiag.collectors.closure_recorder.FETCH_EVERY_S",
}
PHRASE_UNITS = {"PERCENTILE_RELATIVE_ERROR": "%", "DEFAULT_FLUSH_INTERVAL_S": "s", "FETCH_EVERY_S": "s"}


def module_named(name: str, defining: str | None = None):
    """The module ``name`` (a full path, or a module of ``PACKAGES``), or None; with
    ``defining``, the first such module that defines it (``liveness`` is a module of the
    analysis and of the collectors)."""
    for candidate in (name, *(f"{package}.{name}" for package in PACKAGES)):
        try:
            module = importlib.import_module(candidate)
        except ModuleNotFoundError:
            continue
        if defining is None or hasattr(module, defining):
            return module
    return None


def constant(name: str, module: str | None, section: str | None):
    """The value of the constant a quote names: in ``module`` when it gives one, else in the
    section's detector, else in the one module of ``BARE_MODULES`` that defines it."""
    if module:
        found = module_named(module, defining=name)
        if found is None:
            raise LookupError(f"`{module}.{name}`: no such constant")
        return getattr(found, name)
    if section and hasattr(detector := module_named(f"detectors.{section}"), name):
        return getattr(detector, name)
    defining = [m for m in map(importlib.import_module, BARE_MODULES) if hasattr(m, name)]
    if len(defining) != 1:
        raise LookupError(f"`{name}` is defined in {len(defining)} of {BARE_MODULES}: name its module")
    return getattr(defining[0], name)


def in_base_units(name: str, value) -> float:
    return float(value) * next((scale for suffix, scale in SUFFIXES.items() if name.endswith(suffix)), 1.0)


def quotes(text: str):
    """Each quoted threshold of ``text``: (section, module, name, written value, unit)."""
    sections = [(match.start(), match.group(1)) for match in SECTION.finditer(text)]
    for match in QUOTE.finditer(text):
        section = next((kind for start, kind in reversed(sections) if start < match.start()), None)
        yield section, match["module"], match["name"], match["value"], match["unit"]


def disagreements(text: str) -> list[str]:
    """Where a quoted threshold of ``text`` is not its constant's value (or names none)."""
    wrong = []
    for section, module, name, written, unit in quotes(text):
        try:
            value = constant(name, module, section)
        except LookupError as error:
            wrong.append(str(error))
            continue
        doc_value = float(written.replace(",", "")) * UNITS[unit]
        if not math.isclose(doc_value, in_base_units(name, value), rel_tol=1e-9):
            wrong.append(f"`{name}` ({written}{' ' + unit if unit else ''}) in section {section}: the code has {value!r}")
    return wrong


def test_every_threshold_findings_md_quotes_is_its_constant():
    text = (DOCS / "findings.md").read_text()
    assert len(list(quotes(text))) >= 40, "docs/findings.md quotes fewer thresholds than it should: is the form kept?"
    assert disagreements(text) == []


def test_findings_md_quotes_each_threshold_once():
    text = (DOCS / "findings.md").read_text()
    seen = {}
    for section, module, name, _, _ in quotes(text):
        key = (module or (section if hasattr(module_named(f"detectors.{section}"), name) else None), name)
        assert key not in seen, f"docs/findings.md quotes `{name}` twice (sections {seen[key]} and {section})"
        seen[key] = section


def test_findings_md_quotes_every_warning_and_critical_threshold_in_its_kinds_section():
    text = (DOCS / "findings.md").read_text()
    quoted = {(section, name) for section, module, name, _, _ in quotes(text) if module is None}
    for kind in FINDING_KINDS:
        detector = module_named(f"detectors.{kind}")
        for name in dir(detector):
            if name.startswith(("WARNING_", "CRITICAL_")):
                assert (kind, name) in quoted, f"docs/findings.md, `{kind}`: `{name}` is not quoted"


@pytest.mark.parametrize("phrase", PHRASES)
def test_the_figures_architecture_md_quotes_are_their_constants(phrase):
    found = re.search(phrase, (DOCS / "architecture.md").read_text())
    assert found, f"docs/architecture.md no longer says {phrase!r}: update PHRASES"
    module, _, name = PHRASES[phrase].rpartition(".")
    value = getattr(module_named(module), name)
    written = float(found.group(1).replace(",", "")) * UNITS[PHRASE_UNITS.get(name)]
    assert math.isclose(written, in_base_units(name, value), rel_tol=1e-6), f"{phrase}: the code has {value!r}"


def test_a_quote_that_disagrees_with_its_constant_is_found():
    from tfdiag.analysis.detectors import slow_link, straggler

    assert straggler.STOPPED_RATIO == 2.0 and slow_link.MIN_EXTRA_NS == 2_000_000
    right = ("## `straggler`\nat least `STOPPED_RATIO` (2x) it.\n"
             "## `slow_link`\nat least `MIN_EXTRA_NS` (2 ms) more; `live.WINDOW_S` (10 s) of records.\n")
    assert len(list(quotes(right))) == 3 and disagreements(right) == []
    wrong = right.replace("(2x)", "(1.4x)").replace("(2 ms)", "(2 s)")
    assert [problem.split(" in section")[0] for problem in disagreements(wrong)] == \
        ["`STOPPED_RATIO` (1.4 x)", "`MIN_EXTRA_NS` (2 s)"]
    # A bare name outside its detector's section must say where it lives.
    assert disagreements("## `slow_link`\n`STOPPED_RATIO` (2x).\n") == [
        "`STOPPED_RATIO` is defined in 0 of " + str(BARE_MODULES) + ": name its module"]
