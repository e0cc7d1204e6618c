"""Sensitivity of an encoder C under (k,b)-participation, and the errors of A = B·C (Choquette-Choo et al., §2).

For an encoder C (columns = steps) and a pattern π, a neighbouring dataset changes the input
rows in π by vectors g_i with ‖g_i‖₂ ≤ 1 (ζ = 1), so the sensitivity is

    sens(C)² = max_{π ∈ Π} max_{‖g_i‖ ≤ 1} ‖C_{[:,π]} G‖_F² = max_π max_G tr(Gᵀ X[π,π] G),  X = CᵀC.

Three ways to compute it, all returned squared (the loss is ‖B‖_F²·sens²):

* ``"nonnegative"`` (Theorem 2.1 / Eq. 3): when X[π,π] ≥ 0 entrywise for every π,
  sens² = max_π 1ᵀX[π,π]1, exactly, for scalar and vector contributions alike; O(b·k²).
  Only the entries of Π̂ (pairs sharing a pattern) matter (remark after H.3). Rounding can
  leave entries like −1e−17 where the exact value is 0; with τ = max(0, −min_{Π̂} X) we return
  max_π 1ᵀX[π,π]1 + τ·k², which is an upper bound because X + τ·Σ_π 1_π1_πᵀ ⪰ X is
  nonnegative on Π̂. Larger negative entries (τ > 1e−9·max|X|) are refused.
* ``"exact"``: for scalar contributions (d = 1) the maximum is over sign vectors,
  sens² = max_π max_{u ∈ {±1}^k} uᵀX[π,π]u, enumerated (2^(k−1) vectors per pattern; refused
  beyond ``MAX_SIGN_VECTORS`` in total). For vector contributions this equals the true value
  when X[π,π] ≥ 0 (Theorem H.1) and may be smaller otherwise (counterexample H.2).
* ``"upper-bound"``: sens² ≤ max_π k·λ_max(X[π,π]), valid for any C and any dimension
  (tr(GᵀMG) ≤ λ_max(M)·‖G‖_F² ≤ k·λ_max(M)); O(b·k³).

Single participation (k = 1) reduces every method to the largest squared column norm of C.
"""

from __future__ import annotations

import itertools
from typing import Literal

import numpy as np
import scipy.linalg

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.participation import MinSeparation, Participation, best_separated_sums
from pure_dp_mf.validation import check_matrix

Method = Literal["nonnegative", "exact", "upper-bound"]
METHODS = ("nonnegative", "exact", "upper-bound")
MAX_SIGN_VECTORS = 1 << 22
NEGATIVE_TOLERANCE = 1e-9


def gram(encoder: object) -> np.ndarray:
    """X = CᵀC in float64 for a finite matrix C."""
    C = check_matrix(encoder, name="encoder")
    return C.T @ C


def sign_vectors(k: int) -> np.ndarray:
    """All u ∈ {±1}^k with u₁ = +1 (uᵀXu is invariant under u → −u), shape (2^(k−1), k)."""
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=k - 1)), dtype=np.float64).reshape(1 << (k - 1), k - 1)
    return np.hstack([np.ones((signs.shape[0], 1)), signs])


def _check_gram(X: np.ndarray, schema: Participation) -> None:
    if X.shape != (schema.steps, schema.steps):
        raise InvalidInputError(f"the encoder has {X.shape[0]} columns but the participation schema has n = {schema.steps}")


