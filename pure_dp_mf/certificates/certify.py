"""Certificates: exact upper bounds on the costs of a base factorization of T_k, and their
independent verification (Arkhipov & Kalinin, section 2.1 and Proposition 2.6; docs/architecture.md "Files").

What is certified
-----------------
The certified factorization is defined by its encoder alone: R̃, a square k×k matrix whose
entries lie on the grid 2^-g (g = ``grid_bits``, 32 by default), and L = T_k·R̃⁻¹, the exact
decoder (a rational matrix that is never formed). The file that holds R̃ is named by the
certificate with its sha256; when the input file's encoder is not on the grid, or the input
stores a decoder, ``certify_factorization`` writes the rounded factorization (encoder only)
beside it and certifies that file: it is the one the streamer must use. The certificate claims

* ‖R̃‖₁→₁ (the ℓ1 sensitivity, exact),
* ‖L‖₂→∞ (metric ``maxse``) or ‖L‖_F (metric ``meanse``),
* c₂ = ‖L‖₂→∞·‖R̃‖₁→₁ or c_F = ‖L‖_F·‖R̃‖₁→₁/√k,
* the leading constant 2C² = 2c²/log₂(k)³ and the lifted constant
  2C²·(log₂k/log₂(2k+1))³ = 2c²/log₂(2k+1)³ (Theorem 2.5),
* for ``meanse`` also the exact-lift MeanSE constant (2k/(2k+1))·2c_F²/log₂(2k+1)³, the
  constant of MeanSE/log₂³n along the lifted sizes n = ((2k+1)^p − 1)/2 when the ◇ lift's
  coarse-only rows are counted (docs/lifting.md, "The exact MeanSE asymptote of the lift"),

each as an exact fraction that is proven to be an upper bound, with a decimal rendering
rounded up to 12 significant digits, and rational lower bounds of log₂k and log₂(2k+1).

The proof, step by step (certifier)
-----------------------------------
1. R̃ = P·2^-g with P an integer matrix (exact rounding, ``exact.round_to_grid``).
   ‖R̃‖₁→₁ = max_j Σ_i |P_ij| / 2^g, exactly.
2. A float64 approximation of L (the stored decoder if the file has one, else T_k·R̃⁻¹ by an LU
   solve) is rounded to L̃ = M·2^-g. Floats stop here: everything below is integer arithmetic.
3. Δ̃ = L̃R̃ − T_k = (M·P − 2^(2g)·T_k)·2^-2g, exactly (integer products).
4. G = Δ̃·T_k⁻¹, exactly: T_k⁻¹ = I − (subdiagonal shift), so G_ij = Δ̃_ij − Δ̃_i,j+1
   (and G_i,k = Δ̃_i,k). The certifier forms it without Δ̃ as G = (M·(P·T_k⁻¹) − 2^2g·I)·2^-2g,
   since T_k·T_k⁻¹ = I (P·T_k⁻¹: each column of P minus the next, in int64).
5. Identity: L̃R̃ = T_k + Δ̃ = (I + G)·T_k, hence L̃ = (I + G)·T_k·R̃⁻¹ = (I + G)·L, i.e.
   L = L̃ − G·L. Let E = L − L̃ = −G·L, E₁ = −G·L̃ (exact, one more integer product) and
   L̂ = L̃ + E₁ = (I − G)·L̃ (exact). Then E = E₁ − G·E and L − L̂ = E − E₁ = −G·E.
6. Convergence. Let ρ be a norm of G compatible with the cost:
   * maxse: ρ = ‖G‖∞→∞ = max_i Σ_j |G_ij|. For any matrix X, row t of G·X has
     ‖(GX)_t‖₂ ≤ Σ_i |G_ti|·‖X_i‖₂ ≤ ρ·‖X‖₂→∞.
   * meanse: ρ = √(‖G‖₁→₁·‖G‖∞→∞) ≥ ‖G‖₂ (bounded above by ``sqrt_upper``), and
     ‖G·X‖_F ≤ ‖G‖₂·‖X‖_F ≤ ρ·‖X‖_F.
   If ρ ≥ 1 the certificate is refused (the Neumann series of (I + G)⁻¹ is not shown to
   converge: L·R is too far from T_k). If ρ < 1, I + G is invertible, so (I + G)·T_k = L̃R̃ is,
   so R̃ is invertible and L exists.
7. With ‖·‖ the row-wise norm ‖·‖₂→∞ (maxse) or ‖·‖_F (meanse): from E = E₁ − G·E,
   ‖E‖ ≤ ‖E₁‖ + ρ‖E‖, so ‖E‖ ≤ ‖E₁‖/(1 − ρ); and ‖L − L̂‖ = ‖G·E‖ ≤ ρ‖E₁‖/(1 − ρ) =: τ.
   By the triangle inequality (row by row for ‖·‖₂→∞):  ‖L‖ ≤ ‖L̂‖ + τ.
8. ‖L̂‖² and ‖E₁‖² are exact rationals (integer sums of squares over 2^6g); their square roots
   are bounded above by integer square roots at 2^-128 (``exact.sqrt_upper``).
   L̂ is the second-order approximation of L, so the bound is within about ρ·‖E₁‖ ≈ 10^-15
   (relative) of the true norm: far inside a 10^-6 relative target.
9. The claimed decoder norm is that bound rounded up to 12 significant digits plus one unit in
   the 12th digit (a headroom of 10^-12 to 10^-11, relative). The headroom lets the verifier,
   which approximates L by its own float route (so by a different L̃, on any machine), prove
   the same number; it also keeps every certified constant above its float64 evaluation, whose
   own rounding error is about 10^-13. The cost c and the constants are computed from the
   claims exactly and rounded up to 12 digits: c₂ = D·S; c_F ≥ √(D²S²/k) (``sqrt_upper``);
   2C² = 2c²/ℓ_k³ and lifted = 2c²/ℓ_{2k+1}³ with ℓ_x ≤ log₂x from ``exact.log2_lower_bound``
   (a series of positive terms for ln y and an upper bound of ln 2; exact for powers of two);
   for meanse also (2k/(2k+1))·2c²/ℓ_{2k+1}³, with the same c and ℓ_{2k+1}.

Verification (independent of the certifier where practical)
-----------------------------------------------------------
``verify_certificate`` reads only the certificate and the factorization file. It checks the
file's sha256, the grid, then each claim in order and raises ``ClaimFailedError`` naming the
first one that fails. It recomputes ‖R̃‖₁→₁ exactly; approximates L by its own float route
(L̃ = cumulative row sums of inv(R̃), not the certifier's LU solve); forms G by an explicit
integer product with T_k⁻¹ (not by column differences); uses ρ = ‖G‖_F for meanse (not
√(‖G‖₁‖G‖∞)); and checks D ≥ √A + c·√B (c = ρ/(1 − ρ), A = ‖L̂‖², B = ‖E₁‖²) without square
roots: D² ≥ c²B, u = D² + c²B − A ≥ 0 and u² ≥ 4D²c²B. The claimed log₂ lower bounds
(denominators powers of two) are checked by truncated repeated squaring with integers
(``exact.log2_lower_bound_holds``), not by the certifier's series. Every decimal must be the
12-digit round-up of its fraction (round-down for the log₂ lower bounds), so changing a
fraction or a decimal alone is detected.

A claim lowered by less than its headroom is still a proven bound and is still accepted; a
lower claim fails. ``certified_sensitivity`` returns the claimed ‖R̃‖₁→₁ after re-checking it
exactly against the named file (cheap: O(k²)), for the streamer's noise scale.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np

import pure_dp_mf
from pure_dp_mf import exact
from pure_dp_mf.atomic import atomic_write_text, check_writable_file
from pure_dp_mf.errors import CheckFailedError, InvalidInputError, PureDPMFError
from pure_dp_mf.factorizations.costs import FactorizationCosts, factorization_costs, lift_factor
from pure_dp_mf.factorizations.factorization import METRICS, Factorization, decoder_from_encoder, file_sha256
from pure_dp_mf.factorizations.matrix_files import MAX_ENTRIES
from pure_dp_mf.validation import check_size, parse_json, read_bytes_limited

FORMAT = "pure_dp_mf.certificate/1"
DEFAULT_GRID_BITS = exact.GRID_BITS
DECIMAL_DIGITS = 12
_MAX_GRID_BITS = 512
MAX_CERTIFIED_SIZE = math.isqrt(MAX_ENTRIES)
"""Largest k of a certificate: a k×k encoder file of more entries is not read (8192)."""
MAX_CERTIFICATE_BYTES = 1 << 20
"""Largest certificate file read (1 MiB; the shipped ones are about 4 KiB)."""
_DECODER_CLAIM = {"maxse": "decoder_max_row_norm", "meanse": "decoder_frobenius_norm"}
_COST_CLAIM = {"maxse": "c2", "meanse": "cf"}
EXACT_LIFT_CLAIM = "lifted_constant_meanse_exact_lift"
"""The meanse-only claim (2k/(2k+1))·2c_F²/log₂(2k+1)³ (docs/lifting.md, "The exact MeanSE asymptote of the lift")."""
_LOG_METHOD = (
    "certifier: e + (partial sum of 2·atanh(z), z = (x/2^e - 1)/(x/2^e + 1)) / (upper bound of ln 2), "
    "rounded down to a multiple of 2^-64 minus 2^-64; verifier: 2^a <= x^(2^s) by truncated repeated squaring"
)

Progress = Callable[[str], None]


class CertificateFileError(PureDPMFError):
    """A certificate file is missing, not JSON, or lacks or misformats a field."""


class CertificationError(PureDPMFError):
    """The factorization cannot be certified (not square, too small, series not convergent)."""


class ClaimFailedError(CheckFailedError):
    """Verification failed; ``claim`` names the first claim that does not hold (exit code 1)."""

    def __init__(self, claim: str, message: str):
        super().__init__(f"claim {claim!r} fails: {message}")
        self.claim = claim


@dataclass(frozen=True)
class Bound:
    """An exact rational bound and its decimal rendering (12 significant digits, rounded up)."""

    value: Fraction
    decimal: str

    @classmethod
    def of(cls, value: exact.Rational, *, lower: bool = False) -> Bound:
        """An upper bound rendered rounded up, or (``lower=True``) a lower bound rendered rounded down."""
        return cls(exact.fraction(value), _render(value, lower=lower))

    def to_json(self) -> dict:
        return {**exact.fraction_to_json(self.value), "decimal": self.decimal}


def _render(value: exact.Rational, *, lower: bool = False) -> str:
    rounding = exact.decimal_floor if lower else exact.decimal_ceil
    return exact.decimal_string(rounding(value, digits=DECIMAL_DIGITS))


def _claim_order(metric: str) -> tuple[str, ...]:
    order = ("encoder_max_column_sum", _DECODER_CLAIM[metric], _COST_CLAIM[metric], "leading_constant", "lifted_constant")
    return order + ((EXACT_LIFT_CLAIM,) if metric == "meanse" else ())


@dataclass
class Certificate:
    """A certificate (see the module docstring); ``factorization_path`` is absolute in memory
    and written relative to the certificate's folder."""

    factorization_path: Path
    factorization_sha256: str
    n: int
    metric: str
    grid_bits: int
    claims: dict[str, Bound]
    log2_lower_bounds: dict[str, Bound]
    certifier_record: dict[str, Bound] = field(default_factory=dict)
    float64: dict[str, float] = field(default_factory=dict)
    rounded_from: dict | None = None
    library_version: str = pure_dp_mf.__version__
    created: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    command: str = ""

    @property
    def sensitivity(self) -> Fraction:
        """The claimed ‖R̃‖₁→₁ (exact)."""
        return self.claims["encoder_max_column_sum"].value

    def to_json(self, *, folder: str | os.PathLike | None = None) -> str:
        """The JSON document; the factorization path is made relative to ``folder`` if given."""
        file = str(self.factorization_path)
        if folder is not None:
            try:
                file = os.path.relpath(self.factorization_path, Path(folder).resolve())
            except ValueError:  # different drives: keep the absolute path
                pass
        document = {
            "format": FORMAT,
            "factorization": {
                "file": file,
                "sha256": self.factorization_sha256,
                "n": self.n,
                "metric": self.metric,
                "grid_bits": self.grid_bits,
                "rounded_from": self.rounded_from,
            },
            "decimal_digits": DECIMAL_DIGITS,
            "claims": {name: bound.to_json() for name, bound in self.claims.items()},
            "log2_lower_bounds": {
                **{name: bound.to_json() for name, bound in self.log2_lower_bounds.items()},
                "method": _LOG_METHOD,
            },
            "certifier_record": {name: bound.to_json() for name, bound in self.certifier_record.items()},
            "float64": self.float64,
            "library_version": self.library_version,
            "created": self.created,
            "timings": self.timings,
            "command": self.command,
        }
        return json.dumps(document, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, *, folder: str | os.PathLike = ".", source: str = "certificate") -> Certificate:
        """Parse a certificate; every structural problem is a ``CertificateFileError``."""
        try:
            document = parse_json(text, what="the certificate")
        except InvalidInputError as error:
            raise CertificateFileError(f"{source}: not valid JSON ({error})") from None
        reader = _Reader(document, source)
        if reader.get("format", str) != FORMAT:
            raise CertificateFileError(f"{source}: field 'format' is not {FORMAT!r}")
        metric = reader.get("factorization.metric", str)
        if metric not in METRICS:
            raise CertificateFileError(f"{source}: field 'factorization.metric' must be one of {METRICS}, got {metric!r}")
        n = reader.get("factorization.n", int)
        grid_bits = reader.get("factorization.grid_bits", int)
        if not 2 <= n <= MAX_CERTIFIED_SIZE or not 1 <= grid_bits <= _MAX_GRID_BITS:
            raise CertificateFileError(
                f"{source}: 'factorization.n' must be in [2, {MAX_CERTIFIED_SIZE}] and 'factorization.grid_bits' in [1, {_MAX_GRID_BITS}]"
            )
        rounded_from = reader.get("factorization.rounded_from", (dict, type(None)))
        file = Path(reader.get("factorization.file", str))
        return cls(
            factorization_path=(Path(folder) / file).resolve() if not file.is_absolute() else file,
            factorization_sha256=reader.get("factorization.sha256", str),
            n=n,
            metric=metric,
            grid_bits=grid_bits,
            claims={name: reader.bound(f"claims.{name}") for name in _claim_order(metric)},
            log2_lower_bounds={name: reader.bound(f"log2_lower_bounds.{name}") for name in ("k", "2k+1")},
            certifier_record={name: reader.bound(f"certifier_record.{name}") for name in reader.get("certifier_record", dict)},
            float64=reader.get("float64", dict),
            rounded_from=rounded_from,
            library_version=reader.get("library_version", str),
            created=reader.get("created", str),
            timings=reader.get("timings", dict),
            command=reader.get("command", str),
        )

    @classmethod
    def read(cls, path: str | os.PathLike) -> Certificate:
        """Read a certificate file (paths inside are relative to its folder)."""
        path = Path(path)
        if not path.is_file():
            raise CertificateFileError(f"{path}: no such certificate file")
        try:
            text = read_bytes_limited(path, limit=MAX_CERTIFICATE_BYTES, what=str(path)).decode("utf-8")
        except InvalidInputError as error:
            raise CertificateFileError(str(error)) from None
        except UnicodeDecodeError as error:
            raise CertificateFileError(f"{path}: unreadable (not UTF-8 text: {error.reason} at byte {error.start})") from None
        return cls.from_json(text, folder=path.resolve().parent, source=str(path))

    def write(self, path: str | os.PathLike) -> Path:
        """Write the certificate atomically; records the command that re-checks it."""
        path = Path(path)
        if not path.parent.exists():
            raise InvalidInputError(f"cannot write {path}: folder {path.parent} does not exist")
        self.command = f"pure-dp-mf verify {path}"
        atomic_write_text(path, self.to_json(folder=path.resolve().parent))
        return path

    def to_table(self) -> tuple[str, list[str], list[tuple]]:
        """(title, columns, rows): every bound beside its float64 value and the relative gap."""
        labels = {
            "encoder_max_column_sum": "‖R‖₁→₁ (exact)",
            "decoder_max_row_norm": "‖L‖₂→∞",
            "decoder_frobenius_norm": "‖L‖_F",
            "c2": "c₂",
            "cf": "c_F",
            "leading_constant": "2C² = 2c²/log₂(k)³",
            "lifted_constant": "2C²·(log₂k/log₂(2k+1))³",
            EXACT_LIFT_CLAIM: "2C²·(log₂k/log₂(2k+1))³·2k/(2k+1) (MeanSE, exact lift)",
        }
        rows = []
        for name, bound in self.claims.items():
            reference = self.float64.get(name)
            if isinstance(reference, bool) or not isinstance(reference, (int, float)) or not math.isfinite(reference):
                reference = None  # a certificate read from a file may hold anything here: it is for information
            gap = float((bound.value - Fraction(reference)) / Fraction(reference)) if reference else None
            rows.append(
                (
                    labels[name],
                    bound.decimal,
                    "" if reference is None else f"{reference:.12g}",
                    "" if gap is None else f"{gap:.2e}",
                )
            )
        for name, bound in self.certifier_record.items():
            rows.append((f"proof record: {name}", f"{float(bound.value):.6g}", "", ""))
        title = f"certificate: {self.factorization_path.name} (k = {self.n}, {self.metric}, grid 2^-{self.grid_bits})"
        return title, ["bound", "certified (rounded up)", "float64", "relative gap"], rows


