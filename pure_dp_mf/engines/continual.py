"""Streaming the correlated noise L·z of the lifted factorization; the continual counter.

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

So every value of L_p·z is a sum of at most p coarse terms and one entry of a base block A·z_b.
``LiftedNoise`` evaluates any range of rows of L_p·z (or of E·L_p·z) by this recursion,
vectorised over whole base blocks and groups, keeping one cached base block A·z_b and one
coarse vector A·w per level: memory O(k·p) = O(k·log n), total time O(n·(r + p)). The z
entries come from a ``NoiseSource``, addressed by column of L_p, so the forward stream, the
reversed stream and a restarted stream all see the same z.

The mechanism (Algorithm 3, made exactly ε-DP): for a stream x ∈ {0,1}ⁿ release
S_t + ⌊2^-g·(L̄_p·Y)_t + ½⌋, S_t the exact integer prefix sum, Y integer discrete-Laplace noise
on the lattice of the certified encoder and L̄_p the lift with every α = 1 (the α's sit in the
noise rates); every rounding is decided exactly (``lattice.py``; the proof is in
docs/privacy.md). Rows of L_p beyond the horizon n are dropped (the paper's truncation); the
columns of R_p kept are a subset, so the exact ‖R_p[:, :n]‖₁→₁ bounds the sensitivity of the
truncated encoder. ``GeneratorSource`` (float Laplace from the keyed generator) remains for
research and benchmarks only: float Laplace has bounded support and is not pure DP.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

import pure_dp_mf
from pure_dp_mf.atomic import atomic_write_text
from pure_dp_mf.certificates.certify import Certificate, certified_sensitivity
from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.factorizations.factorization import Factorization, array_sha256
from pure_dp_mf.mechanisms.lift import lift_plan, lifted_size
from pure_dp_mf.release.generator import NoiseGenerator, laplace_from_words
from pure_dp_mf.release.lattice import PAGE, ExactDecoder, ExactRelease, LatticeSource
from pure_dp_mf.release.postprocess import MonotoneFit
from pure_dp_mf.validation import check_epsilon, check_size

STATE_FORMAT = "pure_dp_mf.counter_state/2"  # /2: the exact lattice release
LEDGER_SUFFIX = ".released"
LOCK_SUFFIX = ".lock"
CHUNK = 1 << 15  # steps of noise computed ahead by the counter
MAX_BLOCK = 1 << 16
TREE_HORIZON_LIMIT = 1024  # trees run through the counter with their dense factorization  # released values kept in the state for completing an output file after a crash


class StateFileError(PureDPMFError):
    """A counter state file is missing, corrupted, stale, or belongs to another counter."""


# ---------------------------------------------------------------------------------------------
# Sizes and the exact sensitivity.


def float_upper(value: Fraction) -> float:
    """The smallest float64 ≥ ``value``."""
    candidate = float(value)
    return candidate if Fraction(candidate) >= value else math.nextafter(candidate, math.inf)


# ---------------------------------------------------------------------------------------------
# Noise sources and the streaming engine.


class NoiseSource(Protocol):
    """z, addressed by column of L_p: ``block(offset, size)`` = z[offset : offset + size]."""

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        """``level`` 1: a base block; ℓ ≥ 2: the coarse block of level ℓ (its noise rate may differ)."""
        ...

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray:
        """The blocks at ``offsets`` stacked as rows (a (len(offsets), size) array)."""
        ...


@dataclass(frozen=True)
class GeneratorSource:
    """Laplace(1) noise from a keyed ``NoiseGenerator``: the block at column ``offset`` is the
    generator's block ``offset`` (blocks of L_p never overlap, so z is well defined). For research
    and benchmarks: float Laplace is not pure DP, and the counter does not use it."""

    generator: NoiseGenerator

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        return self.generator.laplace(index=offset, size=size)

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray:
        return laplace_from_words(self.generator.words_of_blocks(indices=offsets, size=size)).reshape(len(offsets), size)


@dataclass(frozen=True)
class ArraySource:
    """An explicit z (tests, research): ``block`` slices it."""

    z: np.ndarray

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        return np.asarray(self.z[offset : offset + size], dtype=np.float64)

    def blocks(self, offsets: Sequence[int], size: int) -> np.ndarray:
        return np.stack([self.block(offset, size) for offset in offsets])


class LiftedNoise:
    """Rows of L_p·z for the p-fold lift of the base decoder A with parameters α₁…α_{p−1}.

    ``values(start, stop)`` returns (L_p·z)[start:stop] (forward, paper's Noise(p)) and
    ``reversed_values(start, stop)`` returns (E·L_p·z)[start:stop] (NoiseReversed(p)). Memory:
    the base decoder plus one base block and one coarse vector per level, O(k·(r + p)).
    """

    def __init__(self, *, decoder: np.ndarray, alphas: Sequence[float], source: NoiseSource) -> None:
        decoder = np.ascontiguousarray(decoder, dtype=np.float64)
        if decoder.ndim != 2 or not np.all(np.isfinite(decoder)):
            raise InvalidInputError("the base decoder must be a finite matrix")
        self.A = decoder
        self.k, self.r = decoder.shape
        self.alphas = tuple(float(alpha) for alpha in alphas)
        self.levels = len(self.alphas) + 1
        self.sizes = [lifted_size(base_size=self.k, levels=i) for i in range(1, self.levels + 1)]
        self.inner_sizes = [self.r]
        for _ in range(self.levels - 1):
            self.inner_sizes.append((2 * self.k + 1) * self.inner_sizes[-1] + self.r)
        self.source = source
        self._base_cache: tuple[int, np.ndarray] | None = None
        self._coarse_cache: dict[int, tuple[int, np.ndarray]] = {}

    @property
    def n(self) -> int:
        """N_p, the number of rows of L_p."""
        return self.sizes[-1]

    def values(self, start: int, stop: int) -> np.ndarray:
        """(L_p·z)[start:stop]; with a source of c columns (``source.columns``: c independent
        noise vectors z side by side, as the keyed counters use) an array of shape (rows, c)."""
        columns = getattr(self.source, "columns", None)
        out = np.empty((self._check_range(start, stop),) + (() if columns is None else (columns,)))
        self._fill(self.levels, 0, start, out)
        return out

    def reversed_values(self, start: int, stop: int) -> np.ndarray:
        """(E·L_p·z)[start:stop] = (L_p·z)[N_p−1−start … N_p−stop]."""
        out = np.empty(self._check_range(start, stop))
        self._fill(self.levels, 0, self.n - stop, out[::-1])
        return out

    def _check_range(self, start: int, stop: int) -> int:
        if not 0 <= start <= stop <= self.n:
            raise InvalidInputError(f"rows [{start}, {stop}) are outside L_p's {self.n} rows")
        return stop - start

    def _base(self, offset: int) -> np.ndarray:
        """A·z[offset : offset + r], the last one cached."""
        if self._base_cache is None or self._base_cache[0] != offset:
            self._base_cache = (offset, self.A @ self.source.block(offset, self.r))
        return self._base_cache[1]

    def _coarse(self, level: int, offset: int) -> np.ndarray:
        """α·A·w for the coarse block w at column ``offset`` of level ``level``, cached."""
        cached = self._coarse_cache.get(level)
        if cached is None or cached[0] != offset:
            cached = (offset, self.alphas[level - 2] * (self.A @ self.source.block(offset, self.r, level)))
            self._coarse_cache[level] = cached
        return cached[1]

    def terms(self, t: int) -> list[tuple[int, int, int, int]]:
        """Row t of L_p as a sum: [(level, offset, row, sign)] with
        (L_p·z)_t = Σ sign·a_level·(A·z[offset : offset + r])_row, a_1 = 1 and a_ℓ = α_{ℓ−1}
        (level ℓ ≥ 2: the coarse block of that level). At most p terms; the slow, obvious walk of
        the recursion ``values`` vectorises (tested against it)."""
        self._check_range(t, t + 1)
        found: list[tuple[int, int, int, int]] = []
        level, offset, sign = self.levels, 0, 1
        while level > 1:
            N, M = self.sizes[level - 2], self.inner_sizes[level - 2]
            if t < N:
                level -= 1
                continue
            j, u = divmod(t - N, 2 * N + 1)
            found.append((level, offset + (2 * self.k + 1) * M, j, sign))
            if u == N:
                return found
            if u < N:
                offset, t, sign = offset + (2 * j + 1) * M, N - 1 - u, -sign
            else:
                offset, t = offset + (2 * j + 2) * M, u - N - 1
            level -= 1
        found.append((1, offset, t, sign))
        return found

    def _fill(self, level: int, offset: int, start: int, out: np.ndarray) -> None:
        """out[:] = (L_level·z[offset:])[start : start + len(out)]; ``out`` may be a reversed view."""
        m = out.shape[0]
        if level == 1:
            out[:] = self._base(offset)[start : start + m]
            return
        N, M = self.sizes[level - 2], self.inner_sizes[level - 2]
        position, t = 0, start
        if t < N:  # the leading block: Noise(level − 1) on z₀
            take = min(N - t, m)
            self._fill(level - 1, offset, t, out[:take])
            position, t = take, t + take
        coarse_offset = offset + (2 * self.k + 1) * M
        while position < m:
            j, u = divmod(t - N, 2 * N + 1)
            if level == 2 and u == 0 and m - position >= 2 * N + 1 and out.ndim == 1:
                position, t = self._fill_whole_groups(offset, position, t, out)
                continue
            segment = out[position : position + min(m - position, 2 * N + 1 - u)]
            length = segment.shape[0]
            if u < N:  # −E·L·z_{j,a}: positions N−1−u down to N−a_stop
                a_stop = min(N, u + length)
                part = segment[: a_stop - u]
                self._fill(level - 1, offset + (2 * j + 1) * M, N - a_stop, part[::-1])
                np.negative(part, out=part)
            if u <= N < u + length:
                segment[N - u] = 0.0
            b_start = max(u, N + 1)
            if b_start < u + length:  # L·z_{j,b}
                self._fill(level - 1, offset + (2 * j + 2) * M, b_start - N - 1, segment[b_start - u :])
            segment += self._coarse(level, coarse_offset)[j]
            position, t = position + length, t + length

    def _fill_whole_groups(self, offset: int, position: int, t: int, out: np.ndarray) -> tuple[int, int]:
        """Level 2, the whole groups of ``out`` from ``position`` (row t, the first row of group j):
        one matrix product A·[z_{j,a} z_{j,b} …] for all of them; returns the new (position, t)."""
        k, r = self.k, self.r
        j = (t - k) // (2 * k + 1)
        groups = (out.shape[0] - position) // (2 * k + 1)
        offsets = [offset + (2 * (j + g) + 1 + side) * r for g in range(groups) for side in (0, 1)]
        Y = self.A @ self.source.blocks(offsets, r).T  # column 2g: A·z_{j+g,a}; 2g+1: A·z_{j+g,b}
        rows = np.reshape(out[position : position + groups * (2 * k + 1)], (groups, 2 * k + 1), copy=False)
        rows[:, :k] = -Y[::-1, 0::2].T
        rows[:, k] = 0.0
        rows[:, k + 1 :] = Y[:, 1::2].T
        rows += self._coarse(2, offset + (2 * k + 1) * r)[j : j + groups, None]
        return position + groups * (2 * k + 1), t + groups * (2 * k + 1)


def noise(engine: LiftedNoise, *, block: int = 4096) -> Iterator[float]:
    """Algorithm 1, Noise(p): yields (L_p·z)_1, …, (L_p·z)_{N_p} in order, ``block`` rows at a time."""
    for start in range(0, engine.n, block):
        yield from engine.values(start, min(start + block, engine.n)).tolist()


def noise_reversed(engine: LiftedNoise, *, block: int = 4096) -> Iterator[float]:
    """Algorithm 2, NoiseReversed(p): yields (L_p·z)_{N_p}, …, (L_p·z)_1."""
    for start in range(0, engine.n, block):
        yield from engine.reversed_values(start, min(start + block, engine.n)).tolist()


# ---------------------------------------------------------------------------------------------
# The lifting plan (α's) and the base.


_DECODERS: dict[str, ExactDecoder] = {}


def exact_decoder(base: Factorization) -> ExactDecoder:
    """The base's ``lattice.ExactDecoder``, computed once per process and base (sha256 of both
    matrices): at k = 1024 it costs two exact integer products."""
    digest = base_digest(base)
    if digest not in _DECODERS:
        decoder, encoder = base.dense()
        _DECODERS[digest] = ExactDecoder.from_factorization(decoder=decoder, encoder=encoder)
    return _DECODERS[digest]


def lattice_release(
    *,
    key: bytes,
    decoder: ExactDecoder,
    alphas: Sequence,
    epsilon: Fraction,
    sensitivity: Fraction,
    page_size: int = PAGE,
    cached_pages: int = 8,
) -> ExactRelease:
    """The exact lattice release of one counter (lattice.py): integer noise Y ~ DLap on the
    encoder's lattice, keyed by ``key``, with rates ε·c_ℓ/``sensitivity``; L̄_p with every α = 1
    (the α's sit in the noise rates); every rounding decided exactly."""
    source = LatticeSource(
        key=key,
        epsilon=epsilon,
        sensitivity=sensitivity,
        alphas=[Fraction(a) for a in alphas],
        grid_bits=decoder.grid_bits,
        page_size=page_size,
        cached_pages=cached_pages,
    )
    engine = LiftedNoise(decoder=decoder.decoder, alphas=[1.0] * len(alphas), source=source)
    return ExactRelease(engine=engine, decoder=decoder, source=source)


def base_digest(base: Factorization) -> str:
    """sha256 identifying a base: of its decoder's and encoder's float64 bytes and shapes."""
    decoder, encoder = base.dense()
    text = f"{decoder.shape}:{array_sha256(decoder)}:{encoder.shape}:{array_sha256(encoder)}"
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# The counter.


def check_steps(values, *, dimension: int, max_value: int = 1) -> np.ndarray:
    """A batch of steps as an int64 (m, d) array of integers in [0, m] (m = ``max_value``) with row
    sums ≤ m, or a clear error."""
    expected = "0 or 1" if max_value == 1 else f"an integer from 0 to {max_value}"
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(f"stream values must be numbers ({expected})") from None
    if dimension == 1 and array.ndim <= 1:
        array = array.reshape(-1, 1)
    if array.ndim != 2 or array.shape[1] != dimension:
        raise InvalidInputError(f"expected steps of dimension {dimension}, got an array of shape {array.shape}")
    where = (lambda row: f" (row {row} of the batch)") if array.shape[0] > 1 else (lambda row: "")
    if np.isnan(array).any():
        raise InvalidInputError(f"stream value is NaN{where(int(np.argwhere(np.isnan(array))[0][0]))}; expected {expected}")
    bad = (array < 0) | (array > max_value) | (array != np.floor(array))
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise InvalidInputError(f"stream value {float(array[row, column]):g} is not {expected}{where(row)}")
    if dimension > 1 and (array.sum(axis=1) > max_value).any():
        row = int(np.argwhere(array.sum(axis=1) > max_value)[0][0])
        if max_value == 1:
            raise InvalidInputError(f"a step has {int(array[row].sum())} ones{where(row)}; at most one per step is allowed")
        raise InvalidInputError(
            f"a step's values sum to {int(array[row].sum())}{where(row)}; at most {max_value} per step is allowed (ℓ1 bound)"
        )
    return array.astype(np.int64)


class ContinualCounter:
    """ε-DP continual counting with the lifted factorization (Arkhipov & Kalinin, Algorithm 3).

    ``update(x)`` takes the next step (x ∈ {0, …, m}, m = ``max_value``, default 1; for
    ``dimension`` d > 1 a vector of such integers with sum ≤ m) and returns the released running count(s) S_t + ⌊2^-g·(L̄_p·Y)_t + ½⌋, an
    int (int64 array for d > 1); ``counts(xs)`` does a batch. Each of the d coordinates has its
    own noise stream (its own z).

    Privacy guarantee: the released sequence is exactly ε-differentially private with respect to
    changing the value of any one step (d = 1: by at most Δ_step = m; d > 1: replacing one step's
    vector by another of ℓ1 norm ≤ m, an ℓ1 change of at most Δ_step = 2m), for the code as it runs, floats
    included: the noise is discrete Laplace on the lattice of the encoder (an encoder off the
    2^-32 lattice is refused), scaled to the exact ‖R_p[:, :horizon]‖₁→₁ of the lift plan, and
    each release is an exactly decided rounding of L_p·y with y = R_p·x + w (post-processing;
    ``lattice.py``, docs/privacy.md). With a secure generator the noise bits are keyed SHAKE-256
    output, so the guarantee is computational (SHAKE-256 as a PRF); with a seeded generator
    (``seeded``) there is no privacy at all. Released values are integers.

    Persistence: after ``save_state(path)`` the counter keeps ``path`` current: before every
    release it atomically rewrites the state (generator key, release counter, prefix sums, the
    values about to be released) and then the release ledger ``path + '.released'``: one durable
    commit per ``counts`` call, so a call of m steps is a group commit of m releases (``count``
    batches up to ``--commit-every`` lines that are already available). ``resume(path)`` continues
    with exactly the values the uninterrupted counter would release and refuses a state older than
    the ledger (a step released after that state was written would be released again); the state
    keeps the last call's released values (``last_block``, up to ``MAX_BLOCK`` steps) so that an
    output file can be completed after a crash with the values already released, never new ones.
    """

    def __init__(
        self,
        *,
        base: Factorization | str | os.PathLike,
        epsilon: float,
        horizon: int,
        dimension: int = 1,
        rng: NoiseGenerator | None = None,
        metric: str | None = None,
        alphas: Sequence[float] | None = None,
        max_value: int = 1,
        monotone: bool = False,
        _released: int = 0,
        _prefix_sums: Sequence[int] | None = None,
        _lineage: str | None = None,
    ) -> None:
        self.base_file: str | None = None
        self.certificate: str | None = None
        if not isinstance(base, Factorization):
            self.base_file = str(Path(base).resolve())
            base = Factorization.load(base)
        self.base = base
        self.epsilon = check_epsilon(epsilon)
        self.horizon = check_size(horizon, name="horizon")
        self.dimension = check_size(dimension, name="dimension")
        self.rng = rng if rng is not None else NoiseGenerator.secure()
        self.metric = metric or base.metric or "maxse"
        # The lift plan (which checks that the base factors T_k) gives the α's and the exact
        # sensitivity ‖R_p[:, :horizon]‖₁→₁: one implementation, shared with ``compare`` and ``lift``.
        self.plan = lift_plan(base=base, n=self.horizon, metric=self.metric)
        self.alphas = [float(a) for a in self.plan.alphas]
        if alphas is not None and [float(a) for a in alphas] != self.alphas:
            raise InvalidInputError(
                f"the lifting parameters given ({len(alphas)}) are not the lift plan's for horizon {self.horizon} "
                f"({len(self.alphas)}): the state or the base changed"
            )
        self.max_value = check_size(max_value, name="max_value", minimum=1)
        self.step_sensitivity = self.max_value if self.dimension == 1 else 2 * self.max_value
        self.sensitivity = self.plan.sensitivity_exact
        self.scale = float_upper(self.step_sensitivity * self.sensitivity / Fraction(self.epsilon))
        self.exact_decoder = exact_decoder(base)
        generators = (
            [self.rng]
            if self.dimension == 1
            else [
                NoiseGenerator(key=hashlib.sha256(self.rng.key + i.to_bytes(4, "little")).digest(), seeded=self.rng.seeded)
                for i in range(self.dimension)
            ]
        )
        self._releases = [
            lattice_release(
                key=g.key,
                decoder=self.exact_decoder,
                alphas=self.plan.alphas,
                epsilon=Fraction(self.epsilon),
                sensitivity=self.step_sensitivity * self.sensitivity,
            )
            for g in generators
        ]
        self.base_sha256 = base_digest(base)
        self.released = check_size(_released, name="released", minimum=0, maximum=self.horizon)
        self._sums = [int(v) for v in (_prefix_sums if _prefix_sums is not None else [0] * self.dimension)]
        if len(self._sums) != self.dimension:
            raise InvalidInputError(f"{len(self._sums)} prefix sums for dimension {self.dimension}")
        self.last_release: list[int] | None = None
        if monotone and self.dimension != 1:
            raise InvalidInputError("monotone post-processing is for dimension 1 (one running count)")
        self.monotone = bool(monotone)
        self._fit: MonotoneFit | None = MonotoneFit() if monotone else None
        self.last_raw: np.ndarray = np.zeros(0, dtype=np.int64)  # with monotone: the last call's unprocessed releases
        self._expected: dict | None = None  # a resumed counter's expected errors, from its state
        self.choice: Any = None  # the compare row this counter was chosen by (for_horizon), if any
        self.last_block: list[list[int]] = []  # the last commit's released values (d per step), for output files
        self.lineage = _lineage or uuid.uuid4().hex
        _claim_generator(self.rng, lineage=self.lineage)
        self.state_path: Path | None = None
        self._lock: _StateLock | None = None
        self._buffer_start, self._buffer = 0, np.zeros((0, self.dimension), dtype=np.int64)
        self._buffer_list: list[int] | None = None

    def summary(self) -> dict:
        """What runs, for headers and logs: the mechanism, ε, horizon, m, the exact sensitivity
        Δ_step·‖R_p[:, :horizon]‖₁→₁ of the noise, and (when the counter was chosen by
        ``for_horizon``, also after a resume) the expected MaxSE and MeanSE of the releases."""
        expected = self._expected
        if self.choice is not None:
            row, scale = self.choice, self.step_sensitivity**2
            what = (
                f"lifted base {Path(str(row.base_file)).name}"
                if row.mechanism == "lifted"
                else f"{row.mechanism} tree" + (f", arity {row.arity}" if row.arity is not None else "")
            )
            expected = {"mechanism": what, "max_se": scale * row.max_se, "mean_se": scale * row.mean_se}
        mechanism = (
            expected["mechanism"]
            if expected
            else f"lifted base {Path(self.base_file).name}"
            if self.base_file
            else f"base factorization of T_{self.base.n}"
        )
        summary: dict[str, Any] = {
            "mechanism": mechanism,
            "certificate": Path(self.certificate).name if self.certificate else None,
            "epsilon": self.epsilon,
            "horizon": self.horizon,
            "max_value": self.max_value,
            "dimension": self.dimension,
            "sensitivity": float(self.step_sensitivity * self.sensitivity),
            "monotone": self.monotone,
            "seeded": self.seeded,
        }
        if expected:
            summary["expected"] = expected
        return summary

    @property
    def seeded(self) -> bool:
        """True when the noise comes from a seeded (public, non-private) generator."""
        return self.rng.seeded

    def __repr__(self) -> str:
        return (
            f"ContinualCounter(k={self.base.n}, epsilon={self.epsilon}, horizon={self.horizon}, "
            f"dimension={self.dimension}, released={self.released}, seeded={self.seeded})"
        )

    # ------------------------------------------------------------------ releasing

    @property
    def lattice_sources(self) -> list[LatticeSource]:
        """The integer noise Y of each coordinate (tests and the audit; never release it)."""
        return [release.source for release in self._releases]

    @property
    def fallbacks(self) -> int:
        """Steps whose rounding was decided in rational arithmetic (lattice.ExactRelease)."""
        return sum(release.fallbacks for release in self._releases)

    def _noise(self, start: int, stop: int) -> np.ndarray:
        """⌊2^-g·(L̄_p·Y)_t + ½⌋ for t in [start, stop), shape (stop − start, d), computed ahead
        in chunks of ``CHUNK`` steps (the noise does not depend on the data)."""
        if not (self._buffer_start <= start and stop <= self._buffer_start + len(self._buffer)):
            chunk_stop = min(self.horizon, max(stop, start + CHUNK))
            columns = [release.noise(start, chunk_stop) for release in self._releases]
            self._buffer_start = start
            self._buffer = np.stack(columns, axis=1)
            self._buffer_list = None
        return self._buffer[start - self._buffer_start : stop - self._buffer_start]

    def counts(self, values) -> np.ndarray:
        """Release the next steps: int64 array of shape (m,) (d = 1) or (m, d)."""
        steps = check_steps(values, dimension=self.dimension, max_value=self.max_value)
        m = steps.shape[0]
        if self.released + m > self.horizon:
            raise InvalidInputError(f"{m} more steps would exceed the horizon {self.horizon} ({self.released} already released)")
        if m == 0:
            return np.zeros((0,) if self.dimension == 1 else (0, self.dimension), dtype=np.int64)
        sums = np.array(self._sums, dtype=np.int64) + np.cumsum(steps, axis=0)
        released = sums + self._noise(self.released, self.released + m)
        fit, rows = self._fit, released
        if self._fit is not None:  # post-processing (postprocess.py); rows hold (processed, unprocessed)
            fit, shown = self._fit.extended(released[:, 0].tolist(), first_step=self.released, max_value=self.max_value)
            rows = np.column_stack([shown, released[:, 0]])
        if self.state_path is not None:  # one durable commit for the whole call, before any release
            block = rows.tolist() if m <= MAX_BLOCK else rows[-1:].tolist()
            self._persist(released=self.released + m, prefix_sums=sums[-1], last_release=rows[-1], last_block=block, fit=fit)
            self.last_block = block
        else:
            self.last_block = []  # not kept without a state file (a later save_state must not store stale values)
        self.released += m
        self._sums = sums[-1].tolist()
        self.last_release = rows[-1].tolist()
        self._fit = fit
        if self.monotone:
            self.last_raw = released[:, 0]
            return rows[:, 0]
        return released[:, 0] if self.dimension == 1 else released

    def update(self, value) -> int | np.ndarray:
        """Release the next step; returns an int (d = 1) or an int64 vector (d > 1)."""
        if self.dimension > 1:
            return self.counts(np.asarray(value, dtype=object).reshape(1, -1) if np.ndim(value) == 1 else value)[0]
        t = self.released
        if (
            type(value) in (int, bool)
            and 0 <= value <= self.max_value
            and t < self.horizon
            and self.state_path is None
            and not self.monotone
        ):
            index = t - self._buffer_start  # fast path: the arithmetic of ``counts`` on Python ints
            if not 0 <= index < len(self._buffer):
                self._noise(t, t + 1)
                index = 0
            if self._buffer_list is None:
                self._buffer_list = self._buffer[:, 0].tolist()
            self._sums[0] += int(value)
            self.released = t + 1
            result = self._sums[0] + self._buffer_list[index]
            self.last_release = [result]
            self.last_block = []
            return result
        return int(self.counts([value])[0])

    @property
    def prefix_sums(self) -> np.ndarray:
        """The exact running counts S_t (not private: never release them)."""
        return np.array(self._sums, dtype=np.int64)

    # ------------------------------------------------------------------ state files

    def _record(self, *, released: int, prefix_sums, last_release, last_block, fit: MonotoneFit | None) -> dict:
        record = {
            "format": STATE_FORMAT,
            "library_version": pure_dp_mf.__version__,
            "lineage": self.lineage,
            "base": {
                "sha256": self.base_sha256,
                "file": self.base_file,
                "certificate": self.certificate,
                "tree": None
                if self.choice is None or self.choice.mechanism == "lifted"
                else [self.choice.mechanism, self.choice.arity],
                "base_size": self.base.n,
                "inner_size": self.base.inner_size,
            },
            "metric": self.metric,
            "epsilon": self.epsilon.hex(),
            "horizon": self.horizon,
            "dimension": self.dimension,
            "max_value": self.max_value,
            "alphas": [alpha.hex() for alpha in self.alphas],
            "sensitivity": [str(self.sensitivity.numerator), str(self.sensitivity.denominator)],
            "scale": self.scale.hex(),
            "generator": self.rng.to_record(),
            "released": int(released),
            "prefix_sums": [int(s) for s in prefix_sums],
            "last_release": None if last_release is None else [int(v) for v in last_release],
            "last_block": [[int(v) for v in row] for row in last_block],
            "monotone": None if fit is None else fit.to_record(),
            "choice": self.summary().get("expected"),
        }
        record["checksum"] = _checksum(record)
        return record

    def _persist(self, *, released: int, prefix_sums, last_release, last_block, fit: MonotoneFit | None) -> None:
        """State first, then the ledger, both atomic: always ledger ≤ state on disk."""
        if self.state_path is None:
            raise StateFileError("the counter has no state file; call save_state first")
        record = self._record(
            released=released, prefix_sums=prefix_sums, last_release=last_release, last_block=last_block, fit=fit
        )
        atomic_write_text(self.state_path, json.dumps(record, sort_keys=True))
        atomic_write_text(_ledger(self.state_path), json.dumps({"lineage": self.lineage, "released": int(released)}))

    def save_state(self, path: str | os.PathLike) -> Path:
        """Write the state to ``path`` (atomically, mode 0600: it holds the generator key) and
        keep it current before every later release (see the class docstring)."""
        path = Path(path)
        if not path.parent.exists():
            raise StateFileError(f"cannot write {path}: folder {path.parent} does not exist")
        if self._lock is None or self._lock.path != path:
            lock = _StateLock(path)
            if self._lock is not None:
                self._lock.release()
            self._lock = lock
        self.state_path = path
        self._persist(
            released=self.released,
            prefix_sums=self.prefix_sums,
            last_release=self.last_release,
            last_block=self.last_block,
            fit=self._fit,
        )
        return path

    def close(self) -> None:
        """Release the lock on the state file (also released when the process ends, however it
        ends). The counter keeps working in memory but no longer persists."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self.state_path = None

    def __enter__(self) -> ContinualCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def for_horizon(
        cls,
        *,
        epsilon: float,
        horizon: int,
        metric: str = "maxse",
        mechanism: str = "auto",
        dimension: int = 1,
        rng: NoiseGenerator | None = None,
        max_value: int = 1,
        monotone: bool = False,
    ) -> ContinualCounter:
        """The counter of the mechanism ``compare`` ranks best for (horizon, ε, metric).

        ``mechanism`` "auto" takes the best row of ``compare.comparison_rows`` (every shipped
        lifted base and the five trees at their best arity) for ``metric``; "lifted" the best
        lifted base only; a tree name that tree. A lifted base runs from its shipped certificate
        (``from_certificate``); a tree runs through the counter with its exact factorization and
        no lifting, which materialises its n×n decoder, so trees run up to horizon
        ``TREE_HORIZON_LIMIT`` ("auto" then skips them; at every n ≥ 5 a lifted base ranks first
        anyway). The choice is kept in ``choice`` (the ``ComparisonRow``, errors at ε for one
        unit of sensitivity; the counter's variances are those times ``step_sensitivity``²).
        """
        from pure_dp_mf import resources
        from pure_dp_mf.mechanisms import planner as compare
        from pure_dp_mf.mechanisms import trees

        horizon = check_size(horizon, name="horizon")
        if mechanism not in ("auto", "lifted", *trees.MECHANISMS):
            raise InvalidInputError(
                f"unknown mechanism {mechanism!r}; expected auto, lifted or one of {', '.join(trees.MECHANISMS)}"
            )
        rows = compare.comparison_rows(n=horizon, epsilon=epsilon, sort_by=metric)
        if mechanism == "auto":
            rows = [r for r in rows if r.mechanism == "lifted" or horizon <= TREE_HORIZON_LIMIT]
        else:
            rows = [r for r in rows if r.mechanism == mechanism]
            if mechanism != "lifted" and horizon > TREE_HORIZON_LIMIT:
                raise InvalidInputError(
                    f"the {mechanism} tree runs with its dense factorization: horizon at most {TREE_HORIZON_LIMIT}, got {horizon}"
                )
        if not rows:
            raise InvalidInputError(f"no {mechanism} mechanism is available for horizon {horizon}")
        row = rows[0]
        if row.mechanism == "lifted":
            base_file = Path(str(row.base_file))
            certificate = resources.certificate_file(base_file, folder=base_file.parent.parent / "certificates")
            if certificate.is_file():
                counter = cls.from_certificate(
                    certificate,
                    epsilon=epsilon,
                    horizon=horizon,
                    dimension=dimension,
                    rng=rng,
                    max_value=max_value,
                    monotone=monotone,
                )
            else:
                counter = cls(
                    base=base_file,
                    epsilon=epsilon,
                    horizon=horizon,
                    dimension=dimension,
                    rng=rng,
                    max_value=max_value,
                    monotone=monotone,
                )
        else:
            factorization = trees.tree_factorization(mechanism=row.mechanism, n=horizon, arity=row.arity)
            counter = cls(
                base=factorization,
                epsilon=epsilon,
                horizon=horizon,
                dimension=dimension,
                rng=rng,
                alphas=[],
                max_value=max_value,
                monotone=monotone,
            )
        counter.choice = row
        return counter

    @classmethod
    def from_certificate(
        cls,
        certificate: str | os.PathLike,
        *,
        epsilon: float,
        horizon: int,
        dimension: int = 1,
        rng: NoiseGenerator | None = None,
        max_value: int = 1,
        monotone: bool = False,
    ) -> ContinualCounter:
        """A counter on the base factorization that ``certificate`` certifies (train → certify →
        lift → count: the documented flow).

        The certificate binds the base file by its sha256, and its claimed ‖R̃‖₁→₁ is re-checked
        exactly against the encoder on its lattice (``certify.certified_sensitivity``, O(k²)); the
        counter's own sensitivity is then the exact ‖R_p[:, :horizon]‖₁→₁ of the lift plan. The
        accuracy claims are re-proved by ``pure-dp-mf verify``, not here.

        Raises:
            CertificateFileError, ClaimFailedError: an unreadable certificate, a base file whose
                sha256 differs, or an encoder off the lattice or above the claimed sensitivity.
        """
        certificate_record = Certificate.read(certificate)
        certified_sensitivity(path=certificate)
        counter = cls(
            base=certificate_record.factorization_path,
            epsilon=epsilon,
            horizon=horizon,
            dimension=dimension,
            rng=rng,
            max_value=max_value,
            monotone=monotone,
        )
        counter.certificate = str(Path(certificate).resolve())
        return counter

    @classmethod
    def resume(
        cls,
        path: str | os.PathLike,
        *,
        base: Factorization | str | os.PathLike | None = None,
        epsilon: float | None = None,
        horizon: int | None = None,
        rng: NoiseGenerator | None = None,
        max_value: int | None = None,
        monotone: bool | None = None,
    ) -> ContinualCounter:
        """The counter saved in ``path``, bound to it again. ``base`` (default: the file the state
        names), ``epsilon``, ``horizon``, ``rng``, ``max_value`` and ``monotone``, when given, must
        match the state."""
        lock = _StateLock(Path(path))  # first: a second process is refused before anything is read
        try:
            return cls._resume_locked(
                path, lock=lock, base=base, epsilon=epsilon, horizon=horizon, rng=rng, max_value=max_value, monotone=monotone
            )
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _resume_locked(
        cls,
        path: str | os.PathLike,
        *,
        lock: _StateLock,
        base: Factorization | str | os.PathLike | None,
        epsilon: float | None,
        horizon: int | None,
        rng: NoiseGenerator | None,
        max_value: int | None = None,
        monotone: bool | None = None,
    ) -> ContinualCounter:
        record = read_state(path)
        if monotone is not None and bool(record.get("monotone")) != monotone:
            state_says = "with" if record.get("monotone") else "without"
            raise StateFileError(f"{path}: the state was made {state_says} monotone post-processing")
        if epsilon is not None and float.fromhex(record["epsilon"]) != check_epsilon(epsilon):
            raise StateFileError(f"{path}: the state is for epsilon {float.fromhex(record['epsilon'])}, not {epsilon}")
        if horizon is not None and record["horizon"] != horizon:
            raise StateFileError(f"{path}: the state is for horizon {record['horizon']}, not {horizon}")
        if max_value is not None and int(record.get("max_value", 1)) != max_value:
            raise StateFileError(f"{path}: the state is for max_value {record.get('max_value', 1)}, not {max_value}")
        generator = NoiseGenerator.from_record(record["generator"])
        if rng is not None and (rng.key != generator.key or rng.seeded != generator.seeded):
            raise StateFileError(f"{path}: the state was made with another generator (seed)")
        tree = record["base"].get("tree")
        if base is None and tree:
            from pure_dp_mf.mechanisms import trees

            base = trees.tree_factorization(mechanism=str(tree[0]), n=record["horizon"], arity=tree[1])
        if base is None:
            if not record["base"]["file"]:
                raise StateFileError(f"{path}: the state names no base file; pass the base")
            base = record["base"]["file"]
        counter = cls(
            base=base,
            epsilon=float.fromhex(record["epsilon"]),
            horizon=record["horizon"],
            dimension=record["dimension"],
            max_value=int(record.get("max_value", 1)),
            monotone=record.get("monotone") is not None,
            rng=generator,
            metric=record["metric"],
            alphas=[float.fromhex(alpha) for alpha in record["alphas"]],
            _released=record["released"],
            _prefix_sums=record["prefix_sums"],
            _lineage=record["lineage"],
        )
        if counter.base_sha256 != record["base"]["sha256"]:
            raise StateFileError(f"{path}: the state belongs to another base factorization (sha256 differs)")
        if counter.scale.hex() != record["scale"]:
            raise StateFileError(f"{path}: the noise scale recomputed from the base differs from the state's")
        counter.last_release = record["last_release"]
        counter.last_block = record.get("last_block") or ([record["last_release"]] if record["last_release"] else [])
        counter.certificate = record["base"].get("certificate")
        if record.get("monotone") is not None:
            counter._fit = MonotoneFit.from_record(record["monotone"])
        counter._expected = record.get("choice")
        counter.state_path = Path(path)
        counter._lock = lock
        return counter


def format_release(released) -> str:
    """One output line: the released count, or the d counts separated by spaces."""
    return str(released) if isinstance(released, int) else " ".join(str(int(v)) for v in released)


def open_release_log(
    path: Path,
    *,
    counter: ContinualCounter,
    resumed: bool,
    render: Callable[[int, list], str] | None = None,
    header: str | None = None,
) -> IO[str]:
    """Open the release log ``path`` for appending so that it holds exactly the released steps, one
    line each, across restarts (the exactly-once output of ``pure-dp-mf count --output``): after a kill
    the state may be up to one commit ahead of the file (released, not yet written): those steps'
    values, kept in the state (``last_block``), are written again (the same values, no new noise).

    ``render(first_step, rows)`` formats released rows (d values each) starting at the 0-based step
    ``first_step`` (default: ``format_release`` lines); ``header``, if given, is the file's first
    line (written when the file is created, not counted as a step)."""
    render = render or _render_plain
    header_lines = 0 if header is None else header.count("\n") + 1
    if not resumed:
        if path.exists() and path.stat().st_size > 0:
            raise InvalidInputError(f"{path} already exists and is not empty; the counter would append to it")
        stream = open(path, "w", encoding="utf-8")
        if header is not None:
            stream.write(header + "\n")
        return stream
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    complete = text[: text.rfind("\n") + 1]
    lines = max(complete.count("\n") - header_lines, 0)
    missing = counter.released - lines
    if not 0 <= missing <= len(counter.last_block):
        raise InvalidInputError(f"{path} has {lines} lines but the state has released {counter.released} steps")
    stream = open(path, "a", encoding="utf-8")
    if len(complete) != len(text):  # a partial last line
        stream.truncate(len(complete.encode("utf-8")))
    if header is not None and not complete:
        stream.write(header + "\n")
    if missing:
        block = counter.last_block[len(counter.last_block) - missing :]
        stream.write(render(counter.released - missing, block))
        stream.flush()
    return stream


def _render_plain(first_step: int, rows: list) -> str:
    return "".join(format_release(row[0] if len(row) == 1 else row) + "\n" for row in rows)


_CLAIMED: dict[bytes, str] = {}  # sha256 of each secure generator key feeding a counter here → its lineage


def _claim_generator(rng: NoiseGenerator, *, lineage: str) -> None:
    """Refuse a secure generator that already feeds a counter of another lineage in this process.

    Guarantee: two counters never add the same noise to different data through one generator
    (their difference would reveal T·(x − x') exactly). A resumed counter has the lineage of the
    one it continues and is accepted; a seeded generator (public, not private) is not tracked."""
    if rng.seeded:
        return
    tag = hashlib.sha256(rng.key).digest()
    owner = _CLAIMED.setdefault(tag, lineage)
    if owner != lineage:
        raise InvalidInputError(
            "this NoiseGenerator already feeds another counter: its noise would be reused on other data; "
            "give each counter its own generator (NoiseGenerator.secure(), or generator.child(label))"
        )


class _StateLock:
    """An exclusive OS lock (``flock``) on ``<state>.lock``, held while a counter uses the state.

    Guarantee: a second process (or a second counter in this process) opening the same state is
    refused at once, so two runs never release the same steps; the OS drops the lock when the
    process ends, however it ends, so a crash never leaves the state locked."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = None
        lock_path = self.path.with_name(self.path.name + LOCK_SUFFIX)
        try:
            handle = open(lock_path, "ab")
        except OSError as error:
            raise StateFileError(f"cannot lock {self.path}: {error.strerror}") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise StateFileError(
                f"{self.path} is in use by another counter (locked through {lock_path.name}); "
                "two runs on one state would release the same steps twice"
            ) from None
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def _checksum(record: dict) -> str:
    body = {key: value for key, value in record.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _ledger(path: Path) -> Path:
    return path.with_name(path.name + LEDGER_SUFFIX)


_FIELDS = {
    "lineage": str,
    "base": dict,
    "metric": str,
    "epsilon": str,
    "horizon": int,
    "dimension": int,
    "alphas": list,
    "sensitivity": list,
    "scale": str,
    "generator": dict,
    "released": int,
    "prefix_sums": list,
}


def read_state(path: str | os.PathLike) -> dict:
    """Read and check a state file and its ledger; every problem is a ``StateFileError``."""
    path = Path(path)
    if not path.is_file():
        raise StateFileError(f"{path}: no such state file")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise StateFileError(f"{path}: corrupted state file ({type(error).__name__})") from None
    if not isinstance(record, dict) or record.get("format") != STATE_FORMAT:
        raise StateFileError(f"{path}: not a counter state file (format {STATE_FORMAT!r} expected)")
    if record.get("checksum") != _checksum(record):
        raise StateFileError(f"{path}: corrupted state file (checksum mismatch)")
    for name, kind in _FIELDS.items():
        if not isinstance(record.get(name), kind):
            raise StateFileError(f"{path}: state field {name!r} is missing or malformed")
    ledger_path = _ledger(path)
    if ledger_path.exists():
        try:
            ledger = json.loads(ledger_path.read_text(encoding="utf-8"))
            ledger_lineage, ledger_released = ledger["lineage"], int(ledger["released"])
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            raise StateFileError(f"{ledger_path}: corrupted release ledger") from None
        if ledger_lineage != record["lineage"]:
            raise StateFileError(f"{ledger_path}: the release ledger belongs to another counter")
        if ledger_released > record["released"]:
            raise StateFileError(
                f"{path}: stale state: it has {record['released']} released steps but {ledger_released} were released; "
                "resuming would release steps again"
            )
    elif record["released"] > 0:
        raise StateFileError(
            f"{path}: the release ledger {ledger_path.name} is missing but the state has released {record['released']} "
            "steps: the state may be a copy, or the ledger was deleted; resuming could release steps again"
        )
    return record
