"""The release of an anytime counter: segments of exact lifted releases and their carried noise.

An anytime counter (``mechanisms.anytime``: a public ``Schedule`` of segments b_s … b_s + ℓ_s − 1)
releases step t of segment s with the noise Σ_{s'<s} K_{s'} + N_s(t − b_s): N_s the exact release
of segment s's own mechanism (``single.SingleRelease``) under the generator's child "anytime
segment s", at (1 − θ_s)·ε for a two-release segment and ε otherwise, and K_s the noise carried out
of segment s: its counter's final rounded noise N_s(ℓ_s − 1), or for a two-release segment the
exact combination ⌊w_s·N_s(ℓ_s − 1) + (1 − w_s)·Y_s + ½⌋ with Y_s ~ DLap(θ_s·ε/Δ_step) one draw of
the child "anytime total s" (``combine_total``, w_s a public dyadic weight).

Privacy (docs/privacy.md, "The anytime counter"): each unit changes the steps of one segment per
coordinate, and segment s spends (1 − θ_s)·ε on its counter and θ_s·ε on its total: ε per
segment, segments on disjoint steps with independent children of the key (parallel composition).
The mechanism is duck-typed (``schedule``, ``segment_mechanism``), so this module imports nothing
above ``release/``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from pure_dp_mf.release.error_bars import ErrorBars, NoiseMoments
from pure_dp_mf.release.lattice import LatticeSource, Rates, noise_rate, sampler_rate
from pure_dp_mf.validation import exact_integers


def segment_generator(generator, index: int, schedule):
    """The noise of segment ``index``: the generator's child "anytime segment s"; an extended
    counter's segment 0 keeps the generator itself (its noise is never redrawn)."""
    if index == 0 and schedule.segments[0].mechanism is not None:
        return generator
    return generator.child(f"anytime segment {index}")


def total_generator(generator, index: int):
    """The noise of segment ``index``'s total (a two-release segment): the generator's child
    "anytime total s", distinct from every segment's child."""
    return generator.child(f"anytime total {index}")


def total_rate(*, epsilon: float | Fraction, theta: Fraction, step_sensitivity: int) -> Fraction:
    """λ = θ_s·ε/Δ_step: the rate of the discrete Laplace noise DLap(λ) on a segment's total
    (integer moves of ℓ1 size ≤ Δ_step per changed unit: θ_s·ε-DP, docs/privacy.md), as the
    sampler draws it (``lattice.sampler_rate``: never above λ)."""
    rate = noise_rate(epsilon=Fraction(epsilon) * theta, sensitivity=Fraction(step_sensitivity), grid_bits=0)
    return sampler_rate(rate)


