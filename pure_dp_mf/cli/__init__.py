"""The ``pure-dp-mf`` command. Every module in this package registers its commands on ``app``;
``main`` imports only the module of the command being run (``COMMANDS``), so that a one-step
``count`` does not pay for the Gaussian side, torch or the report (all of them for ``--help``).

``main`` turns a ``PureDPMFError`` (bad input, bad file) or a usage error (unknown flag, a value
that does not parse) into one line ``error: …`` on stderr and exit code 2 (1 for a check that
fails: a certificate claim that does not hold), and Ctrl-C into one line and exit code 130.
"""

from __future__ import annotations

import errno
import importlib
import pkgutil
import sys
import warnings

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.errors import PureDPMFError, missing_extra

COMMANDS = {
    "audit": ("audit",),
    "bounds": ("bounds",),
    "budget": ("budget",),
    "certify": ("certify",),
    "verify": ("certify",),
    "check-claims": ("certify",),
    "compare": ("compare",),
    "count": ("count",),
    "releases": ("releases",),
    "ledger": ("ledger",),
    "plan": ("plan",),
    "info": ("info",),
    "lift": ("lift",),
    "lower-bound": ("lower_bound",),
    "multi-epoch": ("multi_epoch", "multi_epoch_compare"),
    "reproduce": ("reproduce",),
    "train": ("train",),
}


def load_commands(argv: list[str] | None = None) -> None:
    """Register the command named in ``argv`` (every command when none is named or for help)."""
    argv = sys.argv[1:] if argv is None else argv
    named = next((argument for argument in argv if not argument.startswith("-")), None)
    modules = COMMANDS.get(named or "", None)
    if modules is None:
        modules = tuple(m.name for m in pkgutil.iter_modules(__path__) if m.name != "app")
    for module in modules:
        try:
            importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as error:
            if error.name == f"{__name__}.{module}":
                continue
            user_error = missing_extra(error)
            if user_error is None or named in COMMANDS:  # the command asked for needs it: say which extra
                raise user_error or error from None


def _say(message: str) -> None:
    error_console.print(message, markup=False, highlight=False, soft_wrap=True)


NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""The write errors of a place with no room (a full disk, a quota, a file-size limit, a read-only
file system): a user's condition, not a bug, wherever it is met."""


def main() -> None:
    """Entry point of the ``pure-dp-mf`` script."""
    warnings.filterwarnings("ignore", message="seeded noise")  # the command says it in its own words
    try:
        load_commands()
        code = app(standalone_mode=False)  # usage errors come back as exceptions, not a box
    except PureDPMFError as error:
        _say(f"error: {error}")
        sys.exit(error.exit_code)
    except ModuleNotFoundError as error:  # an optional extra that is not installed: one line naming it
        user_error = missing_extra(error)
        if user_error is None:
            raise
        _say(f"error: {user_error}")
        sys.exit(user_error.exit_code)
    except typer.TyperException as error:  # unknown flag, a value that does not parse, …
        context = getattr(error, "ctx", None)
        where = f" (see {context.command_path} --help)" if context is not None else ""
        _say(f"error: {error.format_message()}{where}")
        sys.exit(2 if getattr(error, "exit_code", 1) == 2 or context is not None else 1)
    except OSError as error:  # a full disk or a read-only place met after the checks: one line, no traceback
        if error.errno not in NO_ROOM:
            raise
        where = f"cannot write {error.filename}: " if error.filename else ""
        _say(f"error: {where}{error.strerror}")
        sys.exit(2)
    except (KeyboardInterrupt, typer.Abort):
        code = 130
    if code == 130:  # Ctrl-C (typer turns KeyboardInterrupt into exit code 130)
        _say("interrupted; a command given --state or --checkpoint continues where it stopped when run again the same way")
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["all_commands", "app", "main"]


def all_commands() -> typer.Typer:
    """The application with every command registered (for ``typer.testing.CliRunner``)."""
    load_commands([])
    return app
