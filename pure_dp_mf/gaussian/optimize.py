"""Optimal factorizations A = B·C under (k,b)-participation by the Lagrange dual (Choquette-Choo et al., §3, App. I).

The problem (Eq. 6). With X = CᵀC and V = AᵀA the loss of Eq. 4 is ‖B‖_F²·sens(C)² with the
optimal decoder B = A·C⁻¹, ‖B‖_F² = tr(V·X⁻¹); it is invariant under C → αC, so we solve

    minimise tr(V·X⁻¹)  over X ≻ 0  subject to  uᵀXu ≤ 1 for u ∈ 𝒟  [and X_ij ≥ 0 for (i,j) ∈ 𝒮].

Three constraint sets (Choquette-Choo et al., Appendix I.3):

* ``"full"``: 𝒟 = every sign vector u ∈ {±1}^π on every pattern π (b·2^(k−1) of them), 𝒮 = ∅.
  Exact for scalar contributions (d = 1); small k only.
* ``"nonnegative"`` (the paper's experiments): 𝒟 = the indicator vectors 1_π (b of them) and
  𝒮 = all pairs, n² + b multipliers. Then sens² = max_π 1ᵀX[π,π]1 for vectors of any dimension
  (Theorem 2.1).
* ``"pairs"`` (the paper's "in between" set): 𝒟 = {1_π}, 𝒮 = Π̂, the pairs sharing a pattern
  (b·k(k−1) entries), the least that keeps Theorem 2.1 applicable (remark after H.3).
  Its optimum lies between the other two.

The dual (Theorem 3.1). With multipliers v_u ≥ 0 and Λ ≥ 0 (supported on 𝒮, symmetric), let
U = Σ_u v_u·u·uᵀ − Λ. For U ≻ 0 the Lagrangian tr(VX⁻¹) + tr(UX) − Σv is minimised by the
unique X ≻ 0 with X·U·X = V (Lemma I.2), X(U) = U^{−1/2}(U^{1/2}VU^{1/2})^{1/2}U^{−1/2}, and

    g(v, Λ) = 2·tr((U^{1/2}VU^{1/2})^{1/2}) − Σ_u v_u,   ∂g/∂v_u = uᵀX(U)u − 1,   ∂g/∂Λ = −X(U).

Every such (v, Λ) gives the lower bound g ≤ optimum (weak duality). g is concave and
g(t·v, t·Λ) = 2√t·S − t·Σv with S = tr((U^{1/2}VU^{1/2})^{1/2}), so the best multiple of any
dual point gives the bound S²/Σv; at the optimum g(v*) = Σ v* (Theorem 3.1).

Computation. With U = LLᵀ (Cholesky) and the eigendecomposition LᵀVL = Q·diag(w)·Qᵀ we have
S = Σ √w and X(U) = L^{−T}·Q·diag(√w)·Qᵀ·L^{−1} (Lemma I.2 with U_L = L, U_R = Lᵀ): one
Cholesky, one symmetric eigendecomposition and one triangular solve per evaluation, O(n³).

Solver. We maximise g over the nonnegative orthant by the spectral projected gradient method
(Birgin, Martínez & Raydan 2000: Barzilai–Borwein steps, projection onto v, Λ ≥ 0, and a
non-monotone Armijo line search that also rejects points where U is not positive definite).
It needs only g and its gradient (Theorem 3.1), handles the n² bound constraints of Λ at the
cost of a clip, and converges for concave g; a Newton method would need an n²×n² Hessian.

The masked primal (the default wherever it applies). A dual evaluation needs an n×n
eigendecomposition (≈ 40 matrix products). When n = k·b and the constraint is "nonnegative" or
"pairs" we instead minimise f(X) = tr(V·X⁻¹) by L-BFGS over the
"orthogonal" family X_ij = 0 for i ≠ j in the same pattern, with each pattern's diagonal summing
to 1 (the family of jax_privacy's dense.optimize); for such X, sens(X)² = max_π Σ_{i∈π} X_ii
exactly, for any dimension. For "nonnegative" the off-pattern entries are also kept ≥ 0
(projected L-BFGS: components at an active bound are dropped from the gradient and the step is
clipped), so every iterate is feasible as it stands. An evaluation is one Cholesky, its inverse
P = X⁻¹ (potri), f = ⟨V, P⟩ and G = X⁻¹VX⁻¹ = (A·P)ᵀ(A·P) (one syrk; A·P is a cumulative sum
for prefix sums): about 2n³ flops, against about 4n³ for two triangular solves and a product.

Certificate of the masked primal. At a stationary point G vanishes off the patterns and is
constant on the diagonal of each pattern's block, so U = G is dual feasible for both "pairs" and
"nonnegative" and its bound equals the primal loss (the family contains the optimum of "pairs",
and of "nonnegative" with the bounds above). Before convergence we certify with U = the pattern
blocks of G (for "nonnegative" also its negative entries where X_ij ≥ 0 is active), which is
≻ 0 as a pinching of G, rescaled by a diagonal congruence so that each block's diagonal is
constant (then v_π = that constant is the block's largest entry), and one eigenvalue computation.
Equalising the diagonals cut the certified gap 5–40× at the same iterate (n = 500, k = 20).
Checks come every ``check_every`` iterations or, when an eigenvalue computation costs more, far
enough apart that they take about ``CERTIFY_SHARE`` of the time.

Primal point and certified gap. Each dual iterate yields X(U), which may violate the constraints
slightly; we repair it into a feasible point — X + c·11ᵀ for "nonnegative", X + c·Σ_classes
1·1ᵀ for "pairs" (c = the most negative constrained entry; both repairs add a PSD matrix, so
tr(V·X⁻¹) does not increase) — and evaluate its true loss tr(V·X⁻¹)·sens(X)² with the
sensitivity of ``sensitivity.py``. We stop when (loss − bound)/bound ≤ ``gap``. Both numbers
are computed in float64 (this is a numerical certificate, not an exact-arithmetic proof).

The returned encoder C is lower triangular with CᵀC = X (C = E·chol(E·X·E)ᵀ·E, E the reversal),
scaled to sens(C) = 1, and B = A·C⁻¹; loss, sensitivity and gap are recomputed from that C.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
import scipy.linalg

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.gaussian.participation import Participation
from pure_dp_mf.gaussian.sensitivity import gram_sensitivity_squared, sign_vectors
from pure_dp_mf.validation import check_matrix, check_positive, check_size

Constraint = Literal["nonnegative", "pairs", "full"]
CONSTRAINTS = ("nonnegative", "pairs", "full")
METHODS = ("auto", "dual", "masked-primal")
DEFAULT_GAP = 1e-3
DEFAULT_MAX_ITERATIONS = 20_000
MAX_STEPS = 4096
"""Largest n of the dense optimizer (n×n matrices, O(n³) per iteration)."""
MAX_FULL_VECTORS = 4096
SINGLE_THREAD_BELOW = 256
LBFGS_MEMORY = 8
CERTIFY_SHARE = 0.2  # the masked primal spends at most about this share of its time on certificates


def _blas_threads(n: int):
    """One BLAS thread for small problems: thread hand-offs cost more than n³ flops there
    (measured 15× slower at n = 6 on a loaded 2-core machine). No-op without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas") if n < SINGLE_THREAD_BELOW else contextlib.nullcontext()


