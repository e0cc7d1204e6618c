"""A mechanism: the decoder a counter streams, its exact sensitivity, its noise levels, its provenance.

``Mechanism`` is the value every engine runs (``engines.continual``, ``engines.keyed``, Spark,
the audit): a ``StreamingDecoder`` (``streaming.py``), the exact atoms of its rows (the base's
``ExactDecoder``, whose proven error bound decides the release's roundings, ``release.lattice``),
the exact sensitivity Δ = ‖R[:, :n]‖₁→₁ of its encoder for steps of value at most 1, the lift's
α's (they set the relative noise rates of the coarse levels: coordinate ℓ lives on the lattice
2^-g·s_ℓ with s_1 = 1 and s_ℓ = 1/α_{ℓ−1}, so its rate is λ_ℓ = ε·2^-g·s_ℓ/Δ_total, ``rates``),
and a record of where it comes from (the base file and its sha256, the certificate, or the
tree's closed form) from which a resumed counter rebuilds it. ``planner.py`` chooses one;
``lifted`` and ``tree`` build one.

What the privacy rests on is computed here from the matrices themselves, never read from a
profile or a plan: the base is loaded (its sha256 checked against the certificate when there is
one, and the certificate's sensitivity claim re-checked exactly), the sensitivity of the
truncated lift is the exact ‖R_p[:, :n]‖₁→₁ of the lift plan, and a tree's Δ is its exact
closed form (checked against the explicit matrices in tests).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization, array_sha256
from pure_dp_mf.mechanisms.lifted import LiftedDecoder
from pure_dp_mf.mechanisms.streaming import StreamingDecoder
from pure_dp_mf.release.lattice import ExactDecoder, Rates, noise_rate
from pure_dp_mf.release.single import SingleRelease
from pure_dp_mf.validation import check_size


@dataclass(frozen=True)
class Mechanism:
    """What a counter runs (module docstring). ``expected`` holds the MaxSE and MeanSE at ε = 1
    for steps of value at most 1 (the planner's figures; the counter's own error bars come from
    its exact rates); ``column_norms(n)`` the exact column ℓ1 norms of R[:, :n] (user-level
    sensitivities of keyed counts)."""

    name: str
    decoder: StreamingDecoder
    atoms: ExactDecoder
    sensitivity: Fraction
    alphas: tuple[Fraction, ...] | None
    horizon: int | None
    record: dict
    expected: dict | None = None
    column_norms: Callable[[int], list[Fraction]] | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        """ "lifted" or the tree's name."""
        return str(self.record["kind"])

    def rates(self, *, epsilon: float | Fraction, sensitivity: Fraction) -> Rates:
        """The noise rates of every level for a total ℓ1 sensitivity ``sensitivity`` (Δ_step·Δ,
        or a keyed user-level Δ): λ_ℓ = ε·2^-g·s_ℓ/sensitivity (``lattice.noise_rate``)."""
        base = noise_rate(epsilon=Fraction(epsilon), sensitivity=sensitivity, grid_bits=self.atoms.grid_bits)
        return Rates(base=base, alphas=self.alphas)

    def release(self, *, generators: list, epsilon: float, **options: Any) -> SingleRelease:
        """The exact release of this mechanism for a counter: one noise source per generator (a
        coordinate of the stream), rates for the total sensitivity Δ_step·Δ, or ``sensitivity``
        when given (a keyed user-level Δ); ``page_size`` is the noise layout (``LatticeSource``),
        ``cached_pages`` only memory. ``options`` (``step_sensitivity``, ``sensitivity``,
        ``page_size``, ``cached_pages``) are ``SingleRelease``'s, with its defaults."""
        return SingleRelease(mechanism=self, generators=generators, epsilon=epsilon, **options)


# ---------------------------------------------------------------------------------------------
# Lifted bases.


def base_digest(base: Factorization) -> str:
    """sha256 identifying a base: of its decoder's and encoder's float64 bytes and shapes."""
    decoder, encoder = base.dense()
    text = f"{decoder.shape}:{array_sha256(decoder)}:{encoder.shape}:{array_sha256(encoder)}"
    return hashlib.sha256(text.encode()).hexdigest()


_ATOMS: dict[str, ExactDecoder] = {}


def exact_decoder(base: Factorization, *, digest: str | None = None) -> ExactDecoder:
    """The base's ``lattice.ExactDecoder``, computed once per process and base (``base_digest``,
    or ``digest`` when the caller has computed it): at k = 1024 it costs two exact integer products."""
    digest = digest or base_digest(base)
    if digest not in _ATOMS:
        decoder, encoder = base.dense()
        _ATOMS[digest] = ExactDecoder.from_factorization(decoder=decoder, encoder=encoder)
    return _ATOMS[digest]


