"""Matrices as people publish them: bare ``.npy``, ``.npz`` with any array names, plain text or CSV.

Authors publish encoders and decoders as bare NumPy files (Arkhipov & Kalinin, arXiv 2607.08963,
ship ``maxse_n1024_R.npy`` and ``meanse_n1024_R.npy``), as archives with their own array names, or
as text. ``read_matrix`` reads any of these *exactly*: float64 as stored, float32 widened to float64
(every float32 is a float64, so no value changes), integers scaled by a stated power of two
(``integer_grid_bits``: the entry m means m·2^-g, exact while |m| < 2^53), text parsed by NumPy
(decimal text rounds to the nearest float64, as any reader of that text would). Whatever is read
is recorded (``source``): the file name, the SHA-256 of the file as given, the array name, the
stored dtype and shape, so a reader can repeat the computation on the same bytes.

Refused with one clear message each (``InvalidInputError``): a missing file or a folder, a file
that is none of these formats, an archive with several arrays and no ``array`` chosen, an array
name that is not there, Python objects (pickles are never loaded), a value that is not a matrix
(0, 1 or 3+ dimensions), an empty matrix, complex or boolean values, NaN or infinity, and integers
without a grid.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pure_dp_mf.errors import InvalidInputError

NPY_MAGIC = b"\x93NUMPY"
TEXT_SUFFIXES = (".txt", ".csv", ".tsv", ".dat", ".mat.txt")


@dataclass(frozen=True)
class PublishedMatrix:
    """A matrix read from a published file: its float64 values and where they came from."""

    values: np.ndarray
    source: dict


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_matrix(
    path: str | os.PathLike, *, array: str | None = None, integer_grid_bits: int | None = None, what: str = "matrix"
) -> PublishedMatrix:
    """Read one matrix from ``path`` (``.npy``, ``.npz``, text or CSV), exactly; see the module docstring.

    Args:
        path: the file.
        array: the array to take from an ``.npz`` archive (needed when it holds several).
        integer_grid_bits: g for integer arrays: the entry m stands for m·2^-g.
        what: how error messages name the matrix ("encoder", "decoder").

    Returns:
        The values (float64, C order) and the ``source`` record.

    Raises:
        InvalidInputError: see the module docstring.
    """
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"{path}: no such file")
    if not path.is_file():
        raise InvalidInputError(f"{path}: not a file")
    with open(path, "rb") as stream:
        head = stream.read(6)
    if head == NPY_MAGIC:
        if array is not None:
            raise InvalidInputError(f"{path}: a bare .npy file holds one array; --array applies to .npz archives")
        raw, name = _load_npy(path), None
    elif zipfile.is_zipfile(path):
        raw, name = _load_npz(path, array=array)
    else:
        if array is not None:
            raise InvalidInputError(f"{path}: a text file holds one matrix; --array applies to .npz archives")
        raw, name = _load_text(path), None
    values = _checked(raw, path=path, array=name, integer_grid_bits=integer_grid_bits, what=what)
    source: dict[str, object] = {
        "file": path.name,
        "sha256": file_sha256(path),
        "array": name,
        "dtype": str(raw.dtype),
        "shape": list(raw.shape),
    }
    if raw.dtype.kind in "iu":
        source["integer_grid_bits"] = integer_grid_bits
    return PublishedMatrix(values=values, source=source)


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as error:
        if "pickle" in str(error).lower() or "object" in str(error).lower():
            raise InvalidInputError(f"{path}: the array holds Python objects; only numeric arrays are read") from None
        raise InvalidInputError(f"{path}: unreadable .npy file ({error})") from None
    except (OSError, EOFError) as error:
        raise InvalidInputError(f"{path}: unreadable .npy file ({type(error).__name__})") from None


def _load_npz(path: Path, *, array: str | None) -> tuple[np.ndarray, str]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            if not names:
                raise InvalidInputError(f"{path}: the archive holds no arrays")
            if array is None:
                if len(names) > 1:
                    raise InvalidInputError(
                        f"{path} holds {len(names)} arrays ({', '.join(sorted(names))}); choose one with --array NAME"
                    )
                array = names[0]
            if array not in names:
                raise InvalidInputError(f"{path} has no array {array!r}; it holds {', '.join(sorted(names))}")
            return archive[array], array
    except InvalidInputError:
        raise
    except ValueError as error:
        if "pickle" in str(error).lower() or "object" in str(error).lower():
            raise InvalidInputError(f"{path}: array {array!r} holds Python objects; only numeric arrays are read") from None
        raise InvalidInputError(f"{path}: unreadable .npz file ({error})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as error:
        raise InvalidInputError(f"{path}: unreadable .npz file ({type(error).__name__})") from None


def _load_text(path: Path) -> np.ndarray:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInputError(
            f"{path}: not a matrix file (.npy, .npz, or text with one row per line); it is binary and not NumPy's format"
        ) from None
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InvalidInputError(f"{path}: the file holds no matrix (no rows)")
    delimiter = "," if "," in lines[0] else ("\t" if "\t" in lines[0] else None)
    try:
        values = np.loadtxt(io.StringIO("\n".join(lines)), delimiter=delimiter, dtype=np.float64, ndmin=2)
    except ValueError as error:
        raise InvalidInputError(f"{path}: not a matrix of numbers ({error})") from None
    return values


def _checked(raw: np.ndarray, *, path: Path, array: str | None, integer_grid_bits: int | None, what: str) -> np.ndarray:
    where = f"{path}" + (f" (array {array!r})" if array is not None else "")
    if raw.ndim != 2:
        raise InvalidInputError(f"{where}: the {what} must be a matrix (2 dimensions), got shape {tuple(raw.shape)}")
    if raw.size == 0:
        raise InvalidInputError(f"{where}: the {what} is empty (shape {tuple(raw.shape)})")
    kind = raw.dtype.kind
    if kind == "f":
        values = raw.astype(np.float64)  # float16/32 widen exactly
    elif kind in "iu":
        if integer_grid_bits is None:
            raise InvalidInputError(
                f"{where}: the {what} holds integers ({raw.dtype}); state their grid with --integer-grid-bits G "
                "(the entry m stands for m·2^-G)"
            )
        if integer_grid_bits < 0 or integer_grid_bits > 1000:
            raise InvalidInputError(f"--integer-grid-bits must be between 0 and 1000, got {integer_grid_bits}")
        if raw.size and int(np.abs(raw.astype(object)).max()) >= 2**53:
            raise InvalidInputError(f"{where}: integer entries of 2^53 or more cannot be read exactly as float64")
        values = np.ldexp(raw.astype(np.float64), -integer_grid_bits)
        if not np.all(np.isfinite(values)) or np.any((values == 0) & (raw != 0)):
            raise InvalidInputError(f"{where}: the grid 2^-{integer_grid_bits} takes the entries outside the float64 range")
    elif kind == "b":
        raise InvalidInputError(f"{where}: the {what} holds booleans, not numbers")
    elif kind == "c":
        raise InvalidInputError(f"{where}: the {what} holds complex numbers")
    else:
        raise InvalidInputError(f"{where}: the {what} holds {raw.dtype} values, not numbers")
    if not np.all(np.isfinite(values)):
        bad = np.argwhere(~np.isfinite(values))[0]
        raise InvalidInputError(f"{where}: the {what} has a NaN or infinite entry at row {bad[0]}, column {bad[1]}")
    return np.ascontiguousarray(values)
