"""The per-machine cache of results that are costly to compute and a pure function of their key.

Entries are JSON records or NumPy arrays (``.npy``), one file each, in ``cache_folder()``:
``$PURE_DP_MF_CACHE`` ("off": no cache), else ``$XDG_CACHE_HOME/pure_dp_mf`` (default
``~/.cache/pure_dp_mf``), created with mode 0700. Four kinds live there: proven decoder bounds
(``release/lattice.py``: about half a minute of exact arithmetic for a k = 2048 base), the exact
costs of the tree mechanisms at a horizon (``mechanisms/trees.py``: about half a second a
horizon, paid by every ``count`` that ranks the mechanisms), and, for each base a process loads,
the float decoder T_k·R⁻¹ of its encoder and the float residual ‖L·R − T_k‖_max
(``factorizations/factorization.py``: a fifth of a second each at k = 1 024, paid by every
``count`` at start-up). The last two bear on accuracy only: the encoder and the exact
sensitivity are always read and computed from the base file itself, and the decoder bound is
proven for the exact integer matrices its entry names. Each entry names what it was computed
from (its key holds the inputs or a digest of them and of the code that computed it), and a
reader checks that name before using it; an entry that cannot be read is computed again. An
entry is trusted like the installed code (a user who can write it can also change the code).
Writing is atomic; a cache that cannot be written only costs the next process the computation."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np

from pure_dp_mf.atomic import atomic_write_bytes, atomic_write_text


def cache_folder() -> Path | None:
    """``$PURE_DP_MF_CACHE`` ("off": None), else ``$XDG_CACHE_HOME/pure_dp_mf`` (``~/.cache/…``)."""
    setting = os.environ.get("PURE_DP_MF_CACHE")
    if setting == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pure_dp_mf"


def read_entry(name: str) -> dict | None:
    """The record stored under ``name`` (a file name), or None: no cache, no entry, unreadable."""
    folder = cache_folder()
    if folder is None:
        return None
    try:
        record = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_entry(name: str, record: dict) -> None:
    """Store ``record`` under ``name``, atomically; silently nothing when it cannot be written."""
    folder = cache_folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_text(folder / name, json.dumps(record))
    except OSError:
        pass


def read_array(name: str) -> np.ndarray | None:
    """The array stored under ``name`` (a ``.npy`` file name), or None: no cache, no entry,
    unreadable (never a pickled object)."""
    folder = cache_folder()
    if folder is None:
        return None
    try:
        return np.load(folder / name, allow_pickle=False)
    except (OSError, ValueError):
        return None


def write_array(name: str, array: np.ndarray) -> None:
    """Store ``array`` under ``name`` (``.npy``), atomically; silently nothing when it cannot be written."""
    folder = cache_folder()
    if folder is None:
        return
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_bytes(folder / name, buffer.getvalue())
    except OSError:
        pass
