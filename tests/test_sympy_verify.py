"""The sympy engine (``certificates/sympy_verify.py``): an independent route that re-checks every
claim of a certificate with L = T_k·R̃⁻¹ computed exactly in sympy. It accepts the shipped
certificates and agrees with the FLINT verifier claim by claim, rejects a lowered claim naming
it, refuses k above its limit, and shares no code with the FLINT verifier."""

from __future__ import annotations

import ast
import json
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy
from conftest import SAFETY_LIMIT, run_cli

from pure_dp_mf.certificates import sympy_verify
from pure_dp_mf.certificates.certify import ClaimFailedError, certify_factorization, verify_certificate
from pure_dp_mf.certificates.sympy_verify import verify_with_sympy
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER

SMALL = [f"k{k:03d}_{metric}" for k in (4, 8, 16) for metric in ("maxse", "meanse")]


@pytest.mark.parametrize("name", SMALL)
def test_both_engines_accept_the_shipped_certificates_and_agree_claim_by_claim(name):
    path = CERTIFICATE_FOLDER / f"{name}.json"
    ours = verify_with_sympy(path=path)
    theirs = verify_certificate(path=path)
    assert [c.claim for c in ours.checks] == [c.claim for c in theirs.checks]
    # 5 claims and 2 log₂ lower bounds, and for meanse the exact-lift constant
    assert len(ours.checks) == (8 if name.endswith("meanse") else 7)
    for mine, other in zip(ours.checks, theirs.checks, strict=True):
        assert mine.claimed == other.claimed, mine.claim
        lower = mine.claim.startswith("log2")
        # each engine's own bound is on the right side of the claim, and the two agree closely
        proven, theirs_proven, claimed = Fraction(mine.proven), Fraction(other.proven), Fraction(mine.claimed)
        assert (proven >= claimed) if lower else (proven <= claimed), mine
        assert abs(proven - theirs_proven) <= claimed * Fraction(1, 10**13), (mine, other)
    assert (ours.n, ours.metric, ours.factorization_sha256) == (theirs.n, theirs.metric, theirs.factorization_sha256)


def test_cli_engine_sympy_prints_the_same_report():
    path = str(CERTIFICATE_FOLDER / "k008_maxse.json")
    ours = run_cli("verify", path, "--engine", "sympy", "--json", timeout=SAFETY_LIMIT)
    assert ours.returncode == 0, ours.stderr
    a, b = json.loads(json.dumps(verify_certificate(path=path).as_dict())), json.loads(ours.stdout)
    assert [c["claim"] for c in a["checks"]] == [c["claim"] for c in b["checks"]]
    assert {key: value for key, value in a.items() if key not in ("checks", "seconds")} == {
        key: value for key, value in b.items() if key not in ("checks", "seconds")
    }
    table = run_cli("verify", path, "--engine", "sympy", timeout=SAFETY_LIMIT)
    assert table.returncode == 0 and "OK: every claim" in table.stdout and "verifier's bound" in table.stdout


def _copied(tmp_path: Path, name: str) -> Path:
    """The shipped certificate and its base in tmp_path, keeping the path ../base_factorizations/."""
    (tmp_path / "certificates").mkdir()
    (tmp_path / "base_factorizations").mkdir()
    shutil.copy(BASE_FOLDER / f"{name}.npz", tmp_path / "base_factorizations")
    shutil.copy(CERTIFICATE_FOLDER / f"{name}.json", tmp_path / "certificates")
    return tmp_path / "certificates" / f"{name}.json"


def _decimal(value: Fraction, places: int) -> str:
    digits = str(value.numerator * 10**places // value.denominator).rjust(places + 1, "0")
    return f"{digits[:-places]}.{digits[-places:]}".rstrip("0").rstrip(".") if places else digits  # as certificates write


def _lower_by_one_unit(path: Path, claim: str) -> None:
    """Lower the claim's decimal and its fraction by one unit in the decimal's last digit."""
    document = json.loads(path.read_text())
    entry = document["claims"][claim]
    decimal = entry["decimal"]
    places = len(decimal.split(".")[1]) if "." in decimal else 0
    lowered = Fraction(decimal) - Fraction(1, 10**places)
    assert Fraction(int(entry["numerator"]), int(entry["denominator"])) == Fraction(decimal)
    entry.update(
        numerator=str(lowered.numerator),
        denominator=str(lowered.denominator),
        decimal=_decimal(lowered, places),
    )
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    "name, claim",
    [
        ("k004_maxse", "c2"),
        ("k008_meanse", "cf"),
        ("k016_maxse", "leading_constant"),
        ("k004_meanse", "lifted_constant"),
        ("k016_meanse", "lifted_constant_meanse_exact_lift"),
        ("k008_maxse", "encoder_max_column_sum"),
    ],
)
def test_a_claim_lowered_by_one_unit_is_rejected_naming_it(tmp_path, name, claim):
    path = _copied(tmp_path, name)
    assert verify_with_sympy(path=path).n > 0  # the copy verifies as it is
    _lower_by_one_unit(path, claim)
    with pytest.raises(ClaimFailedError) as ours:
        verify_with_sympy(path=path)
    assert ours.value.claim == claim
    with pytest.raises(ClaimFailedError) as theirs:
        verify_certificate(path=path)
    assert theirs.value.claim == claim  # the engines agree on the verdict and on the claim
    if claim == "c2":
        result = run_cli("verify", str(path), "--engine", "sympy", timeout=SAFETY_LIMIT)
        assert result.returncode == 1 and result.stderr.startswith("error: claim 'c2' fails"), result.stderr