class _Reader:
    """Field access for certificate documents with one-line errors naming the field."""

    def __init__(self, document: object, source: str):
        if not isinstance(document, dict):
            raise CertificateFileError(f"{source}: the certificate is not a JSON object")
        self.document, self.source = document, source

    def get(self, dotted: str, kind):
        value = self.document
        for part in dotted.split("."):
            if not isinstance(value, dict) or part not in value:
                raise CertificateFileError(f"{self.source}: missing field {dotted!r}")
            value = value[part]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise CertificateFileError(f"{self.source}: field {dotted!r} has the wrong type ({type(value).__name__})")
        return value

    def bound(self, dotted: str) -> Bound:
        document = self.get(dotted, dict)
        for part in ("numerator", "denominator", "decimal"):
            written = document.get(part)
            if isinstance(written, str) and len(written) > exact.MAX_NUMBER_DIGITS + 1:
                raise CertificateFileError(
                    f"{self.source}: field '{dotted}.{part}' has {len(written)} characters; "
                    f"at most {exact.MAX_NUMBER_DIGITS} digits are read"
                )
        value = exact.fraction_from_json(document)
        if value is None:
            raise CertificateFileError(
                f"{self.source}: field {dotted!r} is not a fraction "
                "(numerator and denominator must be integer strings, the denominator positive)"
            )
        decimal = document.get("decimal")
        if exact.parse_decimal(decimal) is None:
            raise CertificateFileError(f"{self.source}: field {dotted!r} has no valid 'decimal' string")
        return Bound(value, decimal)


