"""Workload matrices (paper 001, section 1; DESIGN.md notation).

* ``prefix_sum(n)``: T_n, the n×n lower-triangular all-ones matrix, (T_n x)_t = x_1 + … + x_t.
* ``strictly_upper(n)``: U_n, the n×n strictly upper-triangular all-ones matrix.
* ``reversal(n)``: E, the n×n anti-identity (E x reverses x).

Each comes in an exact form (``exact=True``: int64 entries, usable with exact arithmetic) and a
float64 form.
"""

from __future__ import annotations

import numpy as np

from pure_dp_mf.validation import check_size


def _as(matrix: np.ndarray, exact: bool) -> np.ndarray:
    return matrix.astype(np.int64 if exact else np.float64)


def prefix_sum(n: int, *, exact: bool = False) -> np.ndarray:
    """T_n: lower-triangular all-ones, T[i, j] = 1 for j ≤ i."""
    n = check_size(n, name="n")
    return _as(np.tri(n, dtype=np.int64), exact)


def strictly_upper(n: int, *, exact: bool = False) -> np.ndarray:
    """U_n: strictly upper-triangular all-ones, U[i, j] = 1 for j > i."""
    n = check_size(n, name="n")
    return _as(np.triu(np.ones((n, n), dtype=np.int64), 1), exact)


def reversal(n: int, *, exact: bool = False) -> np.ndarray:
    """E: the anti-identity, E[i, n-1-i] = 1."""
    n = check_size(n, name="n")
    return _as(np.eye(n, dtype=np.int64)[::-1], exact)
