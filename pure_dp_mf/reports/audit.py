"""Empirical privacy audit of the counters: ε lower bounds with a stated confidence.

A pure-DP claim is argued (Arkhipov & Kalinin, Theorem 2.1 and Algorithm 3); this module *tests* it, the way
statistical DP testers do (DP-Sniper-style event selection, Clopper–Pearson bounds). For a pair
of neighbouring streams x, x′ and an event E on the released output, ε-DP implies
P[M(x′) ∈ E] ≤ e^ε·P[M(x) ∈ E], so with a Clopper–Pearson lower bound p′_lo on P[M(x′) ∈ E] and an
upper bound p_hi on P[M(x) ∈ E],

    ε ≥ log(p′_lo / p_hi)                                                               (★)

holds with the confidence of both bounds. The audit reports (★) for several pairs, and says that
the claimed ε is *contradicted* when (★) exceeds it for some pair.

**What is audited.** The release of the library's counter (``stream.ContinualCounter``), the
exact lattice release of ``lattice.py``: y = W·x + ⌊2^-g·L̄·Y + ½⌋ with W the prefix-sum
workload, L̄ the lifted decoder with every α = 1 and Y integer discrete-Laplace noise whose
rates carry the α's. For speed the trials are vectorised: L̄ (the first n rows restricted to the
columns they use) is read off the counter's own streaming decoder (``streaming.materialize``). The first ``EXACT_TRIALS`` trials take the counter's own Y (its exact sampler and
keyed stream, ``NoiseGenerator.from_seed(seed·2³² + i)``); the others draw Y from the same law with
numpy (DLap(λ) = G₁ − G₂ for geometric G: the law up to float rounding in the geometric
sampler, far below the audit's resolution). The first ``cross_checks`` trials of every audited
stream are recomputed with a real ``ContinualCounter(...).counts(x)`` and must agree to the
integer (``AuditError`` otherwise). The tree baselines run through the same counter as streaming
decoders (``mechanism.tree``). The claimed law used to design events is
L_p·w with w ≈ Laplace(b), b = Δ/ε (w_i = 2^-g·Y_i/a_i on its lattice, L_p·w = 2^-g·L̄·Y). The
streams of a pair share the trials' noise (common random numbers); this is valid because every
interval is a marginal statement combined by a union bound.

**Events.** The noise law is known, so events come from it. For the output shift d = W·(x′ − x),
the linear programme λ = min{‖u‖₁ : L·u = d} gives the exact privacy loss λ/b of the pair for the
claimed (Laplace, unrounded) law — a lower bound cannot exceed it for a correct counter, and
rounding can only lower the loss — and two statistics of the output:

* ``linear``: vᵀ(y − W·x)/b with v the LP dual (‖Lᵀv‖∞ ≤ 1, vᵀd = λ, least ‖Lᵀv‖₁): its tail
  ratio tends to e^{λ/b}; the right statistic against noise with lighter tails (a Gaussian);
* ``fisher``: dᵀ(L·Lᵀ)⁺(y − W·x), the best linear statistic when the noise is nearly Gaussian
  (many Laplace variables mixed by a dense L);
* ``llr``: the Laplace log-likelihood ratio Σ_j (|ŵ_j| − |ŵ_j − u_j|)/b over the coordinates j of
  the LP solution u that the output identifies (ŵ_j = g_jᵀ(y − W·x) with Lᵀg_j = e_j); when they
  carry all of λ (every tree whose L is square) this is the most powerful test of the pair.

Events are thresholds {s ≥ τ} (favouring x′) or {s ≤ τ} (favouring x) on a statistic s.

**Sample splitting.** The trials are split in two halves: statistic, direction and threshold of each
pair are chosen on the first half (maximising (★) computed there), (★) is evaluated on the second.
Each pair uses two one-sided Clopper–Pearson bounds at level α′ = (1 − confidence)/(2·pairs), so
with probability ≥ ``confidence`` all reported lower bounds hold at once, and a counter that
really is ε-DP is called contradicted with probability ≤ 1 − confidence.

**What it cannot prove.** A lower bound from finitely many samples, only for the pairs and
events tried: passing the audit is evidence, not a proof of privacy. It cannot see failures
outside the pairs tried, losses smaller than its statistical resolution, or events of
probability ≪ 1/trials (e.g. the 2⁻⁵³ tail a float Laplace sampler truncates: docs/privacy.md
shows that failure exactly instead).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import scipy.optimize
import scipy.stats

from pure_dp_mf.engines.continual import ContinualCounter
from pure_dp_mf.engines.generator import NoiseGenerator
from pure_dp_mf.errors import InvalidInputError, PureDPMFError
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import mechanism as mechanisms
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.mechanisms.resolve import resolve_mechanism
from pure_dp_mf.mechanisms.streaming import materialize
from pure_dp_mf.validation import check_epsilon, check_positive, check_size

MECHANISMS = ("lifted", *trees.MECHANISMS)
"""The counters ``counter_target`` can audit: the lifted counter and every tree baseline."""

MAX_N = 1024
"""Largest stream length audited (L is read off the engine column by column)."""

MAX_ENTRIES = 60_000_000
"""Largest trials × n noise matrix held in memory."""

SEED_STRIDE = 2**32
"""Trial i < ``EXACT_TRIALS`` of an audit with seed s is the counter with ``NoiseGenerator.from_seed(s·SEED_STRIDE + i)``."""

EXACT_TRIALS = 8
"""Trials whose integer noise is the counter's own (its exact sampler and keyed stream); the others
draw the same law with numpy, for speed, through the same release map."""

WORST_CANDIDATES = 24
"""Positions whose exact loss λ/b is computed to find the worst one: all when n ≤ 24, else the
first 8 and 16 evenly spaced ones (one LP each)."""


class AuditError(PureDPMFError):
    """The audit cannot run as stated (e.g. its vectorised releases differ from the counter's)."""


# ------------------------------------------------------------------------------- the target


@dataclass(frozen=True)
class AuditTarget:
    """A mechanism to audit, as the audit sees it: release = workload·x + noise.

    ``workload`` (m×n, integers) is the exact part, ``decoder`` (m×M) and ``scale`` b the
    *claimed* noise law (b·decoder·z, z i.i.d. Laplace(1)), used only to design events;
    ``sample_noise(trials, seed)`` returns the noise actually released, a (trials, m) array;
    ``cross_check(streams, noise, seed)`` (optional) recomputes releases with the real code path
    and returns how many it compared, raising ``AuditError`` on any difference.
    """

    name: str
    epsilon: float
    workload: np.ndarray
    decoder: np.ndarray
    scale: float
    sample_noise: Callable[[int, int], np.ndarray]
    description: str
    cross_check: Callable[[Sequence[np.ndarray], np.ndarray, int], int] | None = None

    @property
    def n(self) -> int:
        return self.workload.shape[1]


def trial_seed(seed: int, trial: int) -> int:
    """The generator seed of trial ``trial`` of an audit with seed ``seed``."""
    return seed * SEED_STRIDE + trial


def _engine_map(mechanism, n: int) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
    """(L̄[:n] on the noise coordinates its rows read, those coordinates (level, index), the level
    of each), read off the mechanism's own streaming decoder (``streaming.materialize``, checked
    against ``next`` on unit vectors in tests)."""
    matrix, coordinates = materialize(mechanism.decoder, n)
    keep = np.any(matrix != 0.0, axis=0)
    used = [coordinate for coordinate, kept in zip(coordinates, keep, strict=True) if kept]
    return matrix[:, keep], used, np.array([level for level, _ in used], dtype=np.int64)


def counter_target(
    *,
    mechanism: str,
    n: int,
    epsilon: float,
    arity: int | None = None,
    base: Factorization | str | Path | None = None,
) -> AuditTarget:
    """The library's ``ContinualCounter`` as an ``AuditTarget`` (see the module docstring).

    ``mechanism`` is ``"lifted"`` (the lifted ``base``, default the lifted base the planner ranks
    best for n) or a tree of ``trees.MECHANISMS`` (``arity`` defaults to its best arity for
    MaxSE), each the ``Mechanism`` a counter runs.
    """

    if mechanism not in MECHANISMS:
        raise InvalidInputError(f"unknown mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}")
    n = check_size(n, name="n", maximum=MAX_N)
    epsilon = check_epsilon(epsilon)
    try:
        if mechanism == "lifted":
            if arity is not None:
                raise InvalidInputError("the lifted counter takes no arity")
            built = resolve_mechanism(horizon=n, mechanism="lifted", base=base).mechanism
            label = f"lifted counter, {built.name} (k = {built.record['base_size']})"
        else:
            if base is not None:
                raise InvalidInputError("a tree mechanism takes no base file")
            if mechanism in trees.ARITY_MECHANISMS and arity is None:
                arity = trees.best_arity(mechanism=mechanism, n=n, metric="maxse")
            built = mechanisms.tree(mechanism=mechanism, horizon=n, arity=arity)
            label = f"{built.name}, streamed by the counter"
    except ArithmeticError as error:  # e.g. norms beyond float range while planning the lift
        raise InvalidInputError(f"the counter cannot be built from this base: {type(error).__name__}: {error}") from None
    reference = ContinualCounter(epsilon=epsilon, mechanism=built, generator=NoiseGenerator.from_seed(0))
    g = built.atoms.grid_bits
    # L̄ on the coordinates rows [0, n) use; the counter's noise is ⌊2^-g·L̄·Y + ½⌋ (lattice.py)
    release_map, used, levels = _engine_map(built, n)
    rate_of = reference.rates
    factors = np.array([float(rate_of(1) / rate_of(int(level))) for level in levels])  # a_i: 1, or α_{ℓ−1} for coarse
    rates = np.array([float(rate_of(int(level))) for level in levels])
    decoder = release_map / factors  # L_p·w = 2^-g·L̄·Y with w_i = 2^-g·Y_i/a_i
    scale = reference.scale

    def release(Y: np.ndarray) -> np.ndarray:
        return np.floor(np.ldexp(Y @ release_map.T, -g) + 0.5).astype(np.int64)

    def counter(trial: int, seed: int) -> ContinualCounter:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ContinualCounter(epsilon=epsilon, mechanism=built, generator=NoiseGenerator.from_seed(trial_seed(seed, trial)))

    def counter_integers(real: ContinualCounter) -> np.ndarray:
        """The counter's own Y on the used coordinates (its exact sampler, its keyed stream)."""
        source = real.lattice_sources[0]
        return np.array([source.integers(index, 1, level)[0] for level, index in used], dtype=np.float64)

    def sample_noise(trials: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng([seed, trials])
        p = -np.expm1(-rates)  # DLap(λ) = G₁ − G₂, G geometric on {0, 1, …} with success 1 − e^{−λ}
        Y = (rng.geometric(p, size=(trials, len(rates))) - rng.geometric(p, size=(trials, len(rates)))).astype(np.float64)
        for i in range(min(trials, EXACT_TRIALS)):  # the first trials: the counter's own noise
            Y[i] = counter_integers(counter(i, seed))
        return release(Y)

    def cross_check(streams: Sequence[np.ndarray], noise: np.ndarray, seed: int) -> int:
        if noise.shape[0] > EXACT_TRIALS:
            raise AuditError(f"at most {EXACT_TRIALS} trials are drawn by the counter itself and can be cross-checked")
        compared = 0
        for i in range(noise.shape[0]):
            for x in streams:
                if not np.array_equal(counter(i, seed).counts(x), np.cumsum(x) + noise[i]):
                    raise AuditError(
                        f"trial {i}: the vectorised release differs from ContinualCounter's; the audit would not audit the counter"
                    )
                compared += 1
        return compared

    return AuditTarget(
        name=mechanism,
        epsilon=epsilon,
        workload=np.tril(np.ones((n, n), dtype=np.int64)),
        decoder=decoder,
        scale=scale,
        sample_noise=sample_noise,
        description=f"{label}: n = {n}, ε = {epsilon:g}, b = ‖R‖₁→₁/ε = {scale:.6g}, {decoder.shape[1]} noise variables",
        cross_check=cross_check,
    )


# -------------------------------------------------------------------------------- the pairs


@dataclass(frozen=True)
class Pair:
    """Neighbouring streams x, x′ (differing in one position)."""

    name: str
    stream: np.ndarray
    neighbour: np.ndarray

    @property
    def position(self) -> int:
        """The 1-based position where the streams differ."""
        return int(np.flatnonzero(self.stream != self.neighbour)[0]) + 1


def pair_loss(*, decoder: np.ndarray, shift: np.ndarray, dual: bool = True) -> tuple[float, np.ndarray, np.ndarray | None]:
    """λ = min{‖u‖₁ : L·u = d}, a minimiser u and a dual v (max vᵀd, ‖Lᵀv‖∞ ≤ 1), by HiGHS.

    For y = d·[x′] + L·(b·z), z Laplace(1), the privacy loss of the pair is exactly λ/b: y under x′
    is y under x moved by L·u for every such u (loss ≤ ‖u‖₁/b), and the tail of vᵀy attains it."""
    L = np.asarray(decoder, dtype=np.float64)
    m, M = L.shape
    primal = scipy.optimize.linprog(np.ones(2 * M), A_eq=np.hstack([L, -L]), b_eq=shift, bounds=(0, None), method="highs")
    if primal.status != 0:
        raise AuditError(f"the loss LP of a pair failed: {primal.message}")
    if not dual:
        return float(primal.fun), primal.x[:M] - primal.x[M:], None
    # The dual optimum is rarely unique; among the optimal v take one with the least ‖Lᵀv‖₁ (few
    # noise variables at full weight: its tail ratio approaches e^{λ/b} soonest). Variables (v, t).
    d = np.asarray(shift, dtype=np.float64)
    identity = np.eye(M)
    solution = scipy.optimize.linprog(
        np.concatenate([np.zeros(m), np.ones(M)]),
        A_ub=np.vstack([np.hstack([L.T, -identity]), np.hstack([-L.T, -identity]), np.concatenate([-d, np.zeros(M)])[None, :]]),
        b_ub=np.concatenate([np.zeros(2 * M), [-float(primal.fun) * (1 - 1e-9)]]),
        bounds=[(None, None)] * m + [(0, 1)] * M,
        method="highs",
    )
    if solution.status != 0:
        raise AuditError(f"the dual loss LP of a pair failed: {solution.message}")
    return float(primal.fun), primal.x[:M] - primal.x[M:], solution.x[:m]


def default_pairs(target: AuditTarget, *, seed: int = 0) -> list[Pair]:
    """first, middle, last (all zeros against one one), worst (largest λ among the
    ``WORST_CANDIDATES`` positions tried), dense (a random dense stream against itself with the
    worst position flipped)."""
    n = target.n
    candidates: list[int]
    if n <= WORST_CANDIDATES:
        candidates = list(range(n))
    else:
        candidates = sorted(set(range(8)) | set(np.linspace(0, n - 1, WORST_CANDIDATES - 8).astype(int).tolist()))
    losses = {i: pair_loss(decoder=target.decoder, shift=target.workload[:, i], dual=False)[0] for i in candidates}
    worst = max(losses, key=lambda i: (losses[i] > max(losses.values()) - 1e-9, -i))

    def one(i: int) -> np.ndarray:
        x = np.zeros(n, dtype=np.int64)
        x[i] = 1
        return x

    zeros = np.zeros(n, dtype=np.int64)
    pairs = {"first": 0, "middle": (n - 1) // 2, "last": n - 1, "worst": worst}
    result, seen = [], set()
    for name, i in pairs.items():
        if i not in seen:
            seen.add(i)
            result.append(Pair(name=name, stream=zeros, neighbour=one(i)))
    dense = np.random.default_rng([seed, 12]).integers(0, 2, size=n).astype(np.int64)
    flipped = dense.copy()
    flipped[worst] = 1 - flipped[worst]
    result.append(Pair(name="dense", stream=dense, neighbour=flipped))
    return result


# --------------------------------------------------------------------------- the statistics


def clopper_pearson(count: np.ndarray | int, trials: int, *, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper–Pearson bounds at level α: (lower, upper) with P[p < lower] ≤ α and
    P[p > upper] ≤ α for a binomial count."""
    k = np.asarray(count, dtype=np.float64)
    lower = np.where(k > 0, scipy.stats.beta.ppf(alpha, np.maximum(k, 1), trials - k + 1), 0.0)
    upper = np.where(k < trials, scipy.stats.beta.ppf(1 - alpha, k + 1, np.maximum(trials - k, 1)), 1.0)
    return lower, upper


def _log_ratio(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(lower) - np.log(upper)


@dataclass(frozen=True)
class _Statistic:
    name: str
    evaluate: Callable[[np.ndarray], np.ndarray]  # e = y − W·x (trials × m) → s (trials,)


def _statistics(target: AuditTarget, shift: np.ndarray) -> tuple[float, list[_Statistic]]:
    L, b = target.decoder, target.scale
    loss, u, v = pair_loss(decoder=L, shift=shift)

    def linear(e: np.ndarray, v: np.ndarray = cast(np.ndarray, v)) -> np.ndarray:
        return e @ v / b

    statistics = [_Statistic("linear", linear)]
    fisher = np.linalg.lstsq(L @ L.T, shift, rcond=None)[0]  # Gaussian-optimal direction (LLᵀ)⁻¹d
    if np.any(fisher != 0):
        direction = fisher / np.abs(fisher).max()

        def fisher_statistic(e: np.ndarray, f: np.ndarray = direction) -> np.ndarray:
            return e @ f

        statistics.append(_Statistic("fisher", fisher_statistic))
    support = np.flatnonzero(np.abs(u) > 1e-9)
    if support.size:
        unit = np.zeros((L.shape[1], support.size))
        unit[support, np.arange(support.size)] = 1.0
        G = np.linalg.lstsq(L.T, unit, rcond=None)[0]  # Lᵀ·g_j = e_j where solvable
        ok = np.max(np.abs(L.T @ G - unit), axis=0) < 1e-9
        if ok.any():
            G, w = G[:, ok], u[support[ok]]

            def llr(e: np.ndarray, G: np.ndarray = G, w: np.ndarray = w) -> np.ndarray:
                return (np.abs(e @ G) - np.abs(e @ G - w)).sum(axis=1) / b

            statistics.append(_Statistic("llr", llr))
    return loss / b, statistics


def _candidates(values: np.ndarray, other: np.ndarray, *, points: int = 400) -> np.ndarray:
    pooled = np.concatenate([values, other])
    grid = 1.0 - np.geomspace(1.0, 1.0 / pooled.size, points)
    return np.unique(np.concatenate([np.quantile(pooled, grid), np.quantile(pooled, 1.0 - grid)]))


def _select(s_other: np.ndarray, s_favoured_up: np.ndarray, *, alpha: float):
    """Best threshold event on the selection half: (score, direction, τ)."""
    best = (-math.inf, "+", math.inf)
    taus = _candidates(s_other, s_favoured_up)
    so, sf = np.sort(s_other), np.sort(s_favoured_up)
    T = so.size
    # {s ≥ τ} favours x′ (whose statistic is s_favoured_up); {s ≤ τ} favours x.
    up_fav = T - np.searchsorted(sf, taus, side="left")
    up_oth = T - np.searchsorted(so, taus, side="left")
    down_fav = np.searchsorted(so, taus, side="right")
    down_oth = np.searchsorted(sf, taus, side="right")
    for direction, fav, oth in (("+", up_fav, up_oth), ("-", down_fav, down_oth)):
        lower, _ = clopper_pearson(fav, T, alpha=alpha)
        _, upper = clopper_pearson(oth, T, alpha=alpha)
        scores = _log_ratio(lower, upper)
        i = int(np.argmax(scores))
        if scores[i] > best[0]:
            best = (float(scores[i]), direction, float(taus[i]))
    return best


# ------------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class PairResult:
    """The audit of one pair: the event, both counts on the estimation half, ε bounds."""

    name: str
    position: int
    stream_ones: int
    statistic: str
    event: str
    favoured: str
    count_favoured: int
    count_other: int
    trials: int
    probability_favoured_lower: float
    probability_other_upper: float
    epsilon_estimate: float
    epsilon_lower: float
    exact_loss: float
    contradicted: bool


@dataclass(frozen=True)
class AuditReport:
    """The whole audit. ``epsilon_lower`` is the largest lower bound over pairs; all bounds hold
    simultaneously with probability ≥ ``confidence``."""

    mechanism: str
    description: str
    n: int
    epsilon: float
    trials: int
    seed: int
    confidence: float
    interval_alpha: float
    cross_checked: int
    pairs: list[PairResult]
    epsilon_lower: float
    contradicted: bool
    seconds: float
    statement: str = field(default="")

    def to_json(self) -> dict:
        return asdict(self)


def _audit_pair(*, target: AuditTarget, pair: Pair, selection: np.ndarray, estimation: np.ndarray, alpha: float) -> PairResult:
    """One pair: choose statistic, direction and threshold on ``selection``, bound ε on ``estimation``."""
    half = estimation.shape[0]
    shift = target.workload @ (pair.neighbour - pair.stream)
    exact, statistics = _statistics(target, shift)
    # e = y − W·x: noise under x, noise + shift under x′.
    choice = (-math.inf, statistics[0], "+", math.inf)
    for statistic in statistics:
        score, direction, tau = _select(statistic.evaluate(selection), statistic.evaluate(selection + shift), alpha=alpha)
        if score > choice[0]:
            choice = (score, statistic, direction, tau)
    _, statistic, direction, tau = choice
    s_x, s_xp = statistic.evaluate(estimation), statistic.evaluate(estimation + shift)
    if direction == "+":
        fav, oth, favoured, event = int((s_xp >= tau).sum()), int((s_x >= tau).sum()), "x′", f"{statistic.name} ≥ {tau:.6g}"
    else:
        fav, oth, favoured, event = int((s_x <= tau).sum()), int((s_xp <= tau).sum()), "x", f"{statistic.name} ≤ {tau:.6g}"
    lower, _ = clopper_pearson(fav, half, alpha=alpha)
    _, upper = clopper_pearson(oth, half, alpha=alpha)
    bound = float(_log_ratio(lower, upper))
    estimate = math.log(fav / oth) if fav and oth else (math.inf if fav else -math.inf)
    return PairResult(
        name=pair.name,
        position=pair.position,
        stream_ones=int(pair.stream.sum()),
        statistic=statistic.name,
        event=event,
        favoured=favoured,
        count_favoured=fav,
        count_other=oth,
        trials=half,
        probability_favoured_lower=float(lower),
        probability_other_upper=float(upper),
        epsilon_estimate=estimate,
        epsilon_lower=bound,
        exact_loss=exact,
        contradicted=bound > target.epsilon,
    )


def audit(
    target: AuditTarget,
    *,
    trials: int,
    seed: int = 0,
    confidence: float = 0.99,
    pairs: Sequence[Pair] | None = None,
    cross_checks: int = 4,
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    """Audit ``target`` with ``trials`` releases per stream (half to choose events, half to
    estimate); see the module docstring for the method and what the result means."""
    start = time.perf_counter()
    trials = check_size(trials, name="trials", minimum=200)
    seed = check_size(seed, name="seed", minimum=0)
    confidence = check_positive(confidence, name="confidence")
    if not 0.5 <= confidence < 1:
        raise InvalidInputError(f"confidence must be in [0.5, 1), got {confidence}")
    if trials * target.workload.shape[0] > MAX_ENTRIES:
        raise InvalidInputError(
            f"trials × outputs = {trials} × {target.workload.shape[0]} exceeds {MAX_ENTRIES}; use fewer trials"
        )
    say = progress or (lambda message: None)
    pairs = list(pairs) if pairs is not None else default_pairs(target, seed=seed)
    alpha = (1 - confidence) / (2 * len(pairs))
    say(f"sampling {trials} releases")
    noise = np.asarray(target.sample_noise(trials, seed), dtype=np.float64)
    if noise.shape != (trials, target.workload.shape[0]):
        raise AuditError(f"the sampler returned shape {noise.shape}, expected {(trials, target.workload.shape[0])}")
    checked = 0
    if target.cross_check is not None and cross_checks:
        say("cross-checking against the counter")
        streams = [s for p in pairs for s in (p.stream, p.neighbour)]
        checked = target.cross_check(streams, noise[:cross_checks], seed)
    half = trials // 2
    selection, estimation = noise[:half], noise[half : 2 * half]
    results = []
    for pair in pairs:
        say(f"pair {pair.name}")
        results.append(_audit_pair(target=target, pair=pair, selection=selection, estimation=estimation, alpha=alpha))
    best = max(r.epsilon_lower for r in results)
    contradicted = any(r.contradicted for r in results)
    statement = (
        f"With probability ≥ {confidence:g} every ε lower bound holds at once (Clopper–Pearson, α = {alpha:.3g} per bound, "
        f"events chosen on {half} trials, estimated on {half} others). "
        + (
            f"The claimed ε = {target.epsilon:g} is CONTRADICTED: ε ≥ {best:.4f}."
            if contradicted
            else f"The claimed ε = {target.epsilon:g} is not contradicted (largest lower bound {best:.4f}); "
            "this is not a proof of privacy: only these pairs and events were tried."
        )
    )
    return AuditReport(
        mechanism=target.name,
        description=target.description,
        n=target.n,
        epsilon=target.epsilon,
        trials=trials,
        seed=seed,
        confidence=confidence,
        interval_alpha=alpha,
        cross_checked=checked,
        pairs=results,
        epsilon_lower=best,
        contradicted=contradicted,
        seconds=time.perf_counter() - start,
        statement=statement,
    )