# ---------------------------------------------------------------------------------------------
# Certifier


def _rounded_path(path: Path, grid_bits: int) -> Path:
    return path.with_name(f"{path.stem}_grid{grid_bits}.npz")


def _certifier_decoder_bound(
    P: np.ndarray, M: np.ndarray, *, g: int, metric: str, row_block: int | None = None
) -> dict[str, gmpy2.mpq]:
    """Steps 3-8 of the module docstring: an upper bound of ‖T_k·R̃⁻¹‖ (R̃ = P·2^-g, L̃ = M·2^-g).

    G·2^2g = (M·P − 2^2g·T_k)·T_k⁻¹ = M·(P·T_k⁻¹) − 2^2g·I, and P·T_k⁻¹ is P with each column
    minus the next one: one integer product of small entries, no residual matrix formed.
    ``row_block``: G and E₁ are formed that many rows at a time (``exact.neumann_series``).
    """
    series = exact.neumann_series(
        P, M, grid_bits=g, decoder_bits=g, norm="rows" if metric == "maxse" else "frobenius", row_block=row_block
    )
    rho = series.rho
    if rho >= 1:
        raise CertificationError(
            f"the Neumann series for (I + G)⁻¹, G = (L̃R̃ − T_k)·T_k⁻¹, does not converge: ‖G‖ ≥ {float(rho):.4g} ≥ 1; "
            "L·R is too far from T_k to certify"
        )
    assert series.second_squares is not None
    combine = max if metric == "maxse" else sum
    denominator = gmpy2.mpz(4) ** series.scale_bits
    approximate = exact.sqrt_upper(gmpy2.mpq(combine(series.second_squares), denominator))
    first_order = exact.sqrt_upper(gmpy2.mpq(combine(series.first_squares), denominator))
    tail = rho * first_order / (1 - rho)
    return {
        "series_ratio": rho,
        "second_order_decoder_norm": approximate,
        "first_order_correction_norm": first_order,
        "tail_bound": tail,
        "decoder_norm": approximate + tail,
    }


