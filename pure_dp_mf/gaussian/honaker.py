"""Binary-tree mechanisms with Honaker's estimator from below (Choquette-Choo et al., App. D.3; Honaker 2015;
Kairouz et al. 2021), for any n.

Tree. N = 2^h ≥ n leaves (h = ⌈log₂ n⌉); node (l, i) at level l = 0..h covers the steps
[i·2^l, (i+1)·2^l). The tree encoder has one 0/1 row per node (the indicator of its interval),
restricted to the n real steps; X = CᵀC ≥ 0 entrywise, so the sensitivity is exact
(Theorem 2.1: ``nonnegative``). Rows are ordered by level, then by index.

Online Honaker estimate from below (unit noise on every node). A leaf's estimate is its noisy
value; a node at level l ≥ 1 combines its own noisy value (variance 1) with the sum of its two
children's estimates (variance 2·v_{l−1}) by inverse-variance weighting:

    est = α_l·noisy + (1 − α_l)·(est_left + est_right),   α_l = v_l = 2v_{l−1}/(2v_{l−1} + 1),  v₀ = α₀ = 1.

It is unbiased and uses only nodes already complete, so it is online. The prefix sum of steps
0..t is the sum of the estimates of the dyadic nodes of [0, t+1) (the set bits of t+1).

Variants for n < N (the decoder B and which node rows the encoder keeps):

* ``online``: rows 0..n−1 of the online decoder; only nodes inside [0, n) are ever used, so the
  encoder keeps just those rows.
* ``completion`` (Kairouz et al.): at the last step, run virtual zero steps up to N and release
  the root estimate, the lowest-variance node, for step n−1. The encoder has a row for every
  node of the full tree (the rows of all-virtual nodes are zero, but their noise is drawn).
* ``completion-virtual-removed`` (Choquette-Choo et al., D.3): as ``completion``, but the noise of nodes
  made only of virtual steps is not drawn: their (zero) encoder rows and their decoder columns
  are dropped, so B·C = A still holds and the sensitivity is unchanged; the loss drops.
* ``full``: the full (pseudo-inverse) Honaker decoder B = A·C⁺ for the ``completion`` encoder,
  which is the optimal decoder for that encoder (not online; Denisov et al. 2022 show it is
  still valid for adaptive streams).

For n = N the first three coincide. ``HonakerNoiseStream`` produces the noise of the online
variants step by step in O(h·d) memory: it never forms B or stores n×d noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, TypeAlias

import numpy as np
import scipy.linalg

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.validation import check_size

Noise: TypeAlias = Any  # one noise value: a float64 array or a torch tensor, as the draw function returns

Variant = Literal["online", "completion", "completion-virtual-removed", "full"]
VARIANTS = ("online", "completion", "completion-virtual-removed", "full")
DENSE_LIMIT = 8192


def honaker_weights(height: int) -> np.ndarray:
    """α_l for l = 0..height (α₀ = 1, α_l = 2α_{l−1}/(2α_{l−1} + 1)); α_l is also the estimate's variance."""
    alpha = np.ones(height + 1)
    for level in range(1, height + 1):
        alpha[level] = 2 * alpha[level - 1] / (2 * alpha[level - 1] + 1)
    return alpha


