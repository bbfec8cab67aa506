"""The one exception hierarchy of tfdiag. The CLI prints the message and exits 2."""


class TfdiagError(Exception):
    """Base class of every error tfdiag raises on purpose."""


class RunNotFoundError(TfdiagError):
    """A path given as a run holds no ``plugins/tfdiag`` directory."""


class LogFormatError(TfdiagError):
    """A log file cannot be read at all (as opposed to a skipped record)."""


class InvalidOptionError(TfdiagError, ValueError):
    """An argument or option has a value tfdiag cannot use."""
