"""Untrusted strings made safe to show: no raw control characters, no undecodable bytes.

Task, host, variable and strategy names, messages and paths come from the run's files
(or its directory name) and may hold anything: ANSI escape sequences that would drive
the terminal, carriage returns that overwrite a line, bidirectional overrides that
reorder what is read, or bytes that are not UTF-8 (which Python keeps as lone
surrogates, and which no UTF-8 file or terminal can take). ``printable`` writes each
such character as a visible escape (``\\x1b``, ``\\u202e``, ``\\xff`` for an undecodable
byte), so what is shown is unambiguous and every renderer's output encodes as UTF-8.

Example:
    >>> printable("worker\\x1b[31m:0")
    'worker\\\\x1b[31m:0'
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL, line/paragraph separators, bidirectional embeddings,
# overrides and isolates (Unicode "Trojan source" characters), and lone surrogates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode's surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``str(text)`` with every control character, separator, bidi control and undecodable byte escaped.

    >>> printable("a\\tb\\udcff")
    'a\\\\x09b\\\\xff'
    """
    return _UNSAFE.sub(_escape, str(text))


def printable_lines(text: str) -> str:
    """``printable`` for a whole rendered document: newlines are kept, everything else escaped.

    >>> printable_lines("ok\\nnot \\x1b[2J ok\\n")
    'ok\\nnot \\\\x1b[2J ok\\n'
    """
    return _UNSAFE_BUT_NEWLINE.sub(_escape, text)


__all__ = ["printable", "printable_lines"]
