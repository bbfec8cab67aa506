"""The documentation states what the code does: every record column and finding kind."""

import re
from pathlib import Path

from tfdiag.analysis.detectors import FINDING_KINDS
from tfdiag.events import KINDS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_log_format_documents_every_kind_and_column():
    text = (DOCS / "log-format.md").read_text()
    for kind in KINDS.values():
        section = text.split(f"### `{kind.name}`", 1)
        assert len(section) == 2, f"docs/log-format.md has no section for record kind {kind.name!r}"
        body = section[1].split("### ", 1)[0]
        for column, type_ in kind.columns:
            assert f"| `{column}` | {type_} |" in body, f"{kind.name}.{column} ({type_}) is not documented"


def test_findings_reference_documents_every_kind_and_no_other():
    text = (DOCS / "findings.md").read_text()
    for kind in FINDING_KINDS:
        assert f"## `{kind}`" in text, f"docs/findings.md has no section for {kind!r}"
    documented = re.findall(r"^## `(\w+)`", text, flags=re.MULTILINE)
    assert sorted(documented) == sorted(FINDING_KINDS), "docs/findings.md documents a kind no detector reports"

