"""The lifted decoder L_p as a streaming decoder: Noise / NoiseReversed in O(k·log n) memory.

Arkhipov & Kalinin, section 3 (Algorithms 1–3) and Construction 2.4. Fix a base factorization A·B = T_k
(A = decoder, k×r; B = encoder, r×k) and lift it: L₁ = A, R₁ = B and
(L_{i+1}, R_{i+1}) = (L_i, R_i) ◇_{α_i} (A, B). With N_i rows and M_i columns of L_i
(N₁ = k, N_{i+1} = (2k+1)·N_i + k; M₁ = r, M_{i+1} = (2k+1)·M_i + r), the columns of L_{i+1}
are [z₀ | z_{1,a} z_{1,b} | … | z_{k,a} z_{k,b} | w] (blocks of M_i columns, then r) and its
rows are

* rows 0 … N_i−1:                 L_i·z₀                                  (Noise(i))
* group j = 1…k, 2N_i+1 rows each:  −E·L_i·z_{j,a} + c_j                  (NoiseReversed(i), negated)
                                    c_j                                   (the middle row)
                                    L_i·z_{j,b} + c_j                     (Noise(i))
  with the coarse term c_j = α_i·(A·w)_j (the paper's α_{p−1}·(A·z′)⊗1), E the reversal.

So every value of L_p·z is a sum of at most p coarse terms and one entry of a base block A·z_b
(``terms``), and the first N_{p−1} rows and M_{p−1} columns of L_p are L_{p−1}: the lifts nest,
so one decoder with α's for many levels serves every horizon (and counts without one).
``next`` evaluates any range of rows by this recursion, vectorised over whole base blocks and
groups, keeping one cached base block A·z_b and one coarse vector A·w per level in its state:
memory O(k·p) = O(k·log n), total time O(n·(r + p)). Noise is addressed by column of L_p: a base
block at column c is level 1, offset c; the coarse block of lift level ℓ at column c is level ℓ,
offset c (its own noise rate), so the forward stream, the reversed stream and a restarted
stream all see the same z.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.mechanisms.streaming import NoiseSource, Term, check_rows


@dataclass
class LiftedState:
    """The next row and the cached products of the last base block and each level's coarse block
    (for one noise source: a state moved to another source starts its caches afresh)."""

    t: int
    source: int | None = None
    base: tuple[int, np.ndarray] | None = None
    coarse: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)

    def bind(self, noise: NoiseSource) -> None:
        if self.source != id(noise):
            self.source, self.base, self.coarse = id(noise), None, {}


class LiftedDecoder:
    """L_p of the base decoder A lifted with α₁ … α_{p−1} (``levels`` = p = len(alphas) + 1),
    truncated to ``rows`` rows (default N_p). A ``StreamingDecoder`` (``streaming.py``)."""

    def __init__(self, *, decoder: np.ndarray, alphas: Sequence[float], rows: int | None = None) -> None:
        decoder = np.ascontiguousarray(decoder, dtype=np.float64)
        if decoder.ndim != 2 or not np.all(np.isfinite(decoder)):
            raise InvalidInputError("the base decoder must be a finite matrix")
        self.atoms = self.A = decoder
        self.k, self.r = decoder.shape
        self.alphas = tuple(float(alpha) for alpha in alphas)
        self.levels = len(self.alphas) + 1
        self.sizes = [self.k]
        self.inner_sizes = [self.r]
        for _ in range(self.levels - 1):
            self.sizes.append((2 * self.k + 1) * self.sizes[-1] + self.k)
            self.inner_sizes.append((2 * self.k + 1) * self.inner_sizes[-1] + self.r)
        if rows is not None and not 0 <= rows <= self.sizes[-1]:
            raise InvalidInputError(f"{rows} rows exceed the {self.levels}-fold lift's {self.sizes[-1]}")
        self._rows = self.sizes[-1] if rows is None else rows

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def n(self) -> int:
        """N_p, the number of rows of the untruncated L_p."""
        return self.sizes[-1]

    def level_of(self, stop: int) -> int:
        """The least lift level whose rows cover rows 0 … stop − 1."""
        level = 1
        while level < self.levels and self.sizes[level - 1] < stop:
            level += 1
        return level

    def max_terms(self, stop: int) -> int:
        """Rows below N_ℓ have at most ℓ terms."""
        return self.level_of(stop)

    def init(self, *, start: int = 0) -> LiftedState:
        check_rows(self, start, start)
        return LiftedState(t=start)

    def next(self, state: LiftedState, noise: NoiseSource, *, steps: int = 1) -> tuple[np.ndarray, LiftedState]:
        """Rows state.t … state.t + steps − 1 of L_p·z (shape (steps,) or (steps, columns))."""
        start, stop = state.t, state.t + steps
        check_rows(self, start, stop)
        state.bind(noise)
        columns = getattr(noise, "columns", None)
        out = np.empty((stop - start,) + (() if columns is None else (columns,)))
        self._fill(self.level_of(stop), 0, start, out, noise, state)
        state.t = stop
        return out, state

    def values(self, noise: NoiseSource, start: int, stop: int) -> np.ndarray:
        """(L_p·z)[start:stop] (Algorithm 1, Noise(p), by ranges)."""
        return self.next(self.init(start=start), noise, steps=stop - start)[0]

    def reversed_values(self, noise: NoiseSource, start: int, stop: int) -> np.ndarray:
        """(E·L_p·z)[start:stop] = (L_p·z)[N_p−1−start … N_p−stop] (Algorithm 2, NoiseReversed(p))."""
        if not 0 <= start <= stop <= self.n:
            raise InvalidInputError(f"rows [{start}, {stop}) are outside L_p's {self.n} rows")
        out = np.empty(stop - start)
        state = LiftedState(t=0)
        state.bind(noise)
        self._fill(self.levels, 0, self.n - stop, out[::-1], noise, state)
        return out

    def terms(self, t: int) -> list[Term]:
        """Row t of L_p as a sum: (L_p·z)_t = Σ weight·(A·z_level[offset : offset + r])_row, the
        weight ±1 on the base block and ±α_{ℓ−1} on the coarse block of level ℓ ≥ 2 (exactly: the
        α's are floats; the exact release runs the lift with every α = 1 and puts the α's in the
        noise rates, so its weights are ±1). At most p terms; the slow, obvious walk of the
        recursion ``next`` vectorises (tested against it)."""
        check_rows(self, t, t + 1)
        found: list[Term] = []
        level, offset, sign = self.level_of(t + 1), 0, 1
        while level > 1:
            N, M = self.sizes[level - 2], self.inner_sizes[level - 2]
            if t < N:
                level -= 1
                continue
            j, u = divmod(t - N, 2 * N + 1)
            found.append(Term(level, offset + (2 * self.k + 1) * M, j, sign * Fraction(self.alphas[level - 2])))
            if u == N:
                return found
            if u < N:
                offset, t, sign = offset + (2 * j + 1) * M, N - 1 - u, -sign
            else:
                offset, t = offset + (2 * j + 2) * M, u - N - 1
            level -= 1
        found.append(Term(1, offset, t, Fraction(sign)))
        return found

    def term_arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The terms of rows start … stop − 1 as arrays (row position, level, atom row, weight):
        ``terms`` vectorised over rows (offsets are not needed by the error bars)."""
        check_rows(self, start, stop)
        t = np.arange(start, stop, dtype=np.int64)
        position = np.arange(stop - start, dtype=np.int64)
        sign = np.ones(stop - start, dtype=np.int64)
        alive = np.ones(stop - start, dtype=bool)
        parts: list[tuple[np.ndarray, ...]] = []
        for level in range(self.level_of(stop), 1, -1):
            N = self.sizes[level - 2]
            here = alive & (t >= N)
            j, u = np.divmod(t - N, 2 * N + 1)
            parts.append((position[here], np.full(int(here.sum()), level), j[here], sign[here] * self.alphas[level - 2]))
            alive &= ~(here & (u == N))
            left = here & (u < N)
            right = here & (u > N)
            t = np.where(left, N - 1 - u, np.where(right, u - N - 1, t))
            sign = np.where(left, -sign, sign)
        parts.append((position[alive], np.ones(int(alive.sum()), dtype=np.int64), t[alive], sign[alive].astype(np.float64)))
        rows, levels, atom_rows, signs = (np.concatenate([part[i] for part in parts]) for i in range(4))
        return rows, levels, atom_rows, signs

    # ------------------------------------------------------------------ the recursion

    def _base(self, offset: int, noise: NoiseSource, state: LiftedState) -> np.ndarray:
        """A·z[offset : offset + r], the last one cached."""
        if state.base is None or state.base[0] != offset:
            state.base = (offset, self.A @ noise.block(offset, self.r))
        return state.base[1]

    def _coarse(self, level: int, offset: int, noise: NoiseSource, state: LiftedState) -> np.ndarray:
        """α·A·w for the coarse block w at column ``offset`` of level ``level``, cached."""
        cached = state.coarse.get(level)
        if cached is None or cached[0] != offset:
            cached = (offset, self.alphas[level - 2] * (self.A @ noise.block(offset, self.r, level)))
            state.coarse[level] = cached
        return cached[1]

    def _fill(self, level: int, offset: int, start: int, out: np.ndarray, noise: NoiseSource, state: LiftedState) -> None:
        """out[:] = (L_level·z[offset:])[start : start + len(out)]; ``out`` may be a reversed view."""
        m = out.shape[0]
        if level == 1:
            out[:] = self._base(offset, noise, state)[start : start + m]
            return
        N, M = self.sizes[level - 2], self.inner_sizes[level - 2]
        position, t = 0, start
        if t < N:  # the leading block: Noise(level − 1) on z₀
            take = min(N - t, m)
            self._fill(level - 1, offset, t, out[:take], noise, state)
            position, t = take, t + take
        coarse_offset = offset + (2 * self.k + 1) * M
        while position < m:
            j, u = divmod(t - N, 2 * N + 1)
            if level == 2 and u == 0 and m - position >= 2 * N + 1 and out.ndim == 1:
                position, t = self._fill_whole_groups(offset, position, t, out, noise, state)
                continue
            segment = out[position : position + min(m - position, 2 * N + 1 - u)]
            length = segment.shape[0]
            if u < N:  # −E·L·z_{j,a}: positions N−1−u down to N−a_stop
                a_stop = min(N, u + length)
                part = segment[: a_stop - u]
                self._fill(level - 1, offset + (2 * j + 1) * M, N - a_stop, part[::-1], noise, state)
                np.negative(part, out=part)
            if u <= N < u + length:
                segment[N - u] = 0.0
            b_start = max(u, N + 1)
            if b_start < u + length:  # L·z_{j,b}
                self._fill(level - 1, offset + (2 * j + 2) * M, b_start - N - 1, segment[b_start - u :], noise, state)
            segment += self._coarse(level, coarse_offset, noise, state)[j]
            position, t = position + length, t + length

    def _fill_whole_groups(
        self, offset: int, position: int, t: int, out: np.ndarray, noise: NoiseSource, state: LiftedState
    ) -> tuple[int, int]:
        """Level 2, the whole groups of ``out`` from ``position`` (row t, the first row of group j):
        one matrix product A·[z_{j,a} z_{j,b} …] for all of them; returns the new (position, t)."""
        k, r = self.k, self.r
        j = (t - k) // (2 * k + 1)
        groups = (out.shape[0] - position) // (2 * k + 1)
        offsets = [offset + (2 * (j + g) + 1 + side) * r for g in range(groups) for side in (0, 1)]
        Y = self.A @ noise.blocks(offsets, r).T  # column 2g: A·z_{j+g,a}; 2g+1: A·z_{j+g,b}
        rows = np.reshape(out[position : position + groups * (2 * k + 1)], (groups, 2 * k + 1), copy=False)
        rows[:, :k] = -Y[::-1, 0::2].T
        rows[:, k] = 0.0
        rows[:, k + 1 :] = Y[:, 1::2].T
        rows += self._coarse(2, offset + (2 * k + 1) * r, noise, state)[j : j + groups, None]
        return position + groups * (2 * k + 1), t + groups * (2 * k + 1)


def noise(decoder: LiftedDecoder, source: NoiseSource, *, block: int = 4096) -> Iterator[float]:
    """Algorithm 1, Noise(p): yields (L_p·z)_1, …, (L_p·z)_{rows} in order, ``block`` rows at a time."""
    state = decoder.init()
    for start in range(0, decoder.rows, block):
        values, state = decoder.next(state, source, steps=min(block, decoder.rows - start))
        yield from values.tolist()


def noise_reversed(decoder: LiftedDecoder, source: NoiseSource, *, block: int = 4096) -> Iterator[float]:
    """Algorithm 2, NoiseReversed(p): yields (L_p·z)_{N_p}, …, (L_p·z)_1."""
    for start in range(0, decoder.n, block):
        yield from decoder.reversed_values(source, start, min(start + block, decoder.n)).tolist()
