"""Hostile inputs end in one ``error:`` line (CLI, exit code 2) or a ``PureDPMFError`` (library),
in bounded time and memory: files whose headers declare huge arrays, numbers written beyond the
float range, JSON nested 200 000 deep, sizes that would allocate hundreds of GiB, options that
make no sense, over-long CSV fields and text that is not UTF-8."""

from __future__ import annotations

import io
import json
import shutil
import time
import tracemalloc
import zipfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import SAFETY_LIMIT, run_cli

from pure_dp_mf import exact
from pure_dp_mf.certificates.certify import Certificate
from pure_dp_mf.certificates.claims import read_claims
from pure_dp_mf.errors import PureDPMFError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.factorizations.matrix_files import MAX_ENTRIES, declared_npz, read_matrix
from pure_dp_mf.gaussian.comparison import compare
from pure_dp_mf.gaussian.participation import participation_schema
from pure_dp_mf.gaussian.toeplitz import BufferedToeplitz, read_strategy
from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER

HUGE = (100_000, 100_000)  # 10^10 float64 entries: a 74.5 GiB allocation if believed
DEEP = "[" * 200_000 + "]" * 200_000


def forged_npy(shape: tuple[int, ...] = HUGE) -> bytes:
    """An .npy file whose header declares ``shape`` (float64), followed by a few bytes of data."""
    header = repr({"descr": "<f8", "fortran_order": False, "shape": shape}).encode("latin1")
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"  # magic (6) + version (2) + length (2) + header: a multiple of 64
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\x00" * 64


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def library_file_with(tmp_path: Path, name: str, member: str, data: bytes) -> Path:
    """A copy of a shipped base (this library's format) with one member replaced by ``data``."""
    target = tmp_path / name
    with zipfile.ZipFile(BASE_FOLDER / "k004_maxse.npz") as source, zipfile.ZipFile(target, "w") as out:
        for item in source.namelist():
            out.writestr(item, data if item == member else source.read(item))
    return target


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile")
    files: dict[str, Path] = {}

    def write(name: str, data: bytes | str) -> None:
        files[name] = folder / name
        if isinstance(data, str):
            files[name].write_text(data, encoding="utf-8")
        else:
            files[name].write_bytes(data)

    write("huge.npy", forged_npy())
    with zipfile.ZipFile(folder / "huge.npz", "w") as archive:
        archive.writestr("encoder.npy", forged_npy())
    files["huge.npz"] = folder / "huge.npz"
    files["library_huge.npz"] = library_file_with(folder, "library_huge.npz", "encoder.npy", forged_npy())
    deep_metadata = npy_bytes(np.frombuffer(DEEP.encode(), dtype=np.uint8))
    files["library_deep.npz"] = library_file_with(folder, "library_deep.npz", "metadata.npy", deep_metadata)
    shutil.copy(BASE_FOLDER / "k004_maxse.npz", folder / "k004_maxse.npz")
    write("claims_number.json", '{"encoder": "k004_maxse.npz", "metric": "maxse", "claims": {"c2": 1e999999999}}')
    write("claims_string.json", '{"encoder": "k004_maxse.npz", "metric": "maxse", "claims": {"c2": "1e999999999"}}')
    write("claims_digits.json", '{"encoder": "k004_maxse.npz", "metric": "maxse", "claims": {"c2": ' + "9" * 5000 + "}}")
    write("deep.json", DEEP)
    certificate = json.loads((CERTIFICATE_FOLDER / "k004_maxse.json").read_text())
    certificate["factorization"]["file"] = "k004_maxse.npz"
    certificate["claims"]["c2"]["numerator"] = "9" * 100_000
    write("long_number_certificate.json", json.dumps(certificate))
    write("coefficients.json", '{"coefficients": [1, 0.5, 0.25]}')
    write("text_decay.json", '{"buf_decay": ["a"], "output_scale": [0.5]}')
    write("long_field.csv", "1," + "1" * 140_000 + "\n0,1\n")
    write("latin1.txt", "# café\n1 0\n0 1\n".encode("latin-1"))
    write("events.csv", "step,key\n1,FR\n2,DE\n")
    write("keys.txt", "FR\nDE\n")
    write("quote.csv", 'a\n1\n"1\n0\n')
    write("bad_stream.txt", "1\n2\n")
    buffer = io.BytesIO()
    np.save(buffer, np.eye(4) * 1e-300)
    write("tiny.npy", buffer.getvalue())
    return files


