"""Published claims about a factorization, checked: holds, fails, or cannot be decided.

A paper states numbers about its matrices ("‖R‖₁→₁ ≤ 3.8417", "‖L‖₂→∞ ≤ 1.8730", …). This
module proves, for the matrices as published, an exact lower and an exact upper bound of each
quantity, and answers for each claim "quantity ≤ c":

* **holds** when the proven upper bound is ≤ c (the slack c − upper is reported);
* **fails** when the proven lower bound is > c: a proof that the claim is false;
* **undecided** otherwise (the claim lies between the bounds, within the precision of the proof).

The quantities (``QUANTITIES``), for the encoder R̃ (R rounded to the lattice 2^-g, as Arkhipov &
Kalinin, arXiv 2607.08963, do before their check), L = T_k·R̃⁻¹ exactly, and, when the authors
publish one, their decoder L̃ exactly as given:

* ``encoder_max_column_sum`` ‖R̃‖₁→₁: exact (lower = upper);
* ``approximate_decoder_max_row_norm`` ‖L̃‖₂→∞, ``approximate_decoder_frobenius_norm`` ‖L̃‖_F of
  the decoder the bound is taken around: the published one when given (exact rationals of the
  published floats), else the float64 T_k·R̃⁻¹ rounded to the lattice, as the authors' script
  computes it; square roots bounded both ways;
* ``decoder_correction`` δ_L = ‖L − L̃‖ (the metric's norm) and ``decoder_max_row_norm`` ‖L‖₂→∞,
  ``decoder_frobenius_norm`` ‖L‖_F: by the Neumann series around L̃ (the published decoder, else
  a float64 T_k·R̃⁻¹ on the grid). With G = (L̃·R̃ − T_k)·T_k⁻¹ and E₁ = −G·L̃ (both exact
  integers up to a power of two), L − L̃ = E₁ − G·(L − L̃), so for ρ ≥ ‖G‖ (‖G‖∞→∞ for row norms,
  √(‖G‖₁‖G‖∞) ≥ ‖G‖₂ for the Frobenius norm), ρ < 1:

      ‖E₁‖·(1 − 2ρ)/(1 − ρ) ≤ δ_L ≤ ‖E₁‖/(1 − ρ),
      ‖L̃ + E₁‖ − ρ‖E₁‖/(1 − ρ) ≤ ‖L‖ ≤ ‖L̃ + E₁‖ + ρ‖E₁‖/(1 − ρ)

  (L = L̃ + E₁ − G·(L − L̃), and ‖G·X‖ ≤ ρ‖X‖ row-wise or in Frobenius norm);
* ``c2`` = ‖L‖₂→∞·‖R̃‖₁→₁, ``cf`` = ‖L‖_F·‖R̃‖₁→₁/√k, ``leading_constant`` 2c²/log₂(k)³ and
  ``lifted_constant`` 2c²/log₂(2k+1)³ (Theorem 2.5), with rational bounds on the logarithms.

Every bound is an integer or rational computation (FLINT and gmpy2); floats only choose the point
L̃ around which the series is taken. Claims are read from JSON with their decimals kept exact.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import gmpy2
import numpy as np

from pure_dp_mf import exact
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import METRICS, Factorization, decoder_from_encoder
from pure_dp_mf.validation import parse_json, read_bytes_limited

QUANTITIES = {
    "encoder_max_column_sum": "‖R̃‖₁→₁",
    "decoder_max_row_norm": "‖L‖₂→∞, L = T_k·R̃⁻¹",
    "decoder_frobenius_norm": "‖L‖_F, L = T_k·R̃⁻¹",
    "approximate_decoder_max_row_norm": "‖L̃‖₂→∞, L̃ the published decoder, else float64 T_k·R̃⁻¹ on the grid",
    "approximate_decoder_frobenius_norm": "‖L̃‖_F, L̃ the published decoder, else float64 T_k·R̃⁻¹ on the grid",
    "decoder_correction": "δ_L = ‖L − L̃‖ (‖·‖₂→∞ for maxse, ‖·‖_F for meanse)",
    "c2": "c₂ = ‖L‖₂→∞·‖R̃‖₁→₁",
    "cf": "c_F = ‖L‖_F·‖R̃‖₁→₁/√k",
    "leading_constant": "2c²/log₂(k)³ (c = c₂ for maxse, c_F for meanse)",
    "lifted_constant": "2c²/log₂(2k+1)³ (Theorem 2.5)",
}
VERDICTS = ("holds", "fails", "undecided")
MAX_CLAIMS_BYTES = 1 << 20
"""Largest claims file read (1 MiB: a claims file states a few numbers)."""
MAX_GRID_BITS = 512
"""Largest grid_bits of a claims file (the certifier's limit too)."""


@dataclass(frozen=True)
class ProvenRange:
    """Exact rationals lower ≤ quantity ≤ upper."""

    lower: Fraction
    upper: Fraction


def _q(value) -> Fraction:
    return exact.fraction(value)


def _dyadic_integers(matrix: np.ndarray) -> tuple[np.ndarray, int]:
    """(M, h) with matrix = M·2^-h exactly, M integers (an object array where they exceed int64)."""
    nonzero = matrix[matrix != 0]
    if nonzero.size == 0:
        return np.zeros(matrix.shape, dtype=np.int64), 0
    exponents = np.frexp(nonzero)[1]
    h = max(0, 53 - int(exponents.min()))  # x = f·2^e with f·2^53 an integer
    scaled = np.ldexp(matrix, h) if h < 900 else None
    if scaled is None or not np.all(np.isfinite(scaled)):
        values = [[int(Fraction(float(v)) * (1 << h)) for v in row] for row in matrix.tolist()]
        return np.array(values, dtype=object), h
    if np.all(np.abs(scaled) < 2.0**62):
        return scaled.astype(np.int64), h
    return np.array([[int(v) for v in row] for row in scaled.tolist()], dtype=object), h


def _norm_range(row_squares: list[int], *, scale_bits: int, metric: str) -> ProvenRange:
    """Bounds of the metric's norm of a matrix N·2^-scale_bits from the exact row sums of squares of N."""
    total = max(row_squares) if metric == "maxse" else sum(row_squares)
    value = gmpy2.mpq(total, gmpy2.mpz(2) ** (2 * scale_bits))
    return ProvenRange(lower=_q(exact.sqrt_lower(value)), upper=_q(exact.sqrt_upper(value)))


def proven_ranges(
    *, encoder: np.ndarray, decoder: np.ndarray | None, metric: str, grid_bits: int = exact.GRID_BITS
) -> dict[str, ProvenRange]:
    """Exact lower and upper bounds of every quantity in ``QUANTITIES`` (module docstring).

    Args:
        encoder: R (square, float); it is rounded to the lattice 2^-grid_bits first.
        decoder: the published decoder L̃ (k×k, as given), or None.
        metric: "maxse" or "meanse": the norm used for δ_L, c and the constants.
        grid_bits: g.

    Returns:
        {quantity: ProvenRange} for every quantity of the metric.

    Raises:
        InvalidInputError: a non-square encoder, a decoder of another shape, or L̃ too far from
            T_k·R̃⁻¹ for the series to converge (ρ ≥ 1).
    """
    if metric not in METRICS:
        raise InvalidInputError(f"metric must be one of {METRICS}, got {metric!r}")
    R = np.asarray(encoder, dtype=np.float64)
    k = R.shape[0]
    if R.ndim != 2 or R.shape != (k, k) or k < 2:
        raise InvalidInputError(f"claims are checked for a square k×k encoder with k ≥ 2, got shape {R.shape}")
    R_rounded, _ = exact.round_to_grid(R, grid_bits=grid_bits)
    P = exact.grid_integers(R_rounded, grid_bits=grid_bits, name="the rounded encoder")
    if decoder is not None:
        L_tilde = np.asarray(decoder, dtype=np.float64)
        if L_tilde.shape != (k, k):
            raise InvalidInputError(f"the decoder has shape {L_tilde.shape}; the encoder is {k}×{k}")
        M, h = _dyadic_integers(L_tilde)
    else:
        h = grid_bits
        M = exact.grid_integers(decoder_from_encoder(R_rounded), grid_bits=h, nearest=True, name="the float decoder")
    with exact.flint_threads():
        series = exact.neumann_series(
            P, exact.integer_matrix(M), grid_bits=grid_bits, decoder_bits=h, norm="rows" if metric == "maxse" else "frobenius"
        )
    rho = _q(series.rho)
    if rho >= 1:
        raise InvalidInputError(
            f"the Neumann series around the decoder does not converge (‖G‖ ≥ {float(rho):.3g} ≥ 1): "
            "L̃·R̃ is too far from T_k to bound L = T_k·R̃⁻¹ this way"
        )
    assert series.second_squares is not None
    E1_squares, second_squares, scale = series.first_squares, series.second_squares, series.scale_bits
    first = _norm_range(E1_squares, scale_bits=scale, metric=metric)
    approximate = _norm_range(second_squares, scale_bits=scale, metric=metric)
    tail = rho * first.upper / (1 - rho)
    decoder_range = ProvenRange(lower=max(Fraction(0), approximate.lower - tail), upper=approximate.upper + tail)
    correction = ProvenRange(lower=max(Fraction(0), first.lower * (1 - 2 * rho) / (1 - rho)), upper=first.upper / (1 - rho))
    sensitivity = Fraction(max(exact.column_abs_sums(P)), 1 << grid_bits)
    ranges: dict[str, ProvenRange] = {
        "encoder_max_column_sum": ProvenRange(sensitivity, sensitivity),
        ("decoder_max_row_norm" if metric == "maxse" else "decoder_frobenius_norm"): decoder_range,
        "decoder_correction": correction,
    }
    approximate_squares = exact.row_sums_of_squares(np.asarray(M).tolist())
    ranges["approximate_decoder_max_row_norm"] = _norm_range(approximate_squares, scale_bits=h, metric="maxse")
    ranges["approximate_decoder_frobenius_norm"] = _norm_range(approximate_squares, scale_bits=h, metric="meanse")
    if metric == "maxse":
        cost = ProvenRange(decoder_range.lower * sensitivity, decoder_range.upper * sensitivity)
        ranges["c2"] = cost
    else:
        cost = ProvenRange(
            _q(exact.sqrt_lower(decoder_range.lower**2 * sensitivity**2 / k)),
            _q(exact.sqrt_upper(decoder_range.upper**2 * sensitivity**2 / k)),
        )
        ranges["cf"] = cost
    for name, m in (("leading_constant", k), ("lifted_constant", 2 * k + 1)):
        log_lower, log_upper = exact.log2_bounds(m)
        ranges[name] = ProvenRange(2 * cost.lower**2 / log_upper**3, 2 * cost.upper**2 / log_lower**3)
    return ranges


@dataclass(frozen=True)
class Verdict:
    """One claim "quantity ≤ bound" and what was proven about it."""

    quantity: str
    bound: Fraction
    verdict: str
    lower: Fraction | None
    upper: Fraction | None

    @property
    def slack(self) -> Fraction | None:
        """bound − proven upper bound (≥ 0 when the claim holds)."""
        return None if self.upper is None else self.bound - self.upper

    def as_dict(self) -> dict:
        def down(value: Fraction | None) -> str | None:  # 12 significant digits, rounded toward −∞
            return None if value is None else _render(value, lower=True)

        def up(value: Fraction | None) -> str | None:  # rounded toward +∞
            return None if value is None else _render(value, lower=False)

        claim = _render(self.bound, lower=False)
        return {
            "quantity": self.quantity,
            "meaning": QUANTITIES[self.quantity],
            "claim": f"≤ {claim}",
            "verdict": self.verdict,
            "proven_lower": down(self.lower),
            "proven_upper": up(self.upper),
            "slack": down(self.slack),
        }


@dataclass
class ClaimsReport:
    """The verdicts of a claims file, and which matrices they are about."""

    encoder: dict
    decoder: dict | None
    metric: str
    grid_bits: int
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def all_hold(self) -> bool:
        return all(v.verdict == "holds" for v in self.verdicts)

    def as_dict(self) -> dict:
        return {
            "encoder": self.encoder,
            "decoder": self.decoder,
            "metric": self.metric,
            "grid_bits": self.grid_bits,
            "all_hold": self.all_hold,
            "claims": [v.as_dict() for v in self.verdicts],
        }


def _render(value: Fraction, *, lower: bool) -> str:
    """``value`` exactly when it has at most 12 significant digits, else rounded to 12 digits
    toward −∞ (``lower``) or +∞, so a rendered lower bound stays a lower bound."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + _render(-value, lower=not lower)
    rounded = exact.decimal_floor(value, digits=12) if lower else exact.decimal_ceil(value, digits=12)
    return exact.decimal_string(rounded)


def judge(*, quantity: str, bound: Fraction, ranges: dict[str, ProvenRange]) -> Verdict:
    """The verdict on "quantity ≤ bound" (module docstring)."""
    proven = ranges.get(quantity)
    if proven is None:
        return Verdict(quantity, bound, "undecided", None, None)
    verdict = "holds" if proven.upper <= bound else ("fails" if proven.lower > bound else "undecided")
    return Verdict(quantity, bound, verdict, proven.lower, proven.upper)


def _exact_number(value: object, *, where: str) -> Fraction:
    if isinstance(value, Fraction):
        return value
    if isinstance(value, str) and value.strip():
        try:
            return exact.parse_number(value.strip(), what=where)
        except InvalidInputError as error:
            if "is not a number" not in str(error):  # a number beyond the caps: say which cap
                raise
    raise InvalidInputError(f"{where}: a claim's bound must be a number (a JSON number or a decimal string), got {_shown(value)}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_claims(path: str | os.PathLike) -> dict:
    """The claims file (JSON), its numbers kept as exact fractions. Keys: ``encoder`` (a file,
    relative to the claims file), ``metric``, ``claims`` ({quantity: bound} or a list of
    {"quantity", "bound"}), and optionally ``encoder_array``, ``decoder``, ``decoder_array``,
    ``integer_grid_bits``, ``grid_bits`` (default 32)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such claims file")
    data = read_bytes_limited(path, limit=MAX_CLAIMS_BYTES, what=str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInputError(
            f"{path}: not a JSON claims file (not UTF-8 text: {error.reason} at byte {error.start})"
        ) from None

    def number(written: str) -> Fraction:  # JSON numbers kept exact, within the caps of exact.parse_number
        return exact.parse_number(written, what=f"{path}: the number")

    document = parse_json(text, what=f"{path}: the claims file", parse_float=number, parse_int=number)
    if not isinstance(document, dict):
        raise InvalidInputError(f"{path}: a claims file is a JSON object")
    for required in ("encoder", "metric", "claims"):
        if required not in document:
            raise InvalidInputError(f"{path}: the claims file has no {required!r}")
    for name in ("encoder", "metric", "encoder_array", "decoder", "decoder_array"):
        if name in document and not (isinstance(document[name], str) or (document[name] is None and name != "encoder")):
            raise InvalidInputError(f"{path}: {name!r} must be a string")
    if document["metric"] not in METRICS:
        raise InvalidInputError(f"{path}: 'metric' must be one of {', '.join(METRICS)}, got {_shown(document['metric'])}")
    claims = document["claims"]
    if isinstance(claims, dict):
        pairs = list(claims.items())
    elif isinstance(claims, list) and all(isinstance(c, dict) and {"quantity", "bound"} <= set(c) for c in claims):
        pairs = [(c["quantity"], c["bound"]) for c in claims]
    else:
        raise InvalidInputError(f"{path}: 'claims' must map quantities to bounds, or list {{quantity, bound}} objects")
    if not pairs:
        raise InvalidInputError(f"{path}: the claims file states no claim")
    parsed = []
    for quantity, bound in pairs:
        if not isinstance(quantity, str) or quantity not in QUANTITIES:
            raise InvalidInputError(f"{path}: unknown quantity {_shown(quantity)}; known: {', '.join(QUANTITIES)}")
        parsed.append((quantity, _exact_number(bound, where=f"{path}: {quantity}")))
    document["claims"] = parsed
    for name, (low, high) in (("grid_bits", (1, MAX_GRID_BITS)), ("integer_grid_bits", (0, 1000))):
        if document.get(name) is not None:
            value = document[name]
            if not (isinstance(value, Fraction) and value.denominator == 1):
                raise InvalidInputError(f"{path}: {name} must be an integer")
            if not low <= value <= high:
                raise InvalidInputError(f"{path}: {name} must be between {low} and {high}, got {value}")
            document[name] = int(value)
    return document


def check_claims(*, path: str | os.PathLike) -> ClaimsReport:
    """Check every claim of the claims file ``path`` (``read_claims``) against the matrices it names.

    Returns:
        A ``ClaimsReport``; ``all_hold`` is True only if every claim holds.

    Raises:
        InvalidInputError: an unreadable claims file or matrix (one clear line each).
    """
    path = Path(path)
    document = read_claims(path)
    folder = path.resolve().parent
    decoder_file = document.get("decoder")
    factorization = Factorization.load(
        folder / str(document["encoder"]),
        array=document.get("encoder_array"),
        decoder=None if decoder_file is None else folder / str(decoder_file),
        decoder_array=document.get("decoder_array"),
        integer_grid_bits=document.get("integer_grid_bits"),
    )
    metric = str(document["metric"])
    grid_bits = int(document.get("grid_bits") or exact.GRID_BITS)
    L, R = factorization.dense()
    ranges = proven_ranges(encoder=R, decoder=L if decoder_file is not None else None, metric=metric, grid_bits=grid_bits)
    source = factorization.metadata.get("source", {})
    report = ClaimsReport(
        encoder=source.get("encoder", {"file": str(document["encoder"])}),
        decoder=source.get("decoder"),
        metric=metric,
        grid_bits=grid_bits,
    )
    report.verdicts = [judge(quantity=quantity, bound=bound, ranges=ranges) for quantity, bound in document["claims"]]
    return report
