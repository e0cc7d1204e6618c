"""The ``Factorization`` type and its file format (docs/architecture.md "Files").

A factorization of the workload T_n is a pair (L, R) = (decoder, encoder) with L·R = T_n,
L of shape n×s and R of shape s×n, plus a metadata record. Every stage of the pipeline
(train → certify → lift → stream) reads and writes this one type.

File format (``.npz``, written without pickles, atomically):

* ``encoder``: R, float32 or float64, as produced;
* ``decoder``: L, optional; when absent L is recomputed as T_n·R⁻¹ (square R only);
* ``metadata``: a UTF-8 JSON document stored as a uint8 array, holding at least
  ``format`` ("pure_dp_mf.factorization/1"), ``n``, ``inner_size``, ``metric``, ``dtype``,
  ``library_version``, ``arrays`` ({name: {"shape", "dtype", "sha256"}}) and any producer
  record (``made_by``: trainer settings, seed, iterations, wall time, costs...).

``load`` checks the container, the arrays present, shapes and dtypes against the record, the
sha256 of every array's bytes, finiteness, and inner-size consistency, and names exactly what
does not match.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import pure_dp_mf
from pure_dp_mf.atomic import atomic_write_bytes
from pure_dp_mf.cache import read_array, read_entry, write_array, write_entry
from pure_dp_mf.errors import FactorizationFileError, InvalidInputError, NotAFactorizationError
from pure_dp_mf.factorizations.costs import FactorizationCosts, factorization_costs
from pure_dp_mf.factorizations.matrix_files import MAX_ENTRIES, declared_npz, file_sha256, npz_members, read_matrix
from pure_dp_mf.validation import UNIT_EPSILON, issparse, parse_json

__all__ = ["DEFAULT_TOLERANCE", "FORMAT", "METRICS", "Factorization", "array_sha256", "decoder_from_encoder", "file_sha256"]

FORMAT = "pure_dp_mf.factorization/1"
METRICS = ("maxse", "meanse")
DEFAULT_TOLERANCE = 1e-6


def array_sha256(array: np.ndarray) -> str:
    """sha256 of an array's bytes in C order (shape and dtype are recorded beside it)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _as_matrix(matrix: Any, *, name: str):
    """Dense float32/float64 array or CSR matrix, finite, 2-D; the first problem named."""
    if issparse(matrix):
        import scipy.sparse

        matrix = scipy.sparse.csr_matrix(matrix, dtype=np.float64)
        values = matrix.data
    else:
        try:
            matrix = np.asarray(matrix)
        except (TypeError, ValueError):
            raise InvalidInputError(f"{name} is not a numeric matrix") from None
        if matrix.dtype not in (np.float32, np.float64):
            if not (np.issubdtype(matrix.dtype, np.integer) or matrix.dtype == np.bool_):
                raise InvalidInputError(f"{name} has dtype {matrix.dtype}; expected float32, float64 or integers")
            matrix = matrix.astype(np.float64)
        values = matrix
    if matrix.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-dimensional, got shape {matrix.shape}")
    if 0 in matrix.shape:
        raise InvalidInputError(f"{name} is empty (shape {matrix.shape})")
    if not np.all(np.isfinite(values)):
        raise InvalidInputError(f"{name} contains NaN or infinity")
    return matrix