def assert_one_error_line(result, *needles: str, code: int = 2) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, (result.returncode, result.stderr[-2000:])
    assert lines and lines[-1].startswith("error:"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])


CLI_CASES = [
    # a header declaring 10^10 entries: refused from the header, nothing allocated
    (["info", "{huge.npy}"], ["(100000, 100000)", str(MAX_ENTRIES)]),
    (["certify", "{huge.npz}", "--metric", "maxse", "--out", "{dir}/c.json"], ["(100000, 100000)"]),
    (["info", "{library_huge.npz}"], ["(100000, 100000)"]),
    # numbers beyond the float range, written as decimals: exact, but capped
    (["check-claims", "{claims_number.json}"], ["exponent beyond"]),
    (["check-claims", "{claims_digits.json}"], ["at most 1000 digits"]),
    (["verify", "{long_number_certificate.json}"], ["claims.c2.numerator"]),
    # JSON nested 200 000 deep, in every JSON the package reads
    (["check-claims", "{deep.json}"], ["nested deeper"]),
    (["verify", "{deep.json}"], ["nested deeper"]),
    (["multi-epoch", "check-strategy", "{deep.json}", "--n", "8", "--participations", "2"], ["nested deeper"]),
    (["info", "{library_deep.npz}"], ["nested deeper"]),
    # sizes checked before allocating, numbers parsed strictly
    (["multi-epoch", "check-strategy", "{coefficients.json}", "--n", "1000000000", "--participations", "1"], ["--n", "4194304"]),
    (["multi-epoch", "check-strategy", "{text_decay.json}", "--n", "8", "--participations", "2"], ["buf_decay"]),
    (["multi-epoch", "compare", "--n", "1000000000000", "--participations", "10", "--no-dense"], ["--n", "4194304"]),
    (["train", "--base-size", "100000", "--metric", "maxse", "--out", "{dir}/t.npz"], ["--base-size", "8192"]),
    # nonsense options
    (
        ["multi-epoch", "check-strategy", "{coefficients.json}", "--n", "8", "--participations", "2", "--separation", "-4"],
        ["--separation", "at least 1"],
    ),
    (["multi-epoch", "compare", "--n", "8", "--participations", "0", "--no-dense"], ["--participations", "at least 1"]),
    # text matrices: an over-long field, Latin-1 where UTF-8 is expected
    (["info", "{long_field.csv}"], ["140000 characters", "131072"]),
    (["info", "{latin1.txt}"], ["not UTF-8", "0xe9"]),
    # numbers past what the engines address: one error, up front
    (["plan", "--step", "1" * 30, "--epsilon", "1"], ["--step"]),
    (["compare", "--n", "2" + "0" * 399], ["--n"]),
    (["lift", "base_factorizations/k004_maxse.npz", "--n", "2" + "0" * 399], ["--n"]),
    (["count", "--epsilon", "1", "--dimension", "100000000000"], ["--dimension"]),
    # options that would be ignored, or an output that cannot be written: refused before any release
    (["count", "--epsilon", "1", "--horizon", "4", "--through", "1"], ["--through"]),
    (["count", "--epsilon", "1", "--horizon", "4", "--band", "simultaneous"], ["--band simultaneous", "--format plain"]),
    (
        ["count", "--epsilon", "1", "--horizon", "4", "--format", "csv", "--output", "{dir}/o.csv", "--plot", "{dir}/x.txt"],
        [".png"],
    ),
    (
        ["count", "--epsilon", "1", "--horizon", "4", "--format", "csv", "--output", "{dir}/o.csv", "--plot", "/proc/p.png"],
        ["--plot"],
    ),
    (
        ["count", "--epsilon", "1", "--horizon", "4", "--start", "2025-01-01", "--step-column", "d", "--step-size", "\u0661d"],
        ["--step-size"],
    ),
    (["reproduce", "--out", "{huge.npy}"], ["--out", "not a folder"]),
    (
        [
            "count",
            "--epsilon",
            "1",
            "--horizon",
            "4",
            "--format",
            "csv",
            "--output",
            "{dir}/o.csv",
            "--plot",
            "/nonexistent/p.png",
        ],
        ["--plot /nonexistent/p.png"],
    ),
    # unbounded work: an anytime keyed schedule to 10^18, refused up front
    (
        ["count", "{events.csv}", "--key-column", "key", "--keys", "{keys.txt}", "--step-column", "step", "--epsilon", "1"]
        + ["--through", str(10**18)],
        ["--through"],
    ),
    # malformed input that was once read as values, and costs that overflow
    (["count", "{quote.csv}", "--header", "--column", "a", "--epsilon", "1", "--horizon", "4"], ["line 3", "not a CSV line"]),
    (["count", "{bad_stream.txt}", "--epsilon", "1", "--horizon", "4"], ["line 2"]),
    (["info", "{tiny.npy}"], ["c2", "overflow"]),
]


