"""``pure-dp-mf certify FILE --out CERT.json`` and ``pure-dp-mf verify CERT.json``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from pure_dp_mf.certify import DEFAULT_GRID_BITS, certify_factorization, verify_certificate
from pure_dp_mf.cli.app import app, console, print_json, print_table


@app.command("certify")
def certify_command(
    file: Path = typer.Argument(..., help="factorization file (.npz) with a square encoder"),
    out: Path = typer.Option(..., "--out", help="certificate to write (JSON)"),
    grid_bits: int = typer.Option(DEFAULT_GRID_BITS, "--grid-bits", help="round the encoder to the grid 2^-G"),
    metric: str | None = typer.Option(None, "--metric", help="maxse or meanse (default: the file's)"),
    rounded_out: Path | None = typer.Option(
        None, "--rounded-out", help="where to write the rounded factorization if FILE is off the grid (default: FILE_gridG.npz)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the certificate as JSON instead of a table"),
) -> None:
    """Prove upper bounds on ‖R‖₁→₁, ‖L‖ (L = T_k·R⁻¹), c₂ or c_F and the leading constants, exactly."""
    with console.status("certifying") as status:
        certificate = certify_factorization(
            path=file, grid_bits=grid_bits, metric=metric, out=out, rounded_out=rounded_out, progress=status.update
        )
    if as_json:
        print_json(json.loads(certificate.to_json(folder=out.resolve().parent)))
        return
    print_table(*certificate.to_table())
    console.print(f"certified file: {certificate.factorization_path} (sha256 {certificate.factorization_sha256[:16]}…)")
    console.print(f"certificate written to {out} in {certificate.timings['total_s']:.2f} s; re-check: {certificate.command}")


@app.command("verify")
def verify_command(
    certificate: Path = typer.Argument(..., help="certificate file (JSON)"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Re-prove every claim of a certificate from its factorization file; exit 0 only if all hold."""
    with console.status("verifying") as status:
        result = verify_certificate(path=certificate, progress=status.update)
    if as_json:
        print_json(result.as_dict())
        return
    print_table(*result.to_table())
    console.print(f"OK: every claim of {certificate} holds for {result.factorization_path}")
