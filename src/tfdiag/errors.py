"""The one exception hierarchy of tfdiag. The CLI prints the message and exits 2."""


class TfdiagError(Exception):
    """Base class of every error tfdiag raises on purpose."""


class RunNotFoundError(TfdiagError):
    """A path given as a run holds no ``plugins/tfdiag`` directory."""


class InvalidOptionError(TfdiagError, ValueError):
    """An argument or option has a value tfdiag cannot use."""