def _constants(cost: gmpy2.mpq, logs: dict[str, gmpy2.mpq], *, metric: str, k: int) -> dict[str, gmpy2.mpq]:
    """2c²/ℓ_k³ and 2c²/ℓ_{2k+1}³ (and for meanse (2k/(2k+1))·2c²/ℓ_{2k+1}³), rounded up to 12 digits."""
    constants = {
        "leading_constant": exact.decimal_ceil(2 * cost**2 / logs["k"] ** 3, digits=DECIMAL_DIGITS),
        "lifted_constant": exact.decimal_ceil(2 * cost**2 / logs["2k+1"] ** 3, digits=DECIMAL_DIGITS),
    }
    if metric == "meanse":
        factor = gmpy2.mpq(2 * k, 2 * k + 1)
        constants[EXACT_LIFT_CLAIM] = exact.decimal_ceil(factor * 2 * cost**2 / logs["2k+1"] ** 3, digits=DECIMAL_DIGITS)
    return constants


def _load_square(
    *, source: Path, metric: str | None, read_options: dict[str, Any]
) -> tuple[Factorization, str, np.ndarray, np.ndarray]:
    """(factorization, metric, decoder, R) of the file to certify, refused unless R is square with k ≥ 2.

    ``read_options``: array, decoder, decoder_array and integer_grid_bits for ``Factorization.load``."""
    factorization = Factorization.load(source, **read_options)
    metric = metric or factorization.metric
    if metric is None:
        raise InvalidInputError(f"{source}: no metric recorded in the file; pass metric= one of {METRICS}")
    if metric not in METRICS:
        raise InvalidInputError(f"metric must be one of {METRICS}, got {metric!r}")
    loaded_decoder, R = factorization.dense()  # stored, or T_k·R⁻¹ recomputed by load
    k = factorization.n
    if R.shape != (k, k):
        raise CertificationError(f"{source}: certificates need a square encoder (L = T_k·R⁻¹), got shape {R.shape}")
    if k < 2:
        raise CertificationError(f"{source}: k = {k}; the leading constant needs k >= 2")
    return factorization, metric, loaded_decoder, R


