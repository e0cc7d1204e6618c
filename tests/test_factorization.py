"""Factorization files: round trips and every kind of bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse
from conftest import dyadic_binary_tree, run_cli

from pure_dp_mf.errors import FactorizationFileError, InvalidInputError, NotAFactorizationError
from pure_dp_mf.factorizations.factorization import Factorization, array_sha256
from pure_dp_mf.factorizations.workloads import toeplitz_square_root


def _write_raw(path, arrays: dict, metadata: dict) -> None:
    np.savez(path, **arrays, metadata=np.frombuffer(json.dumps(metadata).encode(), dtype=np.uint8))


@pytest.fixture
def saved(tmp_path):
    L, R = dyadic_binary_tree(8)
    path = tmp_path / "tree.npz"
    Factorization(decoder=L, encoder=R, metadata={"metric": "maxse", "note": "binary tree"}).save(path)
    return path


def test_round_trip_is_bit_exact(tmp_path, saved):
    loaded = Factorization.load(saved)
    L, R = dyadic_binary_tree(8)
    assert np.array_equal(loaded.decoder, L) and np.array_equal(loaded.encoder, R)
    assert loaded.metadata["note"] == "binary tree" and loaded.metric == "maxse"
    assert (loaded.n, loaded.inner_size) == (8, 15)
    assert loaded.validate() == 0.0

    rng = np.random.default_rng(1)
    encoder = (toeplitz_square_root(16) + 1e-3 * rng.standard_normal((16, 16))).astype(np.float32)
    original = Factorization.from_encoder(encoder, metadata={"metric": "meanse"})
    path = tmp_path / "square.npz"
    original.save(path, store_decoder=False)
    again = Factorization.load(path)
    assert again.encoder.dtype == np.float32 and np.array_equal(again.encoder, encoder)
    assert np.array_equal(again.decoder, original.decoder)
    assert again.validate(tolerance=1e-9) < 1e-9
    assert again.metadata["dtype"] == "float32"


def test_sparse_factorizations_are_saved_dense(tmp_path):
    L, R = dyadic_binary_tree(4)
    factorization = Factorization(decoder=scipy.sparse.csr_matrix(L), encoder=scipy.sparse.csr_matrix(R))
    assert factorization.validate() == 0.0
    factorization.save(tmp_path / "sparse.npz")
    assert np.array_equal(Factorization.load(tmp_path / "sparse.npz").decoder, L)


def test_missing_and_non_npz_files(tmp_path):
    with pytest.raises(FactorizationFileError, match="no such file"):
        Factorization.load(tmp_path / "absent.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(FactorizationFileError, match="not an .npz"):
        Factorization.load(tmp_path / "text.npz")
    with pytest.raises(FactorizationFileError, match="not a file"):
        Factorization.load(tmp_path)


def test_missing_arrays_and_bad_metadata(tmp_path):
    path = tmp_path / "f.npz"
    np.savez(path, encoder=np.eye(3))  # no metadata: a published archive, read as its one array
    published = Factorization.load(path)
    assert np.array_equal(published.encoder, np.eye(3)) and published.metadata["source"]["encoder"]["array"] == "encoder"
    np.savez(path, encoder=np.eye(3), other=np.eye(2))
    with pytest.raises(InvalidInputError, match="choose one with --array"):
        Factorization.load(path)
    _write_raw(path, {"decoder": np.eye(3)}, {"format": "pure_dp_mf.factorization/1"})
    with pytest.raises(FactorizationFileError, match="missing array 'encoder'"):
        Factorization.load(path)
    np.savez(path, encoder=np.eye(3), metadata=np.frombuffer(b"{not json", dtype=np.uint8))
    with pytest.raises(FactorizationFileError, match="not valid JSON"):
        Factorization.load(path)
    _write_raw(path, {"encoder": np.eye(3)}, {"format": "something else"})
    with pytest.raises(FactorizationFileError, match="format"):
        Factorization.load(path)


def test_recorded_shape_dtype_and_hash_mismatches(tmp_path, saved):
    with np.load(saved) as archive:
        arrays = {name: archive[name] for name in archive.files}
    metadata = json.loads(arrays.pop("metadata").tobytes())
    path = tmp_path / "bad.npz"

    tampered = dict(arrays, decoder=arrays["decoder"].copy())
    tampered["decoder"][0, 0] = 0.5
    _write_raw(path, tampered, metadata)
    with pytest.raises(FactorizationFileError, match="'decoder' does not match its recorded sha256"):
        Factorization.load(path)

    _write_raw(path, dict(arrays, encoder=arrays["encoder"][:, :4]), metadata)
    with pytest.raises(FactorizationFileError, match="'encoder' has shape"):
        Factorization.load(path)

    _write_raw(path, dict(arrays, encoder=arrays["encoder"].astype(np.float32)), metadata)
    with pytest.raises(FactorizationFileError, match="dtype"):
        Factorization.load(path)

    _write_raw(path, {"encoder": arrays["encoder"]}, metadata)
    with pytest.raises(FactorizationFileError, match="lacks it"):
        Factorization.load(path)

    # consistent hashes but shapes that cannot multiply
    decoder = np.ones((8, 14))
    bad_metadata = json.loads(json.dumps(metadata))
    bad_metadata["arrays"]["decoder"] = {"shape": [8, 14], "dtype": "float64", "sha256": array_sha256(decoder)}
    _write_raw(path, dict(arrays, decoder=decoder), bad_metadata)
    with pytest.raises(FactorizationFileError, match="shapes do not fit"):
        Factorization.load(path)


def test_nan_and_not_a_factorization(tmp_path):
    L, R = dyadic_binary_tree(4)
    R[0, 0] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        Factorization(decoder=L, encoder=R)
    # a file whose arrays carry NaN (hashes consistent) is refused on load
    path = tmp_path / "nan.npz"
    metadata = {
        "format": "pure_dp_mf.factorization/1",
        "n": 4,
        "inner_size": 7,
        "arrays": {
            name: {"shape": list(a.shape), "dtype": "float64", "sha256": array_sha256(a)}
            for name, a in (("decoder", L), ("encoder", R))
        },
    }
    _write_raw(path, {"decoder": L, "encoder": R}, metadata)
    with pytest.raises(FactorizationFileError, match="NaN"):
        Factorization.load(path)

    L, R = dyadic_binary_tree(4)
    R[1, 1] += 0.01
    with pytest.raises(NotAFactorizationError, match="exceeds the tolerance"):
        Factorization(decoder=L, encoder=R).validate()
    with pytest.raises(InvalidInputError, match="singular"):
        Factorization.from_encoder(np.zeros((3, 3)))
    with pytest.raises(InvalidInputError, match="metric"):
        Factorization(decoder=np.eye(2), encoder=np.eye(2), metadata={"metric": "rmse"})


def test_cli_info(saved, tmp_path):
    result = run_cli("info", str(saved), "--json", "--epsilon", "2")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["n"] == 8 and record["inner_size"] == 15 and record["residual"] == 0.0
    assert record["c2"] == pytest.approx(np.sqrt(48)) and record["max_se"] == pytest.approx(2 * 48 / 4)
    table = run_cli("info", str(saved))
    assert table.returncode == 0 and "MaxSE·ε²/log₂(n)³" in table.stdout

    L, R = dyadic_binary_tree(4)
    R[1, 1] += 0.5
    Factorization(decoder=L, encoder=R).save(tmp_path / "wrong.npz")
    (tmp_path / "text.npz").write_text("hello")
    for arguments, message in [
        (("info", str(tmp_path / "absent.npz")), "no such file"),
        (("info", str(tmp_path / "text.npz")), "not an .npz"),
        (("info", str(tmp_path / "wrong.npz")), "L·R is not T_4"),
        (("info", str(saved), "--epsilon", "-1"), "epsilon"),
    ]:
        result = run_cli(*arguments)
        assert result.returncode == 2, (arguments, result.stdout, result.stderr)
        assert result.stderr.startswith("error: ") and message in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
