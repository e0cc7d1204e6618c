"""The ledger (``engines.ledger``): one publication per key, one input per released step, across
processes, users and machines. Every test runs on SQLite and on a real PostgreSQL server
(the ``ledger_url`` fixture, ``tests/postgres_server.py``).

Each attack test below recovers noise on the code before the ledger: a second run on the same key
releases other data under the same noise, so the difference of two releases is T·(x − x′)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import SAFETY_LIMIT, run_cli

from pure_dp_mf.engines import ledger
from pure_dp_mf.engines.ledger import (
    Ledger,
    LedgerError,
    Publication,
    keyed_digest,
    keyed_mac_key,
    keyed_pair_sum,
    keyed_step_digest,
    step_digest,
)
from pure_dp_mf.engines.registry import generator_tag

ROOT = Path(__file__).resolve().parents[1]


def python(script: str, *, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python process (another process, as a second job would be)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def tag(n: int) -> str:
    return generator_tag(bytes([n]) * 32)


# ---------------------------------------------------------------------------------- the ledger itself


def test_a_key_serves_one_publication_and_a_publication_owns_one_key(ledger_url):
    book = Ledger(ledger_url)
    spec = {"engine": "continual", "epsilon": "0x1.0p+0"}
    assert book.claim(Publication(name="daily", key_tag=tag(1), spec=spec)) == "daily"
    assert book.claim(Publication(name="daily", key_tag=tag(1), spec=spec)) == "daily"  # the same: a re-run
    assert book.claim(Publication(name=None, key_tag=tag(1))) == "daily"  # a key names its publication
    with pytest.raises(LedgerError, match="already serves the publication 'daily'"):
        book.claim(Publication(name="weekly", key_tag=tag(1), spec=spec))
    with pytest.raises(LedgerError, match="owns another noise key") as refused:
        book.claim(Publication(name="daily", key_tag=tag(2), spec=spec))
    assert "corrects='daily'" in str(refused.value)  # how to make a correction
    with pytest.raises(LedgerError, match=r"other options \(epsilon\)"):
        book.claim(Publication(name="daily", key_tag=tag(1), spec={**spec, "epsilon": "0x1.0p+1"}))
    with pytest.raises(LedgerError, match="corrects='nothing'"):
        book.claim(Publication(name="fixed", key_tag=tag(3), corrects="nothing"))
    assert book.claim(Publication(name="fixed", key_tag=tag(3), spec=spec, corrects="daily")) == "fixed"
    assert book.publication("fixed")["corrects"] == "daily"
    assert book.claim(Publication(name=None, key_tag=tag(4))) == f"key {tag(4)[:16]}"
    book.close()


def test_a_released_step_is_reproduced_or_refused_without_its_value(ledger_url):
    book = Ledger(ledger_url)
    book.claim(Publication(name="p", key_tag=tag(1)))
    key = bytes([1]) * 32
    digests = [step_digest(key, step=t, data=str(v).encode()) for t, v in enumerate([1, 0, 1])]
    assert book.record("p", first=0, digests=digests) == 3
    assert book.record("p", first=0, digests=digests) == 0  # the same inputs: nothing new, nothing refused
    assert book.record("p", first=1, digests=[*digests[1:], step_digest(key, step=3, data=b"1")]) == 1
    with pytest.raises(LedgerError) as refused:
        book.record("p", first=2, digests=[step_digest(key, step=2, data=b"0"), step_digest(key, step=3, data=b"1")])
    message = str(refused.value)
    assert "step 3 of the publication 'p'" in message and "nothing released" in message
    assert " 0" not in message.replace("step 3", "") and "input 1" not in message  # no stored or given value
    assert book.released_steps("p") == 4  # the refused call inserted nothing
    assert step_digest(key, step=0, data=b"1") != step_digest(bytes(32), step=0, data=b"1")  # keyed: no guessing 0/1
    book.close()


def _race(url: str, digest: str, barrier, results) -> None:
    book = Ledger(url)
    barrier.wait()
    try:
        book.record("race", first=0, digests=[digest])
        results.put("won")
    except LedgerError:
        results.put("refused")


def test_two_processes_recording_different_inputs_for_one_step_one_wins(ledger_url):
    Ledger(ledger_url).claim(Publication(name="race", key_tag=tag(9)))
    context = multiprocessing.get_context("spawn")
    for _ in range(3):
        book = Ledger(ledger_url)
        book._retrying(lambda run: run("DELETE FROM published_steps WHERE publication = 'race'"))
        book.close()
        barrier, results = context.Barrier(2), context.Queue()
        workers = [context.Process(target=_race, args=(ledger_url, d, barrier, results)) for d in ("a" * 64, "b" * 64)]
        for worker in workers:
            worker.start()
        answers = sorted(results.get(timeout=SAFETY_LIMIT) for _ in workers)
        for worker in workers:
            worker.join(timeout=SAFETY_LIMIT)
        assert answers == ["refused", "won"]


# ---------------------------------------------------------------------------------- the keyed step digest (local keyed and Spark)


def test_the_keyed_step_digest_is_a_mac_of_the_inputs_in_any_order_and_sums_over_shards():
    key, other = bytes([7]) * 32, bytes([8]) * 32
    keys, values = ["de", "fr", "it", "es"], np.array([3, 0, 1, 2])
    digest = keyed_step_digest(key, step=4, keys=keys, values=values)
    order = [2, 0, 3, 1]
    assert keyed_step_digest(key, step=4, keys=[keys[i] for i in order], values=values[order]) == digest
    mac_key = keyed_mac_key(key)  # shards computed apart add up to the whole step's digest
    shards = sum(keyed_pair_sum(mac_key, step=4, keys=keys[i : i + 2], values=values[i : i + 2]) for i in (0, 2))
    assert keyed_digest(mac_key, step=4, total=shards) == digest
    changed = [values.copy() for _ in range(4)]
    changed[0][1] = 1  # a key with no input gets one
    changed[1][0] = 2  # an input changes
    changed[2][:] = 0  # every input removed
    changed[3][[0, 3]] = changed[3][[3, 0]]  # two keys swap their inputs
    digests = {keyed_step_digest(key, step=4, keys=keys, values=v) for v in changed}
    assert digest not in digests and len(digests) == 4
    assert keyed_step_digest(key, step=5, keys=keys, values=values) != digest  # another step
    assert keyed_step_digest(other, step=4, keys=keys, values=values) != digest  # keyed: no guessing the inputs
    assert keyed_step_digest(key, step=4, keys=keys, values=values, part=0) != digest  # a stream's shard: its own digest
    empty = keyed_step_digest(key, step=4, keys=keys, values=np.zeros(4, dtype=np.int64))
    assert len(empty) == 64 and int(empty, 16) != 0  # an empty step is no public constant


def test_keyed_counters_record_the_keyed_step_digest(ledger_url):
    from pure_dp_mf.engines.generator import NoiseGenerator
    from pure_dp_mf.engines.keyed import KeyedCounters

    rng = NoiseGenerator.secure()
    counters = KeyedCounters(keys=["de", "fr"], epsilon=1.0, horizon=4, generator=rng, _lineage="L-digest")
    counters.release(np.array([2, 0]))
    name = counters._guard.name
    expected = keyed_step_digest(rng.key, step=0, keys=["de", "fr"], values=[2, 0])
    assert ledger.open_ledger().record(name, first=0, digests=[expected]) == 0  # the stored digest is this one
    with pytest.raises(LedgerError, match="step 1 of the publication"):
        ledger.open_ledger().record(name, first=0, digests=[keyed_step_digest(rng.key, step=0, keys=["de", "fr"], values=[0, 2])])


# ---------------------------------------------------------------------------------- the attacks

_KEY_FILE_RUN = """
import sys
from pure_dp_mf import Counter
from pure_dp_mf.engines.generator import NoiseGenerator
generator = NoiseGenerator.from_key_file(sys.argv[1], query=sys.argv[2])
counter = Counter(epsilon=1.0, horizon=8, generator=generator)
print([release.count for release in counter.update_many([int(v) for v in sys.argv[3]])])
"""


def key_file_run(key: Path, query: str, data: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _KEY_FILE_RUN, str(key), query, data],
        capture_output=True,
        text=True,
        timeout=SAFETY_LIMIT,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_a_batch_job_run_again_on_corrected_data_with_its_key_file_is_refused(ledger_url, tmp_path):
    key = tmp_path / "daily.key"
    first = key_file_run(key, "daily-job", "1011")
    assert first.returncode == 0, first.stderr
    again = key_file_run(key, "daily-job", "1011")
    assert again.stdout == first.stdout  # the same data: the same releases, bit for bit
    longer = key_file_run(key, "daily-job", "10110")
    assert longer.returncode == 0 and longer.stdout.startswith(first.stdout.strip()[:-1])
    corrected = key_file_run(key, "daily-job", "1001")
    assert corrected.returncode != 0 and corrected.stdout == ""  # refused before any output
    assert "step 3 of the publication 'daily-job' was released from other input" in corrected.stderr
    assert "make a new publication" in corrected.stderr
    fixed = key_file_run(tmp_path / "daily-fixed.key", "daily-job-fixed", "1001")  # a correction: a new publication
    assert fixed.returncode == 0, fixed.stderr
    from pure_dp_mf.engines.generator import NoiseGenerator

    NoiseGenerator.from_key_file(tmp_path / "daily-2.key", query="daily-job-2", corrects="daily-job")
    assert ledger.open_ledger().publication("daily-job-2")["corrects"] == "daily-job"  # linked to what it corrects


def test_a_checkpoint_restarted_with_another_key_file_is_refused(ledger_url, tmp_path):
    assert key_file_run(tmp_path / "one.key", str(tmp_path / "checkpoint"), "11").returncode == 0
    other = key_file_run(tmp_path / "two.key", str(tmp_path / "checkpoint"), "11")
    assert other.returncode != 0 and other.stdout == ""
    assert "owns another noise key" in other.stderr


def test_a_generator_record_sent_to_two_processes_cannot_count_two_inputs(ledger_url, tmp_path):
    from pure_dp_mf.engines.generator import NoiseGenerator

    record = json.dumps(NoiseGenerator.secure().to_record())
    script = f"""
    import json, sys
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator
    counter = ContinualCounter.for_horizon(epsilon=1.0, horizon=8, generator=NoiseGenerator.from_record(json.loads({record!r})))
    print(counter.counts([int(v) for v in sys.argv[1]]).tolist())
    """
    one = subprocess.run([sys.executable, "-c", textwrap.dedent(script), "110"], capture_output=True, text=True, cwd=ROOT)
    two = subprocess.run([sys.executable, "-c", textwrap.dedent(script), "110"], capture_output=True, text=True, cwd=ROOT)
    assert one.returncode == 0 and two.stdout == one.stdout, one.stderr
    three = subprocess.run([sys.executable, "-c", textwrap.dedent(script), "100"], capture_output=True, text=True, cwd=ROOT)
    assert three.returncode != 0 and three.stdout == "" and "was released from other input" in three.stderr


def test_keyed_counters_on_one_lineage_twice_cannot_count_two_inputs(ledger_url):
    import numpy as np

    from pure_dp_mf.engines.generator import NoiseGenerator
    from pure_dp_mf.engines.keyed import KeyedCounters

    rng = NoiseGenerator.secure()
    options = {"keys": ["de", "fr"], "epsilon": 1.0, "horizon": 4, "generator": rng, "_lineage": "L1"}
    first = KeyedCounters(**options)
    released = first.release(np.array([1, 0]))
    second = KeyedCounters(**options)
    assert second.release(np.array([1, 0])).tolist() == released.tolist()  # reproduced
    assert first.release(np.array([1, 1])).tolist() != released.tolist()
    with pytest.raises(LedgerError, match="step 2 of the publication"):
        second.release(np.array([0, 1]))  # the same noise as first's step 2 on another input
    assert second.released == 1


def test_keyed_counters_and_the_dataframe_function_on_one_key_file(ledger_url, tmp_path):
    pd = pytest.importorskip("pandas")
    script = """
    import sys
    import pandas as pd
    from pure_dp_mf.engines.dataframe import private_running_counts
    from pure_dp_mf.engines.generator import NoiseGenerator
    generator = NoiseGenerator.from_key_file(sys.argv[1], query="weekly")
    days = [int(v) for v in sys.argv[2].split(",")]
    frame = pd.DataFrame({"key": ["de"] * len(days), "step": days})
    result = private_running_counts(frame, keys=["de", "fr"], epsilon=1.0, horizon=4, generator=generator)
    print(result["count"].tolist(), result.attrs["seeded"], result.attrs["publication"])
    """
    key = str(tmp_path / "weekly.key")
    one = python(script.replace("sys.argv[1]", repr(key)).replace("sys.argv[2]", repr("1,2,2")))
    assert one.returncode == 0 and one.stdout.endswith("False weekly\n"), one.stderr
    assert python(script.replace("sys.argv[1]", repr(key)).replace("sys.argv[2]", repr("1,2,2"))).stdout == one.stdout
    corrected = python(script.replace("sys.argv[1]", repr(key)).replace("sys.argv[2]", repr("1,2,3")))
    assert corrected.returncode != 0 and corrected.stdout == "" and "step 2 of the publication 'weekly'" in corrected.stderr
    seeded = pytest.importorskip("pure_dp_mf.engines.dataframe").private_running_counts(
        pd.DataFrame({"key": ["de"], "step": [1]}), keys=["de"], epsilon=1.0, horizon=2, generator=_seeded()
    )
    assert seeded.attrs["seeded"] is True and seeded.attrs["private"] is False


def _seeded():
    import warnings

    from pure_dp_mf.engines.generator import NoiseGenerator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return NoiseGenerator.from_seed(1)


def test_two_users_sharing_one_ledger_cannot_reuse_a_key_file_or_a_record(ledger_url, tmp_path):
    key = tmp_path / "shared.key"
    homes = []
    for name in ("alice", "bob"):
        home = tmp_path / name
        (home / "state").mkdir(parents=True)
        homes.append({"HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "PURE_DP_MF_REGISTRY": ""})
    assert key_file_run(key, "alice-job", "10", **homes[0]).returncode == 0
    assert (tmp_path / "alice" / "state" / "pure_dp_mf" / "registry.sqlite3").exists()  # each has a registry of their own
    reused = key_file_run(key, "bob-job", "10", **homes[1])  # bob's registry has never seen the key file
    assert reused.returncode != 0 and "already serves the publication 'alice-job'" in reused.stderr
    same = key_file_run(key, "alice-job", "01", **homes[1])
    assert same.returncode != 0 and same.stdout == "" and "step 1 of the publication 'alice-job'" in same.stderr
    record = json.loads(key.read_text())  # the generator record itself, as alice's key file holds it
    script = f"""
    import json
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator
    rng = NoiseGenerator.from_record(json.loads({json.dumps(record)!r}))
    print(ContinualCounter.for_horizon(epsilon=1.0, horizon=8, generator=rng).counts([0, 1]).tolist())
    """
    by_record = python(script, env=homes[1])
    assert by_record.returncode != 0 and by_record.stdout == "" and "of the publication 'alice-job'" in by_record.stderr


# ---------------------------------------------------------------------------------- the CLI


def cli(*arguments: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli(*arguments, input_text=stdin, env=env or {})


def one_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit status 2, one ``error:`` line, the last one (announcements of what runs may come before)."""
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert done.returncode == 2 and errors == lines[-1:] and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def test_a_state_restored_with_its_registry_from_a_backup_cannot_count_other_data(ledger_url, tmp_path):
    """The ledger lives outside the backup (PostgreSQL, or here another SQLite file): the steps the
    restored state forgot are in it, and other data for them is refused before any output."""
    import shutil

    registry, state = tmp_path / "registry.sqlite3", tmp_path / "s.db"
    env = {"PURE_DP_MF_REGISTRY": str(registry)}
    run = ["count", "--epsilon", "1", "--horizon", "8", "--state", str(state)]
    assert cli(*run, stdin="1\n0\n", env=env).returncode == 0
    shutil.copy(state, tmp_path / "s.backup"), shutil.copy(registry, tmp_path / "registry.backup")
    later = cli(*run, stdin="1\n1\n", env=env)
    assert later.returncode == 0 and len(later.stdout.splitlines()) == 2
    shutil.copy(tmp_path / "s.backup", state), shutil.copy(tmp_path / "registry.backup", registry)
    again = cli(*run, stdin="0\n1\n", env=env)  # steps 3 and 4 again, on other data
    assert again.stdout == ""
    one_error(again, "step 3 of the publication", "released from other input")
    same = cli(*run, stdin="1\n1\n", env=env)  # the same data: the same releases
    assert same.returncode == 0 and same.stdout == later.stdout


