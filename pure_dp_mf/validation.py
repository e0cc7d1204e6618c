"""Argument checks shared by every module, each raising ``InvalidInputError`` with a clear message."""

from __future__ import annotations

import numbers

import numpy as np

from pure_dp_mf.errors import InvalidInputError


def check_size(value: object, *, name: str, minimum: int = 1, maximum: int | None = None) -> int:
    """Return ``value`` as an int, refusing non-integers and values outside [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InvalidInputError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum:
        raise InvalidInputError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{name} must be at most {maximum}, got {value}")
    return value


def check_positive(value: object, *, name: str) -> float:
    """Return ``value`` as a float, refusing NaN, infinities and values ≤ 0."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a positive number, got {value!r}") from None
    if not np.isfinite(number) or number <= 0:
        raise InvalidInputError(f"{name} must be a positive finite number, got {value!r}")
    return number


def check_epsilon(value: object, *, name: str = "epsilon") -> float:
    """A privacy parameter ε: positive, finite, and with 1/ε² finite (errors scale as 1/ε²)."""
    epsilon = check_positive(value, name=name)
    square = epsilon * epsilon  # a float product: inf or 0 on overflow or underflow, never an exception
    if square == 0 or not np.isfinite(square) or not np.isfinite(1 / square) or 1 / square == 0:
        direction = "overflow" if epsilon < 1 else "underflow to 0"
        raise InvalidInputError(
            f"{name} = {value!r} is out of range: the errors, which scale as 1/{name}², {direction} in float64"
        )
    return epsilon


def check_matrix(matrix: object, *, name: str, rows: int | None = None, columns: int | None = None) -> np.ndarray:
    """Return ``matrix`` as a finite float64 2-D array, naming the first problem found."""
    try:
        array = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a numeric matrix") from None
    if array.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-dimensional, got shape {array.shape}")
    if rows is not None and array.shape[0] != rows:
        raise InvalidInputError(f"{name} must have {rows} rows, got shape {array.shape}")
    if columns is not None and array.shape[1] != columns:
        raise InvalidInputError(f"{name} must have {columns} columns, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise InvalidInputError(f"{name} contains NaN or infinity (first at index {bad})")
    return array
