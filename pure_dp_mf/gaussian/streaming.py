"""Every Gaussian mechanism in the one streaming form (``mechanisms.streaming``): (init, next) over noise.

Choquette-Choo et al. (arXiv 2211.06530) release B·z for a decoder B (n × inner size) and
Gaussian z; this module gives each of the library's Gaussian mechanisms a ``StreamingDecoder``
(``decoder_of``), so that one loop (``torch_noise.CorrelatedNoise``) serves them all and one
registry test checks them all:

* **causal streams** (banded Toeplitz, BLT, BISR, column-normalized banded, the online Honaker
  tree variants): ``next`` runs the mechanism's own O(bands·d), O(buffers·d) or O(log n·d)
  recursion, drawing the noise coordinates in order from the source (coordinate i is the i-th
  vector drawn);
* **block decoders** (dense factorizations such as the optimizer's, the FFT decoders, the full
  Honaker decoder): row t depends on every entry of z, so ``init`` reads the whole z once and
  the values are computed for all steps at once (``mechanism.decode``), by chunks of columns,
  kept in float32 as Choquette-Choo et al. (App. C) pre-generate them;
* **stamping** composes: each stamp runs the base decoder on its own block of z (coordinates
  offset by the stamp), plus the final value of every earlier stamp.

Noise sources: ``SequentialNormals`` (fresh N(0, 1) vectors, secure from ``os.urandom`` or
seeded for research, served in order and never twice), or any addressed source (tests:
``streaming.ArraySource``). ``terms(t)`` (row t of B, exact rationals of its float entries) comes
from the mechanism's dense decoder with its columns in the order the stream draws them, so it
is meant for small n (tests, inspection); the Gaussian side has no exact release to feed.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.mechanisms.streaming import Term
from pure_dp_mf.validation import check_size

COLUMN_CHUNK = 1 << 16  # columns (parameter coordinates) decoded at once by a block decoder


def secure_standard_normal(size: int) -> np.ndarray:
    """``size`` independent N(0, 1) draws (float64) from ``os.urandom`` via Box–Muller.

    Uniforms are (j + 0.5)/2^53 for 53-bit integers j from the OS generator, so log never sees 0.
    """
    size = check_size(size, name="size", minimum=0)
    pairs = (size + 1) // 2
    bits = np.frombuffer(os.urandom(16 * pairs), dtype=np.uint64).reshape(2, pairs) >> np.uint64(11)
    u1, u2 = (bits.astype(np.float64) + 0.5) / 2.0**53
    radius = np.sqrt(-2.0 * np.log(u1))
    normals = np.concatenate([radius * np.cos(2 * np.pi * u2), radius * np.sin(2 * np.pi * u2)])
    return normals[:size]


class SequentialNormals:
    """Standard normal noise vectors of ``columns`` coordinates, drawn in order: ``block(offset,
    size)`` must ask for the next ``size`` vectors (offset = the number drawn so far), so no
    vector is ever drawn twice or reused. Secure (``os.urandom``, Box–Muller) without a seed; a
    seeded numpy generator (reproducible, NOT secure: for tests and research) with one."""

    def __init__(self, columns: int, *, seed: int | None = None) -> None:
        self.columns = check_size(columns, name="columns")
        self.mode = "secure" if seed is None else "seeded"
        self._rng = None if seed is None else np.random.default_rng(check_size(seed, name="seed", minimum=0))
        self.drawn = 0

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        if offset != self.drawn:
            raise InvalidInputError(f"noise is drawn in order, once: asked for coordinate {offset}, next is {self.drawn}")
        count = size * self.columns
        values = secure_standard_normal(count) if self._rng is None else self._rng.standard_normal(count)
        self.drawn += size
        return values.reshape(size, self.columns)

    def blocks(self, offsets, size: int) -> np.ndarray:
        return np.stack([self.block(offset, size) for offset in offsets])


def _draw_from(noise, state) -> Callable[[], Any]:
    """draw() for a mechanism's own stream: the next coordinate of ``noise``, as a vector."""

    def draw():
        value = noise.block(state.drawn + state.offset, 1)
        state.drawn += 1
        return value[0]

    return draw