def test_an_output_holding_more_steps_than_its_state_is_refused(ledger_url, tmp_path):
    import shutil

    registry, state, output = tmp_path / "registry.sqlite3", tmp_path / "s.db", tmp_path / "out.txt"
    env = {"PURE_DP_MF_REGISTRY": str(registry), "PURE_DP_MF_LEDGER": f"sqlite://{registry}"}  # restored together
    ledger.set_default(None)
    (tmp_path / "a.txt").write_text("1\n0\n")
    (tmp_path / "b.txt").write_text("1\n0\n1\n1\n")
    (tmp_path / "c.txt").write_text("1\n0\n0\n0\n")
    run = ["--epsilon", "1", "--horizon", "8", "--state", str(state), "--output", str(output)]
    assert cli("count", str(tmp_path / "a.txt"), *run, env=env).returncode == 0
    shutil.copy(state, tmp_path / "s.backup"), shutil.copy(registry, tmp_path / "registry.backup")
    assert cli("count", str(tmp_path / "b.txt"), *run, env=env).returncode == 0
    assert len(output.read_text().splitlines()) == 4
    shutil.copy(tmp_path / "s.backup", state), shutil.copy(tmp_path / "registry.backup", registry)
    before = output.read_text()
    one_error(cli("count", str(tmp_path / "c.txt"), *run, env=env), "has more lines than the 2 steps the state has released")
    assert output.read_text() == before


