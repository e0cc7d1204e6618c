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

Hostile files are refused in bounded time and memory, before anything of their declared size
is allocated: the shape and dtype of every ``.npy`` array (bare, or each ``.npz`` member, read
through ``zipfile``) are taken from its header and refused above ``MAX_ENTRIES`` entries or for
a dtype that is not a number of at most ``MAX_ITEMSIZE`` bytes; a text file is refused above
``MAX_TEXT_BYTES`` bytes, with a field longer than ``MAX_FIELD_CHARACTERS`` characters, with
more than ``MAX_ENTRIES`` numbers, or when it is not UTF-8.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_entries, read_bytes_limited

NPY_MAGIC = b"\x93NUMPY"
TEXT_SUFFIXES = (".txt", ".csv", ".tsv", ".dat", ".mat.txt")
MAX_ENTRIES = 1 << 26
"""Most entries of one array read from a file (2^26 = 67 108 864: 512 MiB of float64, an 8192×8192
matrix); the shipped bases go up to 2048×2048 = 2^22."""
MAX_ITEMSIZE = 32
"""Largest size in bytes of one entry's dtype (complex256); longer ones are not numbers."""
MAX_TEXT_BYTES = 1 << 28
"""Largest text or CSV matrix file read (256 MiB; a 2048×2048 matrix of 17-digit numbers is ~80 MiB)."""
MAX_FIELD_CHARACTERS = 1 << 17
"""Longest field of a text or CSV matrix (131 072 characters, the limit of Python's csv module)."""
_TEXT_SEPARATORS = np.frombuffer(b", \t\r\n;", dtype=np.uint8)


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
        raw, name = _load_npy(path, what=what), None
    elif zipfile.is_zipfile(path):
        raw, name = _load_npz(path, array=array, what=what)
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


def _npy_header(stream, *, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from the header of a ``.npy`` stream, read without reading the data."""
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise InvalidInputError(f"{where}: .npy format version {version[0]}.{version[1]} is not read (1.0 and 2.0 are)")
    except InvalidInputError:
        raise
    except (ValueError, TypeError, SyntaxError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise InvalidInputError(f"{where}: unreadable .npy header ({type(error).__name__})") from None
    return tuple(shape), dtype


def check_declared_array(shape: tuple[int, ...], dtype: np.dtype, *, where: str, what: str = "matrix") -> int:
    """Refuse (``InvalidInputError``) an array whose header declares Python objects, a dtype
    that is not a number of at most ``MAX_ITEMSIZE`` bytes, a negative size or more than
    ``MAX_ENTRIES`` entries; return its number of entries. Nothing is allocated."""
    if dtype.hasobject:
        raise InvalidInputError(f"{where}: the array holds Python objects; only numeric arrays are read")
    if dtype.kind not in "biufc" or dtype.itemsize > MAX_ITEMSIZE or dtype.fields is not None or dtype.subdtype is not None:
        raise InvalidInputError(f"{where}: the {what} holds {dtype} values, not numbers")
    if any(int(size) < 0 for size in shape):
        raise InvalidInputError(f"{where}: the header declares a negative size, shape {tuple(shape)}")
    return check_entries(shape, limit=MAX_ENTRIES, what=f"{where}: the {what}")


def declared_npy(path: str | os.PathLike, *, what: str = "matrix") -> tuple[tuple[int, ...], np.dtype]:
    """The (shape, dtype) a bare ``.npy`` file declares, checked by ``check_declared_array``."""
    with open(path, "rb") as stream:
        shape, dtype = _npy_header(stream, where=str(path))
    check_declared_array(shape, dtype, where=str(path), what=what)
    return shape, dtype


def npz_members(path: str | os.PathLike) -> dict[str, str]:
    """{array name: zip member} of an ``.npz`` archive, named as ``numpy.load`` names them."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        raise InvalidInputError(f"{path}: unreadable .npz file ({type(error).__name__})") from None
    members = {name.removesuffix(".npy"): name for name in names}
    members.update({name: name for name in names})
    return members


def declared_npz(path: str | os.PathLike, names: list[str] | None = None, *, what: str = "matrix") -> dict:
    """{array name: (shape, dtype)} that the members of an ``.npz`` archive declare in their
    headers (all of them, or ``names``), each checked by ``check_declared_array``: read through
    ``zipfile`` without decompressing more than the headers. A member that is not a ``.npy``
    array is refused (``numpy.load`` would return all its bytes)."""
    members = npz_members(path)
    declared = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for name in names if names is not None else sorted({n.removesuffix(".npy") for n in members}):
                where = f"{path} (array {name!r})"
                with archive.open(members[name]) as stream:
                    shape, dtype = _npy_header(stream, where=where)
                check_declared_array(shape, dtype, where=where, what=what)
                declared[name] = (shape, dtype)
    except InvalidInputError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, zlib.error) as error:
        raise InvalidInputError(f"{path}: unreadable .npz file ({type(error).__name__})") from None
    return declared


def _load_npy(path: Path, *, what: str) -> np.ndarray:
    declared_npy(path, what=what)
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as error:
        if "pickle" in str(error).lower() or "object" in str(error).lower():
            raise InvalidInputError(f"{path}: the array holds Python objects; only numeric arrays are read") from None
        raise InvalidInputError(f"{path}: unreadable .npy file ({error})") from None
    except (OSError, EOFError) as error:
        raise InvalidInputError(f"{path}: unreadable .npy file ({type(error).__name__})") from None


def _load_npz(path: Path, *, array: str | None, what: str) -> tuple[np.ndarray, str]:
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
            declared_npz(path, [array], what=what)
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
    data = read_bytes_limited(path, limit=MAX_TEXT_BYTES, what=f"{path}: a text matrix")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        if b"\0" in data:
            raise InvalidInputError(
                f"{path}: not a matrix file (.npy, .npz, or text with one row per line); it is binary and not NumPy's format"
            ) from None
        raise InvalidInputError(
            f"{path}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); save the matrix as UTF-8"
        ) from None
    _check_fields(data, path=path)
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InvalidInputError(f"{path}: the file holds no matrix (no rows)")
    delimiter = "," if "," in lines[0] else ("\t" if "\t" in lines[0] else None)
    try:
        values = np.loadtxt(io.StringIO("\n".join(lines)), delimiter=delimiter, dtype=np.float64, ndmin=2)
    except ValueError as error:
        raise InvalidInputError(f"{path}: not a matrix of numbers ({error})") from None
    return values


def _check_fields(data: bytes, *, path: Path) -> None:
    """Refuse a field longer than ``MAX_FIELD_CHARACTERS`` or more than ``MAX_ENTRIES`` fields,
    counted in one vectorised pass over the bytes (comments included: an upper bound)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    separator = np.isin(raw, _TEXT_SEPARATORS)
    boundaries = np.flatnonzero(separator)
    runs = np.diff(np.concatenate(([-1], boundaries, [raw.size]))) - 1  # lengths of the fields between separators
    longest = int(runs.max(initial=0))
    if longest > MAX_FIELD_CHARACTERS:
        raise InvalidInputError(
            f"{path}: a field of {longest} characters, above the limit of {MAX_FIELD_CHARACTERS} characters per field"
        )
    fields = int(np.count_nonzero(runs))
    if fields > MAX_ENTRIES:
        raise InvalidInputError(f"{path}: {fields} fields, above the limit of {MAX_ENTRIES} entries")


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
