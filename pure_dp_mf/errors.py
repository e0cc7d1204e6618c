"""The project's exceptions: every error a user can cause is a ``PureDPMFError``.

The command line prints the message of a ``PureDPMFError`` as one line and exits non-zero;
anything else escaping is a bug.
"""


class PureDPMFError(Exception):
    """Base class of all errors caused by input (arguments, files, streams)."""


class InvalidInputError(PureDPMFError, ValueError):
    """An argument has the wrong type, shape or value."""


class FactorizationFileError(PureDPMFError):
    """A factorization file is missing, unreadable, or does not match its recorded hashes."""


class NotAFactorizationError(PureDPMFError):
    """L·R differs from the workload by more than the tolerance."""