@dataclass
class OptimizationResult:
    """An optimised factorization A = B·C with its certificate (see the module docstring)."""

    encoder: np.ndarray
    decoder: np.ndarray
    loss: float
    dual_bound: float
    relative_gap: float
    sensitivity_squared: float
    multipliers: np.ndarray
    constraint: str
    max_participations: int
    min_sep: int
    iterations: int
    converged: bool
    seconds: float
    workload_name: str | None = None
    history: list[Check] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.encoder.shape[1])

    def metadata(self) -> dict:
        """The record stored with the factorization (docs/architecture.md "Files")."""
        return {
            "metric": "meanse",
            "made_by": {
                "tool": "pure_dp_mf.gaussian.optimize",
                "mechanism": "gaussian",
                "workload": self.workload_name,
                "constraint": self.constraint,
                "max_participations": self.max_participations,
                "participation": "fixed-epoch",
                "separation": self.min_sep,
                "min_sep": self.min_sep,  # the fixed-epoch separation (older readers)
                "loss": self.loss,
                "sensitivity_squared": self.sensitivity_squared,
                "sensitivity": float(np.sqrt(self.sensitivity_squared)),
                "sensitivity_method": _sensitivity_method(self.constraint),
                "dual_bound": self.dual_bound,
                "relative_gap": self.relative_gap,
                "converged": self.converged,
                "iterations": self.iterations,
                "wall_seconds": self.seconds,
            },
        }

    def to_factorization(self):
        """The ``Factorization`` (decoder B, encoder C) with the loss, sensitivity and gap in its metadata."""

        return Factorization(decoder=self.decoder, encoder=self.encoder, metadata=self.metadata())