def decoder_from_encoder(encoder: np.ndarray) -> np.ndarray:
    """L = T_n·R⁻¹ in float64 (R square and invertible), by an LU solve (LAPACK gesv, partial
    pivoting) of Rᵀ·Lᵀ = T_nᵀ. A float approximation: what is proven about L is proven from R.

    The same encoder (by its bytes) is solved once per process, and once per machine: the result
    is kept in the per-machine cache (``cache.py``) under the encoder's sha256 and the linear
    algebra it was computed with (NumPy's version, the BLAS library, its version and its number of
    threads, on which the last bits of a solve depend), so a later process reads exactly the
    solve it would compute (a fifth of a second at k = 1 024)."""
    encoder = np.asarray(encoder, dtype=np.float64)
    n = encoder.shape[1]
    if encoder.shape[0] != n:
        raise InvalidInputError(f"the decoder can only be recomputed for a square encoder, got shape {encoder.shape}")
    if not np.all(np.isfinite(encoder)):
        raise InvalidInputError("the encoder holds NaN or infinity")
    tag = (encoder.shape, array_sha256(encoder))
    cached = _SOLVED.get(tag)
    if cached is not None:
        _SOLVED.move_to_end(tag)
        return cached.copy()
    name = f"solve-{_SOLVE_FORMAT}-{_arithmetic()}-{n}-{tag[1]}.npy"
    stored = read_array(name)  # Lᵀ as the solve gives it, so that L has the solve's memory layout too
    decoder = None if stored is None else stored.T  # (float sums over L depend on its layout)
    if decoder is None or decoder.shape != (n, n) or decoder.dtype != np.float64 or not np.all(np.isfinite(decoder)):
        try:
            decoder = np.linalg.solve(encoder.T, np.tri(n).T).T
        except np.linalg.LinAlgError:
            raise InvalidInputError("the encoder is singular: L = T_n·R⁻¹ does not exist") from None
        if not np.all(np.isfinite(decoder)):
            raise InvalidInputError("the encoder is singular: L = T_n·R⁻¹ does not exist")
        if n >= _CACHED_SIZE:
            write_array(name, decoder.T)
    _SOLVED[tag] = decoder.copy()
    while len(_SOLVED) > _SOLVED_SIZE:
        _SOLVED.popitem(last=False)
    return decoder


_SOLVED: OrderedDict[tuple, np.ndarray] = OrderedDict()
_SOLVED_SIZE = 6
_SOLVE_FORMAT = "v2"  # v2: the entry holds Lᵀ
_CACHED_SIZE = 256  # smaller solves take milliseconds: not worth a file


def _arithmetic() -> str:
    """A digest of what a float solve or product here depends on besides its operands: NumPy's
    version and each BLAS library loaded (its API, version and number of threads, read now, so
    that ``threadpool_limits`` counts)."""
    from threadpoolctl import threadpool_info

    pools = sorted(
        f"{pool.get('internal_api')}:{pool.get('version')}:{pool.get('num_threads')}"
        for pool in threadpool_info()
        if pool.get("user_api") == "blas"
    )
    return hashlib.sha256(f"{np.__version__}|{'|'.join(pools)}".encode()).hexdigest()[:16]