def test_a_moved_state_is_read_anywhere_and_resumed_only_once_adopted(ledger_url, tmp_path):
    state = tmp_path / "s.db"
    here = {"PURE_DP_MF_REGISTRY": str(tmp_path / "here.sqlite3"), "PURE_DP_MF_MACHINE": "here"}
    there = {"PURE_DP_MF_REGISTRY": str(tmp_path / "there.sqlite3"), "PURE_DP_MF_MACHINE": "there"}
    run = ["count", "--epsilon", "1", "--horizon", "8", "--state", str(state)]
    first = cli(*run, stdin="1\n0\n", env=here)
    assert first.returncode == 0, first.stderr
    shown = cli("releases", str(state), "--format", "plain", env=there)  # read-only: any registry
    assert shown.returncode == 0 and shown.stdout == first.stdout, shown.stderr
    one_error(cli(*run, stdin="1\n", env=there), "does not know this state", "pure-dp-mf ledger adopt")
    one_error(cli("ledger", "adopt", str(state), env=there), "on the machine 'here'", "--from here")
    adopted = cli("ledger", "adopt", str(state), "--from", "here", env=there)
    assert adopted.returncode == 0 and "adopted" in adopted.stderr and "2 step(s)" in adopted.stderr, adopted.stderr
    assert cli(*run, stdin="1\n", env=there).returncode == 0
    one_error(cli(*run, stdin="1\n", env=here))  # the old home is refused now (its registry, and the ledger)
    one_error(cli("ledger", "adopt", str(state), env=here), "on the machine 'there'")
    events = [(event, detail["to"]) for _, event, detail in ledger.open_ledger().log()]
    assert ("adopt", "there") in events


