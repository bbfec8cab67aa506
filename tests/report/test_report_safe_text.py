"""Untrusted strings made safe to show (tfdiag.report.safe_text)."""

from __future__ import annotations

import os

import pytest

from tfdiag.report.safe_text import printable, printable_lines


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("worker:\x1b[31m1\x1b[0m", "worker:\\x1b[31m1\\x1b[0m"),  # ANSI colour
        ("ok\rfake", "ok\\x0dfake"),  # carriage return: would overwrite the line
        ("a\x00b\x07c\x7f", "a\\x00b\\x07c\\x7f"),  # NUL, bell, DEL
        ("\x9b31m", "\\x9b31m"),  # C1 CSI
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),  # right-to-left override
        ("\u2066x\u2069", "\\u2066x\\u2069"),  # bidi isolates
        ("line\u2028sep", "line\\u2028sep"),
        (os.fsdecode(b"run-\xff\xfe"), "run-\\xff\\xfe"),  # bytes that are not UTF-8, as the byte
        ("\ud800", "\\ud800"),  # a lone surrogate that is no escaped byte
        ("a\tb\nc", "a\\x09b\\x0ac"),
    ],
)
def test_printable_escapes_what_drives_a_terminal(raw, shown):
    assert printable(raw) == shown
    printable(raw).encode("utf-8")  # strict


@pytest.mark.parametrize("text", ["worker:0", "größe", "ワーカー", "👩‍💻 task", "<b>&amp;</b>", "a\\x1b"])
def test_printable_keeps_ordinary_text(text):
    assert printable(text) == text


def test_printable_lines_keeps_newlines_only():
    assert printable_lines("one\ntwo\r\nthree\t\x1b[2J\n") == "one\ntwo\\x0d\nthree\\x09\\x1b[2J\n"


def test_printable_takes_any_object():
    assert printable(None) == "None" and printable(3.5) == "3.5"
