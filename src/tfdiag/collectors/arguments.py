"""Checks of the arguments users pass to the collectors, with messages that name them."""

from __future__ import annotations

from tfdiag.errors import InvalidOptionError


def check_logdir(logdir) -> None:
    """Raises ``InvalidOptionError`` unless ``logdir`` names a directory (a non-empty path)."""
    if not logdir:
        raise InvalidOptionError(f"Invalid value for argument `logdir`. Expected a directory. Received: {logdir!r}")


def check_count(name: str, value, *, optional: bool = False) -> None:
    """Raises ``InvalidOptionError`` unless ``value`` is an int >= 0 (or None when ``optional``).

    >>> check_count("trace_every", -1)
    Traceback (most recent call last):
    ...
    tfdiag.errors.InvalidOptionError: Invalid value for argument `trace_every`. Expected an int >= 0. Received: -1
    """
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        expected = "an int >= 0" + (" or None" if optional else "")
        raise InvalidOptionError(f"Invalid value for argument `{name}`. Expected {expected}. Received: {value!r}")