def _round_encoder(
    *,
    factorization: Factorization,
    source: Path,
    loaded_decoder: np.ndarray,
    R: np.ndarray,
    grid_bits: int,
    rounded_out: str | os.PathLike | None,
    read_options: dict[str, Any],
    say: Progress,
) -> tuple[np.ndarray, bool, bool, dict | None, Path]:
    """R̃ = R on the grid, written to its own file where it differs from the input (moved, decoder
    stored or published matrix): (R̃, whether rewritten, whether a decoder was given, rounded_from, certified path)."""
    published = "source" in factorization.metadata and "arrays" not in factorization.metadata
    R_rounded, moved = exact.round_to_grid(R, grid_bits=grid_bits)
    has_decoder = "decoder" in factorization.metadata.get("arrays", {}) or read_options["decoder"] is not None
    rounded_from = None
    certified = source
    rewritten = bool(moved or has_decoder or published)
    if rewritten:
        certified = Path(rounded_out) if rounded_out is not None else _rounded_path(source, grid_bits)
        if certified.resolve() == source.resolve():
            raise InvalidInputError(f"the rounded factorization would overwrite its input {source}; choose another --rounded-out")
        say(f"writing the rounded factorization {certified}")
        metadata = {key: value for key, value in factorization.metadata.items() if key != "arrays"}
        changes = np.abs(R_rounded - R)
        rounded_from = {
            "file": source.name,
            "sha256": file_sha256(source),
            "grid_bits": grid_bits,
            "entries_moved": int(np.count_nonzero(changes)),
            "largest_change": float(changes.max(initial=0.0)),
        }
        if published:
            rounded_from["array"] = read_options["array"]
            rounded_from["integer_grid_bits"] = read_options["integer_grid_bits"]
        metadata["rounded_from"] = rounded_from
        Factorization(decoder=loaded_decoder, encoder=R_rounded, metadata=metadata).save(certified, store_decoder=False)
    return R_rounded, rewritten, has_decoder, rounded_from, certified


def _exact_bounds(
    *, R_rounded: np.ndarray, approximate_decoder: np.ndarray, grid_bits: int, metric: str, k: int, row_block: int | None = None
) -> tuple[dict[str, gmpy2.mpq], dict[str, gmpy2.mpq], dict[str, gmpy2.mpq]]:
    """(certifier record, claimed values, log₂ lower bounds): the exact part of the certificate."""
    P = exact.grid_integers(R_rounded, grid_bits=grid_bits, name="the rounded encoder")
    M = exact.grid_integers(approximate_decoder, grid_bits=grid_bits, nearest=True, name="the decoder")
    with exact.flint_threads():
        record = _certifier_decoder_bound(P, M, g=grid_bits, metric=metric, row_block=row_block)
    sensitivity = gmpy2.mpq(max(exact.column_abs_sums(P)), gmpy2.mpz(2) ** grid_bits)
    decoder_bound = exact.decimal_ceil(record["decoder_norm"], digits=DECIMAL_DIGITS, extra_units=1)
    if metric == "maxse":
        cost = exact.decimal_ceil(decoder_bound * sensitivity, digits=DECIMAL_DIGITS)
    else:
        cost = exact.decimal_ceil(exact.sqrt_upper(decoder_bound**2 * sensitivity**2 / k), digits=DECIMAL_DIGITS)
    logs = {"k": exact.log2_lower_bound(k), "2k+1": exact.log2_lower_bound(2 * k + 1)}
    values = {"encoder_max_column_sum": sensitivity, _DECODER_CLAIM[metric]: decoder_bound, _COST_CLAIM[metric]: cost}
    values.update(_constants(cost, logs, metric=metric, k=k))
    return record, values, logs


def _float64_values(*, float_costs: FactorizationCosts, metric: str, k: int) -> dict[str, float]:
    """The float64 counterparts of the claims (for the certificate's comparison column)."""
    constant = float_costs.max_se_constant if metric == "maxse" else float_costs.mean_se_constant
    values = {
        "encoder_max_column_sum": float_costs.encoder_max_column_sum,
        _DECODER_CLAIM[metric]: float_costs.decoder_max_row_norm if metric == "maxse" else float_costs.decoder_frobenius_norm,
        _COST_CLAIM[metric]: float_costs.c2 if metric == "maxse" else float_costs.cf,
        "leading_constant": constant,
        "lifted_constant": constant * lift_factor(k),
    }
    if metric == "meanse":
        values[EXACT_LIFT_CLAIM] = constant * lift_factor(k) * (2 * k) / (2 * k + 1)
    return values