def _sensitivity_method(constraint: str) -> Literal["nonnegative", "exact"]:
    return "exact" if constraint == "full" else "nonnegative"


class _Dual:
    """g, ∇g and X(U) for one problem; the multipliers z = (v, λ) live in one vector."""

    def __init__(self, A: np.ndarray, schema: Participation, constraint: str) -> None:
        n = schema.steps
        self.A, self.schema, self.constraint = A, schema, constraint
        self.V = _gram(A)
        patterns = schema.patterns
        if constraint == "full":
            signs = sign_vectors(schema.max_participations)
            count = patterns.shape[0] * signs.shape[0]
            if count > MAX_FULL_VECTORS:
                raise InvalidInputError(
                    f"the full constraint set has {count} sign vectors (b·2^(k−1)), more than {MAX_FULL_VECTORS}; "
                    "use constraint 'nonnegative' or 'pairs'"
                )
            vectors = np.zeros((count, n))
            for p, pattern in enumerate(patterns):
                vectors[p * signs.shape[0] : (p + 1) * signs.shape[0], pattern] = signs
            rows = cols = np.zeros(0, dtype=np.int64)
        else:
            vectors = np.zeros((patterns.shape[0], n))
            np.put_along_axis(vectors, patterns, 1.0, axis=1)
            support = np.triu(np.ones((n, n), dtype=bool), 1)
            if constraint == "pairs":
                support &= schema.pair_mask
            rows, cols = np.nonzero(support)
        self.vectors, self.rows, self.cols = vectors, rows, cols
        self.m = vectors.shape[0]

    def initial(self) -> np.ndarray:
        """v = 1 and Λ cancelling the off-diagonal of Σ v·u·uᵀ on its support: U is diagonal and ≻ 0."""
        v = np.ones(self.m)
        P = _gram(self.vectors)
        return np.concatenate([v, P[self.rows, self.cols]])

    def U(self, z: np.ndarray) -> np.ndarray:
        v, lam = z[: self.m], z[self.m :]
        U = scipy.linalg.blas.dgemm(1.0, self.vectors.T * v, self.vectors)
        U[self.rows, self.cols] -= lam
        U[self.cols, self.rows] -= lam
        return U

    def evaluate(self, z: np.ndarray):
        """(g, ∇g, X(U), S) at z, or None where U is not positive definite."""
        L = _cholesky(self.U(z))
        if L is None:
            return None
        w, Q = scipy.linalg.eigh(_gram(_lower_times(self.A, L)), check_finite=False)
        w = np.maximum(w, 0.0)
        X = _gram(_solve_lower(L, Q * np.sqrt(np.sqrt(w)), transpose=True), rows=True)
        S = float(np.sum(np.sqrt(w)))
        v = z[: self.m]
        g = 2.0 * S - float(np.sum(v))
        grad = np.concatenate([np.einsum("ij,jk,ik->i", self.vectors, X, self.vectors) - 1.0, -2.0 * X[self.rows, self.cols]])
        return g, grad, X, S


# Dense linear algebra. Everything goes through scipy's BLAS/LAPACK, none through numpy's: numpy
# ships its own OpenBLAS, and alternating between the two libraries leaves one's idle threads
# spinning against the other's work (a Cholesky plus a product ran 2.6× slower at n = 500 on 2
# cores). BLAS level 1 also avoids numpy's temporaries in the L-BFGS updates (5× at n = 2000).


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """⟨a, b⟩ = Σ a_ij·b_ij."""
    return float(scipy.linalg.blas.ddot(a.ravel(), b.ravel()))


