"""The release of a counter running one mechanism: exact lattice noise and its error bars.

``SingleRelease`` draws, for each generator (a coordinate of the stream), integer noise
Y ~ DLap(λ_ℓ) per level on the lattice 2^-g ℤ (``lattice.LatticeSource``, rates λ_ℓ from the
mechanism for the total sensitivity: ``Mechanism.rates``) and releases the rounded noise
⌊2^-g·(L̄·Y)_t + ½⌋ with every rounding decided exactly (``lattice.ExactRelease``); its error bars
are the exact moments of that noise (``error_bars.ErrorBarModel``). Privacy: docs/privacy.md,
"Theorem" (Arkhipov & Kalinin, arXiv 2607.08963, with exact discrete Laplace noise). The mechanism
is duck-typed (``decoder``, ``atoms``, ``sensitivity``, ``kind``, ``rates``), so this module
imports nothing above ``release/``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from pure_dp_mf.release.error_bars import ErrorBarModel, ErrorBars, NoiseMoments
from pure_dp_mf.release.lattice import PAGE, ExactRelease, LatticeSource


class SingleRelease:
    """The rounded noise ⌊2^-g·(L̄·Y)_t + ½⌋ of a counter running one ``Mechanism`` and its error
    bars: integer noise DLap(λ_ℓ) per level on the lattice (``LatticeSource``, keyed by each
    generator), every rounding decided exactly (``ExactRelease``). Privacy: docs/privacy.md,
    "Theorem"."""

    def __init__(
        self,
        *,
        mechanism,
        generators: list,
        epsilon: float,
        step_sensitivity: int = 1,
        sensitivity: Fraction | None = None,
        page_size: int = PAGE,
        cached_pages: int | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.sensitivity = step_sensitivity * mechanism.sensitivity if sensitivity is None else sensitivity
        self.rates = mechanism.rates(epsilon=epsilon, sensitivity=self.sensitivity)
        tree = mechanism.kind != "lifted"  # a tree: one page per height in use, pages shrinking with the height
        if cached_pages is None:
            cached_pages = 2 * mechanism.decoder.max_terms(1) + 8 if tree else 8
        self.sources = [
            LatticeSource(key=generator.key, rates=self.rates, page_size=page_size, cached_pages=cached_pages, shrink=tree)
            for generator in generators
        ]
        self.exact = ExactRelease(decoder=mechanism.decoder, atoms=mechanism.atoms, sources=self.sources)
        self._model: ErrorBarModel | None = None

    def noise(self, start: int, stop: int) -> np.ndarray:
        """The rounded noise of steps start … stop − 1: (m,) for one generator, else (m, d)."""
        return self.exact.noise(start, stop)

    @property
    def fallbacks(self) -> int:
        """Values whose rounding was decided in rational arithmetic."""
        return self.exact.fallbacks

    def moments(self, start: int, stop: int) -> NoiseMoments:
        if self._model is None:
            self._model = ErrorBarModel(decoder=self.mechanism.decoder, atoms=self.mechanism.atoms, rates=self.rates)
        return self._model.moments(start, stop)

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        """Each step's noise std and guaranteed (1 − β) half-width (``release.error_bars``)."""
        return self.moments(start, stop).bars(beta=beta)
