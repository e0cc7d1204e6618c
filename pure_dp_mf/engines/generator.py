"""Secure noise: a keyed counter-mode generator, Laplace samples, rounding to integers.

The streaming counter (``stream.py``, Arkhipov & Kalinin section 3) needs the Laplace vector z of the
lifted factorization block by block, forwards for ``Noise`` and backwards for
``NoiseReversed``, and again after a restart. A counter-mode generator gives exactly that:
the noise of block ``index`` is a fixed function of a secret 256-bit key and ``index``, so

* any block can be produced in any order, as often as needed, always the same: a resumed or
  reversed stream cannot draw *fresh* noise for a position that already has noise;
* the whole generator state is the key (32 bytes), stored in the counter's state file.

Generator: SHAKE-256 (FIPS 202, Python's ``hashlib``) keyed by prefixing the secret key, the
construction underlying KMAC: block ``index`` of length m is the first 8m output bytes of
SHAKE-256(key ‖ "z" ‖ 0x00 ‖ index (16 bytes, little-endian) ‖ m (8 bytes, little-endian)). Under the standard assumption that keyed SHAKE-256 is a
pseudorandom function, these bytes are indistinguishable from independent uniform bytes to
anyone without the key. ``NoiseGenerator.secure()`` draws the key from the operating system
(``secrets.token_bytes``). ``NoiseGenerator.from_seed(seed)`` derives the key from a public
integer: reproducible, for tests and research only, flagged as such everywhere
(``seeded`` attribute, state files, CLI warnings) because anyone knowing the seed can subtract
the noise.

Laplace: each 64-bit word gives a sign bit and a 53-bit integer v, and
z = ±(−log1p(−v·2⁻⁵³)), an Exp(1) variable with a random sign, i.e. Laplace of scale 1
(density e^{−|z|}/2) up to the 2⁻⁵³ grid of the uniform; |z| ≤ 53·ln 2 ≈ 36.7 (the tail
beyond has probability 2⁻⁵³, which this sampler does not produce).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from pure_dp_mf.engines import registry as registries
from pure_dp_mf.engines.ledger import Publication, key_exported, open_ledger
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_size

KEY_BYTES = 32
GENERATOR_KIND = "shake256-counter/1"
_SEED_DOMAIN = b"pure_dp_mf seeded generator v1\x00"
_MANTISSA = np.uint64((1 << 53) - 1)


@dataclass(frozen=True)
class NoiseGenerator:
    """A keyed counter-mode generator: ``words(index=, size=)`` is a fixed function of the key.

    Guarantees: with a key from ``secure()``, the output is computationally indistinguishable
    from uniform bits (keyed SHAKE-256 as a PRF); the same (index, size) always gives the same
    words, so noise can be regenerated but never redrawn. With ``from_seed(seed)`` there is no
    secrecy at all: reproducibility only.
    """

    key: bytes
    seeded: bool
    publication: str | None = field(default=None, compare=False)  # the ledger publication a key file serves

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) != KEY_BYTES:
            raise InvalidInputError(f"a generator key must be {KEY_BYTES} bytes")

    def __repr__(self) -> str:  # never print the key
        return f"NoiseGenerator(seeded={self.seeded})"

    @classmethod
    def secure(cls) -> NoiseGenerator:
        """A generator keyed from the operating system's CSPRNG (``secrets``): for production."""
        return cls(key=secrets.token_bytes(KEY_BYTES), seeded=False)

    @classmethod
    def from_key_file(
        cls,
        path: str | os.PathLike,
        *,
        query: str | os.PathLike,
        registry: str | os.PathLike | None = None,
        corrects: str | None = None,
    ) -> NoiseGenerator:
        """A secure generator whose key lives in the file ``path``: created when missing (a key
        from ``secrets``, the ``to_record`` JSON, mode 0600, written to a temporary file and
        linked into place, so two processes racing to create it end with one key), read when
        present.

        For an engine that restarts a release, such as a Spark streaming query restarted from its
        checkpoint: every restart gets the same key, so a replayed step regenerates its noise and
        later steps continue the same noise vector. A fresh key after a restart would release the
        later steps of the same data under new noise, a second ε-DP release (2ε in all). Keep the
        file secret, beside the query's checkpoint.

        The file is bound to ``query`` (the query's checkpoint location, or another name that
        stays the same across its restarts) in the lineage registry (``engines.registry``): a
        second query on the same key file is refused with an error naming the first, so one key
        never serves two queries. The query is also the key's publication in the ledger
        (``engines.ledger``): the key file serves that publication only, and the publication
        only that key (another key file for the same query is refused). ``corrects`` names the
        publication this one corrects (a correction is a new publication: a new key file, a new
        query name, its own budget charge), recorded in the ledger."""
        target = Path(path)
        if not target.exists():
            folder = target.parent if str(target.parent) else Path(".")
            if not folder.is_dir():
                raise InvalidInputError(f"key file {target}: folder {folder} does not exist")
            record = json.dumps(cls.secure().to_record()).encode()
            handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(handle, "wb") as stream:  # mkstemp creates it with mode 0600
                    stream.write(record)
                    stream.flush()
                    os.fsync(stream.fileno())
                try:
                    os.link(temporary, target)  # fails if another process created it first: use theirs
                except FileExistsError:
                    pass
            finally:
                os.unlink(temporary)
            directory = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        try:
            record = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise InvalidInputError(f"key file {target}: cannot read it ({error})") from None
        generator = cls.from_record(record)
        if generator.seeded:
            raise InvalidInputError(f"key file {target} holds a seeded key: a key file is for private releases")
        bound = registries.bind_key_file(target, key=generator.key, query=str(query), registry=registry)
        try:
            name = open_ledger().claim(
                Publication(name=str(query), key_tag=registries.generator_tag(generator.key), corrects=corrects)
            )
        except BaseException:
            if bound:  # the ledger refused: this machine's registry keeps no binding of the refused query
                registries.unbind_key_file(target, query=str(query), registry=registry)
            raise
        return replace(generator, publication=name)

    @classmethod
    def from_seed(cls, seed: int) -> NoiseGenerator:
        """A reproducible generator keyed by a public seed: NOT private, for tests and research."""
        seed = check_size(seed, name="seed", minimum=0)
        key = hashlib.sha256(_SEED_DOMAIN + seed.to_bytes((seed.bit_length() + 8) // 8, "little")).digest()
        return cls(key=key, seeded=True)

    def child(self, label: str) -> NoiseGenerator:
        """An independent generator for another counter: key SHA-256(key ‖ "child" ‖ label), same
        seededness. Distinct labels give unrelated keys (SHA-256 as a PRF)."""
        if not isinstance(label, str) or not label:
            raise InvalidInputError("a child generator needs a non-empty label")
        encoded = label.encode()
        key = hashlib.sha256(self.key + b"child\x00" + len(encoded).to_bytes(8, "little") + encoded).digest()
        child = NoiseGenerator(
            key=key, seeded=self.seeded, publication=None if self.publication is None else f"{self.publication}/{label}"
        )
        if registries.is_exported(self):
            mark_exported(child)
        return child

    def coordinate(self, index: int) -> NoiseGenerator:
        """The generator of coordinate ``index`` of a vector stream: key SHA-256(key ‖ index as 4
        bytes, little-endian), same seededness. Distinct indices give unrelated keys, and none
        equals a ``child`` key (a 4-byte suffix against a suffix of at least 14 bytes: different
        inputs to SHA-256, a PRF)."""
        index = check_size(index, name="coordinate", minimum=0, maximum=2**32 - 1)
        return NoiseGenerator(key=hashlib.sha256(self.key + index.to_bytes(4, "little")).digest(), seeded=self.seeded)

    def words(self, *, index: int, size: int) -> np.ndarray:
        """``size`` uniform 64-bit words of block ``index`` (a non-negative integer)."""
        return self.words_of_blocks(indices=[index], size=size)

    def words_of_blocks(self, *, indices, size: int) -> np.ndarray:
        """The words of several blocks of equal ``size``, concatenated (one array, one copy):
        block i is SHAKE-256(key ‖ "z" ‖ 0 ‖ i as 16 bytes ‖ size as 8 bytes), first 8·size bytes."""
        prefix, tail, length = self._keyed, int(size).to_bytes(8, "little"), 8 * size
        digests = []
        for index in indices:
            hasher = prefix.copy()
            hasher.update(int(index).to_bytes(16, "little") + tail)
            digests.append(hasher.digest(length))
        return np.frombuffer(b"".join(digests), dtype="<u8")

    @functools.cached_property
    def _keyed(self):
        return hashlib.shake_256(self.key + b"z\x00")

    def laplace(self, *, index: int, size: int) -> np.ndarray:
        """``size`` Laplace(scale 1) samples of block ``index`` (see the module docstring)."""
        return laplace_from_words(self.words(index=index, size=size))

    def to_record(self) -> dict:
        """The state-file record (holds the secret key: state files are written mode 0600). The key
        has then left the process: every counter on it claims its publication in the ledger."""
        mark_exported(self)
        return {"kind": GENERATOR_KIND, "key": self.key.hex(), "seeded": self.seeded}

    @classmethod
    def from_record(cls, record: object) -> NoiseGenerator:
        if not isinstance(record, dict) or record.get("kind") != GENERATOR_KIND:
            raise InvalidInputError(f"unknown generator record (expected kind {GENERATOR_KIND!r})")
        try:
            key = bytes.fromhex(record["key"])
        except (KeyError, TypeError, ValueError):
            raise InvalidInputError("the generator record has no valid key") from None
        if not isinstance(record.get("seeded"), bool):
            raise InvalidInputError("the generator record does not say whether it is seeded")
        generator = cls(key=key, seeded=record["seeded"])
        mark_exported(generator)
        return generator


def laplace_from_words(words: np.ndarray) -> np.ndarray:
    """Laplace(1) samples from uniform 64-bit words: top bit = sign, low 53 bits = v,
    |z| = −log1p(−v·2⁻⁵³) (exact arguments, accurate logarithm)."""
    words = np.asarray(words, dtype=np.uint64)
    magnitude = -np.log1p((words & _MANTISSA).astype(np.float64) * -(2.0**-53))
    return np.copysign(magnitude, words.view(np.int64).astype(np.float64))  # top bit set: negative


def round_to_integers(values) -> np.ndarray:
    """Noise rounded to the nearest integer (ties to even) as int64; refuses NaN/inf and
    values beyond ±2⁶²."""
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(np.abs(values) > 2.0**62):
        raise InvalidInputError("noise to round is not finite or too large for int64")
    return np.rint(values).astype(np.int64)


class GeneratorSource:
    """Laplace(1) noise from a keyed ``NoiseGenerator`` as a noise source (``mechanisms.streaming``):
    the block at coordinate ``offset`` of any level is the generator's block ``offset`` (the
    coordinates a decoder reads never overlap, so z is well defined). For research and
    benchmarks: float Laplace is not pure DP, and no counter uses it."""

    def __init__(self, generator: NoiseGenerator) -> None:
        self.generator = generator

    def block(self, offset: int, size: int, level: int = 1) -> np.ndarray:
        return self.generator.laplace(index=offset, size=size)

    def blocks(self, offsets, size: int) -> np.ndarray:
        return laplace_from_words(self.generator.words_of_blocks(indices=offsets, size=size)).reshape(len(offsets), size)


_CLAIMED: dict[bytes, str] = {}  # sha256 of each secure generator key feeding a counter here → its lineage


def claim_in_process(generator: NoiseGenerator, *, lineage: str) -> None:
    """Refuse a secure generator that already feeds a counter of another lineage in this process.

    Guarantee: two counters of one process never add the same noise to different data through one
    generator (their difference would reveal T·(x − x′) exactly). A key that leaves the process
    (a state, a key file) is claimed in the lineage registry too (``engines.registry``), which
    extends the guarantee across processes. A seeded generator (public, not private) is not tracked."""
    if generator.seeded:
        return
    tag = hashlib.sha256(generator.key).digest()
    owner = _CLAIMED.setdefault(tag, lineage)
    if owner != lineage:
        raise InvalidInputError(
            "this NoiseGenerator already feeds another counter: its noise would be reused on other data; "
            "give each counter its own generator (NoiseGenerator.secure(), or generator.child(label))"
        )


def mark_exported(generator: NoiseGenerator) -> None:
    """Note that the secure key of ``generator`` may serve runs outside this one (``registry.is_exported``);
    the first time, every counter of this process that released on it unguarded is barred in the
    ledger (``ledger.key_exported``)."""
    if registries.note_exported(generator):
        key_exported(hashlib.sha256(generator.key).digest())