class _TermsFromDense:
    """``terms``, ``term_arrays`` and ``max_terms`` from a dense decoder whose columns are in draw order."""

    dense: Callable[[], np.ndarray]
    n: int

    @property
    def atoms(self) -> np.ndarray:
        return np.ones((1, 1))

    @property
    def rows(self) -> int:
        return self.n

    def terms(self, t: int) -> list[Term]:
        row = self._matrix()[t]
        return [Term(1, int(j), 0, Fraction(float(row[j]))) for j in np.flatnonzero(row)]

    def term_arrays(self, start: int, stop: int):
        block = self._matrix()[start:stop]
        positions, columns = np.nonzero(block)
        return (
            positions,
            np.ones(len(positions), dtype=np.int64),
            np.zeros(len(positions), dtype=np.int64),
            block[positions, columns],
        )

    def max_terms(self, stop: int) -> int:
        return int(np.count_nonzero(self._matrix()[:stop], axis=1).max(initial=0))

    def _matrix(self) -> np.ndarray:
        cached = getattr(self, "_dense_cache", None)
        if cached is None:
            cached = np.asarray(self.dense(), dtype=np.float64)
            self._dense_cache = cached
        return cached


@dataclass
class StreamState:
    """The next row, the coordinates drawn so far, and the mechanism's own running stream."""

    t: int
    offset: int = 0
    drawn: int = 0
    stream: Any = None
    source: int | None = None
    skip: int = 0
    carry: Any = None
    values: np.ndarray | None = field(default=None, repr=False)


class CausalDecoder(_TermsFromDense):
    """A causal Gaussian mechanism (its ``stream(draw)`` yields (B·z)_t in order)."""

    def __init__(self, mechanism, *, stream: Callable[[Callable[[], Any]], Iterator], dense: Callable[[], np.ndarray]) -> None:
        self.mechanism, self.n, self._stream, self.dense = mechanism, int(mechanism.n), stream, dense

    def init(self, *, start: int = 0, offset: int = 0) -> StreamState:
        if not 0 <= start <= self.n:
            raise InvalidInputError(f"row {start} is outside the decoder's {self.n} rows")
        return StreamState(t=0, offset=offset, skip=start)  # rows before ``start`` are replayed on the first next

    def next(self, state: StreamState, noise, *, steps: int = 1) -> tuple[np.ndarray, StreamState]:
        if state.stream is None or state.source != id(noise):
            state.stream, state.source, state.drawn = self._stream(_draw_from(noise, state)), id(noise), 0
            skip, state.t, state.skip = state.t + state.skip, 0, 0
            for _ in range(skip):  # a restart replays the rows before it (the same noise, re-read)
                next(state.stream)
                state.t += 1
        if state.t + steps > self.n:
            raise InvalidInputError(f"rows [{state.t}, {state.t + steps}) are outside the decoder's {self.n} rows")
        values = [np.asarray(next(state.stream), dtype=np.float64) for _ in range(steps)]
        state.t += steps
        return np.stack(values), state


class BlockDecoder(_TermsFromDense):
    """A non-causal decoder (row t reads all of z): z read once, every row computed at once and
    kept in float32 until it is streamed out (``relative_precision`` of the values)."""

    relative_precision = 2.0**-23

    def __init__(self, mechanism, *, scratch_dir: str | os.PathLike | None = None) -> None:
        self.mechanism, self.n, self.dense = mechanism, int(mechanism.n), mechanism.dense_decoder
        self.inner_size = int(mechanism.inner_size)
        self.scratch_dir = scratch_dir

    def init(self, *, start: int = 0, offset: int = 0) -> StreamState:
        if not 0 <= start <= self.n:
            raise InvalidInputError(f"row {start} is outside the decoder's {self.n} rows")
        return StreamState(t=start, offset=offset)

    def next(self, state: StreamState, noise, *, steps: int = 1) -> tuple[np.ndarray, StreamState]:
        if state.values is None or state.source != id(noise):
            z = np.asarray(noise.block(state.offset, self.inner_size), dtype=np.float64)
            z2 = z.reshape(self.inner_size, -1)
            values = self._buffer(z2.shape[1], state)
            for lo in range(0, z2.shape[1], COLUMN_CHUNK):
                values[:, lo : lo + COLUMN_CHUNK] = np.asarray(self.mechanism.decode(z2[:, lo : lo + COLUMN_CHUNK]))
            state.values, state.source = values if z.ndim > 1 else values[:, 0], id(noise)
        if state.t + steps > self.n:
            raise InvalidInputError(f"rows [{state.t}, {state.t + steps}) are outside the decoder's {self.n} rows")
        out = np.asarray(state.values[state.t : state.t + steps], dtype=np.float64)
        state.t += steps
        if state.t == self.n:  # the last row is out: the block is freed (its scratch file deleted)
            state.values = None
            if state.carry is not None:
                state.carry.close()
                state.carry = None
        return out, state

    def _buffer(self, columns: int, state: StreamState) -> np.ndarray:
        """The (n × columns) float32 block: in memory, or in a private scratch file (mode 0600)."""
        if self.scratch_dir is None:
            return np.empty((self.n, columns), dtype=np.float32)
        handle = tempfile.NamedTemporaryFile(dir=str(self.scratch_dir), prefix="noise-", suffix=".f32")
        state.carry = handle
        return np.memmap(handle, dtype=np.float32, mode="w+", shape=(self.n, columns))