def test_a_budget_is_charged_only_with_a_release(ledger_url, tmp_path):
    from pure_dp_mf.engines.budget import Budget

    registry = tmp_path / "registry.sqlite3"
    env = {"PURE_DP_MF_REGISTRY": str(registry)}
    budget = Budget.create("b", epsilon=1.0, registry=registry)
    (tmp_path / "bad.txt").write_text("1\n2\n")
    (tmp_path / "good.txt").write_text("1\n0\n")
    one_error(cli("count", str(tmp_path / "bad.txt"), "--epsilon", "0.5", "--budget", "b", env=env), "line 2")
    assert budget.spent == 0
    plot = ["--output", str(tmp_path / "o.csv"), "--format", "csv", "--plot", "/nonexistent/p.png"]
    one_error(cli("count", str(tmp_path / "good.txt"), "--epsilon", "0.5", "--budget", "b", *plot, env=env), "--plot")
    assert budget.spent == 0 and not (tmp_path / "o.csv").exists()
    state = ["--state", str(tmp_path / "s.db"), "--horizon", "4"]
    done = cli("count", str(tmp_path / "good.txt"), "--epsilon", "0.5", "--budget", "b", *state, env=env)
    assert done.returncode == 0 and budget.spent == 0.5, done.stderr


def test_an_input_is_read_once(ledger_url, tmp_path):
    command = "from pure_dp_mf.cli import main; main()"
    script = f"{sys.executable!s} -c '{command}' count --epsilon 1 --horizon 4 --seed 1 <(printf '1\\n0\\n1\\n')"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=SAFETY_LIMIT)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3, (done.stdout, done.stderr)


