"""Plan profiles: what the planner needs of each certified base, read without loading a matrix.

The lift plan of a base (``mechanisms.lift.LiftedFamily``) depends on two sequences only: the
squared row norms ρ(t) = ‖A_t‖² of its decoder (floats: they rank mechanisms and predict errors,
they prove nothing) and the exact column ℓ1 norms γ(j) = ‖B_{:,j}‖₁ of its encoder (integers on
the grid 2^-g: they give the exact sensitivity of every truncated lift). ``profiles.json``, in the
folder of the bases, holds both for every certified base, with the sha256 of the base file and of
its certificate, so that the planner ranks every shipped base in milliseconds. Once a base is
chosen, the counter loads it, checks its sha256 and its certificate's sensitivity claim, and
computes everything the privacy rests on from the matrix itself (``mechanisms.mechanism``).

``write_profiles`` rebuilds the file from the certificates and their bases (run after
certifying a new base: ``python -m pure_dp_mf.certificates.profiles``); a test checks that the
shipped file equals a fresh build.
"""

from __future__ import annotations

import hashlib
import json
import os
from fractions import Fraction
from pathlib import Path

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import parse_json

FORMAT = "pure_dp_mf.profiles/1"
FILE_NAME = "profiles.json"


def profile_of(certificate: Path, *, folder: Path) -> dict:
    """The profile of the base that ``certificate`` certifies (loads the base: a build step);
    paths relative to ``folder``, the profile file's folder."""
    from pure_dp_mf.certificates.certify import Certificate
    from pure_dp_mf.factorizations.costs import column_abs_sums_exact, row_norms_squared
    from pure_dp_mf.factorizations.factorization import Factorization

    record = Certificate.read(certificate)
    base = Factorization.load(record.factorization_path)
    decoder, encoder = base.dense()
    grid = 1 << record.grid_bits
    columns = column_abs_sums_exact(encoder)
    if any((value * grid).denominator != 1 for value in columns):
        raise InvalidInputError(f"{record.factorization_path}: the encoder is not on the grid 2^-{record.grid_bits}")
    return {
        "certificate": os.path.relpath(certificate, folder),
        "certificate_sha256": _sha256(certificate),
        "base": os.path.relpath(record.factorization_path, folder),
        "base_sha256": record.factorization_sha256,
        "base_size": int(decoder.shape[0]),
        "inner_size": int(decoder.shape[1]),
        "metric": record.metric,
        "grid_bits": record.grid_bits,
        "row_norms_squared": [float(v) for v in row_norms_squared(decoder)],
        "column_sums": [int(value * grid) for value in columns],
    }


def write_profiles(*, certificates: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Rebuild ``folder/profiles.json`` from every certificate ``k*_*.json`` in ``certificates``."""
    from pure_dp_mf.atomic import atomic_write_text

    certificates, folder = Path(certificates), Path(folder)
    bases = {path.stem: profile_of(path, folder=folder) for path in sorted(certificates.glob("k*_*.json"))}
    target = folder / FILE_NAME
    atomic_write_text(target, json.dumps({"format": FORMAT, "bases": bases}, sort_keys=True) + "\n")
    target.chmod(0o644)  # shipped data, readable by all
    return target


def read_profiles(folder: str | os.PathLike) -> dict[str, dict]:
    """The profiles of ``folder`` ({name: profile}), each with its ``column_sums`` as exact
    Fractions and ``certificate``/``base`` as absolute paths; {} when the folder has no profile file."""
    folder = Path(folder)
    path = folder / FILE_NAME
    if not path.is_file():
        return {}
    try:
        document = parse_json(path.read_bytes(), what=str(path))
    except OSError as error:
        raise InvalidInputError(f"{path}: unreadable plan profiles ({error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidInputError(f"{path}: not a plan profile file (format {FORMAT!r} expected)")
    profiles = {}
    for name, profile in document["bases"].items():
        grid = 1 << int(profile["grid_bits"])
        profiles[name] = {
            **profile,
            "certificate": (folder / profile["certificate"]).resolve(),
            "base": (folder / profile["base"]).resolve(),
            "column_sums": [Fraction(int(value), grid) for value in profile["column_sums"]],
        }
    return profiles


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


if __name__ == "__main__":
    from pure_dp_mf import resources

    print(write_profiles(certificates=resources.CERTIFICATE_FOLDER, folder=resources.BASE_FOLDER))