def combine_total(final: int, total: int, weight: Fraction) -> int:
    """⌊w·final + (1 − w)·total + ½⌋ exactly (integers, w dyadic): the carried noise of a
    two-release segment from its counter's final rounded noise and its total's noise (the counts
    S add back unchanged: ⌊v + ½⌋ commutes with adding an integer)."""
    a, d = weight.numerator, weight.denominator
    return (a * int(final) + (d - a) * int(total) + d // 2) // d if d > 1 else a * int(final) + (1 - a) * int(total)


class SegmentedRelease:
    """The rounded noise and the error bars of an anytime counter (module docstring): step t of
    segment s gets Σ_{s'<s} N_{s'}(ℓ_{s'} − 1) + N_s(t − b_s), each N the exact release of its
    segment (``ExactRelease``) under its own generator. Keeps the current segment's release and
    one carried vector: O(k·log t) memory."""

    def __init__(
        self,
        *,
        mechanism,
        generators: list,
        epsilon: float,
        step_sensitivity: int = 1,
        **layout,
    ):
        self.mechanism, self.schedule = mechanism, mechanism.schedule
        self.generators, self.epsilon, self.step_sensitivity = generators, epsilon, step_sensitivity
        self.layout = layout
        self._releases: dict[int, object] = {}
        self._carried: list[tuple[np.ndarray, NoiseMoments]] = [(np.zeros(len(generators), dtype=np.int64), NoiseMoments.zero())]
        self._fallbacks = 0

    def _segment(self, index: int):
        if index not in self._releases:
            for old in [i for i in self._releases if i < index]:
                self._fallbacks += self._releases.pop(old).fallbacks  # type: ignore[attr-defined]
            segment = self.mechanism.segment_mechanism(index)
            generators = [segment_generator(g, index, self.schedule) for g in self.generators]
            share = self.schedule.segment(index).counter_share()
            self._releases[index] = segment.release(
                generators=generators,
                epsilon=self.epsilon if share == 1 else Fraction(self.epsilon) * share,
                step_sensitivity=self.step_sensitivity,
                **self.layout,
            )
        return self._releases[index]

    def carried(self, index: int) -> tuple[np.ndarray, NoiseMoments]:
        """(the carried noise Σ_{s'<index} K_{s'}, the moments of that sum): K_s = N_s(ℓ_s − 1),
        or for a two-release segment K_s = ⌊w_s·N_s(ℓ_s − 1) + (1 − w_s)·Y_s + ½⌋ with Y_s its
        total's DLap(θ_s·ε/Δ_step) noise (``combine_total``)."""
        while len(self._carried) <= index:
            done = len(self._carried) - 1
            segment = self.schedule.segment(done)
            length = segment.length
            release = self._segment(done)
            final = exact_integers(np.asarray(release.noise(length - 1, length)).reshape(-1))
            last = release.moments(length - 1, length).at(0)
            if segment.theta is not None and segment.weight is not None:
                rate = total_rate(epsilon=self.epsilon, theta=segment.theta, step_sensitivity=self.step_sensitivity)
                totals = [total_noise(total_generator(g, done), rate) for g in self.generators]
                final = exact_integers(
                    np.array(
                        [combine_total(int(f), y, segment.weight) for f, y in zip(final.tolist(), totals, strict=True)],
                        dtype=object,
                    )
                )
                weight = float(segment.weight)  # dyadic: exact
                last = last.scaled(weight).plus(NoiseMoments.discrete_laplace(rate).scaled(1 - weight)).rounded()
            noise, moments = self._carried[-1]
            total = exact_integers(noise.astype(object) + final.astype(object))  # int64 only when it provably fits
            self._carried.append((total, moments.plus(last)))
        return self._carried[index]

    def noise(self, start: int, stop: int) -> np.ndarray:
        """The rounded noise of steps start … stop − 1, shape (stop − start, d)."""
        parts, t = [], start
        while t < stop:
            index = self.schedule.index_of(t)
            first = self.schedule.first(index)
            end = min(stop, first + self.schedule.segment(index).length)
            carried, _ = self.carried(index)
            own = np.asarray(self._segment(index).noise(t - first, end - first)).reshape(end - t, -1)
            if own.dtype == object or carried.dtype == object or np.abs(own).max(initial=0) >= 2**62:
                own, carried = own.astype(object), carried.astype(object)  # exact: int64 sums could wrap
            parts.append(own + carried[None, :])
            t = end
        if any(part.dtype == object for part in parts):
            parts = [part.astype(object) for part in parts]
        return np.concatenate(parts) if parts else np.zeros((0, len(self.generators)), dtype=np.int64)

    @property
    def fallbacks(self) -> int:
        return self._fallbacks + sum(release.fallbacks for release in self._releases.values())  # type: ignore[attr-defined]

    def moments(self, start: int, stop: int) -> NoiseMoments:
        """The noise moments of steps start … stop − 1 (each step's own segment plus the carried finals)."""
        pieces, t = [], start
        while t < stop:
            index = self.schedule.index_of(t)
            first = self.schedule.first(index)
            end = min(stop, first + self.schedule.segment(index).length)
            own = self._segment(index).moments(t - first, end - first)
            pieces.append(own.plus(self.carried(index)[1]))
            t = end
        return NoiseMoments.concatenate(pieces)

    def bars(self, start: int, stop: int, *, beta: float) -> ErrorBars:
        return self.moments(start, stop).bars(beta=beta)


def total_noise(generator, rate: Fraction) -> int:
    """Y ~ DLap(rate), the one draw of a segment total's noise: entry 0 of the first page of the
    keyed lattice stream of ``generator`` (``LatticeSource``: exact, regenerated, never redrawn)."""
    return LatticeSource(key=generator.key, rates=Rates(base=rate), page_size=1, cached_pages=1).integers(0, 1)[0]