@dataclass
class Factorization:
    """T_n ≈ decoder·encoder with a metadata record (see the module docstring)."""

    decoder: Any
    encoder: Any
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.encoder = _as_matrix(self.encoder, name="encoder")
        self.decoder = _as_matrix(self.decoder, name="decoder")
        n, inner = self.decoder.shape
        if self.encoder.shape != (inner, n):
            raise InvalidInputError(
                f"shapes do not fit T_n = L·R: decoder is {self.decoder.shape}, encoder is {self.encoder.shape}, "
                f"expected encoder shape ({inner}, {n})"
            )
        metric = self.metadata.get("metric")
        if metric is not None and metric not in METRICS:
            raise InvalidInputError(f"unknown metric {metric!r}; expected one of {METRICS}")

    @classmethod
    def from_encoder(cls, encoder: Any, *, metadata: dict | None = None) -> Factorization:
        """The factorization (T_n·R⁻¹, R) of a square invertible encoder R."""
        encoder = _as_matrix(encoder, name="encoder")
        return cls(decoder=decoder_from_encoder(encoder), encoder=encoder, metadata=dict(metadata or {}))

    @property
    def n(self) -> int:
        return int(self.decoder.shape[0])

    @property
    def inner_size(self) -> int:
        return int(self.decoder.shape[1])

    @property
    def metric(self) -> str | None:
        return self.metadata.get("metric")

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """(L, R) as dense float64 arrays."""

        def densify(matrix):
            return matrix.toarray() if issparse(matrix) else np.asarray(matrix, dtype=np.float64)

        return densify(self.decoder), densify(self.encoder)

    def residual(self) -> float:
        """‖L·R − T_n‖_max in float64. For dense matrices of size at least 256 the value is kept in
        the per-machine cache (``cache.py``) under the sha256 of both matrices' bytes and the
        linear algebra it was computed with (as ``decoder_from_encoder``)."""
        dense = isinstance(self.decoder, np.ndarray) and isinstance(self.encoder, np.ndarray) and self.n >= _CACHED_SIZE
        if dense:
            text = f"{self.decoder.shape}:{self.decoder.dtype}:{array_sha256(self.decoder)}:{self.encoder.dtype}:{array_sha256(self.encoder)}"
            name = f"residual-{_SOLVE_FORMAT}-{_arithmetic()}-{hashlib.sha256(text.encode()).hexdigest()}.json"
            record = read_entry(name)
            if record is not None and record.get("of") == text:
                try:
                    return float.fromhex(record["residual"])
                except (KeyError, TypeError, ValueError):
                    pass
        product = self.decoder @ self.encoder
        if issparse(product):
            product = product.toarray()
        residual = float(np.max(np.abs(np.asarray(product, dtype=np.float64) - np.tri(self.n))))
        if dense:
            write_entry(name, {"of": text, "residual": residual.hex()})
        return residual

    def validate(self, *, tolerance: float = DEFAULT_TOLERANCE) -> float:
        """Check that L·R = T_n within ``tolerance`` (max-entry); return the residual."""
        residual = self.residual()
        if not residual <= tolerance:
            raise NotAFactorizationError(
                f"L·R is not T_{self.n}: max |L·R − T_n| = {residual:.3g} exceeds the tolerance {tolerance:g}"
            )
        return residual

    def costs(self, *, epsilon: float = UNIT_EPSILON) -> FactorizationCosts:
        """Float64 costs (c₂, c_F, MaxSE, MeanSE, leading constants) at ``epsilon``."""
        return factorization_costs(decoder=self.decoder, encoder=self.encoder, epsilon=epsilon)

    # ------------------------------------------------------------------ files

    def save(self, path: str | os.PathLike, *, store_decoder: bool = True) -> Path:
        """Write the ``.npz`` file atomically; ``store_decoder=False`` keeps only R (square R)."""
        path = Path(path)
        if not path.parent.exists():
            raise FactorizationFileError(f"cannot write {path}: folder {path.parent} does not exist")
        decoder, encoder = self.decoder, self.encoder
        if issparse(decoder) or issparse(encoder):
            decoder, encoder = self.dense()
        arrays = {"encoder": np.ascontiguousarray(encoder)}
        if store_decoder:
            arrays["decoder"] = np.ascontiguousarray(decoder)
        elif encoder.shape[0] != encoder.shape[1]:
            raise InvalidInputError("store_decoder=False needs a square encoder (L is recomputed as T_n·R⁻¹)")
        metadata = dict(self.metadata)
        metadata.update(
            format=FORMAT,
            n=self.n,
            inner_size=self.inner_size,
            metric=self.metric,
            dtype=str(arrays["encoder"].dtype),
            library_version=metadata.get("library_version", pure_dp_mf.__version__),
            arrays={
                name: {"shape": list(array.shape), "dtype": str(array.dtype), "sha256": array_sha256(array)}
                for name, array in arrays.items()
            },
        )
        buffer = io.BytesIO()
        arrays["metadata"] = np.frombuffer(json.dumps(metadata, sort_keys=True).encode(), dtype=np.uint8)
        np.savez_compressed(buffer, allow_pickle=False, **arrays)
        atomic_write_bytes(path, buffer.getvalue())
        self.metadata = metadata
        return path

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        array: str | None = None,
        decoder: str | os.PathLike | None = None,
        decoder_array: str | None = None,
        integer_grid_bits: int | None = None,
    ) -> Factorization:
        """Read a factorization: this library's file format, or matrices as published.

        A ``pure_dp_mf`` factorization file (``.npz`` with a ``metadata`` record) is read and
        checked in full; every mismatch is a ``FactorizationFileError``. Any other file is read
        as a published encoder R (``matrix_files.read_matrix``: bare ``.npy``, an ``.npz`` array
        chosen by ``array``, text or CSV), with L = T_k·R⁻¹ for a square R, or with the published
        decoder L̃ read from ``decoder`` (then the factorization is (L̃, R) as published, and
        certify bounds L = T_k·R⁻¹ through L̃). The metadata records where every matrix came from
        (``source``: file name, SHA-256 of the file as given, array name, dtype, shape).

        Raises:
            FactorizationFileError: a damaged file of this library's format.
            InvalidInputError: an unreadable or unsuitable published matrix (one clear line each).
        """
        path = Path(path)
        if not path.exists():
            raise FactorizationFileError(f"{path}: no such file")
        if not path.is_file():
            raise FactorizationFileError(f"{path}: not a file")
        if path.suffix.lower() == ".npz" and not zipfile.is_zipfile(path):
            raise FactorizationFileError(f"{path}: not an .npz file (not a zip archive)")
        if not _is_library_file(path):
            return cls._from_published(
                path, array=array, decoder=decoder, decoder_array=decoder_array, integer_grid_bits=integer_grid_bits
            )
        if array is not None or decoder is not None or decoder_array is not None or integer_grid_bits is not None:
            raise InvalidInputError(
                f"{path} is a pure_dp_mf factorization file; --array, --decoder and --integer-grid-bits apply to published matrices"
            )
        _check_declared_members(path)  # every member's shape and dtype, from its header, before any is read
        try:
            with np.load(path, allow_pickle=False) as archive:
                contents = {name: archive[name] for name in archive.files}
        except Exception as error:  # corrupt members surface as many exception types
            raise FactorizationFileError(f"{path}: unreadable .npz file ({type(error).__name__}: {error})") from None
        for required in ("encoder", "metadata"):
            if required not in contents:
                raise FactorizationFileError(f"{path}: missing array {required!r} (found {sorted(contents)})")
        try:
            text = contents.pop("metadata").astype(np.uint8).tobytes().decode("utf-8")
            metadata = parse_json(text, what="metadata")
        except UnicodeDecodeError as error:
            raise FactorizationFileError(f"{path}: metadata is not valid JSON ({error})") from None
        except InvalidInputError as error:
            raise FactorizationFileError(f"{path}: metadata is not valid JSON ({error})") from None
        if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
            raise FactorizationFileError(f"{path}: metadata does not declare format {FORMAT!r}")
        records = metadata.get("arrays")
        if not isinstance(records, dict) or "encoder" not in records:
            raise FactorizationFileError(f"{path}: metadata has no array records")
        for name, record in records.items():
            if name not in contents:
                raise FactorizationFileError(f"{path}: metadata records array {name!r} but the file lacks it")
            stored = contents[name]
            if not isinstance(record, dict) or list(stored.shape) != record.get("shape"):
                raise FactorizationFileError(
                    f"{path}: array {name!r} has shape {list(stored.shape)}, metadata says {record.get('shape') if isinstance(record, dict) else record}"
                )
            if str(stored.dtype) != record.get("dtype"):
                raise FactorizationFileError(
                    f"{path}: array {name!r} has dtype {stored.dtype}, metadata says {record.get('dtype')}"
                )
            if array_sha256(stored) != record.get("sha256"):
                raise FactorizationFileError(f"{path}: array {name!r} does not match its recorded sha256")
        for name in contents:
            if name not in records:
                raise FactorizationFileError(f"{path}: array {name!r} is not recorded in the metadata")
        encoder = contents["encoder"]
        try:
            if "decoder" in contents:
                factorization = cls(decoder=contents["decoder"], encoder=encoder, metadata=metadata)
            else:
                factorization = cls.from_encoder(encoder, metadata=metadata)
        except InvalidInputError as error:
            raise FactorizationFileError(f"{path}: {error}") from None
        if factorization.n != metadata.get("n") or factorization.inner_size != metadata.get("inner_size"):
            raise FactorizationFileError(
                f"{path}: arrays give n={factorization.n}, inner size={factorization.inner_size}; "
                f"metadata says n={metadata.get('n')}, inner size={metadata.get('inner_size')}"
            )
        return factorization

    @classmethod
    def _from_published(
        cls,
        path: Path,
        *,
        array: str | None,
        decoder: str | os.PathLike | None,
        decoder_array: str | None,
        integer_grid_bits: int | None,
    ) -> Factorization:
        encoder = read_matrix(path, array=array, integer_grid_bits=integer_grid_bits, what="encoder")
        R = encoder.values
        source: dict = {"encoder": encoder.source}
        if decoder is None:
            if decoder_array is not None:
                raise InvalidInputError("--decoder-array names an array of the --decoder file; give --decoder too")
            if R.shape[0] != R.shape[1]:
                raise InvalidInputError(
                    f"{path}: an encoder alone must be square (L = T_k·R⁻¹), got shape {R.shape}; give the decoder with --decoder"
                )
            if R.shape[0] < 2:
                raise InvalidInputError(f"{path}: the encoder is 1×1; a base factorization needs k ≥ 2")
            try:
                with np.errstate(all="ignore"):
                    factorization = cls.from_encoder(R, metadata={"source": source})
            except (np.linalg.LinAlgError, ValueError) as error:
                raise InvalidInputError(f"{path}: the encoder is singular ({error})") from None
        else:
            published = read_matrix(decoder, array=decoder_array, integer_grid_bits=integer_grid_bits, what="decoder")
            source["decoder"] = published.source
            try:
                factorization = cls(decoder=published.values, encoder=R, metadata={"source": source})
            except InvalidInputError as error:
                raise InvalidInputError(f"{path} with decoder {decoder}: {error}") from None
        if not np.all(np.isfinite(factorization.dense()[0])):
            raise InvalidInputError(f"{path}: the encoder is singular (T_k·R⁻¹ is not finite)")
        return factorization


