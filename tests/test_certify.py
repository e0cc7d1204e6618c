"""Certificates : certify, verify, soundness, corrupt inputs, shipped certificates."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from fraction_certifier import fraction_decoder_bound
from typer.testing import CliRunner

from pure_dp_mf import exact
from pure_dp_mf.certificates.certify import (
    EXACT_LIFT_CLAIM,
    Certificate,
    CertificateFileError,
    CertificationError,
    ClaimFailedError,
    certified_sensitivity,
    certify_factorization,
    verify_certificate,
)
from pure_dp_mf.cli import all_commands
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization, decoder_from_encoder, file_sha256
from pure_dp_mf.factorizations.workloads import toeplitz_square_root
from pure_dp_mf.resources import BASE_FOLDER as BASES
from pure_dp_mf.resources import CERTIFICATE_FOLDER as CERTIFICATES

app = all_commands()

CLAIMS = {
    "maxse": ["encoder_max_column_sum", "decoder_max_row_norm", "c2", "leading_constant", "lifted_constant"],
    "meanse": [
        "encoder_max_column_sum",
        "decoder_frobenius_norm",
        "cf",
        "leading_constant",
        "lifted_constant",
        EXACT_LIFT_CLAIM,
    ],
}


def perturbed_on_grid(n: int, *, seed: int) -> np.ndarray:
    """A dense, non-triangular encoder near the Toeplitz square root, on the grid 2^-32."""
    rng = np.random.default_rng(seed)
    encoder = toeplitz_square_root(n) + 0.05 * rng.normal(size=(n, n))
    return exact.round_to_grid(encoder, grid_bits=32)[0]


def save(path: Path, encoder: np.ndarray, metric: str, *, decoder: np.ndarray | None = None) -> Path:
    if decoder is None:
        Factorization.from_encoder(encoder, metadata={"metric": metric}).save(path, store_decoder=False)
    else:
        Factorization(decoder=decoder, encoder=encoder, metadata={"metric": metric}).save(path)
    return path


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """Certificates for a k = 12 factorization on the grid, one per metric."""
    folder = tmp_path_factory.mktemp("certified")
    result = {}
    for metric in ("maxse", "meanse"):
        factorization = save(folder / f"k12_{metric}.npz", perturbed_on_grid(12, seed=3), metric)
        certificate = certify_factorization(path=factorization, out=folder / f"k12_{metric}.json")
        result[metric] = (folder / f"k12_{metric}.json", factorization, certificate)
    return result


def edited(source: Path, target: Path, change) -> Path:
    """A copy of a certificate (file path made absolute) with ``change`` applied to its JSON."""
    document = json.loads(source.read_text())
    document["factorization"]["file"] = str((source.parent / document["factorization"]["file"]).resolve())
    change(document)
    target.write_text(json.dumps(document))
    return target


# ---------------------------------------------------------------------------------------------
# certify + verify


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_certificate_verifies_and_is_tight_against_float64(certified, metric):
    path, factorization, certificate = certified[metric]
    assert certificate.factorization_path == factorization.resolve()  # on the grid: the file itself
    assert certificate.factorization_sha256 == hashlib.sha256(factorization.read_bytes()).hexdigest()
    assert certificate.rounded_from is None and list(certificate.claims) == CLAIMS[metric]
    result = verify_certificate(path=path)
    assert [check.claim for check in result.checks][:3] == CLAIMS[metric][:3]
    for name in CLAIMS[metric]:
        claimed, reference = certificate.claims[name].value, Fraction(certificate.float64[name])
        assert claimed >= reference, name
        assert claimed <= reference * (1 + Fraction(1, 10**6)), name
    document = json.loads(path.read_text())
    assert document["factorization"]["file"] == factorization.name
    assert document["command"] == f"pure-dp-mf verify {path}"
    assert set(document["timings"]) >= {"total_s", "exact_s"}
    for bound in document["claims"].values():
        assert Fraction(bound["decimal"]) >= Fraction(int(bound["numerator"]), int(bound["denominator"]))


def test_certificate_json_round_trip(certified):
    path, _, certificate = certified["maxse"]
    again = Certificate.read(path)
    assert again.claims == certificate.claims and again.log2_lower_bounds == certificate.log2_lower_bounds
    assert again.factorization_path == certificate.factorization_path and again.n == 12


def _exact_inverse(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    n = len(matrix)
    work = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(matrix)]
    for column in range(n):
        pivot = next(r for r in range(column, n) if work[r][column] != 0)
        work[column], work[pivot] = work[pivot], work[column]
        inverse_pivot = 1 / work[column][column]
        work[column] = [v * inverse_pivot for v in work[column]]
        for r in range(n):
            if r != column and work[r][column] != 0:
                factor = work[r][column]
                work[r] = [a - factor * b for a, b in zip(work[r], work[column])]
    return [row[n:] for row in work]


def _log2_of_9_lower() -> Fraction:
    """log₂9 = 3 + ln(9/8)/ln 2 from below: an alternating series ending on a negative term for
    ln(1 + 1/8), and Σ 1/(j·2^j) plus its tail bound for ln 2 from above (not exact.py's series)."""
    x = Fraction(1, 8)
    ln_lower = sum((Fraction((-1) ** (j + 1)) * x**j / j for j in range(1, 81)), Fraction(0))
    ln2_upper = sum((Fraction(1, j * 2**j) for j in range(1, 201)), Fraction(0)) + Fraction(1, 201 * 2**200)
    return 3 + ln_lower / ln2_upper


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_k4_certificate_rechecked_with_pure_fractions(tmp_path, metric):
    factorization = save(tmp_path / "k4.npz", perturbed_on_grid(4, seed=11), metric)
    certify_factorization(path=factorization, out=tmp_path / "k4.json")
    document = json.loads((tmp_path / "k4.json").read_text())
    assert hashlib.sha256(factorization.read_bytes()).hexdigest() == document["factorization"]["sha256"]
    claims = {name: Fraction(int(b["numerator"]), int(b["denominator"])) for name, b in document["claims"].items()}
    with np.load(factorization) as archive:
        R = [[Fraction(float(v)) for v in row] for row in archive["encoder"]]  # floats are exact dyadics
    T = [[Fraction(int(j <= i)) for j in range(4)] for i in range(4)]
    inverse = _exact_inverse(R)
    L = [[sum((T[i][m] * inverse[m][j] for m in range(4)), Fraction(0)) for j in range(4)] for i in range(4)]
    assert [[sum(L[i][m] * R[m][j] for m in range(4)) for j in range(4)] for i in range(4)] == T
    sensitivity = max(sum(abs(R[i][j]) for i in range(4)) for j in range(4))
    rows = [sum(v * v for v in row) for row in L]
    assert claims["encoder_max_column_sum"] == sensitivity
    if metric == "maxse":
        norm_squared, cost_squared, decoder, cost = max(rows), max(rows) * sensitivity**2, "decoder_max_row_norm", "c2"
    else:
        norm_squared, cost_squared, decoder, cost = sum(rows), sum(rows) * sensitivity**2 / 4, "decoder_frobenius_norm", "cf"
    assert norm_squared <= claims[decoder] ** 2 <= norm_squared * (1 + Fraction(1, 10**9))
    assert cost_squared <= claims[cost] ** 2 <= cost_squared * (1 + Fraction(1, 10**9))
    leading = 2 * cost_squared / 8  # log₂4 = 2
    assert leading <= claims["leading_constant"] <= leading * (1 + Fraction(1, 10**9))
    lifted = 2 * cost_squared / _log2_of_9_lower() ** 3  # ≥ the true lifted constant
    assert lifted <= claims["lifted_constant"] <= lifted * (1 + Fraction(1, 10**9))
    if metric == "meanse":
        exact_lift = Fraction(8, 9) * lifted  # 2k/(2k+1) at k = 4
        assert exact_lift <= claims[EXACT_LIFT_CLAIM] <= exact_lift * (1 + Fraction(1, 10**9))
    else:
        assert EXACT_LIFT_CLAIM not in claims


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_fast_certifier_equals_a_fraction_implementation_of_the_same_steps(tmp_path, metric):
    encoder = perturbed_on_grid(7, seed=21)
    factorization = save(tmp_path / "k7.npz", encoder, metric)
    certificate = certify_factorization(path=factorization)
    expected = fraction_decoder_bound(encoder, decoder_from_encoder(encoder), grid_bits=32, metric=metric)
    assert certificate.certifier_record["decoder_norm"].value == expected


def test_off_grid_input_is_rounded_and_the_rounded_file_is_certified(tmp_path):
    off_grid = toeplitz_square_root(8) / 3  # binom(2j, j)/(3·4^j): not dyadic
    source = save(tmp_path / "sqrt.npz", off_grid, "maxse")
    certificate = certify_factorization(path=source, out=tmp_path / "c.json")
    rounded = tmp_path / "sqrt_grid32.npz"
    assert certificate.factorization_path == rounded.resolve()
    assert certificate.rounded_from["file"] == "sqrt.npz"
    loaded = Factorization.load(rounded)
    assert "decoder" not in loaded.metadata["arrays"] and loaded.metadata["rounded_from"]["grid_bits"] == 32
    assert np.array_equal(loaded.encoder, exact.round_to_grid(off_grid, grid_bits=32)[0])
    assert not np.array_equal(loaded.encoder, off_grid)
    verify_certificate(path=tmp_path / "c.json")
    other = save(tmp_path / "other.npz", toeplitz_square_root(8) / 5, "maxse")

    def renamed(document):  # claims to be rounded from another file, with that file's true hash
        document["factorization"]["rounded_from"].update(file="other.npz", sha256=file_sha256(other))

    with pytest.raises(ClaimFailedError, match="rounded_from"):
        verify_certificate(path=edited(tmp_path / "c.json", tmp_path / "renamed.json", renamed))

    def rehashed(document):
        document["factorization"]["rounded_from"]["sha256"] = "0" * 64

    with pytest.raises(ClaimFailedError, match="rounded_from"):
        verify_certificate(path=edited(tmp_path / "c.json", tmp_path / "rehashed.json", rehashed))
    custom = certify_factorization(path=source, grid_bits=40, rounded_out=tmp_path / "fine.npz", out=tmp_path / "f.json")
    assert custom.factorization_path == (tmp_path / "fine.npz").resolve() and custom.grid_bits == 40
    verify_certificate(path=tmp_path / "f.json")
    fine = certify_factorization(path=source, grid_bits=70, rounded_out=tmp_path / "g70.npz", out=tmp_path / "g70.json")
    assert fine.grid_bits == 70  # numerators beyond 2^62: the object-array path
    verify_certificate(path=tmp_path / "g70.json")
    for name in CLAIMS["maxse"][1:]:  # a finer grid: tighter or equal, never looser than 1e-10
        assert fine.claims[name].value <= custom.claims[name].value * (1 + Fraction(1, 10**10))
    with pytest.raises(InvalidInputError, match="overwrite its input"):
        certify_factorization(path=source, rounded_out=source)


def test_a_stored_decoder_is_dropped_from_the_certified_file(tmp_path):
    encoder = perturbed_on_grid(6, seed=5)
    factorization = Factorization.from_encoder(encoder, metadata={"metric": "meanse"})
    source = tmp_path / "with_decoder.npz"
    factorization.save(source)
    certificate = certify_factorization(path=source, out=tmp_path / "c.json")
    assert certificate.factorization_path.name == "with_decoder_grid32.npz"
    verify_certificate(path=tmp_path / "c.json")


def test_factorization_far_from_T_k_is_refused(tmp_path):
    encoder = perturbed_on_grid(6, seed=2)
    wrong_decoder = Factorization.from_encoder(encoder).decoder + 0.5
    source = save(tmp_path / "far.npz", encoder, "maxse", decoder=wrong_decoder)
    with pytest.raises(CertificationError, match="does not converge"):
        certify_factorization(path=source)
    rectangular = tmp_path / "rect.npz"
    Factorization(decoder=np.ones((3, 2)), encoder=np.ones((2, 3)), metadata={"metric": "maxse"}).save(rectangular)
    with pytest.raises(CertificationError, match="square encoder"):
        certify_factorization(path=rectangular)
    with pytest.raises(InvalidInputError, match="metric must be one of"):
        certify_factorization(path=save(tmp_path / "x.npz", encoder, "maxse"), metric="maxmean")


# ---------------------------------------------------------------------------------------------
# soundness: lowered claims, changed bytes


def _lower_decimal(text: str) -> str:
    places = len(text.split(".")[1]) if "." in text else 0
    return exact.decimal_string(Fraction(text) - Fraction(1, 10**places))


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_lowering_any_claim_makes_verify_fail(certified, tmp_path, metric):
    path = certified[metric][0]
    for name in CLAIMS[metric]:

        def consistent(document, name=name):  # lower the fraction by 10^-9 relative, decimal to match
            value = Fraction(int(document["claims"][name]["numerator"]), int(document["claims"][name]["denominator"]))
            lowered = exact.decimal_ceil(value * (1 - Fraction(1, 10**9)), digits=12)
            document["claims"][name] = {**exact.fraction_to_json(lowered), "decimal": exact.decimal_string(lowered)}

        def numerator(document, name=name):
            document["claims"][name]["numerator"] = str(int(document["claims"][name]["numerator"]) - 1)

        def decimal(document, name=name):
            document["claims"][name]["decimal"] = _lower_decimal(document["claims"][name]["decimal"])

        for change in (consistent, numerator, decimal):
            with pytest.raises(ClaimFailedError) as failure:
                verify_certificate(path=edited(path, tmp_path / "edited.json", change))
            assert failure.value.claim == name, (name, change.__name__, str(failure.value))
    for name, x in (("k", 12), ("2k+1", 25)):  # a log₂ lower bound raised above log₂x

        def raised(document, name=name):
            value = exact.fraction_from_json(document["log2_lower_bounds"][name]) + Fraction(1, 2**40)
            document["log2_lower_bounds"][name] = {
                **exact.fraction_to_json(value),
                "decimal": exact.decimal_string(exact.decimal_floor(value)),
            }

        with pytest.raises(ClaimFailedError, match=re.escape(f"log2_lower_bound {name}")):
            verify_certificate(path=edited(path, tmp_path / "edited.json", raised))

        def huge(document, name=name):  # numerator + 2^40: deciding it must not form 2^(2^40)
            record = document["log2_lower_bounds"][name]
            value = Fraction(int(record["numerator"]) + 2**40, int(record["denominator"]))
            document["log2_lower_bounds"][name] = {
                **exact.fraction_to_json(value),
                "decimal": exact.decimal_string(exact.decimal_floor(value)),
            }

        with pytest.raises(ClaimFailedError, match=re.escape(f"log2_lower_bound {name}")):
            verify_certificate(path=edited(path, tmp_path / "edited.json", huge))


def test_changing_any_byte_of_the_factorization_file_makes_verify_fail(tmp_path):
    factorization = save(tmp_path / "k4.npz", perturbed_on_grid(4, seed=7), "maxse")
    certify_factorization(path=factorization, out=tmp_path / "k4.json")
    original = factorization.read_bytes()
    for position in range(len(original)):
        changed = bytearray(original)
        changed[position] ^= 0x01
        factorization.write_bytes(bytes(changed))
        with pytest.raises(ClaimFailedError, match="sha256"):
            verify_certificate(path=tmp_path / "k4.json")
    factorization.write_bytes(original)
    verify_certificate(path=tmp_path / "k4.json")


def test_a_certificate_for_another_file_or_grid_is_refused(certified, tmp_path):
    path, _, _ = certified["maxse"]
    other = save(tmp_path / "other.npz", perturbed_on_grid(12, seed=4), "maxse")
    with pytest.raises(ClaimFailedError, match="sha256.*another or a changed file"):
        verify_certificate(path=edited(path, tmp_path / "a.json", lambda d: d["factorization"].update(file=str(other))))
    with pytest.raises(ClaimFailedError, match="does not exist"):
        verify_certificate(path=edited(path, tmp_path / "b.json", lambda d: d["factorization"].update(file="gone.npz")))

    def coarse(document):
        document["factorization"]["file"] = str(certified["maxse"][1])
        document["factorization"]["grid_bits"] = 8

    with pytest.raises(ClaimFailedError, match="grid_bits"):
        verify_certificate(path=edited(path, tmp_path / "c.json", coarse))
    with pytest.raises(ClaimFailedError, match="'n'"):
        verify_certificate(
            path=edited(path, tmp_path / "d.json", lambda d: d["factorization"].update(file=str(certified["maxse"][1]), n=13))
        )


# ---------------------------------------------------------------------------------------------
# corrupt certificates


REQUIRED = [
    "format",
    "factorization",
    "factorization.file",
    "factorization.sha256",
    "factorization.n",
    "factorization.metric",
    "factorization.grid_bits",
    "claims",
    "log2_lower_bounds",
    "log2_lower_bounds.k",
    "log2_lower_bounds.2k+1",
    "certifier_record",
    "float64",
    "library_version",
    "created",
    "timings",
    "command",
] + [f"claims.{name}" for name in CLAIMS["maxse"]]


def test_corrupt_certificates_give_clear_errors(certified, tmp_path):
    path = certified["maxse"][0]
    truncated = tmp_path / "truncated.json"
    truncated.write_text(path.read_text()[:200])
    with pytest.raises(CertificateFileError, match="not valid JSON"):
        verify_certificate(path=truncated)
    with pytest.raises(CertificateFileError, match="no such certificate"):
        verify_certificate(path=tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(CertificateFileError, match="not a JSON object"):
        verify_certificate(path=tmp_path / "list.json")
    for dotted in REQUIRED:

        def drop(document, dotted=dotted):
            *parents, last = dotted.split(".")
            target = document
            for part in parents:
                target = target[part]
            del target[last]

        with pytest.raises(CertificateFileError, match=f"missing field '{re.escape(dotted)}"):
            verify_certificate(path=edited(path, tmp_path / "dropped.json", drop))
    bad_fractions = [
        {"numerator": 3, "denominator": "2", "decimal": "1.5"},
        {"numerator": "3.0", "denominator": "2", "decimal": "1.5"},
        {"numerator": "3", "denominator": "0", "decimal": "1.5"},
        {"numerator": "3", "denominator": "-2", "decimal": "1.5"},
        {"numerator": "3", "decimal": "1.5"},
        "3/2",
    ]
    for bad in bad_fractions:
        with pytest.raises(CertificateFileError, match="c2"):
            verify_certificate(path=edited(path, tmp_path / "bad.json", lambda d, bad=bad: d["claims"].update(c2=bad)))
    with pytest.raises(CertificateFileError, match="decimal"):
        verify_certificate(path=edited(path, tmp_path / "bad.json", lambda d: d["claims"]["c2"].update(decimal="1e3")))
    with pytest.raises(CertificateFileError, match="format"):
        verify_certificate(path=edited(path, tmp_path / "bad.json", lambda d: d.update(format="other/1")))
    with pytest.raises(CertificateFileError, match="metric"):
        verify_certificate(path=edited(path, tmp_path / "bad.json", lambda d: d["factorization"].update(metric="max")))
    with pytest.raises(CertificateFileError, match="wrong type"):
        verify_certificate(path=edited(path, tmp_path / "bad.json", lambda d: d["factorization"].update(n="12")))


# ---------------------------------------------------------------------------------------------
# sensitivity for the streamer, paths, CLI


def test_certified_sensitivity_is_the_exact_fraction_and_is_rechecked(tmp_path):
    encoder = perturbed_on_grid(5, seed=9)
    factorization = save(tmp_path / "k5.npz", encoder, "maxse")
    certify_factorization(path=factorization, out=tmp_path / "k5.json")
    value = certified_sensitivity(path=tmp_path / "k5.json")
    expected = max(sum(abs(Fraction(float(v))) for v in column) for column in encoder.T)
    assert isinstance(value, Fraction) and value == expected
    with pytest.raises(ClaimFailedError, match="encoder_max_column_sum"):

        def lowered(d):
            return d["claims"]["encoder_max_column_sum"].update(
                numerator=str(int(d["claims"]["encoder_max_column_sum"]["numerator"]) - 1)
            )

        certified_sensitivity(path=edited(tmp_path / "k5.json", tmp_path / "low.json", lowered))
    save(factorization, perturbed_on_grid(5, seed=10), "maxse")
    with pytest.raises(ClaimFailedError, match="sha256"):
        certified_sensitivity(path=tmp_path / "k5.json")


def test_relative_paths_survive_moving_the_folder(tmp_path):
    (tmp_path / "project" / "factorizations").mkdir(parents=True)
    (tmp_path / "project" / "certificates").mkdir()
    factorization = save(tmp_path / "project" / "factorizations" / "k6.npz", perturbed_on_grid(6, seed=1), "meanse")
    certify_factorization(path=factorization, out=tmp_path / "project" / "certificates" / "k6.json")
    document = json.loads((tmp_path / "project" / "certificates" / "k6.json").read_text())
    assert document["factorization"]["file"] == "../factorizations/k6.npz"
    shutil.copytree(tmp_path / "project", tmp_path / "moved")
    shutil.rmtree(tmp_path / "project")
    verify_certificate(path=tmp_path / "moved" / "certificates" / "k6.json")


def test_cli_certify_and_verify(tmp_path):
    factorization = save(tmp_path / "k8.npz", perturbed_on_grid(8, seed=6), "maxse")
    runner = CliRunner()
    result = runner.invoke(app, ["certify", str(factorization), "--out", str(tmp_path / "k8.json")])
    assert result.exit_code == 0, result.output
    assert "‖L‖₂→∞" in result.output and "pure-dp-mf verify" in result.output
    result = runner.invoke(app, ["verify", str(tmp_path / "k8.json"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["verified"] is True
    tampered = edited(tmp_path / "k8.json", tmp_path / "bad.json", lambda d: d["claims"]["c2"].update(decimal="0.5"))
    completed = run_cli("verify", str(tampered))
    assert completed.returncode == 1 and "error: claim 'c2' fails" in completed.stderr  # a failed check, not bad input
    result = runner.invoke(app, ["certify", str(tmp_path / "none.npz"), "--out", str(tmp_path / "x.json")])
    assert result.exit_code != 0 and "no such file" in str(result.exception)


# ---------------------------------------------------------------------------------------------
# shipped certificates


# Every shipped certificate is verified here, except the k = 2048 ones (about a minute each):
# `reproduce --quick` re-verifies every shipped certificate, and tests/test_reproduce.py requires
# its run to have no failure.
SHIPPED = sorted(path for path in CERTIFICATES.glob("*.json") if not path.name.startswith("k2048_"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_certificate_verifies(path):
    result = verify_certificate(path=path)
    assert result.factorization_path.parent == (BASES).resolve()


def test_shipped_meanse_exact_lift_constant_is_2k_over_2k_plus_1_times_the_lifted_one():
    for path in sorted(CERTIFICATES.glob("*_meanse.json")):
        certificate = Certificate.read(path)
        k, claims = certificate.n, certificate.claims
        scaled = Fraction(2 * k, 2 * k + 1) * claims["lifted_constant"].value
        new = claims[EXACT_LIFT_CLAIM].value
        assert abs(new - scaled) <= new * Fraction(1, 10**11), path.name  # both rounded up at 12 digits
    for path in sorted(CERTIFICATES.glob("*_maxse.json")):
        assert EXACT_LIFT_CLAIM not in json.loads(path.read_text())["claims"], path.name


def test_shipped_k1024_meanse_exact_lift_claim_verifies_and_one_unit_lower_fails(tmp_path):
    path = CERTIFICATES / "k1024_meanse.json"
    result = verify_certificate(path=path)
    check = next(check for check in result.checks if check.claim == EXACT_LIFT_CLAIM)
    assert check.claimed == "0.0708748120934"
    assert Fraction(check.claimed) * (1 - Fraction(1, 10**11)) <= Fraction(check.proven) <= Fraction(check.claimed)

    def one_unit_lower(document):  # the 12th significant digit lowered by one, fraction to match
        lowered = Fraction(_lower_decimal(document["claims"][EXACT_LIFT_CLAIM]["decimal"]))
        document["claims"][EXACT_LIFT_CLAIM] = {**exact.fraction_to_json(lowered), "decimal": exact.decimal_string(lowered)}

    with pytest.raises(ClaimFailedError) as failure:
        verify_certificate(path=edited(path, tmp_path / "lowered.json", one_unit_lower))
    assert failure.value.claim == EXACT_LIFT_CLAIM and "2k/(2k+1)" in str(failure.value)


@pytest.mark.parametrize("factorization", sorted((BASES).glob("k*.npz")), ids=lambda p: p.name)
def test_every_shipped_factorization_has_a_certificate(factorization):
    certificate = CERTIFICATES / f"{factorization.stem}.json"
    assert certificate.exists(), (
        f"no certificate for {factorization.name}: run pure-dp-mf certify {factorization} --out {certificate}"
    )
    assert Certificate.read(certificate).factorization_path == factorization.resolve()


# ---------------------------------------------------------------------------------------------
# row-blocked exact products


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_row_blocked_certify_and_verify_give_identical_results(tmp_path, metric):
    """Certifying and verifying a row block at a time proves the same exact bounds as the whole
    matrix at once, for blocks of one row, blocks that do not divide k, and one block larger than k."""
    from pure_dp_mf.certificates.certify import _verifier_decoder_bound

    k = 23
    factorization = save(tmp_path / f"k{k}.npz", perturbed_on_grid(k, seed=11), metric)
    whole = certify_factorization(path=factorization, out=tmp_path / "whole.json")
    R = Factorization.load(factorization).encoder
    P = exact.grid_integers(R, grid_bits=32)
    whole_verifier = _verifier_decoder_bound(R, P, g=32, metric=metric)
    for row_block in (1, 5, k, 100):
        blocked = certify_factorization(path=factorization, out=tmp_path / f"blocked{row_block}.json", row_block=row_block)
        assert blocked.claims == whole.claims and blocked.certifier_record == whole.certifier_record
        assert _verifier_decoder_bound(R, P, g=32, metric=metric, row_block=row_block) == whole_verifier
        checks = verify_certificate(path=tmp_path / "whole.json", row_block=row_block).checks
        assert checks == verify_certificate(path=tmp_path / "whole.json").checks


def test_row_blocked_series_equals_the_whole_and_refuses_the_same(tmp_path):
    """``exact.neumann_series`` by row blocks (integer array or fmpz decoder) equals the whole
    assembly, first and second order, for both norms; a factorization far from T_k is refused
    by the blocked certifier and verifier alike."""
    k = 17
    P = exact.grid_integers(perturbed_on_grid(k, seed=4), grid_bits=32)
    M = exact.grid_integers(decoder_from_encoder(P * 2.0**-32), grid_bits=32, nearest=True)
    for norm in ("rows", "frobenius"):
        whole = exact.neumann_series(P, exact.integer_matrix(M), grid_bits=32, decoder_bits=32, norm=norm)
        for decoder in (M, exact.integer_matrix(M)):
            for row_block in (1, 4, 16):
                assert exact.neumann_series(P, decoder, grid_bits=32, decoder_bits=32, norm=norm, row_block=row_block) == whole
    encoder = perturbed_on_grid(6, seed=2)
    source = save(tmp_path / "far.npz", encoder, "maxse", decoder=Factorization.from_encoder(encoder).decoder + 0.5)
    with pytest.raises(CertificationError, match="does not converge"):
        certify_factorization(path=source, row_block=2)
    with pytest.raises(InvalidInputError, match="row_block must be at least 1"):
        certify_factorization(path=source, row_block=0)
    result = CliRunner().invoke(app, ["verify", str(tmp_path / "x.json"), "--row-block", "0"])
    assert isinstance(result.exception, InvalidInputError) and "--row-block must be at least 1" in str(result.exception)