class StampedDecoder(_TermsFromDense):
    """Stamping as composition: stamp j runs the base decoder on z's j-th block of
    ``base.inner_size`` coordinates, plus the final value of every earlier stamp."""

    def __init__(self, mechanism, *, scratch_dir: str | os.PathLike | None = None) -> None:
        self.mechanism, self.n, self.dense = mechanism, int(mechanism.n), mechanism.dense_decoder
        self.base = decoder_of(mechanism.base, scratch_dir=scratch_dir)
        self.base_n, self.base_inner = int(mechanism.base.n), _draws(mechanism.base)

    def init(self, *, start: int = 0, offset: int = 0) -> StreamState:
        if start != 0:
            raise InvalidInputError("a stamped decoder starts at row 0")
        return StreamState(t=0, offset=offset, carry=None)

    def next(self, state: StreamState, noise, *, steps: int = 1) -> tuple[np.ndarray, StreamState]:
        out = []
        for _ in range(steps):
            stamp, row = divmod(state.t, self.base_n)
            if row == 0:
                state.stream = self.base.init(offset=state.offset + stamp * self.base_inner)
            value, state.stream = self.base.next(state.stream, noise)
            value = value[0]
            out.append(value if state.carry is None else value + state.carry)
            if row == self.base_n - 1:
                state.carry = value if state.carry is None else state.carry + value
            state.t += 1
        return np.stack(out), state


def _draws(mechanism) -> int:
    """How many noise coordinates one run of the mechanism's decoder reads."""
    decoder = decoder_of(mechanism)
    return int(getattr(decoder, "inner_size", 0) or math.prod(np.asarray(decoder.dense()).shape[1:]))


def decoder_of(mechanism, *, scratch_dir: str | os.PathLike | None = None):
    """The ``StreamingDecoder`` of a Gaussian mechanism (module docstring): the one dispatch
    (``scratch_dir``: where a block decoder keeps its float32 block, else in memory)."""
    from pure_dp_mf.gaussian.honaker import HonakerMechanism
    from pure_dp_mf.gaussian.stamping import StampedMechanism
    from pure_dp_mf.gaussian.toeplitz import BandedStrategy, ToeplitzStrategy

    if isinstance(mechanism, StampedMechanism):
        return StampedDecoder(mechanism, scratch_dir=scratch_dir)
    if isinstance(mechanism, HonakerMechanism) and mechanism.variant != "full":
        return CausalDecoder(mechanism, stream=mechanism.stream, dense=lambda: _probed(mechanism))
    if isinstance(mechanism, (ToeplitzStrategy, BandedStrategy)):
        return CausalDecoder(mechanism, stream=mechanism.stream, dense=mechanism.dense_decoder)
    return BlockDecoder(mechanism, scratch_dir=scratch_dir)


def _probed(mechanism) -> np.ndarray:
    """The dense decoder of a causal stream with its columns in draw order, read off the stream
    itself by unit vectors (the online trees draw their nodes in completion order)."""
    decoder = CausalDecoder(mechanism, stream=mechanism.stream, dense=lambda: np.zeros((0, 0)))
    draws = _count_draws(mechanism)
    columns = []
    from pure_dp_mf.mechanisms.streaming import ArraySource

    for j in range(draws):
        unit = np.zeros(draws)
        unit[j] = 1.0
        values, _ = decoder.next(decoder.init(), ArraySource(unit), steps=decoder.n)
        columns.append(values)
    return np.stack(columns, axis=1).reshape(decoder.n, draws)


def _count_draws(mechanism) -> int:
    counted = {"draws": 0}

    def draw():
        counted["draws"] += 1
        return 0.0

    for _ in mechanism.stream(draw):
        pass
    return counted["draws"]