def certify_factorization(
    *,
    path: str | os.PathLike,
    grid_bits: int = DEFAULT_GRID_BITS,
    metric: str | None = None,
    out: str | os.PathLike | None = None,
    rounded_out: str | os.PathLike | None = None,
    progress: Progress | None = None,
    array: str | None = None,
    decoder: str | os.PathLike | None = None,
    decoder_array: str | None = None,
    integer_grid_bits: int | None = None,
    row_block: int | None = None,
) -> Certificate:
    """Certify the factorization in ``path`` (see the module docstring for the proof).

    Args:
        path: a factorization file (.npz) with a square encoder R of T_k, or a published encoder
            (bare .npy, an .npz array chosen by ``array``, text or CSV: ``Factorization.load``).
        grid_bits: g; the certified encoder is R̃ on the lattice 2^-g ℤ.
        metric: "maxse" or "meanse" (default: the file's).
        out: where to write the certificate (JSON), if given.
        rounded_out: where to write the rounded factorization when R is off the grid or the
            file stores a decoder (default: ``<stem>_grid<G>.npz`` beside the input); that file
            is the one certified.
        progress: called with a short message at each stage.
        array, decoder, decoder_array, integer_grid_bits: how to read a published matrix
            (``Factorization.load``). With a published decoder L̃ the bound on L = T_k·R̃⁻¹ is taken
            through that L̃ (its Neumann-series correction), as the authors' own check does.
        row_block: form the exact products that many rows at a time (all at once if None): the
            same certificate, in less memory.

    Returns:
        The ``Certificate``: exact upper bounds on ‖R̃‖₁→₁, the decoder norm, c and the constants.

    Raises:
        CertificationError: the factorization cannot be certified (non-square encoder, k < 2,
            Neumann series not convergent).
        InvalidInputError, FactorizationFileError: bad arguments or an unreadable file.
    """
    say = progress or (lambda message: None)
    start = time.perf_counter()
    grid_bits = check_size(grid_bits, name="grid_bits", minimum=1, maximum=_MAX_GRID_BITS)
    if row_block is not None:
        row_block = check_size(row_block, name="row_block", minimum=1)
    for name, target in (("--out", out), ("--rounded-out", rounded_out)):
        if target is not None:
            check_writable_file(target, name=name)
    source = Path(path)
    say(f"loading {source}")
    read_options = {"array": array, "decoder": decoder, "decoder_array": decoder_array, "integer_grid_bits": integer_grid_bits}
    factorization, metric, loaded_decoder, R = _load_square(source=source, metric=metric, read_options=read_options)
    k = factorization.n
    R_rounded, rewritten, has_decoder, rounded_from, certified = _round_encoder(
        factorization=factorization,
        source=source,
        loaded_decoder=loaded_decoder,
        R=R,
        grid_bits=grid_bits,
        rounded_out=rounded_out,
        read_options=read_options,
        say=say,
    )
    rounded_seconds = time.perf_counter() - start

    say("float64 approximation of L = T_k·R̃⁻¹")
    float_decoder = loaded_decoder if not rewritten else decoder_from_encoder(R_rounded)
    approximate_decoder = loaded_decoder if has_decoder else float_decoder
    float_costs = factorization_costs(decoder=float_decoder, encoder=R_rounded)
    float_seconds = time.perf_counter() - start - rounded_seconds

    say(f"exact residual, series and norms (k = {k})")
    record, values, logs = _exact_bounds(
        R_rounded=R_rounded, approximate_decoder=approximate_decoder, grid_bits=grid_bits, metric=metric, k=k, row_block=row_block
    )
    exact_seconds = time.perf_counter() - start - rounded_seconds - float_seconds

    certificate = Certificate(
        factorization_path=certified.resolve(),
        factorization_sha256=file_sha256(certified),
        n=k,
        metric=metric,
        grid_bits=grid_bits,
        claims={name: Bound.of(values[name]) for name in _claim_order(metric)},
        log2_lower_bounds={name: Bound.of(value, lower=True) for name, value in logs.items()},
        certifier_record={name: Bound.of(value) for name, value in record.items()},
        float64=_float64_values(float_costs=float_costs, metric=metric, k=k),
        rounded_from=rounded_from,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        timings={
            "round_s": round(rounded_seconds, 3),
            "float_s": round(float_seconds, 3),
            "exact_s": round(exact_seconds, 3),
            "total_s": round(time.perf_counter() - start, 3),
        },
    )
    if out is not None:
        say(f"writing {out}")
        certificate.write(out)
    return certificate


# ---------------------------------------------------------------------------------------------
# Verifier (its own route; see "Verification" in the module docstring)


@dataclass(frozen=True)
class Check:
    """One verified claim: the claimed decimal and the verifier's own bound (rounded up)."""

    claim: str
    claimed: str
    proven: str


@dataclass
class VerificationResult:
    """What ``verify_certificate`` checked; it exists only if every claim holds."""

    certificate_path: Path
    factorization_path: Path
    factorization_sha256: str
    n: int
    metric: str
    checks: list[Check]
    seconds: float

    def to_table(self) -> tuple[str, list[str], list[tuple]]:
        title = f"verified: {self.certificate_path} (k = {self.n}, {self.metric}) in {self.seconds:.2f} s"
        return (
            title,
            ["claim", "claimed", "verifier's bound", "holds"],
            [(c.claim, c.claimed, c.proven, "yes") for c in self.checks],
        )

    def as_dict(self) -> dict:
        return {
            "certificate": str(self.certificate_path),
            "factorization": str(self.factorization_path),
            "sha256": self.factorization_sha256,
            "n": self.n,
            "metric": self.metric,
            "checks": [c.__dict__ for c in self.checks],
            "seconds": self.seconds,
            "verified": True,
        }


def _load_certified(certificate: Certificate) -> np.ndarray:
    """The certified encoder, after checking the file's sha256, size and format."""
    path = certificate.factorization_path
    if not path.is_file():
        raise ClaimFailedError("factorization_sha256", f"the certified factorization file {path} does not exist")
    digest = file_sha256(path)
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


def _check_decimal(name: str, bound: Bound, *, lower: bool) -> None:
    if bound.value <= 0:
        raise ClaimFailedError(name, f"the bound {bound.value} is not positive")
    expected = _render(bound.value, lower=lower)
    if bound.decimal != expected:
        raise ClaimFailedError(
            name, f"decimal {bound.decimal} is not its fraction rounded {'down' if lower else 'up'} ({expected})"
        )


