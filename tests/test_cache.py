"""The per-machine cache (``cache.py``): the exact tree costs at a horizon are kept and read back
equal; an entry of other code, of another horizon or damaged is computed again; "off" keeps
nothing."""

from __future__ import annotations

import json
import subprocess
import sys

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
    done = subprocess.run([sys.executable, "-c", PROBE, str(n)], capture_output=True, text=True, env=environment, timeout=120)
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
