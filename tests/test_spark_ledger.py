"""The Spark routes in the ledger (``engines.ledger``, ``engines.spark``): batch (the DataFrame
function and ``count --engine spark``) and Structured Streaming claim their publication, and a
publication released again reproduces its rows or is refused before any row is written. Every
test runs on SQLite and on a real PostgreSQL server (the ``ledger_url`` fixture).

On the code before this, each test below releases other data under the same noise (or a second
noise vector on the same data): the difference of two releases is T·(x − x′)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pure_dp_mf.engines import ledger
from pure_dp_mf.engines.ledger import LedgerError

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------- Spark batch

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
pd = pytest.importorskip("pandas")

from conftest import SAFETY_LIMIT, run_cli  # noqa: E402

from pure_dp_mf.engines.generator import NoiseGenerator  # noqa: E402
from pure_dp_mf.engines.spark import private_running_counts  # noqa: E402
from pure_dp_mf.resources import BASE_FOLDER  # noqa: E402

BASE = str(BASE_FOLDER / "k004_maxse.npz")
KEYS = ["de", "fr", "it", "es"]
ROWS = [("u1", "de", 1, 1), ("u2", "fr", 1, 2), ("u1", "de", 3, 1), ("u3", "it", 3, 1), ("u2", "fr", 6, 1)]
OPTIONS = {"epsilon": 1.0, "horizon": 8, "base": BASE, "max_value": 2, "key_column": "country", "step_column": "day"}


def frame_of(spark, rows):
    return spark.createDataFrame(pd.DataFrame(rows, columns=["uid", "country", "day", "value"]))


def released_rows(released) -> list[tuple]:
    frame = released.toPandas()
    return sorted(zip(frame.key, frame.step.astype(int), frame["count"].astype(int), strict=True))


def test_spark_batch_run_again_reproduces_its_rows_and_refuses_changed_input(spark, ledger_url, tmp_path):
    generator = NoiseGenerator.from_key_file(tmp_path / "daily.key", query="daily-spark")
    first = private_running_counts(frame_of(spark, ROWS), keys=KEYS, value_column="value", generator=generator, **OPTIONS)
    mark = first.schema["count"].metadata["pure_dp_mf"]
    assert mark == {"seeded": False, "private": True, "publication": "daily-spark"}
    assert ledger.open_ledger().released_steps("daily-spark") == 8  # every step's digest, before any row
    rows = released_rows(first)
    assert len(rows) == 4 * 8
    again = private_running_counts(frame_of(spark, ROWS), keys=KEYS, value_column="value", generator=generator, **OPTIONS)
    assert released_rows(again) == rows  # the same input: the same rows, bit for bit
    corrected = [*ROWS[:2], ("u1", "de", 3, 0), *ROWS[3:]]  # one value of day 3 corrected
    with pytest.raises(LedgerError) as refused:
        private_running_counts(frame_of(spark, corrected), keys=KEYS, value_column="value", generator=generator, **OPTIONS)
    message = str(refused.value)
    assert "step 3 of the publication 'daily-spark' was released from other input" in message
    assert "make a new publication" in message and "value" not in message  # steps and what to do, no data


def test_spark_batch_releases_the_input_it_checked_even_if_the_source_changes(spark, ledger_url, tmp_path):
    """Read once: the checked rows are checkpointed; the file rewritten after the check (the same
    size, other values) changes nothing the DataFrame releases when it is written to a sink later
    (on the code before this, the write re-read the file: other data under the same noise)."""
    source = tmp_path / "events.csv"
    source.write_text("uid,country,day,value\n" + "".join(f"{u},{k},{d},{v}\n" for u, k, d, v in ROWS))
    generator = NoiseGenerator.from_key_file(tmp_path / "weekly.key", query="weekly-spark")
    events = spark.read.csv(str(source), header=True)
    released = private_running_counts(events, keys=KEYS, value_column="value", generator=generator, **OPTIONS)
    rows = released_rows(released)
    assert len(rows) == 4 * 8
    source.write_text("uid,country,day,value\n" + "".join(f"{u},{k},{d},{2 - v}\n" for u, k, d, v in ROWS))
    released.write.parquet(str(tmp_path / "out"))  # a new plan over the same DataFrame: the sink
    assert released_rows(spark.read.parquet(str(tmp_path / "out"))) == rows


def test_a_seeded_spark_batch_says_so_and_records_nothing(spark, ledger_url):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generator = NoiseGenerator.from_seed(4)
        released = private_running_counts(frame_of(spark, ROWS), keys=KEYS, value_column="value", generator=generator, **OPTIONS)
    assert released.schema["count"].metadata["pure_dp_mf"] == {"seeded": True, "private": False, "publication": None}
    assert released.schema["upper"].metadata["pure_dp_mf"]["seeded"] is True
    book = ledger.open_ledger()
    assert book._retrying(lambda run: run("SELECT COUNT(*) FROM publications"))[0][0] == 0


_LOCAL = """
import json, sys
from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed
from pure_dp_mf.engines.generator import NoiseGenerator
generator = NoiseGenerator.from_key_file(sys.argv[1], query=sys.argv[2])
counters = KeyedCounters(keys={keys!r}, epsilon=1.0, horizon=8, base={base!r}, max_value=2, generator=generator)
events = [KeyedEvent(key, step, value, None) for key, step, value in json.loads(sys.argv[3])]
rows = []
for step, counts, *_ in run_keyed(counters, iter(events), through=8):
    rows += [[key, step, int(count)] for key, count in zip(counters.keys, counts.tolist())]