def lifted(
    *,
    base: Factorization | str | os.PathLike,
    horizon: int,
    metric: str | None = None,
    certificate: str | os.PathLike | None = None,
    top_alpha: Fraction | None = None,
) -> Mechanism:
    """The lift of ``base`` truncated to ``horizon`` (its α's minimise ``metric``, default the
    base's own; ``top_alpha`` fixes the top one, ``LiftedFamily.plan``), with the exact
    sensitivity ‖R_p[:, :horizon]‖₁→₁ of the lift plan.

    With ``certificate`` the base is the file it certifies: its sha256 and its claimed ‖R̃‖₁→₁
    are re-checked exactly (``certify.certified_sensitivity``, O(k²)); the accuracy claims are
    re-proved by ``pure-dp-mf verify``, not here.

    Raises:
        CertificateFileError, ClaimFailedError: an unreadable certificate, a base whose sha256
            differs, an encoder off the lattice or above the claimed sensitivity.
        InvalidInputError, NotAFactorizationError: a base that does not factor T_k.
    """
    horizon = check_size(horizon, name="horizon")
    if certificate is not None:
        from pure_dp_mf.certificates.certify import Certificate, certified_sensitivity

        certified_sensitivity(path=certificate)
        base = Certificate.read(certificate).factorization_path
    base_file = None if isinstance(base, Factorization) else str(Path(base).resolve())
    factorization = base if isinstance(base, Factorization) else _load(base_file)
    metric = metric or factorization.metric or "maxse"
    digest = base_digest(factorization)
    family = _family(factorization, metric, digest=digest)
    plan = family.plan(n=horizon, top_alpha=top_alpha)
    assert plan.sensitivity_exact is not None  # planned with the exact sensitivity (the default)
    atoms = exact_decoder(factorization, digest=digest)
    decoder = LiftedDecoder(decoder=atoms.decoder, alphas=[1.0] * (plan.levels - 1), rows=horizon)
    name = f"lifted base {Path(base_file).name}" if base_file else f"lifted base factorization of T_{factorization.n}"
    return Mechanism(
        name=name,
        decoder=decoder,
        atoms=atoms,
        sensitivity=plan.sensitivity_exact,
        alphas=tuple(plan.alphas_exact),
        horizon=horizon,
        record={
            "kind": "lifted",
            "base": base_file,
            "base_sha256": digest,
            "certificate": None if certificate is None else str(Path(certificate).resolve()),
            "metric": metric,
            "base_size": factorization.n,
            "top_alpha": None if top_alpha is None or plan.levels == 1 else str(Fraction(top_alpha)),
        },
        expected={"max_se": plan.costs.max_se, "mean_se": plan.costs.mean_se},
        column_norms=family.column_norms_exact_of,
    )


@functools.lru_cache(maxsize=8)
def _load(path: str) -> Factorization:
    return Factorization.load(path)


_FAMILIES: dict[tuple[str, str], object] = {}


def _family(base: Factorization, metric: str, *, digest: str):
    """The base's ``LiftedFamily`` for ``metric``, once per process and base (``digest``, its
    ``base_digest``): it checks that the base factors T_k and sums its columns exactly."""
    from pure_dp_mf.mechanisms.lift import LiftedFamily

    key = (digest, metric)
    if key not in _FAMILIES:
        _FAMILIES[key] = LiftedFamily(base=base, metric=metric)
    return _FAMILIES[key]


# ---------------------------------------------------------------------------------------------
# Trees.


def tree(*, mechanism: str, horizon: int, arity: int | None = None) -> Mechanism:
    """A tree mechanism of ``trees.MECHANISMS`` for ``horizon`` as a streaming decoder (any
    horizon, O(log n) memory); Δ is its exact closed form (``trees.tree_costs``)."""
    from pure_dp_mf.mechanisms import trees

    decoder = trees.tree_decoder(mechanism=mechanism, n=horizon, arity=arity)
    costs = trees.tree_costs(mechanism=mechanism, n=decoder.n, arity=decoder.arity)
    name = f"{mechanism} tree" + (f", arity {decoder.arity}" if decoder.arity is not None else "")
    return Mechanism(
        name=name,
        decoder=decoder,
        atoms=_unit_atoms(),
        sensitivity=costs.sensitivity,
        alphas=None,
        horizon=decoder.n,
        record={"kind": mechanism, "arity": decoder.arity},
        expected={"max_se": costs.max_se(), "mean_se": costs.mean_se()},
        column_norms=None,
    )


@functools.lru_cache(maxsize=1)
def _unit_atoms() -> ExactDecoder:
    """The 1×1 atom [1] of a tree's rows (one node per term), exact: τ = 0."""
    one = np.ones((1, 1))
    return ExactDecoder.from_factorization(decoder=one, encoder=one)


# ---------------------------------------------------------------------------------------------
# Rebuilding.


def from_record(record: dict, *, horizon: int | None):
    """The lifted or tree mechanism a state recorded (``Mechanism.record``), rebuilt for
    ``horizon``; a base whose file changed (sha256) is refused. Every record, the anytime one
    included, is rebuilt by ``resolve.from_record``."""
    kind = record.get("kind")
    if kind == "anytime":
        raise InvalidInputError("an anytime mechanism's record is rebuilt by resolve.from_record")
    if horizon is None:
        raise InvalidInputError("the state's mechanism needs a horizon")
    if kind == "lifted":
        if not record.get("base"):
            raise InvalidInputError("the state's mechanism names no base file")
        top_alpha = record.get("top_alpha")
        mechanism = lifted(
            base=record["base"],
            horizon=horizon,
            metric=record.get("metric"),
            certificate=record.get("certificate"),
            top_alpha=None if top_alpha is None else Fraction(top_alpha),
        )
        if mechanism.record["base_sha256"] != record.get("base_sha256"):
            raise InvalidInputError(f"the base {record['base']} changed since the state was made (sha256 differs)")
        return mechanism
    return tree(mechanism=str(kind), horizon=horizon, arity=record.get("arity"))
