"""The shipped data: base factorizations and their certificates.

In a source checkout they live in the top-level folders ``base_factorizations/`` (the trained
bases ``k{K:03d}_{metric}.npz``, encoder on the 2⁻³² grid) and ``certificates/`` (their exact
certificates ``k{K:03d}_{metric}.json``, each naming its base by a path relative to itself).
The build (``setup.py``) copies both into the wheel as the package data
``pure_dp_mf/data/base_factorizations`` and ``pure_dp_mf/data/certificates``, with the same
relative layout, so an installed package finds them as a checkout does: the checkout's folders
first, the package data otherwise.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

from pure_dp_mf.errors import InvalidInputError


def _data_root() -> Path:
    """The folder holding ``base_factorizations/`` and ``certificates/``."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "base_factorizations").is_dir() and (checkout / "certificates").is_dir():
        return checkout
    return Path(str(resources.files("pure_dp_mf") / "data"))


_DATA = _data_root()
BASE_FOLDER = _DATA / "base_factorizations"
CERTIFICATE_FOLDER = _DATA / "certificates"
_BASE_NAME = re.compile(r"k(\d+)_(maxse|meanse)\.npz")


def base_files(folder: str | os.PathLike | None = None) -> list[Path]:
    """The base files ``k{K}_{metric}.npz`` of ``folder`` (default: the shipped ones), by name."""
    folder = Path(folder) if folder is not None else BASE_FOLDER
    return sorted(path for path in folder.glob("k*_*.npz") if _BASE_NAME.fullmatch(path.name))


def base_file(*, base_size: int, metric: str, folder: str | os.PathLike | None = None) -> Path:
    """The file of the base of size ``base_size`` for ``metric``; a clear error if it is absent."""
    folder = Path(folder) if folder is not None else BASE_FOLDER
    path = folder / f"k{base_size:03d}_{metric}.npz"
    if not path.is_file():
        raise InvalidInputError(f"no base factorization {path.name} in {folder}")
    return path


def certificate_file(base: str | os.PathLike, *, folder: str | os.PathLike | None = None) -> Path:
    """The certificate ``{stem}.json`` of a base file, in ``folder`` (default: the shipped ones)."""
    folder = Path(folder) if folder is not None else CERTIFICATE_FOLDER
    return folder / f"{Path(base).stem}.json"