def gram_sensitivity_squared(*, gram: np.ndarray, schema: Participation, method: Method = "nonnegative") -> float:
    """sens(C)² from X = CᵀC under ``schema`` by ``method`` (see the module docstring)."""
    X = np.asarray(gram, dtype=np.float64)
    _check_gram(X, schema)
    P, k = schema.patterns, schema.max_participations
    blocks = X[P[:, :, None], P[:, None, :]]  # (patterns, k, k)
    if method == "nonnegative":
        scale = float(np.max(np.abs(X))) if X.size else 0.0
        tau = max(0.0, -float(np.min(X[schema.pair_mask])))
        if tau > NEGATIVE_TOLERANCE * scale:
            i, j = np.argwhere(schema.pair_mask & (X == -tau))[0]
            raise InvalidInputError(
                f"X = CᵀC has a negative entry X[{i},{j}] = {-tau:.3g} within a participation pattern; "
                "the nonnegative formula does not apply (use method 'exact' or 'upper-bound')"
            )
        return float(np.max(blocks.sum(axis=(1, 2)))) + tau * k * k
    if method == "exact":
        count = P.shape[0] << (k - 1)
        if count > MAX_SIGN_VECTORS:
            raise InvalidInputError(
                f"exact sensitivity needs {P.shape[0]}·2^{k - 1} = {count} sign vectors, more than the limit "
                f"{MAX_SIGN_VECTORS}; use method 'upper-bound' (or 'nonnegative' when CᵀC ≥ 0)"
            )
        U = sign_vectors(k)
        best = 0.0
        for block in blocks:
            best = max(best, float(np.max(np.einsum("sk,kl,sl->s", U, block, U))))
        return best
    if method == "upper-bound":
        return float(k * max(scipy.linalg.eigvalsh(block)[-1] for block in blocks))
    raise InvalidInputError(f"unknown sensitivity method {method!r}; expected one of {METHODS}")


def sensitivity_squared(*, encoder: object, max_participations: int, min_sep: int, method: Method = "nonnegative") -> float:
    """sens(C)² under (k,b)-participation with n = number of columns of C (Choquette-Choo et al., §2).

    Guarantee: ``"nonnegative"`` and ``"upper-bound"`` return an upper bound on the squared
    sensitivity for vector contributions of any dimension (equal to it, up to rounding, for
    ``"nonnegative"``); ``"exact"`` returns the squared sensitivity for scalar contributions.
    """
    X = gram(encoder)
    schema = Participation(max_participations=max_participations, min_sep=min_sep, n=X.shape[0])
    return gram_sensitivity_squared(gram=X, schema=schema, method=method)


def single_participation_sensitivity_squared(*, encoder: object) -> float:
    """sens(C)² under single participation: the largest squared column norm of C."""
    C = check_matrix(encoder, name="encoder")
    return float(np.max(np.sum(C * C, axis=0)))


def optimal_decoder(*, workload: object, encoder: object) -> np.ndarray:
    """B = A·C⁺, the decoder of least Frobenius norm with B·C = A (C of full column rank).

    For square invertible C this is A·C⁻¹.
    """
    C = check_matrix(encoder, name="encoder")
    A = check_matrix(workload, name="workload", columns=C.shape[1])
    if C.shape[0] == C.shape[1]:
        try:
            lu = scipy.linalg.lu_factor(C)
        except (ValueError, scipy.linalg.LinAlgError):
            raise InvalidInputError("the encoder is singular") from None
        if np.any(np.diag(lu[0]) == 0):
            raise InvalidInputError("the encoder is singular")
        return scipy.linalg.lu_solve(lu, A.T, trans=1).T
    if np.linalg.matrix_rank(C) < C.shape[1]:
        raise InvalidInputError(
            f"the encoder (shape {C.shape}) does not have full column rank, so B·C = A has no solution in general"
        )
    return A @ np.linalg.pinv(C)


def per_query_errors(*, workload: object, encoder: object, decoder: object | None = None) -> np.ndarray:
    """Per-step noise variance with unit noise: the squared row norms of B (default B = A·C⁺).

    The variance of step i of A·x + B·z, z ~ N(0, σ²I), is σ²·‖B_i‖²; with σ = sens(C)·noise
    multiplier this is what the loss sums.
    """
    B = optimal_decoder(workload=workload, encoder=encoder) if decoder is None else check_matrix(decoder, name="decoder")
    return np.sum(B * B, axis=1)


def total_loss(
    *,
    workload: object,
    encoder: object,
    max_participations: int,
    min_sep: int,
    method: Method = "nonnegative",
    decoder: object | None = None,
) -> float:
    """The loss of Eq. 4: ‖B‖_F²·sens(C)² (total squared error at noise multiplier 1)."""
    errors = per_query_errors(workload=workload, encoder=encoder, decoder=decoder)
    return float(np.sum(errors)) * sensitivity_squared(
        encoder=encoder, max_participations=max_participations, min_sep=min_sep, method=method
    )