def _add_scaled(y: np.ndarray, alpha: float, x: np.ndarray) -> None:
    """y += alpha·x in place (y contiguous)."""
    scipy.linalg.blas.daxpy(x.ravel(), y.ravel(), a=alpha)


def _symmetric(T: np.ndarray) -> np.ndarray:
    """The symmetric matrix whose one triangle is T's (the other triangle of T is zero), C-ordered
    (so that ``ravel`` is a view)."""
    S = np.add(T, T.T, order="C")
    S[np.diag_indices_from(S)] = np.diag(T)
    return S


def _gram(M: np.ndarray, *, rows: bool = False) -> np.ndarray:
    """MᵀM (or M·Mᵀ with ``rows``) by BLAS syrk."""
    return _symmetric(scipy.linalg.blas.dsyrk(1.0, M, trans=0 if rows else 1))


def _cholesky(X: np.ndarray) -> np.ndarray | None:
    """The lower Cholesky factor of X, or None where X is not (numerically) positive definite."""
    L, info = scipy.linalg.lapack.dpotrf(X, lower=1, clean=1)
    return L if info == 0 and np.all(np.isfinite(np.diag(L))) else None


def _inverse(X: np.ndarray) -> np.ndarray | None:
    """X⁻¹ for X ≻ 0 (LAPACK potrf, potri), or None where X is not positive definite."""
    L = _cholesky(X)
    if L is None:
        return None
    P, info = scipy.linalg.lapack.dpotri(L, lower=1)
    return _symmetric(P) if info == 0 else None


def _lower_times(L: np.ndarray, M: np.ndarray) -> np.ndarray:
    """L·M for lower-triangular L (BLAS trmm)."""
    return scipy.linalg.blas.dtrmm(1.0, L, M, lower=1)


def _solve_lower(L: np.ndarray, B: np.ndarray, *, transpose: bool = False) -> np.ndarray:
    """L⁻¹·B (or L⁻ᵀ·B) for lower-triangular invertible L, by LAPACK's trtrs (scipy's wrapper
    ``solve_triangular`` costs milliseconds of overhead per call, which dominates small problems)."""
    solution, info = scipy.linalg.lapack.dtrtrs(L, B, lower=1, trans=1 if transpose else 0)
    if info != 0:
        raise InvalidInputError("a triangular factor is singular")
    return solution


def _repair(X: np.ndarray, schema: Participation, constraint: str) -> np.ndarray:
    """A feasible Gram matrix ⪰ X (see the module docstring)."""
    if constraint == "nonnegative":
        c = max(0.0, -float(np.min(X)))
        return X + c if c > 0 else X
    if constraint == "pairs":
        c = max(0.0, -float(np.min(X[schema.pair_mask])))
        if c > 0:
            i = np.arange(schema.steps)
            X = X + c * (i[:, None] % schema.min_sep == i[None, :] % schema.min_sep)
        return X
    return X


def _primal_loss(V: np.ndarray, X: np.ndarray, schema: Participation, constraint: str) -> float:
    """tr(V·X⁻¹)·sens(X)² for a Gram matrix X (inf where X is not positive definite)."""
    P = _inverse(X)
    if P is None:
        return float("inf")
    return _dot(V, P) * gram_sensitivity_squared(gram=X, schema=schema, method=_sensitivity_method(constraint))


def lower_triangular_factor(gram: np.ndarray) -> np.ndarray:
    """The lower-triangular C with CᵀC = X (X ≻ 0): C = E·chol(E·X·E)ᵀ·E."""
    try:
        L = np.linalg.cholesky(gram[::-1, ::-1])
    except np.linalg.LinAlgError:
        raise InvalidInputError("the Gram matrix is not positive definite") from None
    return np.ascontiguousarray(L.T[::-1, ::-1])


def check_workload(workload: object) -> np.ndarray:
    """A square, lower-triangular, invertible, finite workload A (float64)."""
    A = check_matrix(workload, name="workload")
    if A.shape[0] != A.shape[1]:
        raise InvalidInputError(f"the workload must be square (n×n), got shape {A.shape}")
    if np.any(np.triu(A, 1) != 0):
        raise InvalidInputError("the workload must be lower triangular (a streaming workload)")
    if np.any(np.diag(A) == 0):
        raise InvalidInputError("the workload has a zero on its diagonal, so it is singular")
    return A


