"""The ``pure-dp-mf`` command. Every module in this package registers its commands on ``app``.

``main`` turns a ``PureDPMFError`` (bad input, bad file) or a usage error (unknown flag, a value
that does not parse) into one line ``error: …`` on stderr and exit code 2 (1 for a check that
fails: a certificate claim that does not hold), and Ctrl-C into one line and exit code 130.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.errors import PureDPMFError

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module != "app":
        importlib.import_module(f"{__name__}.{_module}")


def _say(message: str) -> None:
    error_console.print(message, markup=False, highlight=False, soft_wrap=True)


def main() -> None:
    """Entry point of the ``pure-dp-mf`` script."""
    try:
        code = app(standalone_mode=False)  # usage errors come back as exceptions, not a box
    except PureDPMFError as error:
        _say(f"error: {error}")
        sys.exit(error.exit_code)
    except typer.TyperException as error:  # unknown flag, a value that does not parse, …
        context = getattr(error, "ctx", None)
        where = f" (see {context.command_path} --help)" if context is not None else ""
        _say(f"error: {error.format_message()}{where}")
        sys.exit(2 if getattr(error, "exit_code", 1) == 2 or context is not None else 1)
    except (KeyboardInterrupt, typer.Abort):
        code = 130
    if code == 130:  # Ctrl-C (typer turns KeyboardInterrupt into exit code 130)
        _say("interrupted; a command given --state or --checkpoint continues where it stopped when run again the same way")
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main"]
