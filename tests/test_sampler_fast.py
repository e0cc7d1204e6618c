"""The vectorised exact sampler against its straightforward form: the same values from the same keyed
stream, draw for draw.

``_Reference*`` below is the sampler as first written (one array operation per rejection round,
boolean masks, every draw through ``uniform_below``), kept here verbatim as the specification of the
byte stream: ``discrete_laplace_block``, ``uniform_below``, ``_bernoulli_exp_minus_block`` and the
lockstep ``discrete_laplace_blocks`` must return exactly what it returns, over many keys, rates
(near 0, near and above 1, huge denominators, t·K crossing 2^62, values leaving int64) and sizes,
and must leave the stream at the same place (the next bytes read agree)."""

from __future__ import annotations

import hashlib
from fractions import Fraction

import numpy as np
import pytest

from pure_dp_mf.release import discrete_laplace as dl
from pure_dp_mf.release.lattice import noise_rate, sampler_rate

LIMIT = 1 << 62


class _ReferenceStream:
    """``WordStream`` as first written: every read copies its bytes out of the buffer."""

    def __init__(self, *, key: bytes, index: int) -> None:
        self._prefix = hashlib.shake_256(dl.BLOCK_DOMAIN + bytes(key) + index.to_bytes(16, "little"))
        self._chunk = 0
        self._buffer = b""
        self._position = 0

    def _take(self, size: int) -> bytes:
        if self._position + size > len(self._buffer):
            rest = self._buffer[self._position :]
            parts = [rest]
            available = len(rest)
            while available < size:
                hasher = self._prefix.copy()
                hasher.update(self._chunk.to_bytes(8, "little"))
                fresh = hasher.digest(max(1 << 14, size - available))
                parts.append(fresh)
                available += len(fresh)
                self._chunk += 1
            self._buffer, self._position = b"".join(parts), 0
        out = self._buffer[self._position : self._position + size]
        self._position += size
        return out

    def words(self, count: int) -> np.ndarray:
        return np.frombuffer(self._take(8 * count), dtype="<u8").astype(np.uint64)

    def octets(self, count: int) -> np.ndarray:
        return np.frombuffer(self._take(count), dtype=np.uint8)


def _reference_uniform_below(m: int, size: int, stream) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    width = (m - 1).bit_length()
    if width == 0:
        return out
    pending = np.arange(size)
    while pending.size:
        if width <= 8:
            candidates = (stream.octets(pending.size) >> np.uint8(8 - width)).astype(np.int64)
        else:
            candidates = (stream.words(pending.size) >> np.uint64(64 - width)).astype(np.int64)
        accepted = candidates < m
        out[pending[accepted]] = candidates[accepted]
        pending = pending[~accepted]
    return out


def _reference_bernoulli(numerators: np.ndarray | None, t: int, size: int, stream) -> np.ndarray:
    result = np.zeros(size, dtype=bool)
    active = np.arange(size)
    k = 1
    while active.size:
        if numerators is None:
            success = _reference_uniform_below(k, active.size, stream) == 0
        elif t * k < LIMIT:
            success = _reference_uniform_below(t * k, active.size, stream) < numerators[active]
        else:
            first = _reference_uniform_below(k, active.size, stream) == 0
            success = first & (_reference_uniform_below(t, active.size, stream) < numerators[active])
        result[active[~success]] = k % 2 == 1
        active = active[success]
        k += 1
    return result