def _verifier_decoder_bound(
    R: np.ndarray, P: np.ndarray, *, g: int, metric: str, row_block: int | None = None
) -> tuple[gmpy2.mpq, gmpy2.mpq, gmpy2.mpq]:
    """(A, B, c) with ‖T_k·R̃⁻¹‖ ≤ √A + c·√B, by the verifier's own approximation of L.

    Forms the residual Δ̃ = L̃R̃ − T_k itself, G = Δ̃·T_k⁻¹ by column differences of Δ̃ (for ρ),
    and E₁ = −Δ̃·(T_k⁻¹·L̃) (row differences of L̃), so no product uses the certifier's route.
    ``row_block``: rows of Δ̃, G and E₁ are formed that many at a time (row i of each needs only
    row i of L̃), ρ, A and B accumulated over the blocks: exact, so the same (A, B, c) for every
    block size, in less memory.
    """
    n = P.shape[0]
    with np.errstate(all="ignore"):
        try:
            approximate = np.cumsum(np.linalg.inv(R), axis=0)  # rows of T_k·R⁻¹: prefix sums of rows of R⁻¹
        except np.linalg.LinAlgError:
            raise ClaimFailedError(_DECODER_CLAIM[metric], "the encoder is singular in float64") from None
    if not np.all(np.isfinite(approximate)):
        raise ClaimFailedError(_DECODER_CLAIM[metric], "the encoder is numerically singular")
    M = exact.grid_integers(approximate, grid_bits=g, nearest=True, name="the verifier's decoder")
    del approximate
    scale = 1 << (2 * g)
    P_exact = exact.integer_matrix(P)
    W = M.copy()
    W[1:] -= M[:-1]  # T_k⁻¹·M
    W_exact = exact.integer_matrix(W)
    del W
    block = n if row_block is None else max(1, min(int(row_block), n))
    G_max = G_squares = 0
    A_terms: list[int] = []
    B_terms: list[int] = []
    for start in range(0, n, block):
        M_block = exact.integer_matrix(M[start : start + block])
        product = M_block * P_exact  # rows of L̃R̃·2^2g; Δ̃·2^2g = product − 2^2g·T_k
        # G = Δ̃·T_k⁻¹ by column differences; T_k·T_k⁻¹ = I, so the 2^2g·T_k part leaves −2^2g on the diagonal
        G_rows = [[row[j] - row[j + 1] for j in range(n - 1)] + [row[n - 1]] for row in exact.rows_of(product)]
        for offset, row in enumerate(G_rows):
            row[start + offset] -= scale
        if metric == "maxse":
            G_max = max(G_max, *exact.row_abs_sums(G_rows))
        else:
            G_squares += sum(exact.row_sums_of_squares(G_rows))
        del G_rows
        # E₁·2^3g = −Δ̃·T_k⁻¹·L̃·2^3g = 2^2g·T_k·W − product·W = 2^2g·M − product·W (T_k·W = M)
        E1 = M_block * scale - product * W_exact
        del product
        A_terms.extend(exact.row_sums_of_squares(exact.rows_of(M_block * scale + E1)))
        B_terms.extend(exact.row_sums_of_squares(exact.rows_of(E1)))
        del E1, M_block
    if metric == "maxse":
        rho = gmpy2.mpq(G_max, scale)
    else:
        rho = exact.sqrt_upper(gmpy2.mpq(G_squares, scale * scale))
    if rho >= 1:
        raise ClaimFailedError(
            _DECODER_CLAIM[metric], f"the verifier's Neumann series does not converge (‖G‖ ≥ {float(rho):.3g})"
        )
    combine = max if metric == "maxse" else sum
    denominator = gmpy2.mpz(2) ** (6 * g)
    A = gmpy2.mpq(combine(A_terms), denominator)
    B = gmpy2.mpq(combine(B_terms), denominator)
    return A, B, rho / (1 - rho)


def _check_rounded_from(certificate: Certificate, R: np.ndarray) -> None:
    """The provenance claim "rounded from FILE (sha256)": that file exists beside the certified
    one, has that sha256, and its encoder rounded to the grid is exactly the certified encoder."""
    claim = certificate.rounded_from or {}
    name, digest = claim.get("file"), claim.get("sha256")
    if not isinstance(name, str) or not isinstance(digest, str) or Path(name).name != name:
        raise ClaimFailedError("rounded_from", "the record must name a file beside the certified one and its sha256")
    original = certificate.factorization_path.parent / name
    if not original.is_file():
        raise ClaimFailedError("rounded_from", f"{original} does not exist, so the rounding cannot be re-checked")
    if file_sha256(original) != digest:
        raise ClaimFailedError("rounded_from", f"{original} does not have the sha256 the certificate names")
    options = {"array": claim.get("array"), "integer_grid_bits": claim.get("integer_grid_bits")}
    try:
        source = Factorization.load(original, **{key: value for key, value in options.items() if value is not None})
    except PureDPMFError as error:
        raise ClaimFailedError("rounded_from", f"{original} cannot be read as the record says: {error}") from None
    rounded, _ = exact.round_to_grid(source.dense()[1], grid_bits=certificate.grid_bits)
    if rounded.shape != R.shape or not np.array_equal(rounded, R):
        raise ClaimFailedError("rounded_from", f"rounding {original.name} to the grid does not give the certified encoder")


def _sum_of_roots_holds(D: gmpy2.mpq, A: gmpy2.mpq, B: gmpy2.mpq, c: gmpy2.mpq) -> bool:
    """D ≥ √A + c·√B, decided exactly (D, A, B, c ≥ 0 rationals)."""
    if D < 0 or D * D < c * c * B:
        return False
    u = D * D + c * c * B - A
    return u >= 0 and u * u >= 4 * D * D * c * c * B


