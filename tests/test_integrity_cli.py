"""Options that do not apply are refused with the reason, up front; work that cannot finish in
bounded memory is refused; Python API misuse is one clear error (never a traceback)."""

from __future__ import annotations

import os

import pytest
from conftest import one_error_line, run_main

from pure_dp_mf.engines.counter import Counter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError


def test_through_on_a_plain_count_is_refused():
    one_error_line(
        *run_main("count", "--epsilon", "1", "--horizon", "4", "--seed", "1", "--through", "1", stdin="1\n0\n1\n"), "--through"
    )


def test_a_simultaneous_band_with_plain_output_is_refused():
    one_error_line(
        *run_main("count", "--epsilon", "1", "--horizon", "4", "--seed", "1", "--band", "simultaneous", stdin="1\n"),
        "--band simultaneous",
        "--format plain",
    )


def test_a_plot_not_named_png_is_refused_before_any_release(tmp_path):
    out, image = tmp_path / "out.csv", tmp_path / "x.txt"
    code, stdout, err = run_main(
        "count",
        "--epsilon",
        "1",
        "--horizon",
        "4",
        "--seed",
        "1",
        "--format",
        "csv",
        "--output",
        str(out),
        "--plot",
        str(image),
        stdin="1\n",
    )
    one_error_line(code, stdout, err, "--plot", ".png")
    assert not out.exists() and not image.exists()


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_a_plot_in_a_folder_that_takes_no_file_is_refused_before_any_release(tmp_path):
    out = tmp_path / "out.csv"
    code, stdout, err = run_main(
        "count",
        "--epsilon",
        "1",
        "--horizon",
        "4",
        "--seed",
        "1",
        "--format",
        "csv",
        "--output",
        str(out),
        "--plot",
        "/proc/p.png",
        stdin="1\n",
    )
    one_error_line(code, stdout, err, "--plot /proc/p.png")
    assert not out.exists()


def test_a_huge_dimension_is_refused_up_front():
    one_error_line(*run_main("count", "--epsilon", "1", "--dimension", "100000000000", stdin="0\n"), "--dimension")


def test_releases_with_first_after_last_is_refused(tmp_path):
    state = tmp_path / "s.db"
    code, _, err = run_main("count", "--epsilon", "1", "--horizon", "8", "--state", str(state), stdin="1\n0\n1\n")
    assert code == 0, err
    one_error_line(*run_main("releases", str(state), "--first-step", "3", "--last-step", "2"), "--first-step 3", "--last-step 2")


@pytest.mark.parametrize("values", [None, 5, "101"])
def test_extend_with_no_sequence_is_one_clear_error(values):
    with pytest.warns(UserWarning, match="seeded"):
        counter = Counter(epsilon=1.0, horizon=8, generator=NoiseGenerator.from_seed(1))
    with pytest.raises(InvalidInputError, match="sequence of steps' inputs"):
        counter.update_many(values)
    assert counter.released == 0


def test_a_step_past_int64_is_one_error():
    one_error_line(*run_main("plan", "--step", "1" * 30, "--epsilon", "1"), "--step")


@pytest.mark.parametrize("command", [["compare"], ["lift", "base_factorizations/k004_maxse.npz"]])
def test_an_n_past_float64_is_one_error(command):
    one_error_line(*run_main(*command, "--n", "2" + "0" * 399), "--n")


def test_reproduce_into_an_existing_file_is_one_error(tmp_path):
    existing = tmp_path / "report.txt"
    existing.write_text("kept\n")
    one_error_line(*run_main("reproduce", "--out", str(existing)), "--out")
    assert existing.read_text() == "kept\n"


def test_budget_show_creates_no_registry_folder(tmp_path, monkeypatch):
    registry = tmp_path / "missing" / "registry.sqlite3"
    monkeypatch.setenv("PURE_DP_MF_REGISTRY", str(registry))
    one_error_line(*run_main("budget", "show", "daily"), "daily")
    assert not registry.parent.exists()


