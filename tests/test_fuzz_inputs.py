"""Adversarial inputs (hypothesis) against every file loader and every CLI command that reads input.

Random bytes, truncated and bit-flipped files, wrong dtypes and shapes, huge/NaN/empty values:
a loader raises a ``PureDPMFError`` (never another exception), a command exits non-zero with one
``error: …`` line on stderr and no traceback, and prints nothing on stdout when it fails (``count``
streams releases: what it printed before the bad line are genuine releases, integers, one per line).
Commands run in-process through ``pure_dp_mf.cli.main`` (the script's entry point).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import run_main  # noqa: E402
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pure_dp_mf.certificates.certify import Certificate, verify_certificate
from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.engines.journal import Journal
from pure_dp_mf.errors import PureDPMFError
from pure_dp_mf.factorizations.factorization import FORMAT, Factorization, array_sha256
from pure_dp_mf.resources import BASE_FOLDER as BASES
from pure_dp_mf.resources import CERTIFICATE_FOLDER as CERTIFICATES

ROOT = Path(__file__).resolve().parents[1]
BASE = BASES / "k004_maxse.npz"
CERTIFICATE = CERTIFICATES / "k004_maxse.json"
# Deterministic in CI; PURE_DP_MF_FUZZ_EXAMPLES=200 PURE_DP_MF_FUZZ_RANDOM=1 for a longer, random bug hunt.
EXAMPLES = int(os.environ.get("PURE_DP_MF_FUZZ_EXAMPLES", "12"))
RANDOM = os.environ.get("PURE_DP_MF_FUZZ_RANDOM") == "1"
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None, derandomize=not RANDOM
)


# ------------------------------------------------------------------------------------ helpers


run_cli = run_main


def assert_clean_failure(code: int, out: str, err: str, *, streamed: bool = False) -> None:
    assert code != 0, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert err.strip(), "a failure must say why"
    if streamed:
        assert all(line.strip().lstrip("-").isdigit() for line in out.splitlines()), out
    else:
        assert out == "", f"partial output on failure: {out!r}"


def assert_clean(code: int, out: str, err: str, *, streamed: bool = False, verdicts: tuple[int, ...] = ()) -> None:
    """Either a complete result (exit 0, or a documented verdict code with its report) or a clean failure."""
    assert "Traceback" not in err and "Traceback" not in out
    if code == 0 or code in verdicts:
        assert out.strip() or streamed
    else:
        assert_clean_failure(code, out, err, streamed=streamed)


@st.composite
def corrupted(draw, valid: bytes):
    """Random bytes, an empty file, a strict truncation or a few flipped bytes of ``valid``."""
    kind = draw(st.sampled_from(["random", "empty", "truncated", "flipped"]))
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=4096))
    if kind == "empty":
        return b""
    if kind == "truncated":
        return valid[: draw(st.integers(0, len(valid) - 1))]
    data = bytearray(valid)
    for position in draw(st.lists(st.integers(0, len(valid) - 1), min_size=1, max_size=8)):
        data[position] ^= draw(st.integers(1, 255))
    return bytes(data)


def npz_bytes(encoder: np.ndarray, decoder: np.ndarray | None = None, *, n=None, inner_size=None) -> bytes:
    """A factorization file whose metadata is consistent (hashes, shapes, dtypes) with arbitrary arrays."""
    arrays = {"encoder": encoder} if decoder is None else {"encoder": encoder, "decoder": decoder}
    shape = encoder.shape if encoder.ndim == 2 else (0, 0)
    metadata = {
        "format": FORMAT,
        "n": n if n is not None else int(shape[1]),
        "inner_size": inner_size if inner_size is not None else int(shape[0]),
        "metric": "maxse",
        "dtype": str(encoder.dtype),
        "arrays": {k: {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": array_sha256(a)} for k, a in arrays.items()},
    }
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays, metadata=np.frombuffer(json.dumps(metadata).encode(), dtype=np.uint8))
    return buffer.getvalue()


weird_arrays = st.one_of(
    st.sampled_from(["int8", "complex128", "bool", "float16", "uint64", "<U3"]).map(
        lambda dtype: np.eye(4).astype(dtype) if dtype != "<U3" else np.array([["a"] * 4] * 4)
    ),
    st.sampled_from([(0, 0), (4,), (4, 5), (5, 4), (1, 1), (2, 2, 2), (0, 4)]).map(lambda shape: np.ones(shape)),
    st.sampled_from([np.inf, -np.inf, np.nan, 1e308, -1e308, 5e-324, 0.0]).map(lambda v: np.full((4, 4), v)),
    st.sampled_from([np.inf, np.nan, 1e300, 0.0]).map(lambda v: np.where(np.eye(4) > 0, v, 0.0)),
)


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        path = Path(name)
        (path / "base_factorizations").mkdir()
        shutil.copy(BASE, path / "base_factorizations" / BASE.name)
        (path / "certificates").mkdir()
        yield path


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------ factorization files

VALID_NPZ = BASE.read_bytes()


def _commands_reading_a_factorization(path: Path, out: Path) -> list[tuple[list[str], dict]]:
    """(arguments, assert_clean options): lower-bound exits 1 (a bound fails) or 3 (the theorem does
    not apply) with its report, audit exits 1 when ε is contradicted: verdicts, not failures."""
    return [
        (["info", str(path)], {}),
        (["certify", str(path), "--out", str(out / "c.json"), "--rounded-out", str(out / "r.npz")], {}),
        (["lift", str(path), "--n", "100"], {}),
        (["lower-bound", str(path)], {"verdicts": (1, 3)}),
        (["count", "--base", str(path), "--epsilon", "1", "--horizon", "3", "--seed", "1"], {"streamed": True}),
        (
            ["audit", "--mechanism", "lifted", "--base", str(path), "--n", "4", "--epsilon", "1", "--trials", "200"],
            {"verdicts": (1,)},
        ),
    ]


@FUZZ
@given(data=corrupted(VALID_NPZ))
def test_corrupted_factorization_files(folder, data):
    if data == VALID_NPZ:
        return
    path = _write(folder, "fuzz.npz", data)
    try:
        Factorization.load(path)
    except PureDPMFError:
        pass
    else:  # a flipped byte inside compressed data may leave a valid archive only if hashes still match
        assert hashlib.sha256(data).digest() != hashlib.sha256(VALID_NPZ).digest()
    for arguments, options in _commands_reading_a_factorization(path, folder):
        assert_clean(*run_cli(*arguments, stdin="0\n1\n0\n"), **options)


@FUZZ
@given(encoder=weird_arrays, with_decoder=st.booleans())
def test_factorization_files_with_wrong_dtypes_shapes_and_values(folder, encoder, with_decoder):
    decoder = np.tril(np.ones((4, 4))) if with_decoder else None
    path = _write(folder, "weird.npz", npz_bytes(encoder, decoder))
    try:
        Factorization.load(path)
    except PureDPMFError:
        pass
    for arguments, options in _commands_reading_a_factorization(path, folder):
        assert_clean(*run_cli(*arguments, stdin="0\n1\n0\n"), **options)


def test_count_with_a_valid_base_of_huge_norms(folder):
    """R = 10³⁰⁰·I (L = 10⁻³⁰⁰·T) is a factorization of T_4 that loads; count must refuse it cleanly."""
    path = _write(folder, "huge.npz", npz_bytes(np.where(np.eye(4) > 0, 1e300, 0.0)))
    Factorization.load(path)
    code, out, err = run_cli("count", "--base", str(path), "--epsilon", "1", "--horizon", "3", "--seed", "1", stdin="0\n")
    assert_clean(code, out, err, streamed=True)


@pytest.mark.parametrize("name", ["missing.npz", "."])
def test_missing_factorization_file(folder, name):
    path = folder / name
    with pytest.raises(PureDPMFError):
        Factorization.load(path)
    for arguments, options in _commands_reading_a_factorization(path, folder):
        assert_clean_failure(*run_cli(*arguments, stdin="0\n"), streamed=options.get("streamed", False))


# ---------------------------------------------------------------------------------- certificates

VALID_CERTIFICATE = CERTIFICATE.read_bytes()


def _json_mutations():
    scalar = st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(allow_nan=True), st.text(max_size=20))
    return st.recursive(
        scalar,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
        max_leaves=12,
    )


@st.composite
def mutated_certificate(draw):
    record = json.loads(VALID_CERTIFICATE)
    path = []
    node = record
    while isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        path.append(key)
        if not isinstance(node[key], dict):
            break
        node = node[key]
    replacement = draw(_json_mutations())
    if not path:
        return json.dumps(replacement).encode()
    parent = record
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()):
        parent[path[-1]] = replacement
    else:
        del parent[path[-1]]
    return json.dumps(record).encode()


@FUZZ
@given(data=st.one_of(corrupted(VALID_CERTIFICATE), mutated_certificate()))
def test_corrupted_certificates(folder, data):
    if data == VALID_CERTIFICATE:
        return
    path = _write(folder / "certificates", "fuzz.json", data)
    try:
        Certificate.read(path)
        verify_certificate(path=path)  # returns only if every claim is re-proven
        verified = True
    except PureDPMFError:
        verified = False
    code, out, err = run_cli("verify", str(path))
    if verified:  # a mutation that left every claim intact (e.g. a comment field)
        assert code == 0 and out.strip() and "Traceback" not in err
    else:
        assert_clean_failure(code, out, err)


# ----------------------------------------------------------------------------------- state files


@pytest.fixture(scope="module")
def valid_state(folder):
    counter = ContinualCounter(
        base=folder / "base_factorizations" / BASE.name, epsilon=1.0, horizon=6, generator=NoiseGenerator.from_seed(3)
    )
    path = counter.save_state(folder / "valid_state.db")
    counter.counts([1, 0])
    counter.close()
    return path.read_bytes()


@FUZZ
@given(data=st.data())
def test_corrupted_state_files(folder, valid_state, data):
    corrupt = data.draw(corrupted(valid_state))
    if corrupt == valid_state:
        return
    path = _write(folder, "state.db", corrupt)  # corrupted, or intact but a copy of valid_state.db: refused either way
    with pytest.raises(PureDPMFError):
        Journal.open(path).close()
    code, out, err = run_cli("count", "--state", str(path), "--epsilon", "1", "--horizon", "6", stdin="1\n0\n")
    assert_clean_failure(code, out, err, streamed=True)


@pytest.fixture(scope="module")
def state_in_place(folder):
    """A state at its own path, known to the registry: (path, its bytes, what it serves)."""
    counter = ContinualCounter(
        base=folder / "base_factorizations" / BASE.name, epsilon=1.0, horizon=6, generator=NoiseGenerator.secure()
    )
    path = counter.save_state(folder / "in_place_state.db")
    counter.counts([1, 0])
    counter.counts([1])
    counter.close()
    return path, path.read_bytes(), _served(path)


def _served(path: Path) -> tuple:
    journal = Journal.open(path)
    try:
        blocks = [(start, np.asarray(rows, dtype=object).tolist()) for start, rows in journal.blocks(0)]
        return json.dumps(journal.header, sort_keys=True), journal.released, json.dumps(journal.progress), blocks
    finally:
        journal.close()


@FUZZ
@given(position=st.integers(min_value=0, max_value=1 << 20), mask=st.integers(min_value=1, max_value=255))
def test_a_byte_changed_in_a_state_in_place_is_refused_or_served_exactly(state_in_place, position, mask):
    path, original, expected = state_in_place
    changed = bytearray(original)
    changed[position % len(original)] ^= mask
    path.write_bytes(bytes(changed))
    try:
        try:
            seen = _served(path)
        except PureDPMFError:
            return  # refused, naming the problem
        assert seen == expected  # never a different release or progress record
    finally:
        path.write_bytes(original)


# ---------------------------------------------------------------------------------- count input


@FUZZ
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.lists(
            st.sampled_from(["0", "1", "2", "-1", "nan", "inf", "1e400", "0.5", "x", "1,0", "", " ", "\x00"]), max_size=12
        ).map("\n".join),
    )
)
def test_count_input_streams(text):
    code, out, err = run_cli("count", "--epsilon", "1", "--horizon", "8", "--seed", "2", stdin=text)
    assert_clean(code, out, err, streamed=True)
    steps = text.split("\n")[:-1] if text.endswith("\n") or not text else text.split("\n")
    assert code == (2 if len(steps) > 8 else 0)  # a stream: invalid lines count as 0 (--invalid zero), never a stop
    if code == 0:
        assert len(out.splitlines()) == len(steps)  # every line is a step, in order


@pytest.mark.parametrize(
    "arguments",
    [
        ["--epsilon", "nan"],
        ["--epsilon", "0"],
        ["--horizon", "0"],
        ["--horizon", "-5"],
        ["--horizon", "2.5"],
        ["--dimension", "0"],
    ],
)
def test_count_bad_numbers(arguments):
    base = {"--epsilon": "1", "--horizon": "4"}
    for flag, value in zip(arguments[::2], arguments[1::2]):
        base[flag] = value
    code, out, err = run_cli("count", *[item for pair in base.items() for item in pair], stdin="0\n")
    assert_clean_failure(code, out, err)


# ----------------------------------------------------------------------------- train checkpoints


@settings(max_examples=6, deadline=None, database=None, derandomize=not RANDOM)
@given(data=st.one_of(st.binary(max_size=512), st.just(b""), st.just(VALID_NPZ[:300])))
def test_corrupted_training_checkpoints(folder, data):
    from pure_dp_mf.factorizations.train import load_checkpoint

    path = _write(folder, "fuzz.ckpt", data)
    with pytest.raises(PureDPMFError):
        load_checkpoint(path)
    code, out, err = run_cli(
        "train",
        "--base-size",
        "4",
        "--metric",
        "maxse",
        "--out",
        str(folder / "t.npz"),
        "--resume",
        str(path),
        "--adam-steps",
        "1",
        "--lbfgs-steps",
        "0",
        "--no-progress",
    )
    assert_clean_failure(code, out, err)
    code, out, err = run_cli(
        "train",
        "--base-size",
        "4",
        "--metric",
        "maxse",
        "--out",
        str(folder / "t.npz"),
        "--init",
        str(path),
        "--adam-steps",
        "1",
        "--lbfgs-steps",
        "0",
        "--no-progress",
    )
    assert_clean_failure(code, out, err)


# ----------------------------------------------------------------------- reproduce's input folders


@settings(max_examples=2, deadline=None, database=None, derandomize=not RANDOM)
@given(data=corrupted(VALID_CERTIFICATE))
def test_reproduce_with_a_corrupted_certificate_folder(folder, data):
    """A corrupted certificate is a failed section: exit 1 with FAILED on stderr, no traceback."""
    certificates = folder / "reproduce_certificates"
    certificates.mkdir(exist_ok=True)
    _write(certificates, "k004_maxse.json", data)
    code, out, err = run_cli(
        "reproduce",
        "--only",
        "certificates",
        "--certificates",
        str(certificates),
        "--bases",
        str(folder / "base_factorizations"),
        "--out",
        str(folder / "reproduce_out"),
    )
    assert "Traceback" not in err and "Traceback" not in out
    assert code != 0 and ("FAILED" in err or "error:" in err)