@dataclass(frozen=True)
class HonakerMechanism:
    """The binary tree with Honaker's estimator from below on n steps (see the module docstring)."""

    n: int
    variant: Variant = "completion-virtual-removed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_size(self.n, name="n"))
        if self.variant not in VARIANTS:
            raise InvalidInputError(f"unknown tree variant {self.variant!r}; expected one of {VARIANTS}")

    @property
    def name(self) -> str:
        return {
            "online": "Honaker online",
            "completion": "Honaker + completion",
            "completion-virtual-removed": "Honaker + completion, virtual noise removed",
            "full": "Honaker full (pseudo-inverse)",
        }[self.variant]

    @property
    def height(self) -> int:
        return max(0, int(self.n - 1).bit_length())

    @property
    def leaves(self) -> int:
        return 1 << self.height

    @cached_property
    def _nodes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(level, start, end) of every node of the full tree, ordered by level then index."""
        levels, starts = [], []
        for height in range(self.height + 1):
            count = self.leaves >> height
            levels.append(np.full(count, height))
            starts.append(np.arange(count) << height)
        level = np.concatenate(levels)
        start = np.concatenate(starts)
        return level, start, start + (1 << level)

    @cached_property
    def _kept(self) -> np.ndarray:
        """Indices of the tree nodes whose rows the encoder keeps."""
        level, start, end = self._nodes
        if self.variant == "completion":  # all-virtual nodes are kept: zero rows whose noise is still drawn
            return np.arange(level.size)
        inside = end <= self.n if self.variant == "online" else start < self.n
        return np.flatnonzero(inside)

    @property
    def inner_size(self) -> int:
        return int(self._kept.size)

    def _online_decoder(self) -> np.ndarray:
        """The online decoder over all nodes of the full tree (N rows)."""
        level, start, end = self._nodes
        alpha = honaker_weights(self.height)
        N = self.leaves
        # keep[l, top] = Π_{j=l+1..top} (1 − α_j): the weight a level-l estimate keeps inside a level-top estimate
        keep = np.ones((self.height + 1, self.height + 1))
        for low in range(self.height + 1):
            for top in range(low + 1, self.height + 1):
                keep[low, top] = keep[low, top - 1] * (1 - alpha[top])
        B = np.zeros((N, level.size))
        for t in range(N):
            released, prefix = 0, t + 1
            for top in range(self.height, -1, -1):
                if prefix >> top & 1:
                    lo, hi = released, released + (1 << top)
                    inside = (start >= lo) & (end <= hi)
                    B[t, inside] = alpha[level[inside]] * keep[level[inside], top]
                    released = hi
        return B

    @cached_property
    def _dense(self) -> tuple[np.ndarray, np.ndarray]:
        if self.n > DENSE_LIMIT:
            raise InvalidInputError(
                f"dense tree matrices are built for n ≤ {DENSE_LIMIT}, got n = {self.n} (streaming has no limit)"
            )
        level, start, end = self._nodes
        steps = np.arange(self.n)
        full_encoder = ((start[:, None] <= steps[None, :]) & (steps[None, :] < end[:, None])).astype(np.float64)
        encoder = full_encoder[self._kept]
        if self.variant == "full":
            X = encoder.T @ encoder
            decoder = np.tri(self.n) @ scipy.linalg.cho_solve(scipy.linalg.cho_factor(X), encoder.T)
            return decoder, encoder
        online = self._online_decoder()
        decoder = online[: self.n].copy()
        if self.variant != "online":
            decoder[self.n - 1] = online[self.leaves - 1]
        return decoder[:, self._kept], encoder

    def dense_decoder(self) -> np.ndarray:
        return self._dense[0]

    def dense_encoder(self) -> np.ndarray:
        return self._dense[1]

    def gram(self) -> np.ndarray:
        """X = CᵀC (entrywise ≥ 0)."""
        C = self.dense_encoder()
        return C.T @ C

    def per_step_variance(self) -> np.ndarray:
        B = self.dense_decoder()
        return np.sum(B * B, axis=1)

    def decoder_frobenius_squared(self) -> float:
        return float(self.per_step_variance().sum())

    def decode(self, z: np.ndarray) -> np.ndarray:
        """B·z for z of shape (inner_size,) or (inner_size, d)."""
        return self.dense_decoder() @ np.asarray(z, dtype=np.float64)

    def stream(self, draw: Callable[[], Noise]) -> HonakerNoiseStream:
        """Step-by-step noise of the online variants, drawing one noise vector per node with ``draw()``."""
        if self.variant == "full":
            raise InvalidInputError("the full Honaker decoder is not online; it cannot be streamed")
        return HonakerNoiseStream(self.n, self.variant, draw)


class HonakerNoiseStream:
    """(B·z)_t for t = 0, 1, …, n−1 of an online tree variant, in O(h·d) memory.

    ``draw()`` returns a fresh unit-variance noise vector (numpy or torch; only + and scalar *
    are used). Nodes are drawn in the order they complete; all-virtual nodes of the
    ``completion-virtual-removed`` variant are never drawn. Once released, a step's noise is
    never recomputed.
    """

    def __init__(self, n: int, variant: Variant, draw: Callable[[], object]) -> None:
        self.n, self.variant, self.draw = n, variant, draw
        self.height = max(0, int(n - 1).bit_length())
        self.alpha = honaker_weights(self.height)
        self.step = 0
        self._stack: list[tuple[int, Noise]] = []  # (level, estimate noise) of maximal complete nodes

    def __iter__(self):
        return self

    def __next__(self) -> Noise:
        if self.step >= self.n:
            raise StopIteration
        self._merge_at(0, self.draw())  # push a new leaf
        self.step += 1
        if self.step == self.n and self.variant != "online" and self.n < (1 << self.height):
            return self._complete_tree()
        total = self._stack[0][1]
        for _, estimate in self._stack[1:]:
            total = total + estimate
        return total

    def _complete_tree(self) -> Noise:
        """Run virtual zero steps up to N and return the root estimate's noise."""
        removed = self.variant == "completion-virtual-removed"
        real = self.step
        leaves = 1 << self.height
        # virtual subtrees are all-virtual nodes: their noise estimate is 0 when removed
        position = real
        while position < leaves:
            # the largest all-virtual dyadic block starting at `position` that fits before the next merge
            size = position & -position if position else leaves
            while position + size > leaves:
                size >>= 1
            level = size.bit_length() - 1
            estimate = 0 * self._stack[-1][1] if removed else self._virtual_estimate(level)
            self._merge_at(level, estimate)
            position += size
        return self._stack[0][1]

    def _virtual_estimate(self, level: int) -> Noise:
        """Estimate noise of an all-virtual node built from fresh draws (no removal)."""
        estimate = self.draw()
        for height in range(1, level + 1):
            a = self.alpha[height]
            sibling = self._virtual_estimate(height - 1)
            estimate = a * self.draw() + (1 - a) * (estimate + sibling)
        return estimate

    def _merge_at(self, level: int, estimate: Noise) -> None:
        """Push a node estimate at ``level`` and merge equal levels bottom-up (each merge completes a node)."""
        while self._stack and self._stack[-1][0] == level:
            _, left = self._stack.pop()
            level += 1
            a = self.alpha[level]
            estimate = a * self.draw() + (1 - a) * (left + estimate)
        self._stack.append((level, estimate))