@pytest.mark.parametrize("arguments, needles", CLI_CASES, ids=[" ".join(a[:2]) + f" #{i}" for i, (a, _) in enumerate(CLI_CASES)])
def test_hostile_input_ends_in_one_error_line(hostile, tmp_path, arguments, needles):
    filled = []
    for argument in arguments:
        for name, path in {**hostile, "dir": tmp_path}.items():
            argument = argument.replace("{" + name + "}", str(path))
        filled.append(argument)
    start = time.perf_counter()
    result = run_cli(*filled, timeout=SAFETY_LIMIT)
    assert_one_error_line(result, *needles)
    assert time.perf_counter() - start < 30


def test_train_keeps_k_4096_and_states_its_limit(tmp_path):
    # the size check comes first: k = 4096 passes it and the next check (the metric) answers
    result = run_cli(
        "train", "--base-size", "4096", "--metric", "nonsense", "--out", str(tmp_path / "t.npz"), timeout=SAFETY_LIMIT
    )
    assert_one_error_line(result, "metric")
    assert "base-size" not in result.stderr


# ------------------------------------------------------------------ the library raises its own errors


def _bounded(call, *, seconds: float = 5.0, megabytes: float = 64.0) -> PureDPMFError:
    """Run ``call``, which must raise a ``PureDPMFError`` within ``seconds`` and ``megabytes``."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(PureDPMFError) as raised:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < seconds
    assert peak < megabytes * 2**20, peak
    return raised.value


def test_declared_shapes_are_refused_before_allocating(hostile):
    for name in ("huge.npy", "huge.npz"):
        error = _bounded(lambda name=name: read_matrix(hostile[name]))
        assert "(100000, 100000)" in str(error)
        _bounded(lambda name=name: Factorization.load(hostile[name]))
    _bounded(lambda: Factorization.load(hostile["library_huge.npz"]))
    _bounded(lambda: read_strategy(hostile["huge.npy"], n=8))
    # the shipped bases, up to 2048×2048, stay below the limit
    assert 2048 * 2048 <= MAX_ENTRIES
    for base in sorted(BASE_FOLDER.glob("k*.npz")):
        shape, dtype = declared_npz(base, ["encoder"])["encoder"]
        assert shape[0] <= 2048 and dtype == np.float64


def test_numbers_beyond_the_float_range_are_exact_but_capped(hostile, tmp_path):
    assert exact.parse_number("1e400") == 10**400  # beyond float64, read exactly
    assert exact.parse_number("-2.5e-400") == Fraction(-25, 10**401)
    for text, message in (("1e999999999", "exponent"), ("9" * 5000, "digits"), ("1e1001", "exponent"), ("1e-1001", "exponent")):
        assert message in str(_bounded(lambda text=text: exact.parse_number(text), seconds=1))
    for name in ("claims_number.json", "claims_string.json", "claims_digits.json"):
        _bounded(lambda name=name: read_claims(hostile[name]), seconds=2)
    (tmp_path / "k004_maxse.npz").write_bytes((BASE_FOLDER / "k004_maxse.npz").read_bytes())
    (tmp_path / "big.json").write_text('{"encoder": "k004_maxse.npz", "metric": "maxse", "claims": {"c2": 1e400}}')
    assert read_claims(tmp_path / "big.json")["claims"] == [("c2", Fraction(10**400))]
    text = hostile["long_number_certificate.json"].read_text()
    _bounded(lambda: Certificate.from_json(text, source="certificate"), seconds=2)


def test_deep_json_is_refused_everywhere(hostile):
    _bounded(lambda: read_claims(hostile["deep.json"]))
    _bounded(lambda: Certificate.from_json(DEEP, source="certificate"))
    _bounded(lambda: read_strategy(hostile["deep.json"], n=8))
    _bounded(lambda: Factorization.load(hostile["library_deep.npz"]))


def test_gaussian_sizes_and_values_are_checked_before_allocating(hostile):
    _bounded(lambda: read_strategy(hostile["coefficients.json"], n=10**9))
    _bounded(lambda: compare(n=10**12, max_participations=10, dense=False))
    _bounded(lambda: compare(n=100_000, max_participations=10))  # the dense mechanisms: n×n matrices
    _bounded(lambda: read_strategy(hostile["text_decay.json"], n=8))
    _bounded(lambda: BufferedToeplitz(decay=np.array(["a"]), scale=np.array([0.5])))
    _bounded(lambda: participation_schema(name="min-sep", max_participations=2, separation=-4, n=8))
    _bounded(lambda: participation_schema(name="fixed-epoch", max_participations=0, separation=4, n=8))


def test_text_matrices_with_long_fields_or_latin1_are_refused(hostile):
    assert "131072" in str(_bounded(lambda: read_matrix(hostile["long_field.csv"])))
    assert "not UTF-8" in str(_bounded(lambda: read_matrix(hostile["latin1.txt"])))


# ------------------------------------------------------------------ bounded work at any magnitude


@pytest.mark.parametrize("max_value", ["1000000", str(10**18)])
def test_anytime_with_a_huge_max_value_finishes_with_an_integer(max_value):
    """The noise of an anytime count at m = 10⁶ or 10¹⁸ is beyond float64's exact integers, so
    every value is decided in integers (``ExactDecoder.refine``; the exact solve of a 2048×2048
    system took minutes here): the run ends, within the safety limit, with one integer per step."""
    result = run_cli(
        "count", "--epsilon", "1", "--max-value", max_value, "--seed", "1", input_text="1\n0\n", timeout=SAFETY_LIMIT
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stdout.split()
    assert len(lines) == 2 and all(line.lstrip("-").isdigit() for line in lines)


def test_library_misuse_is_one_package_error():
    """Keys that are not a list, steps that are not a sequence: a ``PureDPMFError`` at once."""
    import warnings

    from pure_dp_mf.engines.counter import Counter
    from pure_dp_mf.engines.generator import NoiseGenerator
    from pure_dp_mf.engines.keyed import check_keys

    for keys in (None, 5, "FR", b"FR"):
        _bounded(lambda keys=keys: check_keys(keys))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counter = Counter(epsilon=1.0, horizon=8, generator=NoiseGenerator.from_seed(1))
    for values in (None, 5):
        _bounded(lambda values=values: counter.update_many(values))
    assert counter.released == 0
