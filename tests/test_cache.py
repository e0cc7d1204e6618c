"""The per-machine cache (``cache.py``): the exact tree costs at a horizon are kept and read back
equal; an entry of other code, of another horizon or damaged is computed again; "off" keeps
nothing."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import SAFETY_LIMIT

from pure_dp_mf import cache

PROBE = """
import json, sys
from pure_dp_mf.mechanisms import trees
n = int(sys.argv[1])
rows = {}
for mechanism in trees.ARITY_MECHANISMS:
    arity = trees.best_arity(mechanism=mechanism, n=n, metric="maxse")
    costs = trees.tree_costs(mechanism=mechanism, n=n, arity=arity)
    rows[mechanism] = [arity, str(costs.sensitivity), str(costs.max_row_norm_squared), str(costs.mean_row_norm_squared)]
print(json.dumps(rows))
"""


def _probe(n: int, folder) -> dict:
    environment = {"PURE_DP_MF_CACHE": str(folder), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(n)], capture_output=True, text=True, env=environment, timeout=SAFETY_LIMIT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tree_costs_are_kept_and_read_back_equal(tmp_path):
    n = 12345
    computed = _probe(n, "off")
    assert _probe(n, tmp_path) == computed  # computed, then written
    (entry,) = tmp_path.glob(f"tree-costs-*-{n}.json")
    record = json.loads(entry.read_text())
    assert record["n"] == n and len(record["costs"]) > 3 * 100  # every arity searched
    assert _probe(n, tmp_path) == computed  # read back
    for key in record["costs"]:  # an entry that lies is believed (trusted like the code) ...
        record["costs"][key][2] = "1/7"
    entry.write_text(json.dumps(record))
    assert _probe(n, tmp_path) != computed
    record["code"] = "another code"  # ... but one of other code is not
    entry.write_text(json.dumps(record))
    assert _probe(n, tmp_path) == computed
    entry.write_text("{ not json")
    assert _probe(n, tmp_path) == computed
    assert json.loads(entry.read_text())["code"] != "another code"  # written again


def test_off_keeps_nothing_and_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    monkeypatch.setenv("PURE_DP_MF_CACHE", "off")
    assert cache.cache_folder() is None and cache.read_entry("x.json") is None
    cache.write_entry("x.json", {"a": 1})
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("PURE_DP_MF_CACHE", str(blocked / "below"))  # below a file: cannot be created
    cache.write_entry("x.json", {"a": 1})
    assert cache.read_entry("x.json") is None
    monkeypatch.setenv("PURE_DP_MF_CACHE", str(tmp_path / "c"))
    cache.write_entry("x.json", {"a": 1})
    assert cache.read_entry("x.json") == {"a": 1}
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700


def test_a_base_solve_and_residual_are_kept_and_read_back_equal(tmp_path, monkeypatch):
    """The float decoder T_k·R⁻¹ and the residual ‖L·R − T_k‖_max of a base are kept per machine:
    read back equal to what a fresh process computes; a damaged or mismatched entry is computed
    again; "off" keeps nothing. (Neither is what privacy rests on: ``cache.py``.)"""
    import numpy as np

    from pure_dp_mf.factorizations import factorization as module
    from pure_dp_mf.factorizations.factorization import Factorization, decoder_from_encoder

    rng = np.random.default_rng(4)
    k = 300
    encoder = np.tri(k) * 0.5 + np.diag(np.full(k, 0.5)) + np.tril(rng.normal(scale=1e-3, size=(k, k)), -1)
    monkeypatch.setenv("PURE_DP_MF_CACHE", "off")
    module._SOLVED.clear()
    computed = decoder_from_encoder(encoder)
    residual = Factorization(decoder=computed, encoder=encoder).residual()
    monkeypatch.setenv("PURE_DP_MF_CACHE", str(tmp_path))
    module._SOLVED.clear()
    np.testing.assert_array_equal(decoder_from_encoder(encoder), computed)  # computed, then written
    (solve,) = tmp_path.glob("solve-*.npy")
    module._SOLVED.clear()
    read = decoder_from_encoder(encoder)  # read back: equal, in the solve's memory layout, so equal sums
    assert read.strides == computed.strides and read.flags["F_CONTIGUOUS"] == computed.flags["F_CONTIGUOUS"]
    assert (read**2).sum(axis=1).tobytes() == (computed**2).sum(axis=1).tobytes()
    module._SOLVED.clear()
    np.save(solve, (computed * 2).T)  # an entry that lies is believed (trusted like the code) ...
    np.testing.assert_array_equal(decoder_from_encoder(encoder), computed * 2)
    for damaged in (np.zeros((k, k + 1)), np.full((k, k), np.nan)):  # ... but not one of another shape, or not finite
        np.save(solve, damaged)
        module._SOLVED.clear()
        np.testing.assert_array_equal(decoder_from_encoder(encoder), computed)
    solve.write_bytes(b"not an array")
    module._SOLVED.clear()
    np.testing.assert_array_equal(decoder_from_encoder(encoder), computed)
    np.testing.assert_array_equal(np.load(solve).T, computed)  # written again
    assert Factorization(decoder=computed, encoder=encoder).residual() == residual  # computed, then written
    (entry,) = tmp_path.glob("residual-*.json")
    assert Factorization(decoder=computed, encoder=encoder).residual() == residual  # read back
    other = computed.copy()
    other[5, 3] += 1e-3  # other matrices: another entry, their own residual
    assert Factorization(decoder=other, encoder=encoder).residual() > 1e-4 > residual
    record = json.loads(entry.read_text())
    record["of"] = "other matrices"
    entry.write_text(json.dumps(record))
    assert Factorization(decoder=computed, encoder=encoder).residual() == residual
    small = np.tri(8)  # below 256: nothing written
    for path in tmp_path.iterdir():
        path.unlink()
    module._SOLVED.clear()
    decoder_from_encoder(small)
    Factorization(decoder=np.eye(8), encoder=small).residual()
    assert list(tmp_path.iterdir()) == []