def test_an_unterminated_csv_quote_is_refused_not_read_as_a_value(tmp_path):
    stream = tmp_path / "stream.csv"
    stream.write_text('a\n1\n"1\n0\n')
    code, out, err = run_main("count", str(stream), "--header", "--column", "a", "--epsilon", "1", "--horizon", "4")
    assert code == 2 and out == "" and "Traceback" not in err  # the file is checked whole before any release
    assert err.strip().splitlines()[-1] == "error: line 3: not a CSV line (unexpected end of data)"
    rows, keys = tmp_path / "rows.csv", tmp_path / "keys.txt"
    rows.write_text('step,key\n1,"FR\n2,DE\n')
    keys.write_text("FR\nDE\n")
    one_error_line(
        *run_main(
            "count",
            str(rows),
            "--key-column",
            "key",
            "--keys",
            str(keys),
            "--step-column",
            "step",
            "--horizon",
            "4",
            "--epsilon",
            "1",
        ),
        "not valid CSV",
    )


def test_a_step_size_in_non_ascii_digits_is_refused(tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text("date\n2025-01-01\n")
    one_error_line(
        *run_main(
            "count",
            str(rows),
            "--step-column",
            "date",
            "--start",
            "2025-01-01",
            "--step-size",
            "\u0661d",
            "--horizon",
            "4",
            "--epsilon",
            "1",
        ),
        "--step-size",
    )


def test_an_unbounded_anytime_keyed_schedule_is_refused(tmp_path):
    rows, keys = tmp_path / "rows.csv", tmp_path / "keys.txt"
    rows.write_text("step,key\n1,FR\n")
    keys.write_text("FR\n")
    one_error_line(
        *run_main(
            "count",
            str(rows),
            "--key-column",
            "key",
            "--keys",
            str(keys),
            "--step-column",
            "step",
            "--epsilon",
            "1",
            "--through",
            str(10**18),
        ),
        "--through",
    )


def test_a_key_list_past_the_limit_is_one_error(tmp_path):
    from pure_dp_mf.engines.keyed import MAX_LOCAL_KEYS

    rows, keys = tmp_path / "rows.csv", tmp_path / "keys.txt"
    rows.write_text("step,key\n1,k1\n")
    keys.write_text("".join(f"k{i}\n" for i in range(MAX_LOCAL_KEYS + 1)))
    one_error_line(
        *run_main(
            "count",
            str(rows),
            "--key-column",
            "key",
            "--keys",
            str(keys),
            "--step-column",
            "step",
            "--epsilon",
            "1",
            "--horizon",
            "4",
        ),
        "--keys",
        "more than 1,000,000",
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_output_on_a_full_disk_is_one_error_and_claims_no_state():
    code, out, err = run_main("count", "--epsilon", "1", "--horizon", "8", "--output", "/dev/full", stdin="1\n0\n")
    assert code == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last == "error: cannot write /dev/full: No space left on device"  # no state: nothing said about one


def test_the_zeroed_stream_lines_go_to_the_operator_log_only(tmp_path):
    log = tmp_path / "operator.jsonl"
    code, out, err = run_main(
        "count", "--epsilon", "1", "--horizon", "8", "--seed", "1", "--operator-log", str(log), stdin="1\n2\nx\n0\n"
    )
    assert code == 0, err
    assert "(--invalid zero)" in err and "2 line" not in err  # the policy is named; the count is not on stderr
    import json

    record = json.loads(log.read_text())
    assert record["invalid_policy"] == "zero" and record["invalid_lines"] == 2 and record["released_steps"] == 4


def test_info_refuses_costs_that_overflow(tmp_path):
    import numpy as np

    encoder = tmp_path / "tiny.npy"
    np.save(encoder, np.eye(4) * 1e-300)
    one_error_line(*run_main("info", str(encoder)), "c2", "overflow")


@pytest.mark.parametrize("keys", [None, 5, 2.5])
def test_keys_that_are_not_a_list_are_one_clear_error(keys):
    from pure_dp_mf.engines.keyed import check_keys

    with pytest.raises(InvalidInputError, match="keys must be a list of keys"):
        check_keys(keys)


def test_ten_million_listed_keys_are_refused_after_reading_one_past_the_limit():
    """A key list (here a generator of 10⁷ keys) is refused at key MAX_LOCAL_KEYS + 1: the rest is
    never read, so memory stays bounded by the stated limit."""
    from pure_dp_mf.engines.keyed import MAX_LOCAL_KEYS, check_keys

    read = []

    def keys():
        for i in range(10**7):
            read.append(i)
            yield f"k{i}"

    with pytest.raises(InvalidInputError, match="more than 1,000,000 keys"):
        check_keys(keys(), maximum=MAX_LOCAL_KEYS)
    assert len(read) == MAX_LOCAL_KEYS + 1