print(json.dumps(sorted(rows)))
"""


def local_run(key: Path, query: str, rows) -> subprocess.CompletedProcess:
    """The local engine (``KeyedCounters``) in another process, on the key file's publication."""
    script = textwrap.dedent(_LOCAL.format(keys=KEYS, base=BASE))
    events = json.dumps([[k, d, v] for _, k, d, v in rows])
    return subprocess.run(
        [sys.executable, "-c", script, str(key), query, events],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=SAFETY_LIMIT,
    )


def test_local_keyed_and_spark_batch_on_one_key_file_are_one_publication(spark, ledger_url, tmp_path):
    """A publication first released by the local engine is reproduced by Spark batch on the same
    input and refused on changed input; and the other way round."""
    corrected = [*ROWS[:4], ("u2", "fr", 6, 2)]  # day 6 corrected
    key = tmp_path / "cross.key"
    local = local_run(key, "cross", ROWS)
    assert local.returncode == 0, local.stderr
    generator = NoiseGenerator.from_key_file(key, query="cross")
    on_spark = private_running_counts(frame_of(spark, ROWS), keys=KEYS, value_column="value", generator=generator, **OPTIONS)
    assert [list(row) for row in released_rows(on_spark)] == json.loads(local.stdout)  # reproduced
    with pytest.raises(LedgerError, match="step 6 of the publication 'cross' was released from other input"):
        private_running_counts(frame_of(spark, corrected), keys=KEYS, value_column="value", generator=generator, **OPTIONS)

    key = tmp_path / "cross-2.key"
    generator = NoiseGenerator.from_key_file(key, query="cross-2")
    first = released_rows(
        private_running_counts(frame_of(spark, ROWS), keys=KEYS, value_column="value", generator=generator, **OPTIONS)
    )
    same = local_run(key, "cross-2", ROWS)
    assert same.returncode == 0 and json.loads(same.stdout) == [list(row) for row in first], same.stderr
    changed = local_run(key, "cross-2", corrected)
    assert changed.returncode != 0 and changed.stdout == ""
    assert "step 6 of the publication 'cross-2' was released from other input" in changed.stderr


# ---------------------------------------------------------------------------------- count --engine spark