def verify_certificate(
    *, path: str | os.PathLike, progress: Progress | None = None, row_block: int | None = None
) -> VerificationResult:
    """Re-prove every claim of the certificate at ``path`` from its factorization file, by a route
    independent of the certifier's.

    Args:
        path: the certificate (JSON); the factorization file is found relative to it.
        progress: called with a short message at each stage.
        row_block: form the exact products that many rows at a time (all at once if None): the
            same checks, in less memory.

    Returns:
        A ``VerificationResult`` listing every check, if all claims hold.

    Raises:
        CertificateFileError: a malformed certificate or a missing factorization file.
        ClaimFailedError: names the first claim that does not hold.
    """
    say = progress or (lambda message: None)
    start = time.perf_counter()
    if row_block is not None:
        row_block = check_size(row_block, name="row_block", minimum=1)
    certificate = Certificate.read(path)
    metric, k, g = certificate.metric, certificate.n, certificate.grid_bits
    say(f"checking {certificate.factorization_path}")
    R = _load_certified(certificate)
    try:
        P = exact.grid_integers(R, grid_bits=g, name="the encoder")
    except InvalidInputError as error:
        raise ClaimFailedError("grid_bits", str(error)) from None
    claims = {name: exact.mpq(bound.value) for name, bound in certificate.claims.items()}
    checks: list[Check] = []

    def record(name: str, holds: bool, proven: exact.Rational, what: str) -> None:
        lower = name.startswith("log2_lower_bound ")
        bound = certificate.log2_lower_bounds[name.removeprefix("log2_lower_bound ")] if lower else certificate.claims[name]
        _check_decimal(name, bound, lower=lower)
        if not holds:
            raise ClaimFailedError(name, f"claimed {bound.decimal}, but {what}")
        rounding = exact.decimal_floor if lower else exact.decimal_ceil
        checks.append(Check(name, bound.decimal, exact.decimal_string(rounding(proven, digits=15))))

    S = gmpy2.mpq(max(exact.column_abs_sums(P)), 1 << g)
    record("encoder_max_column_sum", claims["encoder_max_column_sum"] >= S, S, f"the exact ‖R‖₁→₁ is {float(S)!r}")

    say("exact residual, series and norms")
    D_name = _DECODER_CLAIM[metric]
    with exact.flint_threads():
        A, B, c = _verifier_decoder_bound(R, P, g=g, metric=metric, row_block=row_block)
    D = claims[D_name]
    proven = exact.sqrt_upper(A) + c * exact.sqrt_upper(B)
    record(D_name, _sum_of_roots_holds(D, A, B, c), proven, f"the verifier proves only ≤ {float(proven)!r}")

    cost_name = _COST_CLAIM[metric]
    C = claims[cost_name]
    if metric == "maxse":
        holds, needed = C >= D * claims["encoder_max_column_sum"], D * claims["encoder_max_column_sum"]
    else:
        square = D**2 * claims["encoder_max_column_sum"] ** 2 / k
        holds, needed = C >= 0 and C * C >= square, exact.sqrt_upper(square)
    record(cost_name, holds, needed, f"it must be at least {float(needed)!r} (from the claims above)")

    logs = {}
    for name, x in (("k", k), ("2k+1", 2 * k + 1)):
        bound = exact.mpq(certificate.log2_lower_bounds[name].value)
        try:
            holds = exact.log2_lower_bound_holds(bound, x)
        except InvalidInputError as error:
            raise ClaimFailedError(f"log2_lower_bound {name}", str(error)) from None
        record(f"log2_lower_bound {name}", holds, bound, f"it is not a proven lower bound of log₂({x})")
        logs[name] = bound
    for name, log in (("leading_constant", logs["k"]), ("lifted_constant", logs["2k+1"])):
        needed = 2 * C**2 / log**3
        record(name, claims[name] >= needed, needed, f"2c²/ℓ³ = {float(needed)!r} with the claims above")
    if metric == "meanse":
        needed = gmpy2.mpq(2 * k, 2 * k + 1) * 2 * C**2 / logs["2k+1"] ** 3
        what = f"(2k/(2k+1))·2c²/ℓ_(2k+1)³ = {float(needed)!r} with the claims above"
        record(EXACT_LIFT_CLAIM, claims[EXACT_LIFT_CLAIM] >= needed, needed, what)
    if certificate.rounded_from is not None:
        _check_rounded_from(certificate, R)
    return VerificationResult(
        certificate_path=Path(path),
        factorization_path=certificate.factorization_path,
        factorization_sha256=certificate.factorization_sha256,
        n=k,
        metric=metric,
        checks=checks,
        seconds=time.perf_counter() - start,
    )


def certified_sensitivity(*, path: str | os.PathLike) -> Fraction:
    """The certified ‖R̃‖₁→₁ of the certificate at ``path``, as an exact Fraction.

    Guarantee: the returned value is ≥ the exact ℓ1 sensitivity of the encoder in the file the
    certificate names (its sha256 and the value are re-checked here, O(k²)), so Laplace noise
    of scale value/ε gives ε-DP for x ↦ R̃·x. The other claims are not re-checked: run
    ``verify_certificate`` for those.
    """
    certificate = Certificate.read(path)
    R = _load_certified(certificate)
    try:
        P = exact.grid_integers(R, grid_bits=certificate.grid_bits, name="the encoder")
    except InvalidInputError as error:
        raise ClaimFailedError("grid_bits", str(error)) from None
    exact_value = Fraction(max(exact.column_abs_sums(P)), 1 << certificate.grid_bits)
    if certificate.sensitivity < exact_value:
        raise ClaimFailedError("encoder_max_column_sum", f"claimed {certificate.sensitivity}, exact value {exact_value}")
    return certificate.sensitivity
