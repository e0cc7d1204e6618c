"""noise.py: the keyed counter-mode generator, Laplace samples, rounding."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
import scipy.stats

from pure_dp_mf.engines.generator import NoiseGenerator, laplace_from_words, round_to_integers
from pure_dp_mf.errors import InvalidInputError


def test_words_follow_the_documented_derivation():
    generator = NoiseGenerator.from_seed(11)
    header = generator.key + b"z\x00" + (5).to_bytes(16, "little") + (3).to_bytes(8, "little")
    expected = np.frombuffer(hashlib.shake_256(header).digest(24), dtype="<u8")
    assert np.array_equal(generator.words(index=5, size=3), expected)
    assert generator.key == hashlib.sha256(b"pure_dp_mf seeded generator v1\x00" + (11).to_bytes(1, "little")).digest()


def test_blocks_are_reproducible_and_distinct():
    generator = NoiseGenerator.from_seed(1)
    assert np.array_equal(generator.laplace(index=7, size=50), NoiseGenerator.from_seed(1).laplace(index=7, size=50))
    assert not np.array_equal(generator.laplace(index=7, size=50), generator.laplace(index=8, size=50))
    assert not np.array_equal(generator.laplace(index=7, size=50), NoiseGenerator.from_seed(2).laplace(index=7, size=50))


def test_secure_generator_is_keyed_by_the_system_and_never_prints_its_key():
    first, second = NoiseGenerator.secure(), NoiseGenerator.secure()
    assert not first.seeded and first.key != second.key and len(first.key) == 32
    assert first.key.hex() not in repr(first) and "seeded=False" in repr(first)
    assert NoiseGenerator.from_seed(0).seeded


def test_record_round_trip_and_bad_records():
    generator = NoiseGenerator.secure()
    assert NoiseGenerator.from_record(generator.to_record()) == generator
    with pytest.raises(InvalidInputError, match="kind"):
        NoiseGenerator.from_record({"kind": "mt19937", "key": "00" * 32, "seeded": False})
    with pytest.raises(InvalidInputError, match="key"):
        NoiseGenerator.from_record({"kind": "shake256-counter/1", "key": "zz", "seeded": False})
    with pytest.raises(InvalidInputError, match="32 bytes"):
        NoiseGenerator(key=b"short", seeded=True)
    with pytest.raises(InvalidInputError):
        NoiseGenerator.from_seed(-1)


def test_key_file_is_created_once_and_read_at_every_restart(tmp_path):
    path = tmp_path / "query.key"
    first = NoiseGenerator.from_key_file(path, query="q")
    assert not first.seeded and path.stat().st_mode & 0o777 == 0o600
    assert NoiseGenerator.from_key_file(path, query="q") == first  # a restart: the same key
    assert NoiseGenerator.from_key_file(tmp_path / "other.key", query="other") != first  # another query: another key
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.key", "query.key"]  # no temporary left
    path.write_text("{not json")
    with pytest.raises(InvalidInputError, match="cannot read"):
        NoiseGenerator.from_key_file(path, query="q")
    path.write_text(json.dumps(NoiseGenerator.from_seed(3).to_record()))
    with pytest.raises(InvalidInputError, match="seeded"):
        NoiseGenerator.from_key_file(path, query="q")
    with pytest.raises(InvalidInputError, match="does not exist"):
        NoiseGenerator.from_key_file(tmp_path / "missing" / "query.key", query="q")


def test_laplace_from_words_extremes():
    top, mantissa = np.uint64(1 << 63), np.uint64((1 << 53) - 1)
    words = np.array([0, mantissa, top | mantissa, np.uint64(1 << 52), top | np.uint64(1 << 52)], dtype=np.uint64)
    values = laplace_from_words(words)
    assert values[0] == 0.0
    assert values[1] == pytest.approx(53 * math.log(2), rel=1e-12)
    assert values[2] == -values[1]
    assert values[3] == pytest.approx(math.log(2), rel=1e-15) and values[4] == -values[3]


def test_laplace_distribution_ks():
    """Kolmogorov–Smirnov against Laplace(1) on 2·10⁵ samples, false-alarm rate 10⁻⁴; power: the
    same samples are rejected against a scale 1.3 (the test must be able to fail)."""
    samples = NoiseGenerator.from_seed(2026).laplace(index=0, size=200_000)
    assert scipy.stats.kstest(samples, scipy.stats.laplace(scale=1.0).cdf).pvalue > 1e-4
    assert scipy.stats.kstest(samples, scipy.stats.laplace(scale=1.3).cdf).pvalue < 1e-4
    assert scipy.stats.kstest(samples, scipy.stats.laplace(scale=1 / 1.3).cdf).pvalue < 1e-4


def test_round_to_integers():
    assert round_to_integers([0.4, -0.6, 2.5, 3.5, -7.0]).tolist() == [0, -1, 2, 4, -7]
    assert round_to_integers([1.0]).dtype == np.int64
    with pytest.raises(InvalidInputError, match="not finite"):
        round_to_integers([1.0, math.nan])
    with pytest.raises(InvalidInputError):
        round_to_integers([1e30])
