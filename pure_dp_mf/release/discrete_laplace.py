"""Exact discrete Laplace sampling on ℤ, in integer arithmetic only.

The distribution DLap(λ) with rate λ = s/t > 0 (s, t positive integers) is

    P(Y = y) = (1 − e^{−λ}) / (1 + e^{−λ}) · e^{−λ·|y|},   y ∈ ℤ,

with unbounded support. On the lattice 2^-g ℤ, w = 2^-g·Y with λ = ε·2^-g/Δ has
P(w) ∝ exp(−ε·|w|/Δ): the Laplace mechanism of sensitivity Δ on that lattice, exactly ε-DP for
lattice-valued queries (a neighbour shifts the query by a lattice vector of ℓ1 norm ≤ Δ, and
the density ratio of every output is at most e^ε; there is no float, no cut-off, no rounding).

The samplers follow Canonne, Kamath & Steinke, *The Discrete Gaussian for Differential
Privacy*, arXiv 2004.00010, Algorithms 1 and 2, with every random choice an exact uniform integer
``below(m)`` (rejection sampling on whole bits: no bias, no floats):

* ``bernoulli(numerator, denominator)``: P(1) = n/d exactly, as below(d) < n.
* ``bernoulli_exp_minus(gamma)``: P(1) = e^{−γ} for rational γ ≥ 0. For γ ∈ [0, 1] draw
  A_K ~ Bernoulli(γ/K) for K = 1, 2, … until the first 0 and return whether that K is odd:
  P(K = k is the first 0) = γ^{k−1}/(k−1)! − γ^k/k!, whose sum over odd k is Σ_j (−γ)^j/j! = e^{−γ}.
  For γ > 1, e^{−γ} = (e^{−1})^{⌊γ⌋}·e^{−(γ−⌊γ⌋)}: independent trials, all must succeed.
* ``discrete_laplace(s, t)``: U uniform on {0, …, t−1} kept with probability e^{−U/t}, and
  V ≥ 0 the number of successes of Bernoulli(e^{−1}) before the first failure (geometric,
  P(V = v) ∝ e^{−v}); then X = U + t·V has P(X = x) ∝ e^{−x/t} on ℕ (x ↦ (x mod t, ⌊x/t⌋) is a
  bijection and the two weights multiply). Y = ⌊X/s⌋ has P(Y = y) ∝ Σ_{x: ⌊x/s⌋ = y} e^{−x/t}
  ∝ e^{−y·s/t} on ℕ. A fair sign B, rejecting (B = 1, Y = 0) so that 0 is not counted twice,
  gives P(±y) ∝ e^{−λ|y|} on ℤ: exactly DLap(s/t).

Randomness: a ``UniformSource`` gives ``below(m)``. ``ShakeStream`` is the keyed stream of the
counter's noise: for a 32-byte key and a coordinate index, the SHAKE-256 output of
(domain, key, index) read as a bit string, so coordinate i's draws are a pure function of
(key, i): regenerated, never redrawn (computationally indistinguishable from true randomness
under the standard assumption that keyed SHAKE-256 is a PRF). ``SystemUniform`` uses the
operating system's generator (``secrets``) for tests of the samplers themselves.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import struct
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from pure_dp_mf.errors import InvalidInputError

DOMAIN = b"pure_dp_mf discrete laplace v2\x00"
_CHUNK = 512  # bytes of SHAKE output per counter-mode chunk


class UniformSource(Protocol):
    """Exact uniform integers: ``below(m)`` is uniform on {0, …, m − 1} for every integer m ≥ 1."""

    def below(self, m: int) -> int: ...


def _below_from_bits(m: int, bits) -> int:
    """Uniform on {0, …, m−1} by rejection: draw ⌈log₂ m⌉ bits until the number is < m."""
    if m < 1:
        raise InvalidInputError(f"a uniform draw needs m >= 1, got {m}")
    if m == 1:
        return 0
    width = (m - 1).bit_length()
    while True:
        value = bits(width)
        if value < m:
            return value


def _keyed_shake(domain: bytes, *, key: bytes, index: int, what: str):
    """SHAKE256 absorbing ``domain`` ‖ ``key`` ‖ ``index`` (16 bytes, little-endian): the PRF of
    one stream, after refusing a key under 16 bytes and a negative ``what`` index."""
    if not isinstance(key, bytes | bytearray) or len(key) < 16:
        raise InvalidInputError("a noise key must be at least 16 bytes")
    if index < 0:
        raise InvalidInputError(f"a {what} index must be >= 0, got {index}")
    return hashlib.shake_256(domain + bytes(key) + index.to_bytes(16, "little"))


class ShakeStream:
    """The bit stream of one noise block: chunk c (c = 0, 1, …) is the first 512 bytes of
    SHAKE-256(domain ‖ key ‖ index (16 bytes) ‖ c (8 bytes)), all little-endian, read in order.

    Guarantee: the sequence of ``below`` results is a deterministic function of (key, index) and
    the sequence of arguments, so a block can be recomputed exactly; distinct indices (and keys)
    read disjoint PRF outputs. Counter mode keeps the cost linear in the bits read."""

    def __init__(self, *, key: bytes, index: int) -> None:
        self._prefix = _keyed_shake(DOMAIN, key=key, index=index, what="coordinate")
        self._chunk = 0
        self._value, self._available = 0, 0  # unread bits, lowest first

    def _bits(self, width: int) -> int:
        while self._available < width:
            hasher = self._prefix.copy()
            hasher.update(self._chunk.to_bytes(8, "little"))
            self._value |= int.from_bytes(hasher.digest(_CHUNK), "little") << self._available
            self._available += 8 * _CHUNK
            self._chunk += 1
        value = self._value & ((1 << width) - 1)
        self._value >>= width
        self._available -= width
        return value

    def below(self, m: int) -> int:
        return _below_from_bits(m, self._bits)


class SystemUniform:
    """Uniform integers from the operating system's generator (``secrets.randbelow``)."""

    def below(self, m: int) -> int:
        if m < 1:
            raise InvalidInputError(f"a uniform draw needs m >= 1, got {m}")
        return secrets.randbelow(m)


