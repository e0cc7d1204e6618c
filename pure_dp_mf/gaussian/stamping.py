"""Stamping (Choquette-Choo et al., section 4 end, App. D.4) and the loss of Eq. 4 for any mechanism.

A mechanism here is anything with ``n``, ``inner_size``, ``name``, ``gram()`` (X = CᵀC, n×n),
``per_step_variance()`` (diag B·Bᵀ), ``decoder_frobenius_squared()``, ``decode(z)`` (B·z) and
``dense_decoder()``/``dense_encoder()``. ``DenseMechanism`` wraps any dense pair (B, C).

Stamping an encoder C (m columns) s times gives the block-diagonal encoder I_s ⊗ C on n = s·m
steps. Two decoders:

* restart construction (prefix sums only, the matrix form of Kairouz et al.'s tree restarts):
  block (i, i) is the base decoder B; every block (i, j), i > j, repeats B's last row in each
  row (the released total of an earlier stamp is kept fixed). Because each column of the
  prefix-sum matrix is constant below the diagonal, this factorizes A_n. Per-step variance in
  stamp j: ‖B_t‖² + j·‖B_{m−1}‖² (stamps use independent noise).
* pseudo-inverse decoder for any workload A: A·(I_s ⊗ C)⁺ = A·(I_s ⊗ C⁺). For the prefix sum
  and a base decoder equal to A_m·C⁺, the restart construction *is* this decoder (block (i, j),
  i > j, of A·(I ⊗ C⁺) is 1·1ᵀ·C⁺, whose rows are the last row of A_m·C⁺); tests check it.

Sensitivity of the stamped encoder: its Gram is I_s ⊗ X, handed to
``gaussian.sensitivity.gram_sensitivity_squared``. ``evaluate`` uses the exact ``nonnegative``
formula when X ≥ 0 on the participation pairs, else the ``upper-bound`` k·λ_max(X[π,π]) (sound
for vector contributions of any dimension); the method used is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np
import scipy.linalg

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.participation import participation_schema
from pure_dp_mf.gaussian.sensitivity import schema_sensitivity_squared
from pure_dp_mf.validation import check_matrix, check_size


class GaussianMechanism(Protocol):
    """A Gaussian factorization mechanism: decoder B (n × inner_size), encoder C, noise decoding."""

    @property
    def name(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def inner_size(self) -> int: ...

    def gram(self) -> np.ndarray: ...
    def per_step_variance(self) -> np.ndarray: ...
    def decoder_frobenius_squared(self) -> float: ...
    def decode(self, z: np.ndarray) -> np.ndarray: ...
    def dense_decoder(self) -> np.ndarray: ...
    def dense_encoder(self) -> np.ndarray: ...


class DenseMatrices:
    """The ``GaussianMechanism`` methods of a mechanism that holds its dense decoder B (n×m) and
    encoder C (m×n): the Gram matrix CᵀC, the per-step noise variances ‖B_t‖², ‖B‖_F², B·z."""

    decoder: np.ndarray
    encoder: np.ndarray

    def gram(self) -> np.ndarray:
        return self.encoder.T @ self.encoder

    def per_step_variance(self) -> np.ndarray:
        return np.sum(self.decoder * self.decoder, axis=1)

    def decoder_frobenius_squared(self) -> float:
        return float(np.sum(self.decoder * self.decoder))

    def decode(self, z: np.ndarray) -> np.ndarray:
        return self.decoder @ np.asarray(z, dtype=np.float64)

    def dense_decoder(self) -> np.ndarray:
        return self.decoder

    def dense_encoder(self) -> np.ndarray:
        return self.encoder


@dataclass(frozen=True)
class DenseMechanism(DenseMatrices):
    """Any factorization given by dense matrices: decoder B (n×m), encoder C (m×n)."""

    decoder: np.ndarray
    encoder: np.ndarray
    name: str = "dense"

    def __post_init__(self) -> None:
        C = check_matrix(self.encoder, name="encoder")
        B = check_matrix(self.decoder, name="decoder", rows=C.shape[1], columns=C.shape[0])
        object.__setattr__(self, "encoder", C)
        object.__setattr__(self, "decoder", B)

    @property
    def n(self) -> int:
        return int(self.decoder.shape[0])

    @property
    def inner_size(self) -> int:
        return int(self.encoder.shape[0])


class StampedMechanism:
    """I_s ⊗ C with the restart-construction decoder from the base decoder (prefix sums)."""

    def __init__(self, base: GaussianMechanism, stamps: int) -> None:
        self.base = base
        self.stamps = check_size(stamps, name="stamps")
        self.n = self.stamps * base.n
        self.inner_size = self.stamps * base.inner_size
        self.name = f"{base.name} ×{self.stamps}"

    @cached_property
    def _base_variance(self) -> np.ndarray:
        return np.asarray(self.base.per_step_variance(), dtype=np.float64)

    def gram(self) -> np.ndarray:
        return scipy.linalg.block_diag(*([self.base.gram()] * self.stamps))

    def per_step_variance(self) -> np.ndarray:
        v = self._base_variance
        return np.concatenate([v + j * v[-1] for j in range(self.stamps)])

    def decoder_frobenius_squared(self) -> float:
        return float(self.per_step_variance().sum())

    def decode(self, z: np.ndarray) -> np.ndarray:
        """B·z: each stamp's base noise plus the final noise of every earlier stamp."""
        z = np.asarray(z, dtype=np.float64)
        if z.shape[0] != self.inner_size:
            raise InvalidInputError(f"z must have {self.inner_size} rows, got shape {z.shape}")
        m = self.base.inner_size
        out, carry = [], 0.0
        for j in range(self.stamps):
            block = np.asarray(self.base.decode(z[j * m : (j + 1) * m]))
            out.append(block + carry)
            carry = carry + block[-1]
        return np.concatenate(out, axis=0)

    def dense_encoder(self) -> np.ndarray:
        return scipy.linalg.block_diag(*([self.base.dense_encoder()] * self.stamps))

    def dense_decoder(self) -> np.ndarray:
        B = np.asarray(self.base.dense_decoder())
        m, r = B.shape
        out = np.zeros((self.n, self.inner_size))
        for i in range(self.stamps):
            out[i * m : (i + 1) * m, i * r : (i + 1) * r] = B
            for j in range(i):
                out[i * m : (i + 1) * m, j * r : (j + 1) * r] = B[-1]
        return out


