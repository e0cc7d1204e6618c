"""Consistent post-processing of released running counts: non-negative and non-decreasing.

Privacy: everything here is a function of values already released (and of public facts: a sum
of t values in [0, m] lies in [0, m·t]), so it is post-processing and costs no privacy: the
processed sequence is ε-DP whenever the released one is (Dwork & Roth, Proposition 2.1).

``MonotoneFit`` keeps the isotonic (least-squares non-decreasing) regression of the releases
y_1, …, y_t seen so far with the pool-adjacent-violators algorithm. Its value at the last step is

    f_t = max_{s ≤ t} mean(y_s, …, y_t)

(the last PAVA block's mean). The output of step t is

    v_t = max(v_{t−1}, min(max(round(f_t), 0), m·t)),   v_0 = 0,

so outputs are non-negative, non-decreasing, at most m·t, and a step's output never changes once
given: the fit only acts on future outputs. All arithmetic is on integers (block sums and
counts; round half up), so the output is exactly reproducible. Memory: one (sum, count) pair per
PAVA block, at most t.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pure_dp_mf.errors import InvalidInputError


@dataclass
class MonotoneFit:
    """The online isotonic fit of the releases and the last output (see the module docstring)."""

    sums: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    last: int = 0

    def extended(self, releases: Sequence[int], *, first_step: int, max_value: int) -> tuple[MonotoneFit, np.ndarray]:
        """(the fit after the releases of the 1-based steps first_step + 1, …, their outputs v_t).
        ``self`` is left unchanged, so a commit that fails leaves the fit as it was."""
        sums, counts, last = list(self.sums), list(self.counts), self.last
        out = np.empty(len(releases), dtype=np.int64)
        for index, value in enumerate(releases):
            sums.append(int(value))
            counts.append(1)
            # Pool while the previous block's mean exceeds the last one's (cross-multiplied: exact).
            while len(sums) > 1 and sums[-2] * counts[-1] > sums[-1] * counts[-2]:
                s, c = sums.pop(), counts.pop()
                sums[-1] += s
                counts[-1] += c
            s, c = sums[-1], counts[-1]
            rounded = (2 * s + c) // (2 * c)  # round half up of s/c
            t = first_step + index + 1
            last = max(last, min(max(rounded, 0), max_value * t))
            out[index] = last
        return MonotoneFit(sums=sums, counts=counts, last=last), out

    def to_record(self) -> dict:
        return {"sums": [str(s) for s in self.sums], "counts": list(self.counts), "last": str(self.last)}

    @classmethod
    def from_record(cls, record: dict) -> MonotoneFit:
        try:
            fit = cls(sums=[int(s) for s in record["sums"]], counts=[int(c) for c in record["counts"]], last=int(record["last"]))
        except (KeyError, TypeError, ValueError):
            raise InvalidInputError("the monotone post-processing state is malformed") from None
        if len(fit.sums) != len(fit.counts) or any(c < 1 for c in fit.counts):
            raise InvalidInputError("the monotone post-processing state is malformed")
        return fit