def optimize(
    *,
    workload: object,
    max_participations: int,
    min_sep: int | None = None,
    gap: float = DEFAULT_GAP,
    constraint: Constraint = "nonnegative",
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    check_every: int = 10,
    progress: Callable[[Check], None] | None = None,
    workload_name: str | None = None,
    method: str = "auto",
) -> OptimizationResult:
    """Optimal encoder/decoder for ``workload`` A (n×n) under (k,b)-participation (Choquette-Choo et al., §3).

    ``min_sep`` b defaults to n/k. Stops once (loss − dual bound)/dual bound ≤ ``gap`` or after
    ``max_iterations`` (then ``converged`` is False and the achieved gap is reported).
    ``progress``: called with every ``Check`` (iteration, seconds, loss, dual bound, gap) as it is
    made, e.g. to draw a progress bar. ``method``: "dual" (spectral projected gradient on the dual), "masked-primal" (L-BFGS on the
    orthogonal family, certified by a dual point; n = k·b, not "full"), or "auto" (masked-primal
    wherever possible, else dual).

    Guarantee: the returned C has sens(C)² = ``sensitivity_squared`` (≈ 1) under the schema,
    computed by Theorem 2.1 ("nonnegative", "pairs": vector contributions of any dimension) or by
    enumeration of sign vectors ("full": scalar contributions), and ``dual_bound`` is a lower
    bound on the optimum of the chosen constraint set (up to float64 rounding).
    """
    started = time.perf_counter()
    A, schema, gap, max_iterations, check_every, use_primal = _check_arguments(
        workload=workload,
        max_participations=max_participations,
        min_sep=min_sep,
        gap=gap,
        constraint=constraint,
        max_iterations=max_iterations,
        check_every=check_every,
        method=method,
    )
    if use_primal:
        with _blas_threads(A.shape[0]):
            X, bound, v, iteration, history = _masked_primal(A, schema, constraint, gap, max_iterations, check_every, progress)
        return _result(A, schema, constraint, X, bound, v, iteration, gap, started, workload_name, history)
    X, bound, v, iteration, history = _dual_ascent(
        A=A,
        schema=schema,
        constraint=constraint,
        gap=gap,
        max_iterations=max_iterations,
        check_every=check_every,
        progress=progress,
    )
    return _result(A, schema, constraint, X, bound, v, iteration, gap, started, workload_name, history)


def _check_arguments(
    *,
    workload: object,
    max_participations: int,
    min_sep: int | None,
    gap: float,
    constraint: Constraint,
    max_iterations: int,
    check_every: int,
    method: str,
) -> tuple[np.ndarray, Participation, float, int, int, bool]:
    """``optimize``'s checked arguments: (A, schema, gap, max_iterations, check_every, whether to use the masked primal)."""
    A = check_workload(workload)
    n = A.shape[0]
    if n > MAX_STEPS:
        raise InvalidInputError(f"the dense optimizer takes n up to {MAX_STEPS} (n×n matrices, O(n³) per iteration), got n = {n}")
    k = check_size(max_participations, name="max_participations")
    if min_sep is None:
        if n % k:
            raise InvalidInputError(f"n = {n} is not a multiple of max_participations = {k}; give min_sep")
        min_sep = n // k
    schema = Participation(max_participations=k, min_sep=min_sep, n=n)
    gap = check_positive(gap, name="gap")
    if constraint not in CONSTRAINTS:
        raise InvalidInputError(f"unknown constraint {constraint!r}; expected one of {CONSTRAINTS}")
    max_iterations = check_size(max_iterations, name="max_iterations")
    check_every = check_size(check_every, name="check_every")
    if method not in METHODS:
        raise InvalidInputError(f"unknown method {method!r}; expected one of {METHODS}")
    primal_possible = constraint != "full" and n == k * schema.min_sep
    if method == "masked-primal" and not primal_possible:
        raise InvalidInputError("the masked primal method needs n = k·b and constraint 'nonnegative' or 'pairs'")
    use_primal = method == "masked-primal" or (method == "auto" and primal_possible)
    return A, schema, gap, max_iterations, check_every, use_primal


