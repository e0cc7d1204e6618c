"""Participation schemas: fixed-epoch (Choquette-Choo et al., section 2) and b-min-sep
(Choquette-Choo et al., arXiv 2306.08153, section 2).

**Fixed-epoch** (``Participation``, "fixed-epoch"; the library's ``min_sep`` argument of the
fixed-epoch functions is this b, for historical reasons). Under (k,b)-participation an example contributes to at most k steps of an n-step stream, and
any two consecutive participations are exactly b steps apart: a participation pattern is
π = {i, i+b, …, i+(j−1)b} with j ≤ k. With n = k·b this is the paper's multi-epoch training
(k epochs of b steps each) and Π = {{i, i+b, …, i+(k−1)b} : 0 ≤ i < b}; (k=1, b=n) is single
participation. We allow n to be any multiple of b with k ≤ n/b; the maximal patterns are then
the windows of k consecutive members of each residue class modulo b.

Every sensitivity in this package is a maximum over the *maximal* patterns: a shorter pattern
is a subset of one of them, and both 1ᵀX[π,π]1 (for X ≥ 0) and the sign-vector maximum are
monotone under taking supersets.

**b-min-sep** (``MinSeparation``, "min-sep"): an example participates at most k times, any two
participations at least b steps apart, at any steps otherwise. Every fixed-epoch pattern is a
min-sep pattern, so a min-sep sensitivity is at least the fixed-epoch one: a strategy noised for
fixed-epoch participation under-noises a user who only guarantees a minimum separation. At most
k′ = min(k, ⌈n/b⌉) participations fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, cast

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_entries, check_size

MAX_TABLE_ENTRIES = 1 << 27
"""Largest table of ``best_separated_sums`` ((n + 1)·(k + 1)·rows floats: 1 GiB)."""


@dataclass(frozen=True)
class Participation:
    """The (k,b)-participation schema on n steps (0-based step indices).

    ``max_participations`` k ≥ 1, ``min_sep`` b ≥ 1, ``n`` a multiple of b with k ≤ n/b
    (``n`` defaults to k·b, the paper's k epochs of b steps).
    """

    max_participations: int
    min_sep: int
    n: int | None = None
    name: ClassVar[str] = "fixed-epoch"

    @property
    def separation(self) -> int:
        """b: the steps between consecutive participations (exactly)."""
        return self.min_sep

    def __post_init__(self) -> None:
        k = check_size(self.max_participations, name="max_participations")
        b = check_size(self.min_sep, name="min_sep")
        n = k * b if self.n is None else check_size(self.n, name="n")
        if n % b:
            raise InvalidInputError(f"n = {n} is not a multiple of min_sep = {b}")
        if k > n // b:
            raise InvalidInputError(
                f"max_participations = {k} exceeds n/min_sep = {n // b}: at most {n // b} participations "
                f"{b} steps apart fit in {n} steps"
            )
        object.__setattr__(self, "max_participations", k)
        object.__setattr__(self, "min_sep", b)
        object.__setattr__(self, "n", n)

    @classmethod
    def single(cls, n: int) -> Participation:
        """Single participation on n steps: (k=1, b=n)."""
        n = check_size(n, name="n")
        return cls(max_participations=1, min_sep=n, n=n)

    @property
    def steps(self) -> int:
        """n, filled in by ``__post_init__`` (k·b when not given)."""
        return cast(int, self.n)

    @cached_property
    def patterns(self) -> np.ndarray:
        """The maximal patterns as an int array of shape (number of patterns, k), rows increasing."""
        k, b, n = self.max_participations, self.min_sep, self.steps
        starts = np.arange(n - (k - 1) * b)
        return starts[:, None] + b * np.arange(k)[None, :]

    @cached_property
    def pair_mask(self) -> np.ndarray:
        """Π̂ ∪ diagonal: boolean n×n mask of (i, j) lying together in some pattern (i ≡ j mod b, |i−j| < k·b)."""
        i = np.arange(self.steps)
        difference = i[:, None] - i[None, :]
        return (difference % self.min_sep == 0) & (np.abs(difference) < self.max_participations * self.min_sep)

    def check_n(self, n: int, *, name: str = "matrix") -> None:
        """Refuse a matrix whose size does not match this schema's n."""
        if n != self.n:
            raise InvalidInputError(f"{name} has {n} columns but the participation schema has n = {self.n}")


def participation(*, max_participations: int, min_sep: int | None = None, n: int | None = None) -> Participation:
    """Build a schema from any two of (k, b, n): b defaults to n/k (k epochs over n steps)."""
    if min_sep is None:
        if n is None:
            raise InvalidInputError("give min_sep or n")
        n = check_size(n, name="n")
        k = check_size(max_participations, name="max_participations")
        if n % k:
            raise InvalidInputError(f"n = {n} is not a multiple of max_participations = {k}")
        min_sep = n // k
    return Participation(max_participations=max_participations, min_sep=min_sep, n=n)


@dataclass(frozen=True)
class MinSeparation:
    """b-min-sep participation on n steps: at most k participations, any two ≥ b steps apart."""

    max_participations: int
    separation: int
    n: int
    name: ClassVar[str] = "min-sep"

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_participations", check_size(self.max_participations, name="max_participations"))
        object.__setattr__(self, "separation", check_size(self.separation, name="separation"))
        object.__setattr__(self, "n", check_size(self.n, name="n"))

    @property
    def steps(self) -> int:
        return self.n

    @property
    def participations(self) -> int:
        """k′ = min(k, ⌈n/b⌉): the most participations that fit."""
        return min(self.max_participations, -(-self.n // self.separation))

    def patterns(self) -> Iterator[tuple[int, ...]]:
        """Every pattern (1 to k steps, pairwise ≥ b apart), for brute force on small n. (Not only
        the maximal ones: a short min-sep pattern need not extend to k′ steps.)"""
        b = self.separation

        def extend(prefix: tuple[int, ...], start: int) -> Iterator[tuple[int, ...]]:
            if prefix:
                yield prefix
            if len(prefix) == self.participations:
                return
            for i in range(start, self.n):
                yield from extend((*prefix, i), i + b)

        yield from extend((), 0)

    def check_n(self, n: int, *, name: str = "matrix") -> None:
        if n != self.n:
            raise InvalidInputError(f"{name} has {n} columns but the participation schema has n = {self.n}")


def best_separated_sums(values: np.ndarray, *, participations: int, separation: int) -> np.ndarray:
    """For each row v of ``values`` (shape (rows, n), v ≥ 0): max Σ_{i∈π} v_i over sets π of at
    most k steps pairwise ≥ b apart (Choquette-Choo et al., arXiv 2306.08153, Algorithm 4's
    inner step). Dynamic programme over positions: F_c(p) = max(F_c(p−1), F_{c−1}(p−b) + v_{p−1}),
    F_c(p) the best with c steps among the first p; O(n·k) vector operations over the rows."""
    values = np.atleast_2d(np.asarray(values, dtype=np.float64))
    rows, n = values.shape
    k, b = check_size(participations, name="participations"), check_size(separation, name="separation")
    k = min(k, -(-n // b)) if n else k  # at most ⌈n/b⌉ steps fit: more participations change nothing
    check_entries((n + 1, k + 1, rows), limit=MAX_TABLE_ENTRIES, what="the min-sep dynamic programme")
    history = np.zeros((n + 1, k + 1, rows))  # history[p, c] = F_c(p)
    for p in range(1, n + 1):
        previous = history[max(p - b, 0), :-1]
        history[p, 1:] = np.maximum(history[p - 1, 1:], previous + values[:, p - 1])
    return history[n, k]


def patterns_of(schema: Participation | MinSeparation) -> list[tuple[int, ...]]:
    """The patterns of either schema as tuples (small n: tests and brute force): the maximal
    ones for fixed-epoch, all of them for min-sep."""
    if isinstance(schema, MinSeparation):
        return list(schema.patterns())
    return [tuple(int(i) for i in row) for row in schema.patterns]


def participation_schema(*, name: str, max_participations: int, separation: int, n: int) -> Participation | MinSeparation:
    """The schema called ``name`` ("fixed-epoch" or "min-sep") with k, b and n."""
    if name == "fixed-epoch":
        return Participation(max_participations=max_participations, min_sep=separation, n=n)
    if name == "min-sep":
        return MinSeparation(max_participations=max_participations, separation=separation, n=n)
    raise InvalidInputError(f"unknown participation schema {name!r}; expected fixed-epoch or min-sep")
