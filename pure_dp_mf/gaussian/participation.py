"""(k,b)-participation schemas (Choquette-Choo et al., section 2).

Under (k,b)-participation an example contributes to at most k steps of an n-step stream, and
any two consecutive participations are exactly b steps apart: a participation pattern is
π = {i, i+b, …, i+(j−1)b} with j ≤ k. With n = k·b this is the paper's multi-epoch training
(k epochs of b steps each) and Π = {{i, i+b, …, i+(k−1)b} : 0 ≤ i < b}; (k=1, b=n) is single
participation. We allow n to be any multiple of b with k ≤ n/b; the maximal patterns are then
the windows of k consecutive members of each residue class modulo b.

Every sensitivity in this package is a maximum over the *maximal* patterns: a shorter pattern
is a subset of one of them, and both 1ᵀX[π,π]1 (for X ≥ 0) and the sign-vector maximum are
monotone under taking supersets.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_size


@dataclass(frozen=True)
class Participation:
    """The (k,b)-participation schema on n steps (0-based step indices).

    ``max_participations`` k ≥ 1, ``min_sep`` b ≥ 1, ``n`` a multiple of b with k ≤ n/b
    (``n`` defaults to k·b, the paper's k epochs of b steps).
    """

    max_participations: int
    min_sep: int
    n: int | None = None

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
