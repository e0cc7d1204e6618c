"""Matrices as published (bare .npy, any .npz array, text, integers on a grid) through info,
certify, verify and lift, and published claims checked exactly (pure_dp_mf.certificates.claims)."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from conftest import ROOT, run_cli

from pure_dp_mf import exact
from pure_dp_mf.certificates.certify import Certificate, certify_factorization, verify_certificate
from pure_dp_mf.certificates.claims import QUANTITIES, check_claims, proven_ranges
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER


def _shipped(k: int, metric: str) -> Factorization:
    return Factorization.load(BASE_FOLDER / f"k{k:03d}_{metric}.npz")


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_a_bare_float64_npy_certifies_to_the_shipped_bounds(tmp_path, metric):
    R = _shipped(64, metric).dense()[1]
    np.save(tmp_path / f"{metric}_n64_R.npy", R)
    result = run_cli("certify", str(tmp_path / f"{metric}_n64_R.npy"), "--metric", metric, "--out", str(tmp_path / "c.json"))
    assert result.returncode == 0, result.stderr
    ours = Certificate.read(tmp_path / "c.json")
    shipped = Certificate.read(CERTIFICATE_FOLDER / f"k064_{metric}.json")
    assert {name: bound.value for name, bound in ours.claims.items()} == {name: b.value for name, b in shipped.claims.items()}
    assert ours.rounded_from["file"] == f"{metric}_n64_R.npy" and ours.rounded_from["entries_moved"] == 0
    verified = run_cli("verify", str(tmp_path / "c.json"))
    assert verified.returncode == 0, verified.stderr


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_a_bare_float32_npy_certifies_and_verifies_like_the_npz_route(tmp_path, metric):
    R32 = (_shipped(32, metric).dense()[1] / 7).astype(np.float32)  # entries below 2^-9: off the 2^-32 grid
    np.save(tmp_path / "R.npy", R32)
    from_npy = certify_factorization(path=tmp_path / "R.npy", metric=metric, out=tmp_path / "npy.json")
    Factorization.from_encoder(R32.astype(np.float64), metadata={"metric": metric}).save(tmp_path / "same.npz")
    from_npz = certify_factorization(path=tmp_path / "same.npz", metric=metric, out=tmp_path / "npz.json")
    assert {n: b.value for n, b in from_npy.claims.items()} == {n: b.value for n, b in from_npz.claims.items()}
    assert from_npy.rounded_from["entries_moved"] > 0 and 0 < from_npy.rounded_from["largest_change"] < 2**-32
    assert verify_certificate(path=tmp_path / "npy.json").checks  # raises unless every claim holds
    # the rounding is re-checked from the published file: change it and verify fails
    np.save(tmp_path / "R.npy", R32 * np.float32(1.0001))
    result = run_cli("verify", str(tmp_path / "npy.json"))
    assert result.returncode == 1 and "rounded_from" in result.stderr + result.stdout


def test_npz_with_several_arrays_text_csv_and_integer_matrices(tmp_path):
    R = _shipped(8, "maxse").dense()[1]
    reference = Factorization.from_encoder(R).costs()
    np.savez(tmp_path / "paper.npz", R=R, L=np.eye(8))
    refused = run_cli("info", str(tmp_path / "paper.npz"))
    assert refused.returncode == 2 and "choose one with --array" in refused.stderr and "L, R" in refused.stderr
    chosen = run_cli("info", str(tmp_path / "paper.npz"), "--array", "R", "--json")
    assert chosen.returncode == 0 and json.loads(chosen.stdout)["c2"] == pytest.approx(reference.c2, rel=1e-12)
    np.savetxt(tmp_path / "R.csv", R, delimiter=",", fmt="%.17g")
    np.savetxt(tmp_path / "R.txt", R, fmt="%.17g")
    for name in ("R.csv", "R.txt"):
        assert Factorization.load(tmp_path / name).costs().c2 == reference.c2
    np.save(tmp_path / "P.npy", np.rint(np.ldexp(R, 32)).astype(np.int64))
    scaled = Factorization.load(tmp_path / "P.npy", integer_grid_bits=32)
    assert np.array_equal(scaled.dense()[1], R) and scaled.metadata["source"]["encoder"]["integer_grid_bits"] == 32
    lifted = run_cli("lift", str(tmp_path / "P.npy"), "--integer-grid-bits", "32", "--n", "1000", "--json")
    assert lifted.returncode == 0, lifted.stderr


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: np.full((4, 4), np.nan), "NaN or infinite entry at row 0, column 0"),
        (lambda: np.where(np.eye(4) == 1, np.inf, 0.0), "NaN or infinite"),
        (lambda: np.ones((4, 4)), "singular"),
        (lambda: np.ones((3, 4)), "an encoder alone must be square"),
        (lambda: np.zeros((0, 0)), "is empty"),
        (lambda: np.ones(4), "must be a matrix (2 dimensions), got shape (4,)"),
        (lambda: np.ones((2, 2, 2)), "must be a matrix (2 dimensions)"),
        (lambda: np.eye(4, dtype=np.int64), "state their grid with --integer-grid-bits"),
        (lambda: np.eye(4, dtype=bool), "booleans"),
        (lambda: np.eye(4, dtype=complex), "complex"),
    ],
)
def test_bad_matrices_get_one_error_line(tmp_path, make, message):
    np.save(tmp_path / "bad.npy", make())
    for command in (["info"], ["certify", "--metric", "maxse", "--out", str(tmp_path / "c.json")], ["lift", "--n", "100"]):
        result = run_cli(command[0], str(tmp_path / "bad.npy"), *command[1:])
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), (command, result.stderr)
        assert message in lines[0], (command, lines[0])


def test_unreadable_and_foreign_files_get_one_error_line(tmp_path):
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "words.txt").write_text("a b\nc d\n")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)))
    for name, message in (("objects.npy", "Python objects"), ("words.txt", "not a matrix of numbers"), ("binary.bin", "binary")):
        result = run_cli("info", str(tmp_path / name))
        assert result.returncode == 2 and result.stderr.startswith("error:") and message in result.stderr, result.stderr
    with pytest.raises(InvalidInputError, match="apply to published matrices"):
        Factorization.load(BASE_FOLDER / "k004_maxse.npz", array="encoder")


# ---------------------------------------------------------------------------------------------
# Claims.


def _claims_file(tmp_path, claims: dict, *, metric: str, decoder: bool) -> str:
    document = {"encoder": "R.npy", "metric": metric, "claims": {name: str(value) for name, value in claims.items()}}
    if decoder:
        document["decoder"] = "L.npy"
    (tmp_path / "claims.json").write_text(json.dumps(document))
    return str(tmp_path / "claims.json")


@pytest.mark.parametrize("metric", ["maxse", "meanse"])
def test_every_quantity_true_claim_holds_and_one_percent_lower_fails(tmp_path, metric):
    L, R = _shipped(16, metric).dense()
    np.save(tmp_path / "R.npy", (3 * R).astype(np.float32))  # published scales differ from ours
    np.save(tmp_path / "L.npy", (L / 3).astype(np.float32))
    ranges = proven_ranges(
        encoder=np.load(tmp_path / "R.npy"), decoder=np.load(tmp_path / "L.npy").astype(np.float64), metric=metric
    )
    decoder_norm = "decoder_max_row_norm" if metric == "maxse" else "decoder_frobenius_norm"
    cost = "c2" if metric == "maxse" else "cf"
    names = ["encoder_max_column_sum", decoder_norm, cost, "leading_constant", "lifted_constant", "decoder_correction"]
    names += ["approximate_decoder_max_row_norm", "approximate_decoder_frobenius_norm"]
    for name in names:
        proven = ranges[name]
        assert proven.lower <= proven.upper and proven.upper - proven.lower <= proven.upper * Fraction(1, 10**4), name
        true_claim = exact.decimal_ceil(proven.upper, digits=8)  # as a paper would print it, rounded up
        path = _claims_file(tmp_path, {name: exact.decimal_string(true_claim)}, metric=metric, decoder=True)
        assert check_claims(path=path).verdicts[0].verdict == "holds", name
        lowered = exact.decimal_string(exact.decimal_floor(true_claim * Fraction(99, 100), digits=8))
        path = _claims_file(tmp_path, {name: lowered}, metric=metric, decoder=True)
        result = run_cli("check-claims", path, "--json")
        assert result.returncode == 1, (name, result.stderr)
        verdict = json.loads(result.stdout)["claims"][0]
        assert verdict["quantity"] == name and verdict["verdict"] == "fails", (name, verdict)


def test_claims_that_cannot_be_decided_and_bad_claim_files(tmp_path):
    R = _shipped(8, "maxse").dense()[1]
    np.save(tmp_path / "R.npy", R)
    ranges = proven_ranges(encoder=R, decoder=None, metric="maxse")
    between = (ranges["lifted_constant"].lower + ranges["lifted_constant"].upper) / 2
    path = _claims_file(
        tmp_path,
        {"lifted_constant": exact.decimal_string(exact.decimal_floor(between, digits=30))},
        metric="maxse",
        decoder=False,
    )
    # a claim between the proven bounds is neither proven nor refuted
    verdicts = check_claims(path=path).verdicts
    assert [v.verdict for v in verdicts] == ["undecided"]
    assert run_cli("check-claims", path).returncode == 1
    for document, message in (
        ({"encoder": "R.npy", "metric": "maxse", "claims": {"nonsense": 1}}, "unknown quantity"),
        ({"encoder": "R.npy", "metric": "maxse", "claims": {}}, "states no claim"),
        ({"encoder": "R.npy", "claims": {"c2": 1}}, "no 'metric'"),
        ({"encoder": "R.npy", "metric": "maxse", "claims": {"c2": "x"}}, "must be a number"),
        ({"encoder": "missing.npy", "metric": "maxse", "claims": {"c2": 1}}, "no such file"),
    ):
        (tmp_path / "bad.json").write_text(json.dumps(document))
        result = run_cli("check-claims", str(tmp_path / "bad.json"))
        assert result.returncode == 2 and result.stderr.startswith("error:") and message in result.stderr, result.stderr
    assert set(QUANTITIES) >= {"encoder_max_column_sum", "decoder_correction", "lifted_constant"}


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "claims").glob("table2_k*.json")), ids=lambda p: p.stem)
def test_table_2_and_the_headline_hold_for_every_shipped_base(path):
    report = check_claims(path=path)
    assert report.all_hold, [v.as_dict() for v in report.verdicts]
