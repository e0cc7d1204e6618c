"""Correlated noise for torch training loops: step t of B·z for every parameter (Choquette-Choo et al., section 5).

A Gaussian matrix mechanism A = B·C for the prefix sum A releases noisy prefix sums of the clipped,
summed gradients g_s: Σ_{s≤t} g_s + σ·(B·z)_t, z ~ N(0, I) independently per parameter
coordinate, σ = noise multiplier · clip norm · sens(C). DP-SGD (Choquette-Choo et al., "step 4")
updates the model with the *increments* of that release, so the gradient of step t gets

    g_t + σ·((B·z)_t − (B·z)_{t−1}),      (B·z)_{−1} = 0,

which is g_t + σ·(C⁻¹·z)_t (A⁻¹ is the difference operator), and the model after step t holds
the noise σ·(B·z)_t, per-step variance σ²·‖B_t‖² (total σ²·‖B‖_F²). Adding the prefix noise
σ·(B·z)_t itself to each gradient would leave σ·(A·B·z)_t in the model (total σ²·‖A·B‖_F²) and
is not the mechanism whose privacy ``sens(C)`` accounts for. Hence the two ways to draw:

* ``add_to_gradients(parameters)`` (DP-SGD): adds the next increment to each ``p.grad``;
  ``next_increment()`` returns it, one tensor per parameter shape;
* ``next_prefix()`` (alias ``next()``): σ·(B·z)_t itself, for releasing noisy prefix sums.

One generator serves one of the two: after the first draw, the other way is refused.

One loop serves every mechanism: the mechanism's ``StreamingDecoder`` (``gaussian.streaming.
decoder_of``) is stepped with ``next`` over a ``SequentialNormals`` source whose columns are
the parameter coordinates, so a vector of d normals is drawn per noise coordinate, in order,
never twice. By default (``seed=None``) the normals come from the operating system's
cryptographically secure generator (``os.urandom``, Box–Muller in float64); with an integer
``seed`` from a seeded numpy generator: reproducible, for tests and research only, NOT secure.
``mode`` says which one is in use. The increments are differences of the float64 prefix noise,
taken before the cast to ``dtype``, so they sum to the prefix noise up to float64 rounding.

Memory. Causal mechanisms never hold n×d noise: the online Honaker tree variants keep O(log n)
node estimates of size d; the Toeplitz strategies (``toeplitz.py``) keep O(p·d) for p bands of
C (banded Toeplitz) or of C⁻¹ (BISR) and O(m·d) for m BLT buffers, plus the running sum; and
stamping keeps one stamp at a time plus the carried total of earlier stamps. The FFT decoders
(and dense decoders such as the optimizer's) use the whole z for every step (B_F and B_opt are
not causal), so their noise is computed for a whole stamp at once and kept as an (m×d) float32
array, m the stamp length, in memory, or, with ``scratch_dir``, in a private (mode 0600) file
there that is deleted once the stamp is used up (Choquette-Choo et al., App. C). A released
step's noise is never recomputed. The increments keep one more vector of d float64 values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.stamping import GaussianMechanism, StampedMechanism
from pure_dp_mf.gaussian.streaming import BlockDecoder, SequentialNormals, decoder_of, secure_standard_normal
from pure_dp_mf.validation import check_positive

__all__ = ["CorrelatedNoise", "secure_standard_normal"]


class CorrelatedNoise:
    """σ·(B·z)_t for t = 0, 1, …, n−1, split into the given parameter shapes, drawn either as the
    increments σ·((B·z)_t − (B·z)_{t−1}) that DP-SGD adds to each step's gradient
    (``add_to_gradients``, ``next_increment``) or as the prefix noise itself (``next_prefix``);
    see the module docstring."""

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
        self.workload = "prefix"
        self._previous: torch.Tensor | None = None  # σ·(B·z)_{t−1} in float64, for the increments
        self._way: str | None = None  # "increment" or "prefix", fixed by the first draw

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
        generator = cls(
            mechanism,
            shapes,
            noise_std=noise_std * math.sqrt(sensitivity_squared),
            seed=seed,
            dtype=dtype,
            scratch_dir=scratch_dir,
        )
        generator.workload = str(made_by.get("workload", "prefix"))
        return generator

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
        return self._split(self._draw("prefix"))

    def _draw(self, way: str) -> torch.Tensor:
        """σ·(B·z)_t of the next step as one flat float64 tensor; fixes the way of drawing at the first call."""
        if self._way is not None and self._way != way:
            raise InvalidInputError(
                f"this generator hands out {self._way} noise; draw the {way} noise from a generator of its own"
            )
        if self.step >= self.n:
            raise StopIteration
        self._way = way
        values, self.state = self.decoder.next(self.state, self.source, steps=1)
        self.step += 1
        return torch.from_numpy(np.ascontiguousarray(values[0], dtype=np.float64)) * self.noise_std

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [part.reshape(shape).to(self.dtype) for part, shape in zip(torch.split(flat, self.sizes), self.shapes)]

    def next_prefix(self) -> list[torch.Tensor]:
        """The prefix noise σ·(B·z)_t of the next step, one tensor per parameter shape: the noise of the
        released prefix sum Σ_{s≤t} g_s. Not the noise of one gradient: DP-SGD uses ``add_to_gradients``."""
        try:
            return self.__next__()
        except StopIteration:
            raise InvalidInputError(f"all {self.n} steps of the mechanism have been used") from None

    def next(self) -> list[torch.Tensor]:
        """The prefix noise σ·(B·z)_t of the next step (``next_prefix``)."""
        return self.next_prefix()

    def next_increment(self) -> list[torch.Tensor]:
        """The noise of the next step's gradient, σ·((B·z)_t − (B·z)_{t−1}) = σ·(C⁻¹·z)_t, one tensor per
        parameter shape. Guarantee: a training loop that adds it to step t's sum of gradients, each
        clipped to norm ≤ clip norm, and otherwise uses the data only through those sums, is a
        post-processing of the Gaussian mechanism x ↦ C·x + σ·z (docs/privacy.md, "DP-SGD with
        correlated noise"); its privacy is that of the noise multiplier σ/(clip norm · sens(C)) under
        the participation that sens(C) was computed for.

        Raises:
            InvalidInputError: the factorization is not of the prefix sum, the steps are used up, or
                this generator already handed out prefix noise.
        """
        if self.workload != "prefix":
            raise InvalidInputError(
                f"the factorization is of the workload {self.workload}, not the prefix sum: "
                "its per-gradient noise is A⁻¹·(B·z)_t, not an increment of B·z"
            )
        try:
            current = self._draw("increment")
        except StopIteration:
            raise InvalidInputError(f"all {self.n} steps of the mechanism have been used") from None
        increment = current if self._previous is None else current - self._previous
        self._previous = current
        return self._split(increment)

    def add_to_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """DP-SGD's noise: adds ``next_increment()`` to each parameter's ``.grad`` (in place), in the
        order of ``shapes``. Call it once per step, after the clipped per-example gradients are summed
        into ``.grad`` and before the optimizer's step (guarantee: ``next_increment``).

        Raises:
            InvalidInputError: a parameter without a gradient or whose shape is not the next in ``shapes``.
        """
        parameters = list(parameters)
        if [tuple(p.shape) for p in parameters] != [tuple(shape) for shape in self.shapes]:
            raise InvalidInputError(
                f"parameters of shapes {[tuple(p.shape) for p in parameters]}, "
                f"but the noise is for {[tuple(shape) for shape in self.shapes]}"
            )
        if any(p.grad is None for p in parameters):
            raise InvalidInputError("a parameter has no gradient: sum the clipped gradients into .grad first")
        for p, noise in zip(parameters, self.next_increment()):
            assert p.grad is not None
            p.grad.add_(noise.to(device=p.grad.device, dtype=p.grad.dtype))
