"""Correlated noise for torch training loops: step t of B·z for every parameter (Choquette-Choo et al., section 5).

In DP-SGD with a matrix mechanism A = B·C (Choquette-Choo et al., "step 4"), the clipped, summed gradient of
step t gets the noise σ·(B·z)_t, z ~ N(0, I) independently per parameter coordinate, with
σ = noise multiplier · clip norm · sens(C). ``NoiseGenerator(mechanism, shapes, noise_std=σ)``
returns, at each ``next()``, one tensor per parameter shape holding σ·(B·z)_t.

Randomness. By default (``seed=None``) z comes from the operating system's cryptographically
secure generator (``os.urandom``, turned into normals by the Box–Muller transform in float64).
With an integer ``seed`` a torch Philox/Mersenne generator is used instead: reproducible, for
tests and research only, NOT secure. ``mode`` says which one is in use.

Memory. Streaming mechanisms never hold n×d noise: the online Honaker tree variants keep
O(log n) node estimates of size d; the Toeplitz strategies (``toeplitz.py``) keep O(p·d) for p
bands of C (banded Toeplitz) or of C⁻¹ (BISR) and O(m·d) for m BLT buffers, plus the running
sum; and stamping keeps one stamp at a time plus the carried total of earlier stamps. The FFT decoders (and dense decoders such as the optimizer's) use the
whole z for every step (B_F and B_opt are not causal: row t depends on all 2n entries of z), so
their noise is computed for a whole stamp at once, by chunks of parameters, and kept as an (m×d)
float32 array, m the stamp length (m = n without stamping): in memory by default, or, with
``scratch_dir``, in a private (mode 0600) file there that is deleted once the stamp is used up
(Choquette-Choo et al., App. C: pre-generated noise read row by row). A released step's noise is never
recomputed.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import TypeGuard, cast

import numpy as np
import torch

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.honaker import HonakerMechanism, HonakerNoiseStream
from pure_dp_mf.gaussian.stamping import Mechanism, StampedMechanism
from pure_dp_mf.gaussian.toeplitz import BandedStrategy, ToeplitzStrategy
from pure_dp_mf.validation import check_positive, check_size

DEFAULT_CHUNK = 1 << 16


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


class _Source:
    """Standard normal tensors, secure (default) or seeded."""

    def __init__(self, seed: int | None) -> None:
        self.mode = "secure" if seed is None else "seeded"
        self._generator = None if seed is None else torch.Generator().manual_seed(int(seed))

    def normal(self, *shape: int) -> torch.Tensor:
        if self._generator is None:
            return torch.from_numpy(secure_standard_normal(math.prod(shape)).reshape(shape))
        return torch.randn(*shape, generator=self._generator, dtype=torch.float64)


class NoiseGenerator:
    """σ·(B·z)_t for t = 0, 1, …, n−1, split into the given parameter shapes (see the module docstring)."""

    def __init__(
        self,
        mechanism: Mechanism,
        shapes: Sequence[Sequence[int]],
        *,
        noise_std: float = 1.0,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        chunk: int = DEFAULT_CHUNK,
        scratch_dir: str | os.PathLike | None = None,
    ) -> None:
        self.shapes = [torch.Size(shape) for shape in shapes]
        if not self.shapes:
            raise InvalidInputError("give at least one parameter shape")
        self.sizes = [shape.numel() for shape in self.shapes]
        self.dimension = sum(self.sizes)
        self.noise_std = check_positive(noise_std, name="noise_std")
        self.chunk = check_size(chunk, name="chunk")
        self.dtype = dtype
        self.mechanism = mechanism
        self.n = mechanism.n
        self.scratch_dir = None if scratch_dir is None else Path(scratch_dir)
        if self.scratch_dir is not None and not self.scratch_dir.is_dir():
            raise InvalidInputError(f"scratch_dir {self.scratch_dir} is not a folder")
        self.step = 0
        self._source = _Source(seed)
        self._steps = self._generate()

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike,
        shapes: Sequence[Sequence[int]],
        *,
        noise_multiplier: float,
        clip_norm: float = 1.0,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        chunk: int = DEFAULT_CHUNK,
        scratch_dir: str | os.PathLike | None = None,
    ) -> NoiseGenerator:
        """The generator of a factorization file written by ``pure-dp-mf multi-epoch optimize``.

        The file holds B (decoder) and C (encoder) and the participation it was optimised for
        (k participations, b apart); the sensitivity sens(C) is recomputed here from C for that
        participation (``stamping.sensitivity_of``: exact when CᵀC ≥ 0 on the participation
        pattern, else a proven upper bound), and σ = noise_multiplier · clip_norm · sens(C).
        The privacy of the resulting DP-SGD run is that of the Gaussian mechanism with noise
        multiplier ``noise_multiplier`` (``pure-dp-mf multi-epoch epsilon``) under that participation.

        Raises:
            InvalidInputError: a file that is not a Gaussian factorization (no participation recorded).
        """
        from pure_dp_mf.factorizations.factorization import Factorization
        from pure_dp_mf.gaussian.stamping import DenseMechanism, sensitivity_of

        factorization = Factorization.load(path)
        made_by = (factorization.metadata or {}).get("made_by") or {}
        if made_by.get("mechanism") != "gaussian" or "max_participations" not in made_by:
            raise InvalidInputError(f"{path}: not a multi-epoch factorization (written by pure-dp-mf multi-epoch optimize)")
        mechanism = DenseMechanism(decoder=factorization.decoder, encoder=factorization.encoder, name=Path(path).name)
        sensitivity_squared, _ = sensitivity_of(
            mechanism, max_participations=int(made_by["max_participations"]), min_sep=int(made_by["min_sep"])
        )
        noise_std = check_positive(noise_multiplier, name="noise_multiplier") * check_positive(clip_norm, name="clip_norm")
        return cls(
            mechanism,
            shapes,
            noise_std=noise_std * math.sqrt(sensitivity_squared),
            seed=seed,
            dtype=dtype,
            chunk=chunk,
            scratch_dir=scratch_dir,
        )

    @property
    def mode(self) -> str:
        """ "secure" (os.urandom) or "seeded" (reproducible, not secure)."""
        return self._source.mode

    @property
    def buffered_steps(self) -> int:
        """Steps of noise held at once: 0 for the online trees (O(log n) node estimates), else one stamp."""
        base = self.mechanism.base if isinstance(self.mechanism, StampedMechanism) else self.mechanism
        return 0 if _is_online_tree(base) or _is_streaming(base) else base.n

    def _draw(self) -> torch.Tensor:
        return self._source.normal(self.dimension)

    def _block(self, mechanism: Mechanism) -> Iterator[torch.Tensor]:
        """Steps of one unstamped mechanism."""
        if _is_online_tree(mechanism):
            yield from HonakerNoiseStream(mechanism.n, mechanism.variant, self._draw)
            return
        if _is_streaming(mechanism):  # Toeplitz strategies: O(bands·d) or O(buffers·d) state
            yield from cast(Iterator[torch.Tensor], mechanism.stream(self._draw))
            return
        handle = None
        if self.scratch_dir is None:
            block = np.empty((mechanism.n, self.dimension), dtype=np.float32)
        else:
            handle = tempfile.NamedTemporaryFile(dir=self.scratch_dir, prefix="noise-", suffix=".f32")  # mode 0600
            block = np.memmap(handle, dtype=np.float32, mode="w+", shape=(mechanism.n, self.dimension))
        try:
            for lo in range(0, self.dimension, self.chunk):
                hi = min(self.dimension, lo + self.chunk)
                z = self._source.normal(mechanism.inner_size, hi - lo).numpy()
                block[:, lo:hi] = np.asarray(mechanism.decode(z), dtype=np.float64)
            for row in block:
                yield torch.from_numpy(np.array(row))
        finally:
            del block
            if handle is not None:
                handle.close()  # deletes the file

    def _generate(self) -> Generator[torch.Tensor, None, None]:
        if isinstance(self.mechanism, StampedMechanism):
            carry = None
            for _ in range(self.mechanism.stamps):
                last = None
                for noise in self._block(self.mechanism.base):
                    last = noise
                    yield noise if carry is None else noise + carry
                if last is not None:
                    carry = last if carry is None else carry + last
        else:
            yield from self._block(self.mechanism)

    def __iter__(self) -> NoiseGenerator:
        return self

    def __next__(self) -> list[torch.Tensor]:
        if self.step >= self.n:
            raise StopIteration
        flat = next(self._steps).to(torch.float64) * self.noise_std
        self.step += 1
        if self.step == self.n:
            self._steps.close()  # releases the last buffer (and deletes its scratch file)
        return [part.reshape(shape).to(self.dtype) for part, shape in zip(torch.split(flat, self.sizes), self.shapes)]

    def next(self) -> list[torch.Tensor]:
        """The noise of the next step, one tensor per parameter shape."""
        try:
            return self.__next__()
        except StopIteration:
            raise InvalidInputError(f"all {self.n} steps of the mechanism have been used") from None


def _is_online_tree(mechanism: object) -> TypeGuard[HonakerMechanism]:
    return isinstance(mechanism, HonakerMechanism) and mechanism.variant != "full"


def _is_streaming(mechanism: object) -> TypeGuard[ToeplitzStrategy | BandedStrategy]:
    return isinstance(mechanism, (ToeplitzStrategy, BandedStrategy))