def pseudo_inverse_stamp(*, workload: np.ndarray, encoder: np.ndarray, stamps: int, name: str = "stamped") -> DenseMechanism:
    """(A·(I_s ⊗ C⁺), I_s ⊗ C) for any workload A (n×n, n = s·m) and encoder C (r×m) of full column rank."""
    s = check_size(stamps, name="stamps")
    C = check_matrix(encoder, name="encoder")
    A = check_matrix(workload, name="workload")
    if A.shape != (s * C.shape[1], s * C.shape[1]):
        raise InvalidInputError(
            f"workload must be {s * C.shape[1]}×{s * C.shape[1]} for {s} stamps of a {C.shape} encoder, got {A.shape}"
        )
    if np.linalg.matrix_rank(C) < C.shape[1]:
        raise InvalidInputError(f"the encoder (shape {C.shape}) does not have full column rank")
    pinv = np.linalg.pinv(C)
    stamped = scipy.linalg.block_diag(*([C] * s))
    return DenseMechanism(decoder=A @ scipy.linalg.block_diag(*([pinv] * s)), encoder=stamped, name=f"{name} ×{s}")


@dataclass(frozen=True)
class Loss:
    """The loss of Eq. 4 of one mechanism under (k,b)-participation (unit noise multiplier)."""

    name: str
    n: int
    decoder_frobenius_squared: float
    sensitivity_squared: float
    sensitivity_method: str

    @property
    def loss(self) -> float:
        """‖B‖_F²·sens(C)²: the total squared error at noise multiplier 1."""
        return self.decoder_frobenius_squared * self.sensitivity_squared

    @property
    def rmse(self) -> float:
        """√(loss/n): root-mean-squared error per step at noise multiplier 1."""
        return float(np.sqrt(self.loss / self.n))


def sensitivity_of(
    mechanism: GaussianMechanism, *, max_participations: int, min_sep: int, participation: str = "fixed-epoch"
) -> tuple[float, str]:
    """(sens², method) under the ``participation`` schema ("fixed-epoch": exactly b = ``min_sep``
    apart; "min-sep": at least b apart), k = ``max_participations``. A mechanism with its own
    ``sensitivity_squared(schema)`` (the Toeplitz strategies: O(n) from the coefficients) answers
    itself; otherwise ``sensitivity.schema_sensitivity_squared`` on X = CᵀC."""
    schema = participation_schema(name=participation, max_participations=max_participations, separation=min_sep, n=mechanism.n)
    own = getattr(mechanism, "sensitivity_squared", None)
    if own is not None:
        return own(schema)
    return schema_sensitivity_squared(gram=mechanism.gram(), schema=schema)


def evaluate(mechanism: GaussianMechanism, *, max_participations: int, min_sep: int, participation: str = "fixed-epoch") -> Loss:
    """The loss ‖B‖_F²·sens² of ``mechanism`` under (k,b) participation of the named schema."""
    sens, method = sensitivity_of(mechanism, max_participations=max_participations, min_sep=min_sep, participation=participation)
    return Loss(mechanism.name, mechanism.n, mechanism.decoder_frobenius_squared(), sens, method)


def best_stamps(
    make_base: Callable[[int], GaussianMechanism],
    *,
    n: int,
    stamps: Iterable[int],
    max_participations: int,
    min_sep: int,
    participation: str = "fixed-epoch",
) -> tuple[StampedMechanism, Loss, dict[int, Loss]]:
    """Stamp ``make_base(n // s)`` for every s in ``stamps`` (s must divide n); return the best by loss and all losses."""
    losses: dict[int, Loss] = {}
    mechanisms: dict[int, StampedMechanism] = {}
    for s in stamps:
        s = check_size(s, name="stamps")
        if n % s:
            raise InvalidInputError(f"{s} stamps do not divide n = {n}")
        mechanisms[s] = StampedMechanism(make_base(n // s), s)
        losses[s] = evaluate(mechanisms[s], max_participations=max_participations, min_sep=min_sep, participation=participation)
    best = min(losses, key=lambda s: losses[s].loss)
    return mechanisms[best], losses[best], losses
