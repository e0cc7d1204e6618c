"""``pure-dp-mf info FILE``: sizes, residual and every cost of a factorization file."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import typer

from pure_dp_mf.cli.app import (
    ARRAY_OPTION,
    DECODER_ARRAY_OPTION,
    DECODER_OPTION,
    INTEGER_GRID_OPTION,
    app,
    print_json,
    print_table,
)
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization


@app.command()
def info(
    file: Path = typer.Argument(..., help="factorization file (.npz), or a published encoder (.npy, .npz, text, CSV)"),
    epsilon: float = typer.Option(1.0, "--epsilon", help="privacy budget ε for MaxSE / MeanSE"),
    array: str | None = ARRAY_OPTION,
    decoder: Path | None = DECODER_OPTION,
    decoder_array: str | None = DECODER_ARRAY_OPTION,
    integer_grid_bits: int | None = INTEGER_GRID_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Print size, inner size, metric, residual, norms, c₂, c_F, MaxSE, MeanSE and leading constants."""
    factorization = Factorization.load(
        file, array=array, decoder=decoder, decoder_array=decoder_array, integer_grid_bits=integer_grid_bits
    )
    residual = factorization.validate()
    record = {"file": str(file), "metric": factorization.metric, "residual": residual}
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused just below, by name
        record.update(factorization.costs(epsilon=epsilon).as_dict())
    overflowed = [name for name, value in record.items() if isinstance(value, float) and not math.isfinite(value)]
    if overflowed:  # an inf is no cost: the decoder of a near-singular encoder leaves float64
        raise InvalidInputError(
            f"{file}: {', '.join(overflowed)} overflow float64 (the decoder of this encoder is too large: is it near singular?)"
        )
    if as_json:
        print_json(record)
        return
    labels = {
        "n": "size n",
        "inner_size": "inner size",
        "metric": "metric",
        "residual": "max |L·R − T_n|",
        "decoder_max_row_norm": "‖L‖₂→∞",
        "encoder_max_column_sum": "‖R‖₁→₁",
        "decoder_frobenius_norm": "‖L‖_F",
        "c2": "c₂",
        "cf": "c_F",
        "epsilon": "ε",
        "max_se": "MaxSE",
        "mean_se": "MeanSE",
        "max_se_constant": "MaxSE·ε²/log₂(n)³",
        "mean_se_constant": "MeanSE·ε²/log₂(n)³",
    }
    print_table(str(file), ["quantity", "value"], [(label, record[key]) for key, label in labels.items()])