def test_the_decoder_claims_headroom_is_accepted_by_both_engines(tmp_path):
    # the decoder norm is certified with one unit of headroom in its 12th digit (docs/certificates.md)
    path = _copied(tmp_path, "k008_maxse")
    _lower_by_one_unit(path, "decoder_max_row_norm")
    assert verify_with_sympy(path=path).checks[1].claim == "decoder_max_row_norm"
    assert verify_certificate(path=path).checks[1].claim == "decoder_max_row_norm"


def test_a_decimal_that_is_not_its_fraction_is_rejected(tmp_path):
    path = _copied(tmp_path, "k004_maxse")
    document = json.loads(path.read_text())
    document["claims"]["leading_constant"]["decimal"] = "0.821028687925"
    path.write_text(json.dumps(document))
    with pytest.raises(ClaimFailedError, match="rounded up") as raised:
        verify_with_sympy(path=path)
    assert raised.value.claim == "leading_constant"


def test_k_above_the_limit_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="up to k = 256"):
        verify_with_sympy(path=CERTIFICATE_FOLDER / "k512_maxse.json")
    with pytest.raises(InvalidInputError, match="k = 16"):
        verify_with_sympy(path=CERTIFICATE_FOLDER / "k016_maxse.json", max_base_size=8)
    result = run_cli("verify", str(CERTIFICATE_FOLDER / "k032_maxse.json"), "--engine", "sympy", "--max-base-size", "16")
    assert result.returncode == 2 and result.stderr.startswith("error:") and "k = 32" in result.stderr, result.stderr


def test_a_rounded_certificate_has_its_rounding_rechecked(tmp_path):
    encoder = Factorization.load(BASE_FOLDER / "k004_maxse.npz").encoder + 1e-12  # off the grid
    Factorization.from_encoder(encoder, metadata={"metric": "maxse"}).save(tmp_path / "off.npz")
    certify_factorization(path=tmp_path / "off.npz", out=tmp_path / "c.json")
    assert verify_with_sympy(path=tmp_path / "c.json").n == 4
    shifted = encoder.copy()
    shifted[0, 0] += 2.0**-20  # the original no longer rounds to the certified encoder
    Factorization.from_encoder(shifted, metadata={"metric": "maxse"}).save(tmp_path / "off.npz")
    with pytest.raises(ClaimFailedError) as raised:
        verify_with_sympy(path=tmp_path / "c.json")
    assert raised.value.claim == "rounded_from"


def test_exact_helpers():
    holds = sympy_verify._log2_lower_bound_holds
    assert holds(sympy.Integer(3), 8) and not holds(sympy.Rational(3 * 2**64 + 1, 2**64), 8)
    certified = sympy.Rational(29237397617229858719, 2**63)  # the k = 4 certificate's bound of log₂ 9
    assert holds(certified, 9) and not holds(certified + sympy.Rational(1, 2**40), 9)
    assert sympy_verify._decimal_text(sympy.Rational(1812, 1000)) == "1.812"
    assert sympy_verify._decimal_text(sympy.Integer(2)) == "2"
    root = sympy_verify._sqrt_upper(sympy.Integer(2))
    assert root**2 >= 2 and root - sympy.sqrt(2) < sympy.Rational(1, 2**127)
    assert np.isclose(float(root), 2**0.5)


def test_no_code_is_shared_with_the_flint_verifier():
    tree = ast.parse(Path(sympy_verify.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{alias.name}" for alias in node.names}
    assert not any(name.split(".")[0] in ("flint", "gmpy2") for name in imported), imported
    assert not any("certificates.exact" in name or name.endswith(".exact") for name in imported), imported
    from_certify = {name.rsplit(".", 1)[1] for name in imported if name.startswith("pure_dp_mf.certificates.certify.")}
    assert from_certify <= {"Certificate", "Check", "ClaimFailedError", "VerificationResult"}  # reading and reporting