def test_count_with_a_key_file_reproduces_a_keyed_run_and_refuses_other_input(ledger_url, tmp_path):
    """``count --key-column … --key-file``: the key file's publication is run again on the same
    event rows with the same output, and on corrected rows it is refused at the first changed
    step (the steps before it are reproductions, printed as they were)."""
    (tmp_path / "keys.txt").write_text("de\nfr\n")
    (tmp_path / "a.csv").write_text("country,day\nde,1\nfr,2\nde,3\n")
    (tmp_path / "b.csv").write_text("country,day\nde,1\nde,2\nde,3\n")  # day 2 corrected
    run = ["--key-column", "country", "--step-column", "day", "--keys", str(tmp_path / "keys.txt")]
    run += ["--epsilon", "1", "--horizon", "4", "--key-file", str(tmp_path / "daily.key")]
    first = cli("count", str(tmp_path / "a.csv"), *run)
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 1 + 2 * 4, first.stderr
    assert (tmp_path / "daily.key").stat().st_mode & 0o777 == 0o600
    assert cli("count", str(tmp_path / "a.csv"), *run).stdout == first.stdout  # the same rows, bit for bit
    corrected = cli("count", str(tmp_path / "b.csv"), *run)
    name = str((tmp_path / "daily.key").resolve())
    one_error(corrected, f"step 2 of the publication {name!r} was released from other input", "make a new publication")
    assert first.stdout.startswith(corrected.stdout) and len(corrected.stdout.splitlines()) == 1 + 2  # step 1 only
    one_error(cli("count", str(tmp_path / "a.csv"), *run, "--seed", "1"), "--key-file and --seed")
    one_error(cli("count", str(tmp_path / "a.csv"), *run, "--state", str(tmp_path / "s.db")), "--key-file and --state")
    one_error(
        cli("count", "--epsilon", "1", "--key-file", str(tmp_path / "daily.key"), stdin="1\n"), "--key-file is for event rows"
    )


