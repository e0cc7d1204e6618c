"""The anytime counter: pure ε-DP running counts without a horizon, by segments of lifted counters.

A counter that must work for every t cannot plan one lift for a horizon n. This one cuts the
steps into consecutive **segments** [b_s, b_s + ℓ_s) (0-based), fixed before any data is read by
a public schedule (``Schedule``), and runs on segment s its own known-horizon counter: the lift
of a shipped base truncated to ℓ_s (Arkhipov & Kalinin, arXiv 2607.08963, section 3), with its
own noise (the generator's child "anytime segment s") at the full ε. The release at step t of
segment s is

    r_t = Σ_{s' < s} K_{s'} + c_s(t − b_s),

c_s the segment's running count of its own steps and K_{s'} what segment s' carries: its final
release F_{s'} = c_{s'}(ℓ_{s'} − 1), or for a **two-release segment** (``Segment.theta`` θ_s and
``weight`` w_s, public dyadic rationals) K_{s'} = ⌊w·F_{s'} + (1 − w)·E_{s'} + ½⌋, where its
counter runs at (1 − θ_s)ε and E_{s'} = S^{(s')} + Z_{s'} is one discrete-Laplace estimate of the
segment's total at θ_s·ε (Z ~ DLap(θ_s·ε/Δ_step), the generator's child "anytime total s").
Equivalently r_t = S_t + Σ_{s'<s} (carried noise) + N_s(t − b_s): the noise of every step is a
function of the key and the step only.

**Privacy** (docs/privacy.md, "The anytime counter"). Changing the value of one step changes
the input of exactly one segment; each segment's release is exactly ε-DP in its own input
(the known-horizon theorem, with Δ_s the exact ‖R[:, :ℓ_s]‖₁→₁ of its lift; a two-release
segment is (1 − θ_s)ε + θ_s·ε = ε-DP, its counter and its total independent); the segments' noises
are independent (distinct child keys, SHA-256 as a PRF); so the vector of all segments' releases
is ε-DP by parallel composition, and every r_t is a function of it (post-processing). The
schedule, the bases, the α's and the noise scales depend on ε, m and the shipped scheme only,
never on the data.

**The schedule.** The shipped schemes (``base_factorizations/anytime.json``, one per metric)
list the first segments (length, base, an optional tilted top α, an optional θ and weight):
boundaries and bases chosen by a dynamic programme that minimises the largest ratio of the
anytime error to the best known-horizon error, θ on the first segments (docs/anytime.md);
after the listed segments, each segment is ``growth`` times as long as the one before, on the
last listed segment's base. A known-horizon counter that reached its horizon n goes on as an
anytime counter (``extend``): its mechanism becomes segment 0 (its own noise, not redrawn), one
segment of the best shipped lift for the steps up to the first scheme boundary ≥ 2n, then the
scheme's segments.

**Error.** The noise of r_t is a sum of independent rounded lattice noises, one per segment so
far: its variance is the sum of their variances, and its guaranteed interval adds the
sub-gamma parameters (``error_bars.NoiseMoments``; a carried estimate's two parts scaled by w
and 1 − w, ``NoiseMoments.scaled``). ``errors`` gives the anytime MaxSE and
MeanSE over steps 1 … n from the bases' profiles (no matrix): the figures of ``compare
--anytime`` and ``benchmarks/bench_anytime.py``.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from pure_dp_mf import resources
from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.factorizations.factorization import METRICS
from pure_dp_mf.release.segmented import SegmentedRelease
from pure_dp_mf.validation import UNIT_EPSILON, check_size, parse_json

SCHEMES_FILE = "anytime.json"
FORMAT = "pure_dp_mf.anytime_schemes/1"
MAX_SEGMENTS = 64  # far beyond 2^63 steps at growth ≥ 2


@dataclass(frozen=True)
class Segment:
    """One segment of a schedule: ``length`` steps on the lift of ``base`` (a shipped base's file
    name, its file's sha256 pinned in ``base_sha256``) truncated to ``length``, its top α fixed to
    ``top_alpha`` when given; or, for an extended counter's segment 0, the known-horizon
    ``mechanism`` record it ran."""

    length: int
    base: str | None = None
    base_sha256: str | None = None
    top_alpha: Fraction | None = None
    mechanism: dict | None = None
    theta: Fraction | None = None
    weight: Fraction | None = None

    def __post_init__(self) -> None:
        if (self.theta is None) != (self.weight is None):
            raise InvalidInputError("a two-release segment needs both theta and weight")
        if self.theta is not None and self.weight is not None:
            for name, value, low_open in (("theta", self.theta, True), ("weight", self.weight, False)):
                if not _dyadic(value) or not (0 < value < 1 if low_open else 0 <= value <= 1):
                    raise InvalidInputError(
                        f"a segment's {name} must be a dyadic rational in {'(0, 1)' if low_open else '[0, 1]'}"
                    )

    def to_record(self) -> dict:
        record = {
            "length": self.length,
            "base": self.base,
            "base_sha256": self.base_sha256,
            "top_alpha": None if self.top_alpha is None else str(self.top_alpha),
            "mechanism": self.mechanism,
        }
        if self.theta is not None:  # only two-release segments carry them: older records stay as they were
            record["theta"], record["weight"] = str(self.theta), str(self.weight)
        return record

    @classmethod
    def from_record(cls, record: dict) -> Segment:
        top, theta, weight = record.get("top_alpha"), record.get("theta"), record.get("weight")
        return cls(
            length=check_size(record["length"], name="segment length"),
            base=record.get("base"),
            base_sha256=record.get("base_sha256"),
            top_alpha=None if top is None else Fraction(top),
            mechanism=record.get("mechanism"),
            theta=None if theta is None else _fraction(theta, name="theta"),
            weight=None if weight is None else _fraction(weight, name="weight"),
        )

    def counter_share(self) -> Fraction:
        """1 − θ_s: the share of ε of the segment's counter (1 for a one-release segment)."""
        return 1 - self.theta if self.theta is not None else Fraction(1)


def _dyadic(value: Fraction) -> bool:
    return value.denominator & (value.denominator - 1) == 0


def _fraction(value: object, *, name: str) -> Fraction:
    try:
        return Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise InvalidInputError(f"a segment's {name} must be a rational number, got {value!r}") from None


@dataclass(frozen=True)
class Schedule:
    """The public segments of an anytime counter (module docstring): ``segments`` listed, then
    each next one ``growth`` times as long as the one before on the last listed base."""

    metric: str
    segments: tuple[Segment, ...]
    growth: int

    def segment(self, index: int) -> Segment:
        """Segment ``index`` (0-based), listed or continued."""
        if index < len(self.segments):
            return self.segments[index]
        last = self.segments[-1]
        if last.base is None:
            raise InvalidInputError("a schedule must end with a segment on a shipped base")
        return Segment(
            length=last.length * self.growth ** (index - len(self.segments) + 1), base=last.base, base_sha256=last.base_sha256
        )

    def first(self, index: int) -> int:
        """b_index: the 0-based first step of segment ``index``."""
        return sum(self.segment(i).length for i in range(index))

    def index_of(self, step: int) -> int:
        """The segment holding the 0-based ``step``."""
        start = 0
        for index in range(MAX_SEGMENTS):
            length = self.segment(index).length
            if step < start + length:
                return index
            start += length
        raise InvalidInputError(f"step {step} is beyond the anytime schedule")

    def to_record(self) -> dict:
        return {"metric": self.metric, "growth": self.growth, "segments": [segment.to_record() for segment in self.segments]}

    @classmethod
    def from_record(cls, record: dict) -> Schedule:
        return cls(
            metric=str(record["metric"]),
            growth=check_size(record["growth"], name="growth", minimum=2),
            segments=tuple(Segment.from_record(segment) for segment in record["segments"]),
        )


def shipped_schedule(metric: str = "maxse", *, folder: str | Path | None = None) -> Schedule:
    """The shipped scheme for ``metric`` (``base_factorizations/anytime.json``), each base's file
    sha256 pinned from the profiles."""
    if metric not in METRICS:
        raise InvalidInputError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    folder = Path(folder) if folder is not None else resources.BASE_FOLDER
    document = _schemes(str(folder))
    shas = _file_shas(str(folder))
    segments = []
    for entry in document["schemes"][metric]:
        base = str(entry["base"])
        if base not in shas:
            raise InvalidInputError(f"{folder / SCHEMES_FILE}: the base {base} has no certified profile")
        top, theta, weight = entry.get("top_alpha"), entry.get("theta"), entry.get("weight")
        segments.append(
            Segment(
                length=int(entry["length"]),
                base=base,
                base_sha256=shas[base],
                top_alpha=None if top is None else Fraction(top),
                theta=None if theta is None else _fraction(theta, name="theta"),
                weight=None if weight is None else _fraction(weight, name="weight"),
            )
        )
    return Schedule(metric=metric, segments=tuple(segments), growth=int(document["growth"]))


@functools.lru_cache(maxsize=2)
def _schemes(folder: str) -> dict:
    path = Path(folder) / SCHEMES_FILE
    try:
        document = parse_json(path.read_bytes(), what=str(path))
    except OSError as error:
        raise InvalidInputError(f"cannot read the anytime schemes {path}: {error}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidInputError(f"{path}: not an anytime scheme file (format {FORMAT!r} expected)")
    return document


@functools.lru_cache(maxsize=2)
def _file_shas(folder: str) -> dict[str, str]:
    from pure_dp_mf.certificates.profiles import read_profiles

    return {str(profile["base"].name): str(profile["base_sha256"]) for profile in read_profiles(folder).values()}


def extended_schedule(*, prefix: dict, horizon: int, metric: str = "maxse") -> Schedule:
    """The schedule of a known-horizon counter (mechanism record ``prefix``, ``horizon`` n) that
    goes on: segment 0 is that counter; the next ends at the first boundary b ≥ 2n of the shipped
    scheme, on the shipped lift the planner ranks best for its length; then the scheme's segments
    after b (public: n, the metric and the shipped files decide it)."""
    from pure_dp_mf.mechanisms import planner

    horizon = check_size(horizon, name="horizon")
    scheme = shipped_schedule(metric)
    index, boundary = 0, 0
    while boundary < 2 * horizon:
        boundary += scheme.segment(index).length
        index += 1
    row = planner.choose(horizon=boundary - horizon, metric=metric, mechanism="lifted")
    base = Path(str(row.base_file)).name
    bridge = Segment(length=boundary - horizon, base=base, base_sha256=_file_shas(str(resources.BASE_FOLDER))[base])
    later = [scheme.segment(i) for i in range(index, max(index, len(scheme.segments)) + 1)]
    return Schedule(
        metric=metric,
        segments=(Segment(length=horizon, mechanism=prefix), bridge, *later),
        growth=scheme.growth,
    )


# ---------------------------------------------------------------------------------------------
# The mechanism and its release.


@dataclass(frozen=True)
class AnytimeMechanism:
    """What an anytime counter runs: a ``Schedule`` of segment mechanisms (module docstring).
    It has no horizon and no single sensitivity (each segment has its own)."""

    schedule: Schedule
    name: str = "anytime"
    horizon: None = None
    expected: dict | None = None
    sensitivity: None = None
    alphas: None = None
    _built: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return "anytime"

    @property
    def record(self) -> dict:
        return {"kind": "anytime", "name": self.name, "schedule": self.schedule.to_record()}

    def segment_mechanism(self, index: int):
        """The ``Mechanism`` of segment ``index`` (built once; its base's sha256 checked)."""
        if index not in self._built:
            self._built[index] = _segment_mechanism(self.schedule.segment(index))
        return self._built[index]

    def release(self, *, generators: list, epsilon: float, step_sensitivity: int = 1, **layout) -> SegmentedRelease:
        """The exact release of this mechanism for a counter with these generators (one per
        coordinate), ε and Δ_step: segment s's noise is scaled to Δ_step·Δ_s. ``layout``
        (``page_size``, ``cached_pages``) goes to every segment's ``Mechanism.release``."""
        return SegmentedRelease(
            mechanism=self, generators=generators, epsilon=epsilon, step_sensitivity=step_sensitivity, **layout
        )


def anytime(*, metric: str = "maxse") -> AnytimeMechanism:
    """The anytime mechanism of the shipped scheme for ``metric``."""
    return AnytimeMechanism(schedule=shipped_schedule(metric), name=f"anytime ({metric} segments)")


def _segment_mechanism(segment: Segment):
    from pure_dp_mf.mechanisms import mechanism as mechanisms

    if segment.mechanism is not None:
        return mechanisms.from_record(segment.mechanism, horizon=segment.length)
    base_file = resources.BASE_FOLDER / str(segment.base)
    if not base_file.is_file():
        raise InvalidInputError(f"the anytime schedule's base {segment.base} is not in {resources.BASE_FOLDER}")
    if segment.base_sha256 is not None and hashlib.sha256(base_file.read_bytes()).hexdigest() != segment.base_sha256:
        raise InvalidInputError(f"the base {segment.base} changed since the anytime schedule was fixed (sha256 differs)")
    certificate = resources.certificate_file(base_file, folder=base_file.parent.parent / "certificates")
    return mechanisms.lifted(
        base=base_file,
        horizon=segment.length,
        certificate=certificate if certificate.is_file() else None,
        top_alpha=segment.top_alpha,
    )


# ---------------------------------------------------------------------------------------------
# Expected errors from the profiles (no matrix).


def _profile_family(base: str, metric: str | None = None):
    from pure_dp_mf.mechanisms import planner

    for family, file in planner.shipped_families():
        if file is not None and Path(file).name == base and (metric is None or family.metric == metric):
            return family
    raise InvalidInputError(f"no certified profile of the base {base}")


@functools.lru_cache(maxsize=128)
def _segment_profile(base: str, length: int, top_alpha: Fraction | None) -> tuple:
    """(the segment's family, levels p, Δ (float), row scale) for expected errors."""
    family = _profile_family(base)
    plan = family.plan(n=length, exact_sensitivity=False, top_alpha=top_alpha)
    scale = None if plan.levels == 1 else float(plan.alphas_exact[-1]) ** 2
    return family, plan.levels, plan.sensitivity, scale


def _segment_rows(segment: Segment, count: int) -> tuple[float, float, float]:
    """(Σ, max of the first ``count`` row norms², the row norm² of row count − 1), times Δ²,
    of a segment's lift (profiles; a prefix mechanism record is planned from its base's file name)."""
    base = segment.base if segment.mechanism is None else Path(str(segment.mechanism.get("base"))).name
    family, level, delta, scale = _segment_profile(str(base), segment.length, segment.top_alpha)
    total, largest = family.rows.prefix(level, count, scale=scale)
    before, _ = family.rows.prefix(level, count - 1, scale=scale) if count > 1 else (0.0, None)
    factor = delta * delta
    return float(total) * factor, float(largest) * factor, (float(total) - float(before)) * factor


def carried_variance(segment: Segment, final: float) -> float:
    """What a completed segment adds to the carried variance (ε = 1, Δ_step = 1): its counter's
    final-row variance ``final`` (at (1 − θ_s)ε already), or for a two-release segment
    w²·final + (1 − w)²·2/θ², 2/θ² the variance of Laplace noise on its total at θ_s·ε."""
    if segment.theta is None or segment.weight is None:
        return final
    w, theta = float(segment.weight), float(segment.theta)
    return w * w * final + (1 - w) ** 2 * 2 / (theta * theta)


def errors(*, schedule: Schedule, n: int, epsilon: float = UNIT_EPSILON) -> tuple[float, float]:
    """(MaxSE, MeanSE) over steps 1 … n of the anytime counter at ε (for steps in [0, 1]): the
    largest and the mean per-step variance 2(Δ_s/((1 − θ_s)ε))²‖(L_s)_u‖² + C_s, C_s the carried
    variance of the earlier segments (``carried_variance``; float64, from the profiles)."""
    n = check_size(n, name="n")
    largest, total, carried, start, index = 0.0, 0.0, 0.0, 0, 0
    while start < n:
        segment = schedule.segment(index)
        count = min(segment.length, n - start)
        share = float(segment.counter_share()) ** 2
        rows_sum, rows_max, last = _segment_rows(segment, count)
        largest = max(largest, carried + 2 * rows_max / share)
        total += count * carried + 2 * rows_sum / share
        if count == segment.length:
            carried += carried_variance(segment, 2 * _segment_rows(segment, segment.length)[2] / share)
        start += count
        index += 1
    factor = 1 / (epsilon * epsilon)
    return largest * factor, total / n * factor


def variances(*, schedule: Schedule, n: int, epsilon: float = UNIT_EPSILON) -> np.ndarray:
    """The per-step noise variance of steps 0 … n − 1 at ε, float64 (every step: benchmarks and plots)."""
    n = check_size(n, name="n")
    out, carried, start, index = [], 0.0, 0, 0
    while start < n:
        segment = schedule.segment(index)
        count = min(segment.length, n - start)
        base = segment.base if segment.mechanism is None else Path(str(segment.mechanism.get("base"))).name
        family, level, delta, scale = _segment_profile(str(base), segment.length, segment.top_alpha)
        rows = family.rows.sequence(level, count, scale=scale)
        own = 2 * delta * delta / float(segment.counter_share()) ** 2
        out.append(carried + own * rows)
        if count == segment.length:
            carried += carried_variance(segment, own * float(rows[-1]))
        start += count
        index += 1
    return np.concatenate(out) / (epsilon * epsilon)


def ratio_points(maximum: int) -> list[int]:
    """10³, 10⁴, … up to ``maximum``, and ``maximum`` (the points of the ratio tables)."""
    points = [10**e for e in range(3, int(math.log10(maximum)) + 1) if 10**e <= maximum]
    return sorted(set(points + [maximum]))


def anytime_rows(*, n: int, epsilon: float = UNIT_EPSILON) -> list:
    """Planner rows (``planner.ComparisonRow``) of the shipped anytime schedules at n: the MaxSE and
    MeanSE over steps 1 … n of a counter that did not know n (``compare --anytime``)."""
    from pure_dp_mf.mechanisms.planner import ComparisonRow

    rows = []
    for metric in METRICS:
        schedule = shipped_schedule(metric)
        max_se, mean_se = errors(schedule=schedule, n=n, epsilon=epsilon)
        segments = schedule.index_of(n - 1) + 1
        rows.append(
            ComparisonRow.from_errors(
                mechanism="anytime",
                arity=None,
                best_for=(metric,),
                n=n,
                epsilon=epsilon,
                max_se=max_se,
                mean_se=mean_se,
                source=f"anytime {metric} schedule, {segments} segment{'s' if segments > 1 else ''} by step n",
            )
        )
    return rows