def bernoulli(numerator: int, denominator: int, *, source: UniformSource) -> bool:
    """True with probability numerator/denominator exactly (0 ≤ numerator ≤ denominator)."""
    if denominator < 1 or not 0 <= numerator <= denominator:
        raise InvalidInputError(f"a Bernoulli probability must be in [0, 1], got {numerator}/{denominator}")
    return source.below(denominator) < numerator


def bernoulli_exp_minus(gamma: Fraction, *, source: UniformSource) -> bool:
    """True with probability e^{−γ} exactly, γ ≥ 0 rational (module docstring for the proof)."""
    gamma = Fraction(gamma)
    if gamma < 0:
        raise InvalidInputError(f"bernoulli_exp_minus needs gamma >= 0, got {gamma}")
    whole = gamma.numerator // gamma.denominator
    for _ in range(whole):
        if not _bernoulli_exp_minus_unit(Fraction(1), source):
            return False
    return _bernoulli_exp_minus_unit(gamma - whole, source)


def _bernoulli_exp_minus_unit(gamma: Fraction, source: UniformSource) -> bool:
    """e^{−γ} for γ ∈ [0, 1]: the first K with A_K = 0, A_K ~ Bernoulli(γ/K), is odd."""
    k = 1
    while bernoulli(gamma.numerator, gamma.denominator * k, source=source):
        k += 1
    return k % 2 == 1