def test_every_output_of_a_seeded_run_says_so(ledger_url, tmp_path):
    state, output = tmp_path / "s.db", tmp_path / "out.txt"
    done = cli(
        "count", "--epsilon", "1", "--horizon", "4", "--seed", "3", "--state", str(state), "--output", str(output), stdin="1\n"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.txt.meta.json").read_text())["seeded"] is True  # plain: its sidecar
    shown = cli("releases", str(state))
    assert shown.returncode == 0 and "seeded noise" in shown.stderr
    jsonl = cli("releases", str(state), "--format", "jsonl")
    assert json.loads(jsonl.stdout.splitlines()[0])["header"]["seeded"] is True


def test_a_key_sent_away_after_its_counter_released_bars_the_steps_released(ledger_url):
    """The counter released 3 steps before its key left the process: their inputs were never
    recorded, so no process releases them again under that key."""
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator

    rng = NoiseGenerator.secure()
    counter = ContinualCounter.for_horizon(epsilon=1.0, horizon=8, generator=rng)
    counter.counts([1, 0, 1])
    record = json.dumps(rng.to_record())  # sent to another process now
    script = f"""
    import json
    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import NoiseGenerator
    rng = NoiseGenerator.from_record(json.loads({record!r}))
    print(ContinualCounter.for_horizon(epsilon=1.0, horizon=8, generator=rng).counts([0, 0]).tolist())
    """
    other = python(script)
    assert other.returncode != 0 and other.stdout == "" and "step 1 of the publication" in other.stderr
    assert "was released before its key left the process" in other.stderr
    assert counter.counts([1]).shape == (1,)  # the counter itself goes on, guarded from step 4


def test_a_counter_extended_past_its_horizon_and_resumed_stays_one_publication(ledger_url, tmp_path):
    """--extend continues the publication (the same key, nothing redrawn): the ledger takes the new
    schedule once, from the counter that extends, and every later resume of the state matches it;
    a fresh counter with another horizon on the same key would still be refused."""
    state = tmp_path / "yearly.db"
    first = cli("count", "--epsilon", "1", "--horizon", "6", "--state", str(state), stdin="1\n0\n1\n1\n0\n1\n")
    assert first.returncode == 0, first.stderr
    extended = cli("count", "--epsilon", "1", "--horizon", "6", "--state", str(state), "--extend", stdin="1\n")
    assert extended.returncode == 0 and len(extended.stdout.splitlines()) == 1, extended.stderr
    resumed = cli("count", "--epsilon", "1", "--state", str(state), stdin="0\n1\n")
    assert resumed.returncode == 0 and len(resumed.stdout.splitlines()) == 2, resumed.stderr
    again = cli("count", "--epsilon", "1", "--state", str(state), "--first-step", "9", stdin="1\n")
    assert again.returncode == 0 and again.stdout == resumed.stdout.splitlines(keepends=True)[-1], again.stderr
