"""Correlated noise for torch training loops: step t of B·z for every parameter (Choquette-Choo et al., section 5).

In DP-SGD with a matrix mechanism A = B·C (Choquette-Choo et al., "step 4"), the clipped, summed gradient of
step t gets the noise σ·(B·z)_t, z ~ N(0, I) independently per parameter coordinate, with
σ = noise multiplier · clip norm · sens(C). ``CorrelatedNoise(mechanism, shapes, noise_std=σ)``
returns, at each ``next()``, one tensor per parameter shape holding σ·(B·z)_t.

One loop serves every mechanism: the mechanism's ``StreamingDecoder`` (``gaussian.streaming.
decoder_of``) is stepped with ``next`` over a ``SequentialNormals`` source whose columns are
the parameter coordinates, so a vector of d normals is drawn per noise coordinate, in order,
never twice. By default (``seed=None``) the normals come from the operating system's
cryptographically secure generator (``os.urandom``, Box–Muller in float64); with an integer
``seed`` from a seeded numpy generator: reproducible, for tests and research only, NOT secure.
``mode`` says which one is in use.

Memory. Causal mechanisms never hold n×d noise: the online Honaker tree variants keep O(log n)
node estimates of size d; the Toeplitz strategies (``toeplitz.py``) keep O(p·d) for p bands of
C (banded Toeplitz) or of C⁻¹ (BISR) and O(m·d) for m BLT buffers, plus the running sum; and
stamping keeps one stamp at a time plus the carried total of earlier stamps. The FFT decoders
(and dense decoders such as the optimizer's) use the whole z for every step (B_F and B_opt are
not causal), so their noise is computed for a whole stamp at once and kept as an (m×d) float32
array, m the stamp length, in memory, or, with ``scratch_dir``, in a private (mode 0600) file
there that is deleted once the stamp is used up (Choquette-Choo et al., App. C). A released
step's noise is never recomputed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.stamping import GaussianMechanism, StampedMechanism
from pure_dp_mf.gaussian.streaming import BlockDecoder, SequentialNormals, decoder_of, secure_standard_normal
from pure_dp_mf.validation import check_positive

__all__ = ["CorrelatedNoise", "secure_standard_normal"]


class CorrelatedNoise:
    """σ·(B·z)_t for t = 0, 1, …, n−1, split into the given parameter shapes (see the module docstring)."""

    def __init__(
        self,
        mechanism: GaussianMechanism,
        shapes: Sequence[Sequence[int]],
        *,
        noise_std: float = 1.0,
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        scratch_dir: str | os.PathLike | None = None,
    ) -> None:
        self.shapes = [torch.Size(shape) for shape in shapes]
        if not self.shapes:
            raise InvalidInputError("give at least one parameter shape")
        self.sizes = [shape.numel() for shape in self.shapes]
        self.dimension = sum(self.sizes)
        self.noise_std = check_positive(noise_std, name="noise_std")
        self.dtype = dtype
        self.mechanism = mechanism
        self.n = mechanism.n
        if scratch_dir is not None and not Path(scratch_dir).is_dir():
            raise InvalidInputError(f"scratch_dir {scratch_dir} is not a folder")
        self.decoder = decoder_of(mechanism, scratch_dir=scratch_dir)
        self.source = SequentialNormals(self.dimension, seed=seed)
        self.state = self.decoder.init()
        self.step = 0

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
        scratch_dir: str | os.PathLike | None = None,
    ) -> CorrelatedNoise:
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
            scratch_dir=scratch_dir,
        )

    @property
    def mode(self) -> str:
        """ "secure" (os.urandom) or "seeded" (reproducible, not secure)."""
        return self.source.mode

    @property
    def buffered_steps(self) -> int:
        """Steps of noise held at once: 0 for the causal mechanisms, else one stamp."""
        base = self.mechanism.base if isinstance(self.mechanism, StampedMechanism) else self.mechanism
        return base.n if isinstance(decoder_of(base), BlockDecoder) else 0

    def __iter__(self) -> CorrelatedNoise:
        return self

    def __next__(self) -> list[torch.Tensor]:
        if self.step >= self.n:
            raise StopIteration
        values, self.state = self.decoder.next(self.state, self.source, steps=1)
        flat = torch.from_numpy(np.ascontiguousarray(values[0], dtype=np.float64)) * self.noise_std
        self.step += 1
        return [part.reshape(shape).to(self.dtype) for part, shape in zip(torch.split(flat, self.sizes), self.shapes)]

    def next(self) -> list[torch.Tensor]:
        """The noise of the next step, one tensor per parameter shape."""
        try:
            return self.__next__()
        except StopIteration:
            raise InvalidInputError(f"all {self.n} steps of the mechanism have been used") from None