MinSepMethod = Literal["banded", "brute-force", "upper-bound"]
UPPER_BOUND_ROWS = 256  # rows of |X| per dynamic-programme block (memory (n + 1)·(k + 1)·rows floats)


def min_sep_sensitivity_squared(*, gram: np.ndarray, schema: MinSeparation, method: str = "auto") -> tuple[float, str]:
    """(sens², method) of X = CᵀC under b-min-sep participation (at most k participations, any
    two ≥ b apart), for vector contributions of any dimension.

    * ``"banded"`` (exact): when X_ij = 0 for |i − j| ≥ b (C lower triangular with at most b
      bands, for instance), contributions at different participations are orthogonal, so
      sens² = max_π Σ_{i∈π} X_ii, a dynamic programme (Choquette-Choo et al., arXiv
      2306.08153, Theorem 2).
    * ``"upper-bound"``: for any X, sens² = max_π max_G tr(GᵀX[π,π]G) ≤ max_π Σ_{i,j∈π}|X_ij|
      ≤ max_π Σ_{i∈π} r_i with r_i = max_{π′} Σ_{j∈π′}|X_ij| (rows and columns chosen
      independently: a larger set of choices), both maxima by ``best_separated_sums``
      (ibid., Algorithm 4); O(n²·k).
    * ``"brute-force"`` (exact when X ≥ 0, refused otherwise): max over every pattern of
      1ᵀX[π,π]1, enumerated; for small n and tests.
    * ``"auto"``: banded when it applies, else the upper bound.
    """
    X = np.asarray(gram, dtype=np.float64)
    if X.shape != (schema.n, schema.n):
        raise InvalidInputError(f"the encoder has {X.shape[0]} columns but the participation schema has n = {schema.n}")
    k, b = schema.participations, schema.separation
    offsets = np.abs(np.subtract.outer(np.arange(schema.n), np.arange(schema.n)))
    banded = not np.any(X[offsets >= b])
    if method == "auto":
        method = "banded" if banded else "upper-bound"
    if method == "banded":
        if not banded:
            raise InvalidInputError(f"X = CᵀC is not zero at distance ≥ b = {b}; the banded formula does not apply")
        return float(best_separated_sums(np.diag(X)[None, :], participations=k, separation=b)[0]), "banded"
    if method == "upper-bound":
        magnitude = np.abs(X)
        rows = np.concatenate(
            [
                best_separated_sums(magnitude[start : start + UPPER_BOUND_ROWS], participations=k, separation=b)
                for start in range(0, schema.n, UPPER_BOUND_ROWS)
            ]
        )
        return float(best_separated_sums(rows[None, :], participations=k, separation=b)[0]), "upper-bound"
    if method == "brute-force":
        scale = float(np.max(np.abs(X))) if X.size else 0.0
        if float(np.min(X)) < -NEGATIVE_TOLERANCE * scale:
            raise InvalidInputError("brute force over min-sep patterns needs X = CᵀC ≥ 0")
        return max(float(X[np.ix_(p, p)].sum()) for p in schema.patterns()), "brute-force"
    raise InvalidInputError(f"unknown min-sep sensitivity method {method!r}; expected auto, banded, upper-bound or brute-force")


def schema_sensitivity_squared(*, gram: np.ndarray, schema: Participation | MinSeparation) -> tuple[float, str]:
    """(sens², method) under either schema: fixed-epoch exact (``nonnegative``) when X ≥ 0 on
    the pattern pairs, else the eigenvalue ``upper-bound``; min-sep by
    ``min_sep_sensitivity_squared`` (banded exact, else its upper bound)."""
    X = np.asarray(gram, dtype=np.float64)
    if isinstance(schema, MinSeparation):
        return min_sep_sensitivity_squared(gram=X, schema=schema)
    _check_gram(X, schema)
    scale = float(np.max(np.abs(X))) if X.size else 0.0
    if float(np.min(X[schema.pair_mask])) >= -NEGATIVE_TOLERANCE * scale:
        return gram_sensitivity_squared(gram=X, schema=schema, method="nonnegative"), "nonnegative"
    return gram_sensitivity_squared(gram=X, schema=schema, method="upper-bound"), "upper-bound"