def _dual_ascent(
    *,
    A: np.ndarray,
    schema: Participation,
    constraint: str,
    gap: float,
    max_iterations: int,
    check_every: int,
    progress: Callable[[Check], None] | None,
):
    """Spectral projected gradient ascent on the dual g (module docstring): (X, bound, v, iterations, history)."""
    n = A.shape[0]
    dual = _Dual(A, schema, constraint)
    z = dual.initial()
    state = dual.evaluate(z)
    if state is None:  # U = diag(counts) is always positive definite
        raise AssertionError("initial dual point is not positive definite")
    memory = 10
    recent = [-state[0]]
    step = 1.0
    iteration = 0

    best = _Incumbents(progress=progress, gap=gap, max_iterations=max_iterations)
    with _blas_threads(n):
        while True:
            g, grad, X, S = state
            if iteration % check_every == 0 or iteration == max_iterations:
                scale = (S / float(np.sum(z[: dual.m]))) ** 2
                candidate = _repair(X, schema, constraint)
                if best.record(
                    iteration,
                    loss=_primal_loss(dual.V, candidate, schema, constraint),
                    X=candidate,
                    bound=S * S / float(np.sum(z[: dual.m])),
                    v=z[: dual.m] * scale,
                ):
                    break
            # spectral projected gradient ascent step on g (minimising −g)
            direction = np.maximum(z + step * grad, 0.0) - z
            slope = float(grad @ direction)
            reference = max(recent)
            t = 1.0
            while True:
                trial = z + t * direction
                new = dual.evaluate(trial)
                if new is not None and -new[0] <= reference - 1e-4 * t * slope:
                    break
                t *= 0.5
                if t < 1e-12:
                    new = None
                    break
            if new is None:  # no progress possible at this precision
                break
            s, y = trial - z, -(new[1] - grad)
            sy = float(s @ y)
            step = float(s @ s) / sy if sy > 0 else 1e3 * max(step, 1.0)
            step = min(max(step, 1e-10), 1e10)
            z, state = trial, new
            recent = (recent + [-new[0]])[-memory:]
            iteration += 1
        if best.X is None:
            best.X = _repair(state[2], schema, constraint)
    return best.X, best.bound, best.v, iteration, best.history


def _result(A, schema, constraint, best_X, best_bound, best_v, iteration, gap, started, workload_name, history):
    """Factor the best feasible Gram matrix into the returned, renormalised C and B (see the module docstring)."""
    C = lower_triangular_factor(best_X)
    method = _sensitivity_method(constraint)
    C /= np.sqrt(gram_sensitivity_squared(gram=_gram(C), schema=schema, method=method))
    sens2 = gram_sensitivity_squared(gram=_gram(C), schema=schema, method=method)
    B = _solve_lower(C, np.ascontiguousarray(A.T), transpose=True).T
    loss = float(np.sum(B * B)) * sens2
    relative_gap = (loss - best_bound) / best_bound
    return OptimizationResult(
        encoder=C,
        decoder=B,
        loss=loss,
        dual_bound=float(best_bound),
        relative_gap=float(relative_gap),
        sensitivity_squared=sens2,
        multipliers=best_v,
        constraint=constraint,
        max_participations=schema.max_participations,
        min_sep=schema.min_sep,
        iterations=iteration,
        converged=bool(relative_gap <= gap),
        seconds=time.perf_counter() - started,
        workload_name=workload_name,
        history=history,
    )