def _reference_block(*, s: int, t: int, count: int, key: bytes, index: int) -> np.ndarray:
    if t >= LIMIT:
        return dl._as_integer_array(dl.discrete_laplace_many(s=s, t=t, count=count, source=dl.ShakeStream(key=key, index=index)))
    stream = _ReferenceStream(key=key, index=index)
    parts: list[np.ndarray] = []
    found = 0
    while found < count:
        batch = max(64, 2 * (count - found))
        u = _reference_uniform_below(t, batch, stream)
        kept = u[_reference_bernoulli(u, t, batch, stream)]
        v = np.zeros(kept.size, dtype=np.int64)
        active = np.arange(kept.size)
        while active.size:
            success = _reference_bernoulli(None, t, active.size, stream)
            v[active[success]] += 1
            active = active[success]
        if int(v.max(initial=0)) < LIMIT // t:
            y: np.ndarray = (kept + t * v) // s
        else:
            y = np.array([(int(a) + t * int(b)) // s for a, b in zip(kept, v, strict=True)], dtype=object)
        negative = _reference_uniform_below(2, len(y), stream) == 1
        keep = ~(negative & (y == 0))
        signed = np.where(negative, -y, y)[keep]
        parts.append(signed)
        found += len(signed)
    drawn = np.concatenate(parts)[:count] if parts else np.zeros(0, dtype=np.int64)
    return dl._as_integer_array(drawn.tolist()) if drawn.dtype == object else drawn


def _key(seed: int) -> bytes:
    return hashlib.sha256(seed.to_bytes(8, "little")).digest()


def _same(fast: np.ndarray, reference: np.ndarray) -> bool:
    return fast.dtype == reference.dtype and fast.shape == reference.shape and fast.tolist() == reference.tolist()


# The counter's own rates: level 1 of a k = 256 base's lattice at g = 32, and the 2^-56 grid of a
# coarse level with a huge denominator (sampler_rate).
LATTICE = noise_rate(epsilon=Fraction(1), sensitivity=Fraction(4123456789, 1 << 32) * 37, grid_bits=32)
COARSE = sampler_rate(Fraction(3 << 30, (1 << 62) + 12345))
RATES = [
    (1, 1),  # λ = 1
    (1, 2),
    (1, 3),
    (2, 3),
    (10, 22),
    (7, 255),
    (1, 256),
    (5, 257),
    (999, 1000),  # λ near 1 from below
    (1001, 1000),  # just above 1
    (2**40, 3),  # λ huge: almost every draw is 0
    (1, 2**20 + 1),  # acceptance just above ½
    (1, 2**35),
    (LATTICE.numerator, LATTICE.denominator),
    (COARSE.numerator, COARSE.denominator),
    (1, (1 << 61) + 12345),  # λ near 0, t·2 crosses 2^62: the two-draw Bernoulli
    (3, (1 << 62) // 3 + 1),  # t·3 crosses 2^62
    (1, LIMIT - 1),  # V ≥ 1 leaves the proven int64 range: the Python-integer path
    (12345, LIMIT - 3),
    (1, LIMIT + 5),  # t ≥ 2^62: the scalar sampler
]


@pytest.mark.parametrize(("s", "t"), RATES)
def test_blocks_equal_the_reference_over_keys_and_sizes(s, t):
    for seed, count in enumerate((0, 1, 2, 31, 64, 65, 200, 1000, 3000)):
        for index in (0, 1, (2 << 64) + 7):
            key = _key(seed)
            fast = dl.discrete_laplace_block(s=s, t=t, count=count, key=key, index=index)
            assert _same(fast, _reference_block(s=s, t=t, count=count, key=key, index=index)), (s, t, count, index)


@pytest.mark.parametrize(("s", "t"), [(1, 3), (LATTICE.numerator, LATTICE.denominator), (1, (1 << 61) + 12345), (1, LIMIT - 1)])
def test_large_blocks_equal_the_reference(s, t):
    for seed in range(2):
        key = _key(100 + seed)
        fast = dl.discrete_laplace_block(s=s, t=t, count=1 << 14, key=key, index=seed)
        assert _same(fast, _reference_block(s=s, t=t, count=1 << 14, key=key, index=seed))


def test_many_seeds_at_the_counters_rate():
    s, t = LATTICE.numerator, LATTICE.denominator
    for seed in range(40):
        count = [1, 7, 100, 700][seed % 4]
        fast = dl.discrete_laplace_block(s=s, t=t, count=count, key=_key(seed), index=seed)
        assert _same(fast, _reference_block(s=s, t=t, count=count, key=_key(seed), index=seed))


MODULI = [1, 2, 3, 5, 127, 128, 129, 255, 256, 257, 1000, 2**32 + 1, 2**33 - 1, (1 << 61) + 1, LIMIT - 1]


@pytest.mark.parametrize("m", MODULI)
def test_uniform_below_equals_the_reference_and_leaves_the_stream_in_place(m):
    for seed, sizes in enumerate([(0, 1, 5), (64, 65, 63), (1000, 3, 5000), (20_000, 1, 70)]):
        fast, reference = dl.WordStream(key=_key(seed), index=seed), _ReferenceStream(key=_key(seed), index=seed)
        for size in sizes:
            got = dl.uniform_below(m, size, fast)
            assert got.dtype == np.int64 and got.tolist() == _reference_uniform_below(m, size, reference).tolist()
        assert fast.octets(100).tolist() == reference.octets(100).tolist()  # the same bytes read so far


@pytest.mark.parametrize("t", [1, 3, 200, 256, 2**20 + 1, 2**35, (1 << 61) + 12345, (1 << 62) // 3 + 1, LIMIT - 1])
def test_bernoulli_blocks_equal_the_reference(t):
    rng = np.random.default_rng(t % 1000)
    for seed, size in enumerate((1, 10, 64, 65, 500, 5000)):
        fast, reference = dl.WordStream(key=_key(seed), index=3), _ReferenceStream(key=_key(seed), index=3)
        numerators = rng.integers(0, t, size, endpoint=True) if t > 1 else rng.integers(0, 2, size)
        numerators[: size // 10] = t  # u = t: e^{-1}, as the V loop draws
        assert (
            dl._bernoulli_exp_minus_block(numerators, t, size, fast).tolist()
            == _reference_bernoulli(numerators, t, size, reference).tolist()
        )
        assert (
            dl._bernoulli_exp_minus_block(None, t, size, fast).tolist() == _reference_bernoulli(None, t, size, reference).tolist()
        )
        assert fast.words(3).tolist() == reference.words(3).tolist()


def test_stream_reads_and_views_are_the_reference_bytes():
    fast, reference = dl.WordStream(key=_key(1), index=9), _ReferenceStream(key=_key(1), index=9)
    for size in (3, 1, 20_000, 5, 40_000, 2048, 1, 1 << 16, 7):
        assert fast.octets(size).tobytes() == reference.octets(size).tobytes()
        assert fast.words(size).tolist() == reference.words(size).tolist()
        assert fast.octet_view(size).tobytes() == reference.octets(size).tobytes()
        assert fast.word_view(size).tolist() == reference.words(size).tolist()


@pytest.mark.parametrize(("s", "t"), [(1, 3), (LATTICE.numerator, LATTICE.denominator), (1, LIMIT - 1)])
def test_lockstep_blocks_equal_the_reference(s, t):
    keys = [_key(200 + i) for i in range(9)]
    for count in (1, 65, 1024):
        together = dl.discrete_laplace_blocks(s=s, t=t, count=count, keys=keys, index=5)
        for key, block in zip(keys, together, strict=True):
            assert _same(block, _reference_block(s=s, t=t, count=count, key=key, index=5))


KEY_RATES = [
    (1, 1),
    (1, 3),
    (5, 257),
    (999, 1000),
    (2**40, 3),  # almost every draw is 0: many keys rejected (B = 1, Y = 0) and drawn again
    (1, 2**20 + 1),
    (LATTICE.numerator, LATTICE.denominator),
    (COARSE.numerator, COARSE.denominator),
    (1, (1 << 61) + 12345),  # the two-draw Bernoulli
    (1, LIMIT - 1),  # values leaving the proven int64 range: those keys drawn alone
]


@pytest.mark.parametrize(("s", "t"), KEY_RATES)
@pytest.mark.parametrize("segment", [0, 32, 10**9])
def test_many_keys_equal_the_reference(monkeypatch, s, t, segment):
    """Every key of a lockstep call gets exactly the reference's draws, whether the reads copy each
    key's run of bytes (``_SEGMENT`` 0), gather entry by entry (10^9, aligned and unaligned words)
    or choose by run length; groups of 5 keys (the last one shorter) and pages from 1 to past one
    chunk of words."""
    monkeypatch.setattr(dl, "_SEGMENT", segment)
    monkeypatch.setattr(dl, "_LOCKSTEP_MIN", 1)
    monkeypatch.setattr(dl, "_LOCKSTEP_KEYS", 5)
    keys = [_key(300 + i) for i in range(12)]
    for count, index in [(1, 0), (3, 7), (64, 1), (100, (1 << 64) + 3), (1100, 2)]:
        together = dl.discrete_laplace_blocks(s=s, t=t, count=count, keys=keys, index=index)
        assert len(together) == len(keys)
        for key, block in zip(keys, together, strict=True):
            assert _same(block, _reference_block(s=s, t=t, count=count, key=key, index=index)), (s, t, count, index)


def test_many_keys_large_pages_and_memory_bound(monkeypatch):
    """Pages of several chunks (requests longer than 2^14 bytes: longer chunks, wider rows) and a
    byte budget that splits the keys into groups of 2."""
    monkeypatch.setattr(dl, "_LOCKSTEP_MIN", 1)
    monkeypatch.setattr(dl, "_LOCKSTEP_BYTES", 2 * 2 * 16 * 5000)
    keys = [_key(400 + i) for i in range(5)]
    for s, t in [(1, 3), (LATTICE.numerator, LATTICE.denominator)]:
        together = dl.discrete_laplace_blocks(s=s, t=t, count=5000, keys=keys, index=4)
        for key, block in zip(keys, together, strict=True):
            assert _same(block, _reference_block(s=s, t=t, count=5000, key=key, index=4))


def test_lockstep_streams_read_the_reference_bytes():
    """``_WordStreams.read`` against one ``_ReferenceStream`` per key: requests of bytes and words
    in every mix (empty for some keys, unaligned words, requests past a chunk and into a partly
    computed one), then the next bytes of every key agree."""
    keys = [_key(500 + i) for i in range(4)]
    streams = dl._WordStreams(keys=keys, index=11)
    references = [_ReferenceStream(key=key, index=11) for key in keys]
    rng = np.random.default_rng(5)
    for round_ in range(60):
        itemsize = 1 if round_ % 3 else 8
        counts = rng.integers(0, [3, 40, 700, 5000][round_ % 4], len(keys))
        counts[round_ % len(keys)] = 0
        got = streams.read(np.repeat(np.arange(len(keys)), counts), itemsize)
        expected = [
            reference.octets(int(c)) if itemsize == 1 else reference.words(int(c))
            for reference, c in zip(references, counts, strict=True)
        ]
        assert got.tolist() == np.concatenate(expected).tolist()
    got = streams.read(np.repeat(np.arange(len(keys)), 9), 1)
    assert got.tolist() == np.concatenate([reference.octets(9) for reference in references]).tolist()


@pytest.mark.parametrize("small", [0, 5, 10**9])
def test_array_and_python_integer_paths_agree(monkeypatch, small):
    """Every entry count at which the rounds move from arrays to Python integers gives the same draws
    (``_SMALL`` 0: arrays only; 10^9: Python integers only)."""
    monkeypatch.setattr(dl, "_SMALL", small)
    for s, t in [(1, 3), (5, 257), (LATTICE.numerator, LATTICE.denominator), (1, (1 << 61) + 12345), (1, LIMIT - 1)]:
        for count in (1, 40, 300):
            key = _key(count)
            fast = dl.discrete_laplace_block(s=s, t=t, count=count, key=key, index=2)
            assert _same(fast, _reference_block(s=s, t=t, count=count, key=key, index=2)), (small, s, t, count)


# ------------------------------------------------------------------ error bars: the per-level table


def _reference_moments(model, start: int, stop: int):
    """``ErrorBarModel.moments`` as first written (the levels' table through ``np.unique``)."""
    count = stop - start
    positions, levels, rows, weights = model.decoder.term_arrays(start, stop)
    unique, inverse = np.unique(levels, return_inverse=True)
    table = np.array([model._level(int(level)) for level in unique]).reshape(-1, 2)
    b, variance = table[inverse, 0], table[inverse, 1]
    w = np.abs(np.asarray(weights, dtype=np.float64))
    l2 = model.row_l2[rows] * w
    var = np.bincount(positions, weights=variance * l2 * l2, minlength=count)
    nu = 2 * np.bincount(positions, weights=(b * l2) ** 2, minlength=count)
    c = np.zeros(count)
    np.maximum.at(c, positions, b * w * model.row_max[rows])
    a = np.bincount(positions, weights=model.unit * w * model.row_l1[rows], minlength=count)
    return var, nu, c, a


@pytest.mark.filterwarnings("ignore:seeded noise")
@pytest.mark.parametrize("kind", ["lifted", "binary", "smooth-binary"])
def test_error_bar_moments_equal_the_reference(kind):
    from pure_dp_mf.mechanisms import mechanism as mechanisms
    from pure_dp_mf.release.error_bars import ErrorBarModel
    from pure_dp_mf.resources import BASE_FOLDER

    horizon = 5000
    if kind == "lifted":
        mechanism = mechanisms.lifted(base=BASE_FOLDER / "k008_maxse.npz", horizon=horizon)
    else:
        mechanism = mechanisms.tree(mechanism=kind, horizon=horizon)
    rates = mechanism.rates(epsilon=0.7, sensitivity=mechanism.sensitivity)
    model = ErrorBarModel(decoder=mechanism.decoder, atoms=mechanism.atoms, rates=rates)
    for start, stop in [(0, 1), (0, horizon), (17, 18), (1234, 4321), (horizon - 3, horizon), (5, 5)]:
        got = model.moments(start, stop)
        for fast, reference in zip((got.var, got.nu, got.c, got.a), _reference_moments(model, start, stop), strict=True):
            assert fast.tobytes() == reference.tobytes()
