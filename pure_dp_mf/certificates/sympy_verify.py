"""An independent verification route for certificates, in sympy's exact arithmetic.

Arkhipov & Kalinin (arXiv 2607.08963) re-verify their matrices with sympy. This module does the
same for a certificate of this library (``certify.py``): ``verify_with_sympy`` re-checks every
claim with sympy alone, by a route that shares no code with the FLINT verifier
(``certify.verify_certificate``) beyond reading the certificate's JSON (``Certificate.read``) and
the factorization file (``Factorization.load``); it reports in the same record
(``VerificationResult``) and raises the same ``ClaimFailedError`` naming the first claim that fails.

The route
---------
1. The file's sha256 (``hashlib``), that it stores no decoder, that the encoder is k×k.
2. R̃ = P·2^-g: every float64 entry x is the exact rational ``x.as_integer_ratio()``, and its
   denominator must divide 2^g (the grid claim).
3. ‖R̃‖₁→₁ = max_j Σ_i |P_ij| / 2^g, a ``sympy.Rational``; the claim must be ≥ it.
4. **L exactly.** P⁻¹ = N/d by sympy's fraction-free inverse over ℤ (``DomainMatrix.inv_den``,
   Bareiss elimination), checked by the exact product P·N = d·I; then
   L = T_k·R̃⁻¹ = 2^g·T_k·N/d, whose rows are 2^g/d times the prefix sums of the rows of N. No
   Neumann series, no float approximation of L: ‖L‖²₂→∞ = max_i ‖L_i‖² and ‖L‖²_F = Σ_i ‖L_i‖²
   are exact rationals, and the decoder claim D holds iff D ≥ 0 and D² ≥ ‖L‖², decided exactly.
5. The cost claim must be at least what the claims above give (the certificate's own rule):
   c₂ ≥ D·S; c_F ≥ 0 with c_F² ≥ D²·S²/k.
6. Each log₂ lower bound ℓ (of k and of 2k + 1) must satisfy 2^ℓ ≤ x: with e = ⌊ℓ⌋ and
   f = ℓ − e ∈ [0, 1), 2^ℓ = 2^e·exp(f·ln 2) is bounded from above by rationals (ln 2 ≤ the
   partial sum of Σ 1/(j·2^j) plus its tail bound; exp(y) ≤ its Taylor polynomial plus the
   remainder bound y^N/N!·1/(1 − y/(N+1)), y rounded up to 2^-256), and x must be at least that
   bound: neither the certifier's atanh series nor the FLINT verifier's repeated squaring.
7. The leading and lifted constants must be at least 2c²/ℓ³ with c and ℓ the claims above; for
   meanse, the exact-lift constant at least (2k/(2k+1))·2c²/ℓ³ with ℓ the claimed bound of log₂(2k+1).
8. Every claim's decimal must be its fraction rounded up to 12 significant digits (down for the
   log₂ lower bounds), computed and written here from the fraction.
9. A ``rounded_from`` record: the named file beside the certified one has the sha256 named, and
   its encoder rounded to the grid (nearest, ties to even, in exact integers) is the certified one.

Cost: the exact inverse is O(k³) operations on integers of O(k·g) bits, so the route is
practical up to k of a few hundred (about 11 s at k = 128 and 4 minutes of CPU at k = 256 on
the machine of the README); ``verify_with_sympy`` refuses k above ``max_base_size`` (default
``DEFAULT_MAX_BASE_SIZE`` = 256) with a clear error. The verifier of ``certify.py`` handles every
shipped k in seconds.

sympy computes with python-flint's integers when it is installed and nothing chose otherwise; to
keep this route off FLINT, sympy is imported here with GMP's (gmpy2) integers unless it was
already imported or ``SYMPY_GROUND_TYPES`` is set (``GROUND_TYPES`` says which are in use).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pure_dp_mf.certificates.certify import (
    Certificate,
    Check,
    ClaimFailedError,
    VerificationResult,
)
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.validation import check_size

if "sympy" not in sys.modules and "SYMPY_GROUND_TYPES" not in os.environ:
    os.environ["SYMPY_GROUND_TYPES"] = "gmpy"  # read once, when sympy is first imported
    try:
        import sympy
    finally:
        del os.environ["SYMPY_GROUND_TYPES"]
else:
    import sympy
from sympy.external.gmpy import GROUND_TYPES  # noqa: E402 - after the choice of sympy's integers above
from sympy.polys.matrices import DomainMatrix  # noqa: E402

__all__ = ["DEFAULT_MAX_BASE_SIZE", "GROUND_TYPES", "verify_with_sympy"]

DEFAULT_MAX_BASE_SIZE = 256
DECIMAL_DIGITS = 12  # the certificate format's (pure_dp_mf.certificate/1) decimal renderings
PROVEN_DIGITS = 15  # the "verifier's bound" column, as the FLINT verifier prints it
SQRT_BITS = 128
_LN2_TERMS = 260  # ln 2 from above within 2^-260
_EXP_TERMS = 80  # exp(y), 0 ≤ y < 0.7, from above within 2^-300
_EXP_ROUNDING_BITS = 256
_DECODER_CLAIM = {"maxse": "decoder_max_row_norm", "meanse": "decoder_frobenius_norm"}
_COST_CLAIM = {"maxse": "c2", "meanse": "cf"}

Progress = Callable[[str], None]
Q = sympy.Rational
EXACT_LIFT_CLAIM = "lifted_constant_meanse_exact_lift"  # the claim name, written out (no shared code)


# ------------------------------------------------------------------ exact helpers (sympy only)


def _q(value) -> sympy.Rational:
    """A Fraction (or int) as a sympy Rational, exactly."""
    return Q(int(value.numerator), int(value.denominator))


def _floor(value: sympy.Rational) -> int:
    return int(sympy.floor(value))


def _ceiling(value: sympy.Rational) -> int:
    return int(sympy.ceiling(value))


def _sqrt_upper(value: sympy.Rational) -> sympy.Rational:
    """r = y/2^SQRT_BITS with r² ≥ value (value ≥ 0), from ``sympy.integer_nthroot``."""
    target = _ceiling(value * Q(4) ** SQRT_BITS)
    root, exact = sympy.integer_nthroot(target, 2)
    return Q(int(root) + (0 if exact else 1), 2**SQRT_BITS)


def _decimal_exponent(value: sympy.Rational) -> int:
    """e with 10^e ≤ value < 10^(e+1), for value > 0."""
    e = len(str(_floor(value))) - 1 if value >= 1 else -len(str(_floor(1 / value)))
    while Q(10) ** e > value:
        e -= 1
    while Q(10) ** (e + 1) <= value:
        e += 1
    return e


def _round_digits(value: sympy.Rational, *, digits: int, up: bool) -> sympy.Rational:
    """The decimal with ``digits`` significant digits nearest to ``value`` (> 0) from above
    (``up``) or from below."""
    scale = Q(10) ** (digits - 1 - _decimal_exponent(value))
    return Q(_ceiling(value * scale) if up else _floor(value * scale)) / scale


def _decimal_text(value: sympy.Rational) -> str:
    """The exact decimal expansion of a rational whose denominator is 2^a·5^b, with no
    trailing zeros (the certificate format's rendering)."""
    numerator, denominator = int(value.p), int(value.q)
    twos = fives = 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    if denominator != 1:
        raise InvalidInputError(f"{value} has no finite decimal expansion")
    places = max(twos, fives)
    digits = abs(numerator) * 10**places // int(value.q)
    text = str(digits).rjust(places + 1, "0")
    sign = "-" if numerator < 0 else ""
    return sign + (text if places == 0 else f"{text[:-places]}.{text[-places:]}")


def _shown(value: sympy.Rational, *, up: bool) -> str:
    if value == 0:
        return "0"
    return _decimal_text(_round_digits(value, digits=PROVEN_DIGITS, up=up))


def _ln2_upper() -> sympy.Rational:
    """ln 2 = Σ_{j≥1} 1/(j·2^j) ≤ the first J terms + 1/((J+1)·2^J)."""
    total = sum((Q(1, j * 2**j) for j in range(1, _LN2_TERMS + 1)), Q(0))
    return total + Q(1, (_LN2_TERMS + 1) * 2**_LN2_TERMS)


def _exp_upper(y: sympy.Rational) -> sympy.Rational:
    """exp(y) for 0 ≤ y < 1, from above: Σ_{j<N} y^j/j! + y^N/N!·1/(1 − y/(N+1))."""
    y = Q(_ceiling(y * 2**_EXP_ROUNDING_BITS), 2**_EXP_ROUNDING_BITS)  # exp increases: rounding y up is safe
    total, term = Q(0), Q(1)
    for j in range(_EXP_TERMS):
        total += term
        term = term * y / (j + 1)
    return total + term / (1 - y / (_EXP_TERMS + 1))


def _log2_lower_bound_holds(bound: sympy.Rational, x: int) -> bool:
    """True only if ``bound`` ≤ log₂ x is proven: x ≥ 2^e·exp(f·ln 2), e = ⌊bound⌋, f = bound − e."""
    if bound <= 0:
        return x >= 1
    e = _floor(bound)
    if e >= x.bit_length():  # 2^e > x
        return False
    f = bound - e
    return Q(x) >= Q(2) ** e * _exp_upper(f * _ln2_upper())


# ------------------------------------------------------------------ the route


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _grid_integers(R: np.ndarray, g: int) -> list[list[int]]:
    """P with R = P·2^-g exactly, or ``ClaimFailedError("grid_bits")``."""
    scale = 1 << g
    rows = []
    for i, row in enumerate(R.tolist()):
        integers = []
        for j, x in enumerate(row):
            numerator, denominator = float(x).as_integer_ratio()
            if scale % denominator:
                raise ClaimFailedError("grid_bits", f"the encoder entry ({i}, {j}) = {x!r} is not on the grid 2^-{g}")
            integers.append(numerator * (scale // denominator))
        rows.append(integers)
    return rows


def _nearest_grid_integer(x: float, g: int) -> int:
    """round(x·2^g), ties to even (numpy's rint), in exact integers."""
    numerator, denominator = float(x).as_integer_ratio()
    numerator <<= g
    low, remainder = divmod(numerator, denominator)
    if 2 * remainder > denominator or (2 * remainder == denominator and low % 2):
        low += 1
    return low


def _load(certificate: Certificate) -> np.ndarray:
    path = certificate.factorization_path
    if not path.is_file():
        raise ClaimFailedError("factorization_sha256", f"the certified factorization file {path} does not exist")
    digest = _sha256(path)
    if digest != certificate.factorization_sha256:
        raise ClaimFailedError(
            "factorization_sha256",
            f"{path} has sha256 {digest}, the certificate is for {certificate.factorization_sha256} (another or a changed file)",
        )
    factorization = Factorization.load(path)
    if "decoder" in factorization.metadata.get("arrays", {}):
        raise ClaimFailedError("factorization", f"{path} stores a decoder; a certified factorization is its encoder alone")
    R = np.asarray(factorization.encoder, dtype=np.float64)
    if R.shape != (certificate.n, certificate.n):
        raise ClaimFailedError("n", f"the encoder has shape {R.shape}, the certificate says k = {certificate.n}")
    return R


def _exact_decoder_squares(P: list[list[int]], g: int, *, metric: str) -> sympy.Rational:
    """‖L‖² exactly (‖·‖₂→∞² for maxse, ‖·‖_F² for meanse), L = T_k·(P·2^-g)⁻¹."""
    k = len(P)
    name = _DECODER_CLAIM[metric]
    matrix = DomainMatrix([[sympy.ZZ(v) for v in row] for row in P], (k, k), sympy.ZZ)
    inverse, denominator = matrix.inv_den()
    if denominator == 0:
        raise ClaimFailedError(name, "the encoder is singular: L = T_k·R̃⁻¹ does not exist")
    identity = DomainMatrix.eye(k, sympy.ZZ).to_dense() * denominator
    if (matrix * inverse).to_dense() != identity:  # the inverse is proven here, not trusted
        raise ClaimFailedError(name, "sympy's inverse of the encoder does not check (P·N ≠ d·I)")
    N = [[int(v) for v in row] for row in inverse.to_list()]
    running = [0] * k
    squares = []
    for row in N:  # rows of T_k·N: prefix sums of the rows of N
        running = [a + b for a, b in zip(running, row, strict=True)]
        squares.append(sum(v * v for v in running))
    combined = max(squares) if metric == "maxse" else sum(squares)
    return Q(combined * 4**g, int(denominator) ** 2)


def _check_rounded_from(certificate: Certificate, P: list[list[int]]) -> None:
    record = certificate.rounded_from or {}
    name, digest = record.get("file"), record.get("sha256")
    if not isinstance(name, str) or not isinstance(digest, str) or Path(name).name != name:
        raise ClaimFailedError("rounded_from", "the record must name a file beside the certified one and its sha256")
    original = certificate.factorization_path.parent / name
    if not original.is_file():
        raise ClaimFailedError("rounded_from", f"{original} does not exist, so the rounding cannot be re-checked")
    if _sha256(original) != digest:
        raise ClaimFailedError("rounded_from", f"{original} does not have the sha256 the certificate names")
    options = {key: record.get(key) for key in ("array", "integer_grid_bits") if record.get(key) is not None}
    try:
        source = Factorization.load(original, **options)
    except Exception as error:  # noqa: BLE001 - whatever stops the re-reading is the claim failing
        raise ClaimFailedError("rounded_from", f"{original} cannot be read as the record says: {error}") from None
    encoder = np.asarray(source.dense()[1], dtype=np.float64)
    g = certificate.grid_bits
    if encoder.shape != (len(P), len(P)) or any(
        _nearest_grid_integer(x, g) != p
        for row, prow in zip(encoder.tolist(), P, strict=True)
        for x, p in zip(row, prow, strict=True)
    ):
        raise ClaimFailedError("rounded_from", f"rounding {original.name} to the grid does not give the certified encoder")


def _cost_holds(*, metric: str, cost, decoder, sensitivity, k: int) -> tuple[bool, sympy.Rational]:
    """(holds, the least value the claims allow) of the cost claim: c₂ ≥ D·S, or c_F² ≥ D²·S²/k."""
    if metric == "maxse":
        needed = decoder * sensitivity
        return bool(cost >= needed), needed
    square = decoder**2 * sensitivity**2 / k
    return bool(cost >= 0 and cost**2 >= square), _sqrt_upper(square)


def verify_with_sympy(
    *, path: str | os.PathLike, max_base_size: int = DEFAULT_MAX_BASE_SIZE, progress: Progress | None = None
) -> VerificationResult:
    """Re-prove every claim of the certificate at ``path`` in sympy's exact arithmetic, by the
    route of the module docstring (independent of ``certify.verify_certificate``).

    Args:
        path: the certificate (JSON); the factorization file is found relative to it.
        max_base_size: refuse certificates of k above this (the exact inverse is O(k³)).
        progress: called with a short message at each stage.

    Returns:
        A ``VerificationResult`` listing every check (claimed decimal, the bound proven here), if
        every claim holds.

    Raises:
        InvalidInputError: k above ``max_base_size``.
        CertificateFileError: a malformed certificate.
        ClaimFailedError: names the first claim that does not hold.
    """
    say = progress or (lambda message: None)
    start = time.perf_counter()
    limit = check_size(max_base_size, name="max_base_size", minimum=2)
    certificate = Certificate.read(path)
    metric, k, g = certificate.metric, certificate.n, certificate.grid_bits
    if k > limit:
        raise InvalidInputError(
            f"{path}: k = {k}; the sympy engine verifies certificates up to k = {limit} (an exact inverse, "
            f"O(k³) big-integer operations: about 4 minutes at k = 256); use the flint engine (verify_certificate, "
            "--engine flint) or raise max_base_size (--max-base-size)"
        )
    say(f"checking {certificate.factorization_path}")
    R = _load(certificate)
    P = _grid_integers(R, g)
    claims = {name: _q(bound.value) for name, bound in certificate.claims.items()}
    logs = {name: _q(bound.value) for name, bound in certificate.log2_lower_bounds.items()}
    checks: list[Check] = []

    def record(name: str, holds: bool, proven: sympy.Rational, why: str) -> None:
        lower = name.startswith("log2_lower_bound ")
        key = name.removeprefix("log2_lower_bound ")
        bound = certificate.log2_lower_bounds[key] if lower else certificate.claims[name]
        value = logs[key] if lower else claims[name]
        if value <= 0:
            raise ClaimFailedError(name, f"the bound {bound.value} is not positive")
        expected = _decimal_text(_round_digits(value, digits=DECIMAL_DIGITS, up=not lower))
        if bound.decimal != expected:
            raise ClaimFailedError(
                name, f"decimal {bound.decimal} is not its fraction rounded {'down' if lower else 'up'} ({expected})"
            )
        if not holds:
            raise ClaimFailedError(name, f"claimed {bound.decimal}, but {why}")
        checks.append(Check(name, bound.decimal, _shown(proven, up=not lower)))

    S = Q(max(sum(abs(row[j]) for row in P) for j in range(k)), 2**g)
    record("encoder_max_column_sum", claims["encoder_max_column_sum"] >= S, S, f"the exact ‖R‖₁→₁ is {float(S)!r}")

    say(f"exact inverse of the encoder in sympy (k = {k})")
    D_name = _DECODER_CLAIM[metric]
    squares = _exact_decoder_squares(P, g, metric=metric)
    D = claims[D_name]
    norm = _sqrt_upper(squares)
    record(D_name, bool(D >= 0 and D**2 >= squares), norm, f"the exact norm of L = T_k·R̃⁻¹ is {float(norm)!r}")

    cost_name = _COST_CLAIM[metric]
    C = claims[cost_name]
    holds, needed = _cost_holds(metric=metric, cost=C, decoder=D, sensitivity=claims["encoder_max_column_sum"], k=k)
    record(cost_name, holds, needed, f"it must be at least {float(needed)!r} (from the claims above)")

    for name, x in (("k", k), ("2k+1", 2 * k + 1)):
        record(
            f"log2_lower_bound {name}",
            _log2_lower_bound_holds(logs[name], x),
            logs[name],
            f"2 to its power exceeds {x}: it is not a lower bound of log₂({x})",
        )
    for name, log in (("leading_constant", logs["k"]), ("lifted_constant", logs["2k+1"])):
        needed = 2 * C**2 / log**3
        record(name, bool(claims[name] >= needed), needed, f"2c²/ℓ³ = {float(needed)!r} with the claims above")
    if metric == "meanse":
        needed = Q(2 * k, 2 * k + 1) * 2 * C**2 / logs["2k+1"] ** 3
        why = f"(2k/(2k+1))·2c²/ℓ_(2k+1)³ = {float(needed)!r} with the claims above"
        record(EXACT_LIFT_CLAIM, bool(claims[EXACT_LIFT_CLAIM] >= needed), needed, why)
    if certificate.rounded_from is not None:
        _check_rounded_from(certificate, P)
    return VerificationResult(
        certificate_path=Path(path),
        factorization_path=certificate.factorization_path,
        factorization_sha256=certificate.factorization_sha256,
        n=k,
        metric=metric,
        checks=checks,
        seconds=time.perf_counter() - start,
    )