def _masked_certificate(A, X, G, schema, constraint):
    """A dual lower bound from the gradient G = X⁻¹VX⁻¹ of a masked primal point X (module docstring).

    U keeps G on the patterns' blocks and, for "nonnegative", its negative entries where the bound
    X_ij ≥ 0 is active (the KKT multipliers there); if that is not positive definite, the blocks
    alone (a pinching of G ≻ 0, hence ≻ 0). Then U → D·U·D
    with D diagonal making each pattern's diagonal constant, so v_π = that constant is the largest
    entry of its block (U ⪰ 0) and U = Σ_π v_π·1_π1_πᵀ − Λ with Λ ≥ 0 where the constraint set
    allows it. Equalising the diagonal cut the certified gap 5–40× against v_π = max diagonal.
    """
    n, b, k = schema.steps, schema.min_sep, schema.max_participations
    classes = np.arange(n) % b
    cross = ~schema.pair_mask  # n = k·b: the pairs in no common pattern
    L = None
    if constraint == "nonnegative":
        U = np.where(cross & ((X > 0.0) | (G > 0.0)), 0.0, G)
        L = _cholesky(U)
    if L is None:
        U = np.where(cross, 0.0, G)
        L = _cholesky(U)
    d = np.diag(U)
    v = np.bincount(classes, weights=d, minlength=b) / k
    L = np.sqrt(v[classes] / d)[:, None] * L  # D·U·D = (D·L)(D·L)ᵀ
    w = scipy.linalg.eigh(_gram(_lower_times(A, L)), eigvals_only=True, check_finite=False)
    S = float(np.sum(np.sqrt(np.maximum(w, 0.0))))
    bound = S * S / float(np.sum(v))
    return bound, v * (S / float(np.sum(v))) ** 2


class _MaskedObjective:
    """f(X) = tr(V·X⁻¹), V = AᵀA, and G = X⁻¹VX⁻¹ = (A·X⁻¹)ᵀ(A·X⁻¹) (so ∇f = −G), from X⁻¹.

    With P = X⁻¹ (Cholesky, potri): f = ⟨V, P⟩ costs O(n²) and G one product A·P plus one syrk.
    For the prefix sum A = T_n, A·P is a cumulative sum over rows, O(n²) instead of a triangular
    product: an evaluation costs about 2n³ flops (potrf, potri, syrk)."""

    def __init__(self, A: np.ndarray) -> None:
        self.A = A
        self.prefix_sum = bool(np.array_equal(A, np.tri(A.shape[0])))
        self.V = _gram(A)

    def value(self, X: np.ndarray) -> tuple[float, np.ndarray] | None:
        """(f(X), X⁻¹), or None where X is not positive definite."""
        P = _inverse(X)
        return None if P is None else (_dot(self.V, P), P)

    def gradient(self, P: np.ndarray) -> np.ndarray:
        """G = P·V·P for P = X⁻¹ (symmetric: Pᵀ, a Fortran-ordered view of the C-ordered P, sums
        fast down its columns and goes to syrk without a copy: 2.4× and 1.4× at n = 2000)."""
        return _gram(np.cumsum(P.T, axis=0) if self.prefix_sum else _lower_times(self.A, P.T))