MAX_METADATA_BYTES = 1 << 24
"""Largest metadata record of a factorization file (16 MiB of JSON)."""
MAX_MEMBERS = 16
"""Most arrays in a factorization file of this library's format (it writes 2 or 3)."""


def _check_declared_members(path: Path) -> None:
    """Refuse a factorization file whose members declare (in their ``.npy`` headers) too many
    entries, a dtype that is not numeric, or a metadata record above ``MAX_METADATA_BYTES``,
    before any member is read (``matrix_files.declared_npz``)."""
    try:
        names = sorted({name.removesuffix(".npy") for name in npz_members(path)})
        if len(names) > MAX_MEMBERS:
            raise InvalidInputError(f"{path}: {len(names)} arrays; a factorization file holds at most {MAX_MEMBERS}")
        declared = declared_npz(path, names)
    except InvalidInputError as error:
        raise FactorizationFileError(str(error)) from None
    total = sum(math.prod(shape) for name, (shape, _) in declared.items() if name != "metadata")
    if total > 2 * MAX_ENTRIES:
        raise FactorizationFileError(f"{path}: its arrays hold {total} entries, above the limit of {2 * MAX_ENTRIES}")
    if "metadata" in declared:
        shape, dtype = declared["metadata"]
        if math.prod(shape) * dtype.itemsize > MAX_METADATA_BYTES:
            raise FactorizationFileError(f"{path}: the metadata record is larger than the limit of {MAX_METADATA_BYTES} bytes")


def _is_library_file(path: Path) -> bool:
    """True for a zip archive with a ``metadata`` member: this library's format (checked in full by
    ``load``); published .npz archives hold other names."""
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return "metadata.npy" in archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return True  # let the library loader name the damage
