"""``pure-dp-mf certify FILE --out CERT.json`` and ``pure-dp-mf verify CERT.json``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from pure_dp_mf.certificates.certify import DEFAULT_GRID_BITS, certify_factorization, verify_certificate
from pure_dp_mf.cli.app import (
    ARRAY_OPTION,
    DECODER_ARRAY_OPTION,
    DECODER_OPTION,
    INTEGER_GRID_OPTION,
    app,
    console,
    print_json,
    print_table,
)
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_size

DEFAULT_MAX_BASE_SIZE = 256  # sympy_verify.DEFAULT_MAX_BASE_SIZE, without importing sympy for every command
ROW_BLOCK_OPTION = typer.Option(
    None,
    "--row-block",
    help="form the exact integer products this many rows at a time (default: all at once): the same result in less "
    "memory, see docs/certificates.md",
)


@app.command("certify")
def certify_command(
    file: Path = typer.Argument(
        ..., help="factorization file (.npz) with a square encoder, or a published encoder R (.npy, .npz, text, CSV)"
    ),
    out: Path = typer.Option(..., "--out", help="certificate to write (JSON)"),
    grid_bits: int = typer.Option(DEFAULT_GRID_BITS, "--grid-bits", help="round the encoder to the grid 2^-G"),
    metric: str | None = typer.Option(None, "--metric", help="maxse or meanse (default: the file's)"),
    rounded_out: Path | None = typer.Option(
        None, "--rounded-out", help="where to write the rounded factorization if FILE is off the grid (default: FILE_gridG.npz)"
    ),
    array: str | None = ARRAY_OPTION,
    decoder: Path | None = DECODER_OPTION,
    decoder_array: str | None = DECODER_ARRAY_OPTION,
    integer_grid_bits: int | None = INTEGER_GRID_OPTION,
    row_block: int | None = ROW_BLOCK_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print the certificate as JSON instead of a table"),
) -> None:
    """Prove upper bounds on ‖R‖₁→₁, ‖L‖ (L = T_k·R⁻¹), c₂ or c_F and the leading constants, exactly."""
    if row_block is not None:
        row_block = check_size(row_block, name="--row-block", minimum=1)
    with console.status("certifying") as status:
        certificate = certify_factorization(
            path=file,
            grid_bits=grid_bits,
            metric=metric,
            out=out,
            rounded_out=rounded_out,
            progress=status.update,
            array=array,
            decoder=decoder,
            decoder_array=decoder_array,
            integer_grid_bits=integer_grid_bits,
            row_block=row_block,
        )
    if as_json:
        print_json(json.loads(certificate.to_json(folder=out.resolve().parent)))
        return
    print_table(*certificate.to_table())
    if certificate.rounded_from is not None:
        rounding = certificate.rounded_from
        console.print(
            f"rounded {rounding['file']} to the grid 2^-{rounding['grid_bits']}: {rounding.get('entries_moved', '?')} entries moved, "
            f"the largest by {rounding.get('largest_change', float('nan')):.3g}"
        )
    console.print(f"certified file: {certificate.factorization_path} (sha256 {certificate.factorization_sha256[:16]}…)")
    console.print(f"certificate written to {out} in {certificate.timings['total_s']:.2f} s; re-check: {certificate.command}")


ENGINES = ("flint", "sympy")


@app.command("verify")
def verify_command(
    certificate: Path = typer.Argument(..., help="certificate file (JSON)"),
    engine: str = typer.Option(
        "flint",
        "--engine",
        help="flint (the verifier of certify.py, every k in seconds) or sympy (an independent route: L = T_k·R⁻¹ "
        "exactly in sympy, O(k³), k up to --max-base-size)",
    ),
    max_base_size: int = typer.Option(
        DEFAULT_MAX_BASE_SIZE, "--max-base-size", help="largest k the sympy engine verifies (about 4 minutes at 256)"
    ),
    row_block: int | None = ROW_BLOCK_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Re-prove every claim of a certificate from its factorization file; exit 0 only if all hold."""
    if engine not in ENGINES:
        raise InvalidInputError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    max_base_size = check_size(max_base_size, name="--max-base-size", minimum=2)
    if row_block is not None:
        row_block = check_size(row_block, name="--row-block", minimum=1)
        if engine == "sympy":
            raise InvalidInputError("--row-block applies to the flint engine only")
    with console.status("verifying") as status:
        if engine == "sympy":
            from pure_dp_mf.certificates.sympy_verify import verify_with_sympy  # imports sympy: only for this engine

            result = verify_with_sympy(path=certificate, max_base_size=max_base_size, progress=status.update)
        else:
            result = verify_certificate(path=certificate, progress=status.update, row_block=row_block)
    if as_json:
        print_json(result.as_dict())
        return
    print_table(*result.to_table())
    console.print(f"OK: every claim of {certificate} holds for {result.factorization_path}")


@app.command("check-claims")
def check_claims_command(
    claims: Path = typer.Argument(
        ..., help="claims file (JSON): the matrices and the published bounds, see docs/certificates.md"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the verdicts as JSON"),
) -> None:
    """Check published claims "quantity ≤ c" exactly: holds, fails (proven false) or undecided; exit 0 only if all hold."""
    from pure_dp_mf.certificates.claims import check_claims

    with console.status("proving bounds"):
        report = check_claims(path=claims)
    if as_json:
        print_json(report.as_dict())
    else:
        rows = [
            (v["quantity"], v["claim"], v["verdict"], v["proven_lower"], v["proven_upper"], v["slack"])
            for v in report.as_dict()["claims"]
        ]
        title = f"claims about {report.encoder.get('file')}" + (
            f" with decoder {report.decoder['file']}" if report.decoder else ""
        )
        print_table(title, ["quantity", "claim", "verdict", "proven lower", "proven upper", "slack"], rows)
        failed = [v.quantity for v in report.verdicts if v.verdict != "holds"]
        console.print("every claim holds" if not failed else f"not proven to hold: {', '.join(failed)}")
    if not report.all_hold:
        raise typer.Exit(1)
