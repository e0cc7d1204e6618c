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


#: The optional packages and the extra of ``pure_dp_mf`` that installs each (pyproject.toml): the
#: core counts, certifies (FLINT), verifies, lifts and compares without any of them.
OPTIONAL_PACKAGES = {
    "matplotlib": "plot",
    "sympy": "sympy",
    "dp_accounting": "gaussian",
    "torch": "train",
    "pandas": "dataframe",
    "polars": "dataframe",
    "pyspark": "spark",
    "pyarrow": "parquet",
    "opendp": "opendp",
    "psycopg": "postgres",
}


def missing_extra(error: ModuleNotFoundError) -> PureDPMFError | None:
    """The user error for an optional package that is not installed (``None`` for any other
    missing module, which is a bug): it names the package and the extra that installs it."""
    top = (error.name or "").partition(".")[0]
    extra = OPTIONAL_PACKAGES.get(top)
    if extra is None:
        return None
    return PureDPMFError(
        f"this needs the optional package {top}, which is not installed: "
        f"pip install '.[{extra}]' in a checkout of pure-dp-mf (or pip install {top})"
    )


def require_extra(package: str) -> None:
    """Refuse up front, before anything is released or charged, a feature whose optional package
    (a key of ``OPTIONAL_PACKAGES``) is not installed."""
    import importlib.util

    if importlib.util.find_spec(package) is None:
        error = missing_extra(ModuleNotFoundError(name=package))
        assert error is not None, package
        raise error