def discrete_laplace(*, s: int, t: int, source: UniformSource) -> int:
    """One draw of DLap(s/t): P(Y = y) ∝ e^{−|y|·s/t} on ℤ, exactly (Canonne–Kamath–Steinke,
    Algorithm 2; the proof is in the module docstring)."""
    if s < 1 or t < 1:
        raise InvalidInputError(f"the discrete Laplace rate s/t needs integers s, t >= 1, got {s}/{t}")
    while True:
        u = source.below(t)
        if not bernoulli_exp_minus(Fraction(u, t), source=source):
            continue
        v = 0
        while _bernoulli_exp_minus_unit(Fraction(1), source):
            v += 1
        y = (u + t * v) // s
        negative = source.below(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_laplace_many(*, s: int, t: int, count: int, source: UniformSource) -> list[int]:
    """``count`` successive draws of DLap(s/t) from ``source``: the same algorithm and the same
    sequence of ``below`` calls as ``count`` calls of ``discrete_laplace`` (so the same values from
    the same stream, tested), inlined in integers without ``Fraction`` for speed."""
    if s < 1 or t < 1:
        raise InvalidInputError(f"the discrete Laplace rate s/t needs integers s, t >= 1, got {s}/{t}")
    below, gcd = source.below, math.gcd
    out: list[int] = []
    while len(out) < count:
        u = below(t)
        divisor = gcd(u, t)
        numerator, denominator = u // divisor, t // divisor  # Fraction(u, t) in lowest terms
        k = 1
        while below(denominator * k) < numerator:  # Bernoulli(γ/k), γ = u/t
            k += 1
        if k % 2 == 0:  # e^{-u/t} failed
            continue
        v = 0
        while True:  # V: successes of Bernoulli(e^{-1}) before the first failure
            k = 1
            while below(k) < 1:
                k += 1
            if k % 2 == 0:
                break
            v += 1
        y = (u + t * v) // s
        negative = below(2) == 1
        if negative and y == 0:
            continue
        out.append(-y if negative else y)
    return out


def pmf(y: int, *, s: int, t: int) -> float:
    """P(Y = y) of DLap(s/t) in float64 (for tests and plots, not for sampling)."""
    rate = s / t
    return (1 - math.exp(-rate)) / (1 + math.exp(-rate)) * math.exp(-rate * abs(y))


# ------------------------------------------------------------------------ the vectorised sampler

BLOCK_DOMAIN = b"pure_dp_mf discrete laplace block v1\x00"
_WORD_CHUNK = 1 << 14  # bytes of SHAKE output per counter-mode chunk of a WordStream
VECTOR_LIMIT = 1 << 62
"""``discrete_laplace_block`` runs vectorised in int64 when t < 2^62 (every modulus it draws below
is ≤ t); larger t take the scalar sampler, exact as well."""


class WordStream:
    """Random bytes and 64-bit words of one noise block: chunk c is SHAKE-256(domain ‖ key ‖ index
    (16 bytes) ‖ c (8 bytes)), chunks in order; ``words(m)`` reads the next 8·m bytes as
    little-endian uint64, ``octets(m)`` the next m bytes. A deterministic function of (key, index)
    and the sequence of requests: a request of ``size`` bytes that the buffer cannot serve appends
    one chunk of max(2^14, size − unread) bytes to the unread rest (so the chunk lengths, hence
    the bytes, depend on the request sizes, and a reader must make the same requests)."""

    def __init__(self, *, key: bytes, index: int) -> None:
        self._prefix = _keyed_shake(BLOCK_DOMAIN, key=key, index=index, what="block")
        self._chunk = 0
        self._buffer = b""
        self._position = 0

    def _advance(self, size: int) -> int:
        """Consume the next ``size`` bytes (refilling as the class docstring says) and return their
        offset in ``self._buffer``, which holds them until the next refill replaces it."""
        if self._position + size > len(self._buffer):
            rest = self._buffer[self._position :]
            parts = [rest] if rest else []
            available = len(rest)
            while available < size:
                hasher = self._prefix.copy()
                hasher.update(self._chunk.to_bytes(8, "little"))
                fresh = hasher.digest(max(_WORD_CHUNK, size - available))
                parts.append(fresh)
                available += len(fresh)
                self._chunk += 1
            self._buffer, self._position = parts[0] if len(parts) == 1 else b"".join(parts), 0
        start = self._position
        self._position += size
        return start

    def _take(self, size: int) -> bytes:
        start = self._advance(size)
        return self._buffer[start : start + size]

    def word_view(self, count: int) -> np.ndarray:
        """``words(count)`` as a read-only view of the buffer (no copy); count ≥ 1."""
        start = self._advance(8 * count)  # before reading self._buffer: a refill replaces it
        return np.frombuffer(self._buffer, dtype="<u8", count=count, offset=start)

    def octet_view(self, count: int) -> np.ndarray:
        """``octets(count)`` as a read-only view of the buffer (no copy); count ≥ 1."""
        start = self._advance(count)
        return np.frombuffer(self._buffer, dtype=np.uint8, count=count, offset=start)

    def words(self, count: int) -> np.ndarray:
        return np.frombuffer(self._take(8 * count), dtype="<u8").astype(np.uint64)

    def octets(self, count: int) -> np.ndarray:
        return np.frombuffer(self._take(count), dtype=np.uint8)


def uniform_below(m: int, size: int, stream: WordStream) -> np.ndarray:
    """``size`` independent integers uniform on {0, …, m − 1} (1 ≤ m < 2^62), exactly, as int64:
    for each pending entry one byte (w ≤ 8) or one word, its top w = (m − 1).bit_length() bits,
    kept when < m (probability > ½), otherwise the entry waits for the next round. Bytes or words
    are read in entry order, round by round."""
    if not 1 <= m < VECTOR_LIMIT:
        raise InvalidInputError(f"a vectorised uniform draw needs 1 <= m < 2^62, got {m}")
    return _below(m, size, stream).astype(np.int64, copy=False)


def _below(m: int, size: int, stream: WordStream) -> np.ndarray:
    """``uniform_below(m, size, stream)`` (1 ≤ m < 2^62, unchecked) with the same reads and values,
    as uint8 when w ≤ 8 and as int64 otherwise (the top w ≤ 62 bits of a word fit in int64, so
    the uint64 result is reinterpreted in place: an integer comparison stays exact, never a float
    one). The first round runs on whole arrays (the candidates are the result wherever they are
    < m; when m = 2^w every candidate is < m and nothing is rejected). The entries still pending
    after a round are a fresh draw below m of their own, in entry order (the rounds read in entry
    order): once there are at most ``_SMALL`` of them, ``_below_small`` finishes them."""
    width = (m - 1).bit_length()
    if width == 0 or size == 0:  # m = 1: always 0, nothing read
        return np.zeros(size, dtype=np.uint8)
    shift: np.unsignedinteger
    view: Any  # np.uint8 or np.int64
    if width <= 8:  # one byte per entry: its top w bits
        read, shift, view = stream.octet_view, np.uint8(8 - width), np.uint8
    else:  # one word per entry: its top w bits (w ≤ 62, so they fit in int64)
        read, shift, view = stream.word_view, np.uint64(64 - width), np.int64
    if m == 1 << width:  # every candidate is < m: one round
        return (read(size) >> shift).view(view)
    if size <= _SMALL:
        return np.array(_below_small(m, size, stream), dtype=view)
    out = (read(size) >> shift).view(view)
    pending = (out >= m).nonzero()[0]
    while pending.size > _SMALL:  # index arrays and take: faster here than boolean masks
        candidates = (read(pending.size) >> shift).view(view)
        kept = candidates < m
        accepted = kept.nonzero()[0]
        out[pending.take(accepted)] = candidates.take(accepted)
        pending = pending.take((~kept).nonzero()[0])
    if pending.size:
        out[pending] = _below_small(m, pending.size, stream)
    return out


_SMALL = 64
"""Draws for at most this many entries run on Python integers (``_below_small`` and the chains
built on it): the same reads and values, without the fixed cost of a dozen array operations."""


def _below_small(m: int, size: int, stream: WordStream) -> list[int]:
    """``uniform_below(m, size, stream)`` as Python integers: the same rounds (one request of a
    byte or a word per pending entry, entries in order), the same values."""
    width = (m - 1).bit_length()
    if width == 0 or size == 0:
        return [0] * size
    code, item, shift = ("B", 1, 8 - width) if width <= 8 else ("Q", 8, 64 - width)
    start = stream._advance(item * size)  # before reading stream._buffer: a refill replaces it
    out = [value >> shift for value in struct.unpack_from(f"<{size}{code}", stream._buffer, start)]
    pending = [entry for entry, value in enumerate(out) if value >= m]
    while pending:
        start = stream._advance(item * len(pending))
        rejected = []
        for entry, value in zip(pending, struct.unpack_from(f"<{len(pending)}{code}", stream._buffer, start), strict=True):
            if value >> shift < m:
                out[entry] = value >> shift
            else:
                rejected.append(entry)
        pending = rejected
    return out


def _below_is_zero(m: int, size: int, stream: WordStream) -> np.ndarray:
    """``_below(m, size, stream) == 0`` (m ≥ 2), the same reads: for m ≤ 256 decided on the bytes
    themselves, as the top w = (m − 1).bit_length() bits of a byte b are 0 exactly when b < 2^(8−w)
    and are ≥ m (rejected: the entry reads again next round) exactly when b ≥ m·2^(8−w)."""
    if m > 256:
        return _below(m, size, stream) == 0
    width = (m - 1).bit_length()
    low, high = 1 << (8 - width), m << (8 - width)
    octets = stream.octet_view(size)
    zero = octets < low
    if high == 256:  # m = 2^w: nothing is rejected
        return zero
    pending = (octets >= high).nonzero()[0]
    while pending.size > _SMALL:
        octets = stream.octet_view(pending.size)
        zero[pending.take((octets < low).nonzero()[0])] = True
        pending = pending.take((octets >= high).nonzero()[0])
    if pending.size:
        zero[pending] = [value == 0 for value in _below_small(m, pending.size, stream)]
    return zero


def _bernoulli_exp_minus_block(numerators: np.ndarray | None, t: int, size: int, stream: WordStream) -> np.ndarray:
    """B_i with P(B_i = 1) = e^{−u_i/t} for u_i ∈ [0, t] (``numerators`` None: every u_i = t, i.e.
    e^{−1}), by Canonne–Kamath–Steinke's Algorithm 1 as in ``_bernoulli_exp_minus_unit``: the first
    K with A_K = 0 is odd, A_K ~ Bernoulli(u/(t·K)) drawn as below(t·K) < u (one word), or as
    [below(K) = 0]·[below(t) < u] (two independent draws) once t·K reaches 2^62; for u = t,
    A_K = [below(K) = 0] (A_1 = 1 with nothing read, as below(1) reads nothing). Every comparison
    is between integers (int64 or uint8). The entries still active at some K are a fresh chain from
    that K: once there are at most ``_SMALL`` of them, ``_bernoulli_small`` finishes them."""
    if size <= _SMALL:
        listed = None if numerators is None else numerators.tolist()
        return np.array(_bernoulli_small(listed, t, 1, size, stream), dtype=bool)
    if numerators is None:  # K = 1: below(1) = 0 always, nothing read
        result, active = np.zeros(size, dtype=bool), np.arange(size)
    else:  # K = 1 on the whole array: a first 0 here is odd
        result = _below(t, size, stream) >= numerators
        active = (~result).nonzero()[0]
    k = 2
    while active.size > _SMALL:
        if numerators is None:
            success = _below_is_zero(k, active.size, stream)
        elif t * k < VECTOR_LIMIT:
            success = _below(t * k, active.size, stream) < numerators.take(active)
        else:
            first = _below_is_zero(k, active.size, stream)
            success = first & (_below(t, active.size, stream) < numerators.take(active))
        if k % 2 == 1:
            result[active.take((~success).nonzero()[0])] = True
        active = active.take(success.nonzero()[0])
        k += 1
    if active.size:
        listed = None if numerators is None else numerators.take(active).tolist()
        result[active] = _bernoulli_small(listed, t, k, active.size, stream)
    return result


def _bernoulli_small(numerators: list[int] | None, t: int, k: int, size: int, stream: WordStream) -> list[bool]:
    """``_bernoulli_exp_minus_block`` on Python integers for ``size`` entries, from K = ``k`` on
    (the entries that reached K = k): the same calls of ``_below_small``, in the same order."""
    result = [False] * size
    active = list(range(size))
    while active:
        count = len(active)
        if numerators is None:
            success = [value == 0 for value in _below_small(k, count, stream)]
        elif t * k < VECTOR_LIMIT:
            draws = _below_small(t * k, count, stream)
            success = [value < numerators[entry] for value, entry in zip(draws, active, strict=True)]
        else:  # both draws are made, in this order, whatever the first gives
            first, second = _below_small(k, count, stream), _below_small(t, count, stream)
            success = [a == 0 and b < numerators[entry] for a, b, entry in zip(first, second, active, strict=True)]
        if k % 2 == 1:
            for entry, ok in zip(active, success, strict=True):
                result[entry] = not ok
        active = [entry for entry, ok in zip(active, success, strict=True) if ok]
        k += 1
    return result


def _geometric_block(size: int, t: int, stream: WordStream) -> np.ndarray:
    """V_i ≥ 0, the number of successes of Bernoulli(e^{−1}) before the first failure, for
    ``size`` entries: one ``_bernoulli_exp_minus_block`` per success level over the entries still
    going (in entry order); at most ``_SMALL`` of them go on as Python integers."""
    v = np.zeros(size, dtype=np.int64)
    active = np.arange(size)
    while active.size > _SMALL:
        active = active.take(_bernoulli_exp_minus_block(None, t, active.size, stream).nonzero()[0])
        v[active] += 1
    if active.size:
        v[active] += _geometric_small(active.size, t, stream)
    return v


def _geometric_small(size: int, t: int, stream: WordStream) -> list[int]:
    """``_geometric_block`` on Python integers (the same calls, in the same order)."""
    v = [0] * size
    active = list(range(size))
    while active:
        success = _bernoulli_small(None, t, 1, len(active), stream)
        active = [entry for entry, ok in zip(active, success, strict=True) if ok]
        for entry in active:
            v[entry] += 1
    return v


def discrete_laplace_block(*, s: int, t: int, count: int, key: bytes, index: int) -> np.ndarray:
    """``count`` independent draws of DLap(s/t), exactly: an int64 array, or an object array of
    Python integers in the (astronomically unlikely) event that a value does not fit in int64.

    The algorithm of ``discrete_laplace`` (Canonne–Kamath–Steinke, Algorithm 2; proof in the
    module docstring) run on whole arrays of candidates, its randomness the ``WordStream`` of
    (key, index). Candidates are drawn in rounds; a round's survivors are appended in candidate
    order until ``count`` are found, so the result is a deterministic function of (s, t, count,
    key, index). Exactness: every random choice is an exact uniform integer (``uniform_below``),
    every value an integer (U < t < 2^62, V counted, X = U + t·V and ⌊X/s⌋ in int64 when
    t·(V + 1) ≤ 2^62, else in Python integers). For t ≥ 2^62 the scalar sampler runs instead.
    Each step runs on arrays, or on Python integers once at most ``_SMALL`` entries are left;
    both make the same requests of the stream in the same order, so the values do not depend on
    where one hands over to the other (``tests/test_sampler_fast.py`` replays the first,
    round-by-round implementation draw for draw)."""
    if s < 1 or t < 1:
        raise InvalidInputError(f"the discrete Laplace rate s/t needs integers s, t >= 1, got {s}/{t}")
    if t >= VECTOR_LIMIT:
        return _as_integer_array(discrete_laplace_many(s=s, t=t, count=count, source=ShakeStream(key=key, index=index)))
    stream = WordStream(key=key, index=index)
    parts: list[np.ndarray] = []
    found = 0
    while found < count:
        batch = max(64, 2 * (count - found))  # ≈ 1.6 candidates per draw: P(keep U) ≥ 1 − e^{−1}
        u = uniform_below(t, batch, stream)
        kept = u.take(_bernoulli_exp_minus_block(u, t, batch, stream).nonzero()[0])
        v = _geometric_block(kept.size, t, stream)  # V: successes of Bernoulli(e^{−1}) before the first failure
        if int(v.max(initial=0)) < VECTOR_LIMIT // t:
            y: np.ndarray = kept + t * v  # U + t·V < t·(V + 1) ≤ 2^62: exact in int64
            if s > 1:
                y //= s
        else:
            y = np.array([(int(a) + t * int(b)) // s for a, b in zip(kept, v, strict=True)], dtype=object)
        negative = _below(2, len(y), stream) == 1
        keep = (~(negative & (y == 0))).nonzero()[0]  # B = 1 with Y = 0 is rejected: 0 is not counted twice
        if y.dtype == object:
            signed = np.where(negative, -y, y).take(keep)
        else:  # |Y| < 2^62: −Y fits in int64
            signed = (y * (1 - 2 * negative.astype(np.int64))).take(keep)
        parts.append(signed)
        found += len(signed)
    drawn = np.concatenate(parts)[:count] if parts else np.zeros(0, dtype=np.int64)
    return _as_integer_array(drawn.tolist()) if drawn.dtype == object else drawn


def _as_integer_array(values) -> np.ndarray:
    """int64 when every value fits, else an object array of Python integers (exact either way)."""
    values = [int(v) for v in values]
    if all(-(1 << 63) <= v < (1 << 63) for v in values):
        return np.array(values, dtype=np.int64)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# ------------------------------------------------------------------ many keys in lockstep

_LOCKSTEP_KEYS = 1024  # keys sampled together, at most
_SEGMENT = 32  # a lockstep read copies each key's run of bytes when the runs average this many items
_LOCKSTEP_BYTES = 1 << 25  # and at most about this many bytes of buffers (2·max(2^14, 16·count) a key)
_LOCKSTEP_MIN = 8  # fewer keys are drawn one at a time (lockstep measured slower below 7 to 8 keys)


class _WordStreams:
    """The ``WordStream`` of every key of ``keys`` (same block index), read in lockstep: one call
    reads, for each key j, the next ``counts[j]`` items (bytes or 64-bit words) of key j's own
    stream, exactly the bytes that key's ``WordStream`` would return for a request of that size,
    including its refills (chunk c of SHAKE-256(domain ‖ key ‖ index ‖ c), of length
    max(2^14, request − leftover)). Buffers are the rows of one byte array, each row at least 8
    bytes longer than its chunk's end (so the word after any word read is in the row too).

    A chunk's bytes are computed as they are needed: SHAKE-256 is an extendable-output function,
    so its first m bytes are the first m bytes of its output of any length ≥ m. A refill computes
    min(length, max(4·needed, 2^11)) bytes of the new chunk; a read that needs more of the chunk
    computes the whole chunk (its first bytes again, the same bytes)."""

    def __init__(self, *, keys: Sequence[bytes], index: int) -> None:
        for key in keys:
            if not isinstance(key, bytes | bytearray) or len(key) < 16:
                raise InvalidInputError("a noise key must be at least 16 bytes")
        if index < 0:
            raise InvalidInputError(f"a block index must be >= 0, got {index}")
        suffix = index.to_bytes(16, "little")
        self._prefixes = [hashlib.shake_256(BLOCK_DOMAIN + bytes(key) + suffix) for key in keys]
        self._chunks = [0] * len(keys)
        self._hashers: list[Any] = [None] * len(keys)  # the current chunk's hasher
        self._start = [0] * len(keys)  # where the current chunk starts in the key's row
        self._position = np.zeros(len(keys), dtype=np.int64)  # next unread byte, in the key's row
        self._end = np.zeros(len(keys), dtype=np.int64)  # end of the current chunk, in the key's row
        self._ready = np.zeros(len(keys), dtype=np.int64)  # end of the bytes computed so far (≤ end)
        self._buffer: np.ndarray = np.zeros((len(keys), 0), dtype=np.uint8)
        self._shape(2 * _WORD_CHUNK + 8)

    def _shape(self, width: int) -> None:
        """Rows of ``width`` bytes (rounded up to a multiple of 8), keeping what the rows hold."""
        width = -(-width // 8) * 8
        buffer = np.zeros((len(self._prefixes), width), dtype=np.uint8)
        buffer[:, : self._buffer.shape[1]] = self._buffer
        self._buffer = buffer
        self._flat = buffer.reshape(-1)
        self._words = self._flat.view("<u8")  # word q is bytes 8q … 8q + 7 of the flat buffer
        self._row = np.arange(len(self._prefixes), dtype=np.int64) * width  # flat offset of each row

    def _complete(self, key: int) -> None:
        """Compute the rest of key ``key``'s current chunk."""
        start, ready, end = self._start[key], int(self._ready[key]), int(self._end[key])
        if ready < end:
            self._buffer[key, ready:end] = np.frombuffer(self._hashers[key].digest(end - start)[ready - start :], dtype=np.uint8)
            self._ready[key] = end

    def _refill(self, keys: np.ndarray, sizes: np.ndarray) -> None:
        """Make the next ``sizes[key]`` bytes of each key of ``keys`` ready: the rest of the current
        chunk if they lie in it, else ``WordStream._advance``'s refill (the unread rest moves to
        the row's start and one chunk of max(2^14, size − rest) bytes follows it: one chunk is
        always enough), of which the first bytes are computed."""
        for key, size in zip(keys.tolist(), sizes.take(keys).tolist(), strict=True):
            self._complete(key)
            position, end = int(self._position[key]), int(self._end[key])
            if position + size <= end:
                continue
            rest = end - position
            length = max(_WORD_CHUNK, size - rest)
            if rest + length + 8 > self._buffer.shape[1]:
                self._shape(2 * (rest + length + 8))
            row = self._buffer[key]
            if rest:
                row[:rest] = row[position:end]  # overlapping ranges: NumPy copies through a buffer
            hasher = self._prefixes[key].copy()
            hasher.update(self._chunks[key].to_bytes(8, "little"))
            ready = min(length, max(4 * (size - rest), 1 << 11))
            row[rest : rest + ready] = np.frombuffer(hasher.digest(ready), dtype=np.uint8)
            self._hashers[key], self._start[key] = hasher, rest
            self._chunks[key] += 1
            self._position[key], self._end[key], self._ready[key] = 0, rest + length, rest + ready

    def read(self, owners: np.ndarray, itemsize: int) -> np.ndarray:
        """One item per entry of ``owners`` (key indices, non-decreasing): entry i gets the next
        unread item of key owners[i]'s stream, entries of one key in order. uint8 items for
        ``itemsize`` 1, uint64 for 8 (the little-endian words of the stream). Entry i of key j is
        the item at flat offset first[j] + itemsize·i, first[j] = (row start + position of key j)
        − itemsize·(index of key j's first entry): one gather of bytes, one of words when every
        key's position is a multiple of 8, else two aligned words shifted together."""
        counts = np.bincount(owners, minlength=len(self._prefixes))
        sizes = counts * itemsize
        refill = (self._position + sizes > self._ready).nonzero()[0]
        if refill.size:
            self._refill(refill, sizes)
        offsets = self._row + self._position  # each key's next unread byte in the flat buffer
        self._position += sizes
        readers = counts.nonzero()[0]
        if readers.size and owners.size >= _SEGMENT * readers.size:  # long runs: copy each key's run of bytes
            flat, ends = self._flat, offsets + sizes
            runs = [flat[a:b] for a, b in zip(offsets.take(readers).tolist(), ends.take(readers).tolist(), strict=True)]
            data = np.concatenate(runs)
            return data if itemsize == 1 else data.view("<u8")
        first = offsets - itemsize * (np.cumsum(counts) - counts)
        entries = np.arange(owners.size, dtype=np.int64)
        if itemsize == 1:
            return self._flat.take(first.take(owners) + entries)
        if not (offsets & 7).any():  # every key's words are aligned: one gather
            return self._words.take((first >> 3).take(owners) + entries)
        place = first.take(owners) + 8 * entries
        shift = ((place & 7) << 3).astype(np.uint64)
        low, high = self._words.take(place >> 3), self._words.take((place >> 3) + 1)
        return (low >> shift) | ((high << np.uint64(1)) << (np.uint64(63) - shift))  # shift 0: high adds 0


def _below_keys(m: int, owners: np.ndarray, streams: _WordStreams) -> np.ndarray:
    """``_below(m, …)`` of every key at once (1 ≤ m < 2^62): entry i is key owners[i]'s draw, each
    key's entries reading its own stream exactly as ``uniform_below`` does (round by round, in
    entry order; the rounds are the same as a key's own, since the entries still pending after a
    round are, key by key, that key's pending entries in order). uint8 when w ≤ 8, else int64 (the
    top w ≤ 62 bits of a word, reinterpreted in place: integer comparisons only)."""
    width = (m - 1).bit_length()
    if width == 0 or owners.size == 0:  # m = 1: always 0, nothing read
        return np.zeros(owners.size, dtype=np.uint8)
    shift: np.unsignedinteger
    view: Any  # np.uint8 or np.int64
    if width <= 8:
        itemsize, shift, view = 1, np.uint8(8 - width), np.uint8
    else:
        itemsize, shift, view = 8, np.uint64(64 - width), np.int64
    out = (streams.read(owners, itemsize) >> shift).view(view)
    if m == 1 << width:  # every candidate is < m
        return out
    pending = (out >= m).nonzero()[0]
    while pending.size:  # index arrays and take: faster here than boolean masks
        candidates = (streams.read(owners.take(pending), itemsize) >> shift).view(view)
        kept = candidates < m
        accepted = kept.nonzero()[0]
        out[pending.take(accepted)] = candidates.take(accepted)
        pending = pending.take((~kept).nonzero()[0])
    return out


def _uniform_below_keys(m: int, owners: np.ndarray, streams: _WordStreams) -> np.ndarray:
    """``uniform_below(m, …)`` of every key at once, as int64 (``_below_keys``)."""
    return _below_keys(m, owners, streams).astype(np.int64, copy=False)


def _below_is_zero_keys(m: int, owners: np.ndarray, streams: _WordStreams) -> np.ndarray:
    """``_below_keys(m, owners, streams) == 0`` (m ≥ 2), the same reads; for m ≤ 256 decided on the
    bytes themselves, as ``_below_is_zero`` does."""
    if m > 256:
        return _below_keys(m, owners, streams) == 0
    width = (m - 1).bit_length()
    low, high = 1 << (8 - width), m << (8 - width)
    octets = streams.read(owners, 1)
    zero = octets < low
    if high == 256:  # m = 2^w: nothing is rejected
        return zero
    pending = (octets >= high).nonzero()[0]
    while pending.size:
        octets = streams.read(owners.take(pending), 1)
        zero[pending.take((octets < low).nonzero()[0])] = True
        pending = pending.take((octets >= high).nonzero()[0])
    return zero


def _bernoulli_exp_minus_keys(numerators: np.ndarray | None, t: int, owners: np.ndarray, streams: _WordStreams) -> np.ndarray:
    """``_bernoulli_exp_minus_block`` of every key at once (the same calls, in the same order):
    K = 1 reads nothing when ``numerators`` is None (below(1)) and is below(t) < u otherwise."""
    if numerators is None:
        result, active = np.zeros(owners.size, dtype=bool), np.arange(owners.size)
    else:  # K = 1 on the whole array: a first 0 here is odd
        result = _below_keys(t, owners, streams) >= numerators
        active = (~result).nonzero()[0]
    k = 2
    while active.size:
        active_owners = owners.take(active)
        if numerators is None:
            success = _below_is_zero_keys(k, active_owners, streams)
        elif t * k < VECTOR_LIMIT:
            success = _below_keys(t * k, active_owners, streams) < numerators.take(active)
        else:
            first = _below_is_zero_keys(k, active_owners, streams)
            success = first & (_below_keys(t, active_owners, streams) < numerators.take(active))
        if k % 2 == 1:
            result[active.take((~success).nonzero()[0])] = True
        active = active.take(success.nonzero()[0])
        k += 1
    return result


def discrete_laplace_blocks(*, s: int, t: int, count: int, keys: Sequence[bytes], index: int) -> list[np.ndarray]:
    """``[discrete_laplace_block(s=s, t=t, count=count, key=key, index=index) for key in keys]``,
    the same values (tested), computed for all keys in one pass of array operations.

    Why the values are the same: ``discrete_laplace_block`` is a fixed sequence of calls
    (uniform draws below m, for m that depends only on s, t and the call's place in the sequence)
    whose sizes depend on that key's earlier results. Here every call runs for all keys at once on
    the concatenation of their entries, each key reading its own ``WordStream`` (``_WordStreams``)
    in its own entry order; a key with no entries in a call reads nothing, as the single-key
    sampler makes no read for an empty call. So each key sees exactly its own sequence of reads.
    Keys whose values leave int64 (V with t·(V + 1) > 2^62), every key when t ≥ 2^62, and fewer
    than 8 keys (where lockstep is slower) are drawn by the single-key sampler."""
    if s < 1 or t < 1:
        raise InvalidInputError(f"the discrete Laplace rate s/t needs integers s, t >= 1, got {s}/{t}")
    keys = list(keys)
    if t >= VECTOR_LIMIT or len(keys) < _LOCKSTEP_MIN or count < 1:
        return [discrete_laplace_block(s=s, t=t, count=count, key=key, index=index) for key in keys]
    out: list[np.ndarray] = []
    group = max(1, min(_LOCKSTEP_KEYS, _LOCKSTEP_BYTES // (2 * max(_WORD_CHUNK, 16 * count))))
    group = -(-len(keys) // -(-len(keys) // group))  # groups of equal size (± 1) bound the buffers' memory
    for first in range(0, len(keys), group):
        out.extend(_lockstep_blocks(s=s, t=t, count=count, keys=keys[first : first + group], index=index))
    return out


def _lockstep_blocks(*, s: int, t: int, count: int, keys: list[bytes], index: int) -> list[np.ndarray]:
    """``discrete_laplace_blocks`` for one group of keys."""
    streams = _WordStreams(keys=keys, index=index)
    found = np.zeros(len(keys), dtype=np.int64)
    owner_parts: list[np.ndarray] = []
    value_parts: list[np.ndarray] = []
    overflow = np.zeros(len(keys), dtype=bool)
    while np.any(found < count):
        missing = np.maximum(count - found, 0)
        batch = np.where(missing > 0, np.maximum(64, 2 * missing), 0)
        owners = np.repeat(np.arange(len(keys)), batch)
        u = _uniform_below_keys(t, owners, streams)
        accepted = _bernoulli_exp_minus_keys(u, t, owners, streams)
        accepted_at = accepted.nonzero()[0]
        kept, owners = u.take(accepted_at), owners.take(accepted_at)
        v = np.zeros(kept.size, dtype=np.int64)
        active = np.arange(kept.size)
        while active.size:
            success = _bernoulli_exp_minus_keys(None, t, owners.take(active), streams)
            active = active.take(success.nonzero()[0])
            v[active] += 1
        large = v >= VECTOR_LIMIT // t  # U + t·V would not be proven to fit in int64
        if large.any():
            overflow[owners.take(large.nonzero()[0])] = True
            v[large] = 0
        y = kept + t * v
        if s > 1:
            y //= s
        negative = _below_keys(2, owners, streams) == 1
        keep = (~(negative & (y == 0))).nonzero()[0]  # B = 1 with Y = 0 is rejected
        owners = owners.take(keep)
        owner_parts.append(owners)
        value_parts.append((y * (1 - 2 * negative.astype(np.int64))).take(keep))  # |Y| < 2^62: −Y fits
        found += np.bincount(owners, minlength=len(keys))
    values = np.concatenate(value_parts)
    if len(owner_parts) > 1:  # later batches' values go after each key's earlier ones
        values = values[np.argsort(np.concatenate(owner_parts), kind="stable")]
    starts = np.cumsum(found) - found
    out = [values[start : start + count] for start in starts]
    for key in np.flatnonzero(overflow):
        out[key] = discrete_laplace_block(s=s, t=t, count=count, key=keys[key], index=index)
    return out
