"""The ``pure-dp-mf`` command. Every module in this package registers its commands on ``app``.

``main`` turns a ``PureDPMFError`` (bad input, bad file) into one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

from pure_dp_mf.cli.app import app, error_console
from pure_dp_mf.errors import PureDPMFError

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module != "app":
        importlib.import_module(f"{__name__}.{_module}")


def main() -> None:
    """Entry point of the ``pure-dp-mf`` script."""
    try:
        app()
    except PureDPMFError as error:
        error_console.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        error_console.print("interrupted", markup=False)
        sys.exit(130)


__all__ = ["app", "main"]