def _masked_primal(A, schema, constraint, gap, max_iterations, check_every, progress):
    """L-BFGS on the orthogonal family with dual certificates (module docstring)."""
    n, b, k = schema.steps, schema.min_sep, schema.max_participations
    classes = np.arange(n) % b
    bounded = ~schema.pair_mask if constraint == "nonnegative" else None  # n = k·b: pairs in no common pattern
    free = (~schema.pair_mask).astype(float)
    objective = _MaskedObjective(A)

    def certify(X, f, G):
        """The incumbent candidates at X: its loss (sens² by Theorem 2.1) and the dual certificate."""
        bound, v = _masked_certificate(A, X, G, schema, constraint)
        return {"loss": f * gram_sensitivity_squared(gram=X, schema=schema), "X": X, "bound": bound, "v": v}

    def project(D, X):
        """D restricted to the family (zero within patterns, each pattern's diagonal sum fixed),
        with the components at an active bound X_ij = 0 that would push X_ij below 0 removed."""
        P = D * free
        d = np.diag(D)
        P[np.diag_indices(n)] = d - (np.bincount(classes, weights=d, minlength=b) / k)[classes]
        if bounded is not None:
            P[bounded & (X <= 0.0) & (P > 0.0)] = 0.0
        return P

    def step_to(X, direction, t):
        trial = X.copy()
        _add_scaled(trial, t, direction)
        if bounded is not None:
            np.maximum(trial, 0.0, out=trial, where=bounded)
        return trial

    X = np.eye(n) / k
    f, P = objective.value(X)
    G = objective.gradient(P)
    gradient = project(-G, X)
    pairs: list = []
    best = _Incumbents(progress=progress, gap=gap, max_iterations=max_iterations, X=X)
    iteration = next_check = 0
    certifying = 0.0  # seconds spent in certificates
    while True:
        if iteration >= next_check or iteration >= max_iterations:
            started = time.perf_counter()
            if best.record(iteration, **certify(X, f, G)):
                break
            certifying += time.perf_counter() - started
            next_check = iteration + check_every
            if iteration > 0:  # space the checks so that they take about CERTIFY_SHARE of the time
                per_iteration = (time.perf_counter() - best.started - certifying) / iteration
                spacing = certifying / len(best.history) / CERTIFY_SHARE / per_iteration
                next_check = iteration + max(check_every, int(np.ceil(spacing)))
        # L-BFGS direction from the projected gradient (two-loop recursion)
        q = gradient.copy()
        alphas = []
        for s_, y_, rho in reversed(pairs):
            alpha = rho * _dot(s_, q)
            _add_scaled(q, -alpha, y_)
            alphas.append(alpha)
        if pairs:
            s_, y_, _ = pairs[-1]
            q *= _dot(s_, y_) / _dot(y_, y_)
        else:
            q /= float(np.max(np.abs(q))) * k
        for (s_, y_, rho), alpha in zip(pairs, reversed(alphas)):
            _add_scaled(q, alpha - rho * _dot(y_, q), s_)
        direction = -q if bounded is None else -q * (gradient != 0.0)
        slope = _dot(gradient, direction)
        if slope >= 0:  # not a descent direction: restart from the gradient
            pairs.clear()
            direction = -gradient / (float(np.max(np.abs(gradient))) * k)
            slope = _dot(gradient, direction)
        t = 1.0
        while True:
            trial = step_to(X, direction, t)
            new = objective.value(trial)
            if new is not None and new[0] <= f + 1e-4 * _dot(gradient, trial - X):
                break
            t *= 0.5
            if t < 1e-12:
                new = None
                break
        if new is None:  # no descent step left: a last check, recorded like every other
            best.record(iteration, **certify(X, f, G))
            break
        new_G = objective.gradient(new[1])
        new_gradient = project(-new_G, trial)
        s_, y_ = trial - X, new_gradient - gradient
        sy = _dot(s_, y_)
        if sy > 0:
            pairs = (pairs + [(s_, y_, 1.0 / sy)])[-LBFGS_MEMORY:]
        X, f, G, gradient = trial, new[0], new_G, new_gradient
        iteration += 1
    return best.X, best.bound, best.v, iteration, best.history


class Check(NamedTuple):
    """One certification point of a run: the incumbent loss and bound after ``seconds`` of wall time."""

    iteration: int
    seconds: float
    loss: float
    dual_bound: float
    relative_gap: float


class _Incumbents:
    """The best primal point (least loss) and best dual bound seen so far, shared by both solvers:
    the gap is always between these two, and each check is recorded in ``history`` and passed to
    the ``progress`` callback."""

    def __init__(
        self, *, progress: Callable[[Check], None] | None, gap: float, max_iterations: int, X: np.ndarray | None = None
    ) -> None:
        self.progress, self.gap, self.max_iterations = progress, gap, max_iterations
        self.started = time.perf_counter()
        self.loss, self.X, self.bound = np.inf, X, -np.inf
        self.v: np.ndarray | None = None
        self.history: list[Check] = []

    def offer(self, *, loss: float, X: np.ndarray, bound: float, v: np.ndarray) -> None:
        if loss < self.loss:
            self.loss, self.X = loss, X
        if bound > self.bound:
            self.bound, self.v = bound, v

    def record(self, iteration: int, *, loss: float, X: np.ndarray, bound: float, v: np.ndarray) -> bool:
        """Offer a primal point and a dual bound; True when the gap or the iteration budget is reached."""
        self.offer(loss=loss, X=X, bound=bound, v=v)
        relative_gap = (self.loss - self.bound) / self.bound
        check = Check(iteration, time.perf_counter() - self.started, self.loss, self.bound, relative_gap)
        self.history.append(check)
        if self.progress is not None:
            self.progress(check)
        return relative_gap <= self.gap or iteration >= self.max_iterations
