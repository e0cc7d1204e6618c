"""The project's exceptions: every error a user can cause is a ``PureDPMFError``.

The command line prints the message of a ``PureDPMFError`` as one line and exits with its
``exit_code``: 2 for bad input, 1 for a check that fails (a certificate claim that does not
hold); anything else escaping is a bug.
"""


class PureDPMFError(Exception):
    """Base class of all errors caused by input (arguments, files, streams)."""

    exit_code = 2


class CheckFailedError(PureDPMFError):
    """A check ran on valid input and its answer is "no" (exit code 1)."""

    exit_code = 1


class InvalidInputError(PureDPMFError, ValueError):
    """An argument has the wrong type, shape or value."""


class FactorizationFileError(PureDPMFError):
    """A factorization file is missing, unreadable, or does not match its recorded hashes."""


class NotAFactorizationError(PureDPMFError):
    """L·R differs from the workload by more than the tolerance."""