def spark_cli(*arguments: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli(*arguments, env={"PYSPARK_PYTHON": sys.executable, **(env or {})})


@pytest.mark.slow
def test_count_on_spark_run_again_reproduces_its_output_and_refuses_changed_input(ledger_url, tmp_path):
    """``count --engine spark --key-file``: the same job on the same input writes the same bytes;
    on changed input it is refused before anything is written; a seeded run says so."""
    (tmp_path / "keys.txt").write_text("\n".join(KEYS) + "\n")
    (tmp_path / "events.csv").write_text("uid,country,day,value\n" + "".join(f"{u},{k},{d},{v}\n" for u, k, d, v in ROWS))
    corrected = [*ROWS[:1], ("u2", "fr", 1, 1), *ROWS[2:]]  # day 1 corrected
    (tmp_path / "corrected.csv").write_text("uid,country,day,value\n" + "".join(f"{u},{k},{d},{v}\n" for u, k, d, v in corrected))
    run = ["--key-column", "country", "--keys", str(tmp_path / "keys.txt"), "--step-column", "day", "--column", "value"]
    run += ["--max-value", "2", "--epsilon", "1", "--horizon", "8", "--base", BASE, "--engine", "spark", "--format", "csv"]
    key = ["--key-file", str(tmp_path / "daily.key")]
    first = spark_cli("count", str(tmp_path / "events.csv"), *run, *key, "--output", str(tmp_path / "one.csv"))
    assert first.returncode == 0, first.stderr[-3000:]
    book = ledger.open_ledger()
    publication = str((tmp_path / "daily.key").resolve())
    assert book.publication(publication)["spec"]["engine"] == "keyed" and book.released_steps(publication) == 8
    again = spark_cli("count", str(tmp_path / "events.csv"), *run, *key, "--output", str(tmp_path / "two.csv"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "two.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    refused = spark_cli("count", str(tmp_path / "corrected.csv"), *run, *key, "--output", str(tmp_path / "three.csv"))
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
    assert refused.returncode == 2 and refused.stdout == "" and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert len(errors) == 1 and "step 1 of the publication" in errors[0] and "released from other input" in errors[0]
    assert not (tmp_path / "three.csv").exists() and not (tmp_path / "three.csv.meta.json").exists()
    seeded = spark_cli("count", str(tmp_path / "events.csv"), *run, "--seed", "3", "--output", str(tmp_path / "seeded.csv"))
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    assert "warning: seeded noise (--seed): not for production, not private" in seeded.stderr
    assert json.loads((tmp_path / "seeded.csv.meta.json").read_text())["seeded"] is True
    assert book._retrying(lambda run: run("SELECT COUNT(*) FROM publications"))[0][0] == 1  # seeded: nothing claimed


# ---------------------------------------------------------------------------------- Spark streaming


def _stream(spark, folder: Path, *, key: str, query: str, checkpoint: str, out: str):
    """One run of a keyed stream over ``folder``/in with the public clock ``folder``/clock, to the
    end of what is there (``availableNow``); its StreamingQueryException when it stops."""
    from pure_dp_mf.engines.spark import file_clock, private_running_counts_stream

    events = spark.readStream.schema("uid string, country string, day long, value long").option("header", True)
    events = events.csv(str(folder / "in"))
    released = private_running_counts_stream(
        events,
        clock=file_clock(spark, str(folder / "clock")),
        keys=KEYS,
        epsilon=1.0,
        horizon=8,
        base=BASE,
        max_value=2,
        key_column="country",
        step_column="day",
        value_column="value",
        query=query,
        keys_per_shard=2,
        generator=NoiseGenerator.from_key_file(folder / key, query=query),
    )
    assert released.schema["count"].metadata["pure_dp_mf"]["publication"] == query
    writer = released.writeStream.format("parquet").option("path", str(folder / out))
    running = writer.option("checkpointLocation", str(folder / checkpoint)).trigger(availableNow=True).start()
    try:
        running.awaitTermination()
    except Exception as error:  # the query stopped: a refusal on an executor
        return error
    return None


def _write_days(folder: Path, rows, days) -> None:
    (folder / "in").mkdir(exist_ok=True)
    (folder / "clock").mkdir(exist_ok=True)
    for day in days:
        lines = "".join(f"{u},{k},{d},{v}\n" for u, k, d, v in rows if d == day)
        (folder / "in" / f"day{day:03d}.csv").write_text("uid,country,day,value\n" + lines)
        (folder / "clock" / f"tick{day:03d}.csv").write_text(f"step\n{day}\n")


def _committed(spark, folder: Path) -> list[tuple]:
    if not (folder / "_spark_metadata").exists() or not any((folder / "_spark_metadata").iterdir()):
        return []
    return released_rows(spark.read.parquet(str(folder)))


@pytest.mark.slow
def test_a_stream_run_again_after_deleting_its_checkpoint_cannot_release_corrected_data(spark, ledger_url, tmp_path):
    """Attack 2: the checkpoint deleted, the query run again with its key file: the same data gives
    the same rows; corrected data is refused before the changed shard's rows are emitted."""
    _write_days(tmp_path, ROWS, range(1, 5))
    assert _stream(spark, tmp_path, key="q.key", query="q", checkpoint="c1", out="o1") is None
    first = _committed(spark, tmp_path / "o1")
    assert len(first) == 4 * 4
    assert _stream(spark, tmp_path, key="q.key", query="q", checkpoint="c2", out="o2") is None  # no checkpoint, same data
    assert _committed(spark, tmp_path / "o2") == first
    shutil.rmtree(tmp_path / "in")
    corrected = [*ROWS[:2], ("u1", "de", 3, 2), *ROWS[3:]]
    _write_days(tmp_path, corrected, range(1, 5))
    refused = _stream(spark, tmp_path, key="q.key", query="q", checkpoint="c3", out="o3")
    assert refused is not None and "step 3 of the publication 'q' (shard 0) was released from other input" in str(refused)
    assert [row for row in _committed(spark, tmp_path / "o3") if row[0] == "de" and row[1] >= 3] == []


@pytest.mark.slow
def test_a_stream_restarted_from_its_checkpoint_with_another_key_file_is_refused(spark, ledger_url, tmp_path):
    """Attack 3: the same checkpoint restarted with another key file (another query name, so the
    key file itself is accepted) would release the query's steps again under other noise."""
    _write_days(tmp_path, ROWS, range(1, 4))
    assert _stream(spark, tmp_path, key="one.key", query="one", checkpoint="c", out="o") is None
    before = _committed(spark, tmp_path / "o")
    _write_days(tmp_path, ROWS, range(4, 6))  # new days: the restarted query has work to do
    refused = _stream(spark, tmp_path, key="two.key", query="two", checkpoint="c", out="o")
    assert refused is not None and "started with another noise key" in str(refused)
    assert _committed(spark, tmp_path / "o") == before  # nothing more released
