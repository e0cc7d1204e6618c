"""One streaming form for every decoder: (init, next) over noise, with its terms and its matrix.

Modelled on jax_privacy's ``StreamingMatrix`` (``init_multiply``, ``multiply_next``) and adapted
to restarts and to the exact release. A decoder L (rows = steps, columns = noise coordinates)
is described by

* ``init(start=0) → state`` and ``next(state, noise, steps=1) → (values, state)``: the rows
  start, start + 1, … of L·z, ``steps`` at a time, where ``noise`` is a ``NoiseSource`` that
  returns any block of z by address (so a restarted stream, started at any row, reads the same
  z: the noise of a coordinate is a pure function of its address, never redrawn);
* ``terms(t)``: row t as a signed sparse sum ``Σ weight·(atoms[row] · z_level[offset : offset +
  width])`` (``Term``), which the exact rounding fallback and the error bars read; every term of
  a row reads its own coordinates (no coordinate twice in one row), and every weight is an exact
  rational (for the decoders the exact release runs, ±2^-j with |weight| ≤ 1: exact in binary
  floating point, which its error bound assumes);
* ``atoms``: the small matrix whose rows the terms read (the lifted decoder: the base decoder A;
  a tree: the 1×1 matrix [1], one node per term), ``width`` its columns;
* ``max_terms(stop)``: an upper bound on the number of terms of rows 0 … stop − 1.

``materialize`` and ``row_norms_squared`` derive the dense matrix and the per-row squared norms
from ``terms`` alone (tests compare them with each decoder's own streaming values; the
registry test in ``tests/test_streaming.py`` runs every decoder through the same checks).

Noise coordinates are addressed by (level, index): ``level`` names a stream of the source (its
own rate; a lifted decoder's base blocks are level 1 and its coarse blocks of lift level ℓ are
level ℓ; a tree's nodes of height j are level j + 1), ``index`` the coordinate within it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from pure_dp_mf.errors import InvalidInputError


@dataclass(frozen=True)
class Term:
    """One summand of a decoder row: ``weight``·(atoms[``row``] · z_level[offset : offset + width])."""

    level: int
    offset: int
    row: int
    weight: Fraction


class NoiseSource(Protocol):
    """z by address: ``block(offset, size, level)`` = z_level[offset : offset + size] (shape
    (size,), or (size, columns) for a source of ``columns`` independent noise vectors side by side)."""

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray: ...

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray: ...


class StreamingDecoder(Protocol):
    """The streaming form every decoder implements (module docstring)."""

    atoms: np.ndarray

    @property
    def rows(self) -> int | None:
        """The number of rows (None: unbounded, an anytime decoder)."""
        ...

    def init(self, *, start: int = 0) -> Any: ...

    def next(self, state: Any, noise: NoiseSource, *, steps: int = 1) -> tuple[np.ndarray, Any]: ...

    def terms(self, t: int) -> list[Term]: ...

    def max_terms(self, stop: int) -> int: ...


def values(decoder: StreamingDecoder, noise: NoiseSource, *, start: int, stop: int) -> np.ndarray:
    """Rows start … stop − 1 of L·z through ``init`` and ``next`` (one call)."""
    check_rows(decoder, start, stop)
    if stop == start:
        return np.zeros(0)
    out, _ = decoder.next(decoder.init(start=start), noise, steps=stop - start)
    return out


def check_rows(decoder: StreamingDecoder, start: int, stop: int) -> None:
    """Refuse a row range outside [0, rows]."""
    rows = decoder.rows
    if not 0 <= start <= stop or (rows is not None and stop > rows):
        raise InvalidInputError(f"rows [{start}, {stop}) are outside the decoder's {rows if rows is not None else '∞'} rows")


def coordinates(decoder: StreamingDecoder, n: int) -> list[tuple[int, int]]:
    """The noise coordinates (level, index) that rows 0 … n − 1 read, sorted."""
    width = decoder.atoms.shape[1]
    found = {(term.level, term.offset + j) for t in range(n) for term in decoder.terms(t) for j in range(width)}
    return sorted(found)


def materialize(decoder: StreamingDecoder, n: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(the dense n×C matrix of rows 0 … n − 1, the coordinate (level, index) of each column),
    built from ``terms`` alone (small n: tests)."""
    check_rows(decoder, 0, n)
    columns = coordinates(decoder, n)
    position = {coordinate: i for i, coordinate in enumerate(columns)}
    atoms = np.asarray(decoder.atoms, dtype=np.float64)
    matrix = np.zeros((n, len(columns)))
    for t in range(n):
        for term in decoder.terms(t):
            for j in range(atoms.shape[1]):
                matrix[t, position[(term.level, term.offset + j)]] += float(term.weight) * atoms[term.row, j]
    return matrix, columns


def row_norms_squared(decoder: StreamingDecoder, n: int) -> np.ndarray:
    """‖L_t‖² for t = 0 … n − 1 from ``terms`` (terms of one row read disjoint coordinates)."""
    check_rows(decoder, 0, n)
    atoms = np.asarray(decoder.atoms, dtype=np.float64)
    atom_norms = np.einsum("ij,ij->i", atoms, atoms)
    return np.array([sum(float(term.weight) ** 2 * atom_norms[term.row] for term in decoder.terms(t)) for t in range(n)])


class ArraySource:
    """An explicit z per level (tests, research): ``{level: array}``, or one array for level 1."""

    def __init__(self, z: np.ndarray | dict[int, np.ndarray]) -> None:
        self.z = z if isinstance(z, dict) else {1: np.asarray(z, dtype=np.float64)}

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        values = np.asarray(self.z[level][offset : offset + size], dtype=np.float64)
        if len(values) != size or offset < 0:
            raise InvalidInputError(f"noise coordinates [{offset}, {offset + size}) of level {level} are not in the array")
        return values

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray:
        return np.stack([self.block(offset, size) for offset in offsets])
