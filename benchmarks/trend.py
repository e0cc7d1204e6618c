"""The trend of the certified constants over the base size k: a fit, not a bound.

    .venv/bin/python benchmarks/trend.py [--metric maxse] [--smallest 64] [--plot trend.png]

For each shipped certificate ``certificates/kKKKK_METRIC.json`` it reads the certified c (c₂ =
‖L‖₂→∞·‖R‖₁→₁ for MaxSE, c_F = ‖L‖_F·‖R‖₁→₁/√k for MeanSE) and the lifted constant
2c²/log₂(2k+1)³ (Arkhipov & Kalinin, arXiv 2607.08963, Theorem 2.5), and fits, by least squares
in float64 over k ≥ ``--smallest``,

    c^{2/3} ≈ a·log₂k + b.

Why this form: by Theorem 2.5 the ◇ lift of one base reaches every larger size N with c² growing
like log₂³N (half the base's lifted constant times log₂³N in the limit), so the best c at size k
grows at most like log₂^{3/2}k, that is c^{2/3} at most linearly in log₂k; a line in log₂k is the
natural extrapolation, and its lifted constant 2(a·log₂k + b)³/log₂(2k+1)³ tends to 2a³. The fit says where training at larger k is likely to
land; it proves nothing. The certificate values it prints are the exact claims rounded up
(``figures.round_up``); the fitted and extrapolated ones are floats, marked "fit".
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from pure_dp_mf.certificates.certify import Certificate
from pure_dp_mf.reports.figures import round_up

ROOT = Path(__file__).resolve().parents[1]
CLAIM = {"maxse": "c2", "meanse": "cf"}


def certified(metric: str, folder: Path = ROOT / "certificates") -> list[dict]:
    """(k, c, lifted constant) of every shipped certificate of ``metric``, exact, by k."""
    rows = []
    for path in sorted(folder.glob(f"k*_{metric}.json")):
        certificate = Certificate.read(path)
        claims = certificate.claims
        rows.append(
            {"k": certificate.n, "c": claims[CLAIM[metric]].value, "lifted": claims["lifted_constant"].value, "file": path.name}
        )
    return sorted(rows, key=lambda row: row["k"])


def fit(rows: list[dict], *, smallest: int) -> tuple[float, float]:
    """(a, b) of the least-squares line c^{2/3} ≈ a·log₂k + b over the rows with k ≥ ``smallest``."""
    used = [row for row in rows if row["k"] >= smallest]
    if len(used) < 2:
        raise SystemExit(f"need two certificates with k ≥ {smallest} to fit a line, found {len(used)}")
    x = np.array([math.log2(row["k"]) for row in used])
    y = np.array([float(row["c"]) ** (2 / 3) for row in used])
    a, b = np.polyfit(x, y, 1)
    return float(a), float(b)


def fitted_lifted(k: float, a: float, b: float) -> float:
    """The lifted constant 2c²/log₂(2k+1)³ of the fitted c at size k."""
    return 2 * (a * math.log2(k) + b) ** 3 / math.log2(2 * k + 1) ** 3


def smallest_k_reaching(goal: float, a: float, b: float, *, largest_log2: int = 40) -> int | None:
    """The least power of two k whose fitted lifted constant is ≤ ``goal`` (None up to 2^largest_log2)."""
    for log2 in range(2, largest_log2 + 1):
        if fitted_lifted(2**log2, a, b) <= goal:
            return 2**log2
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metric", choices=sorted(CLAIM), nargs="+", default=["maxse", "meanse"])
    parser.add_argument("--smallest", type=int, default=64, help="the least k in the fit")
    parser.add_argument("--extrapolate", type=int, nargs="+", default=[4096, 8192, 16384])
    parser.add_argument("--goal", type=float, nargs="+", default=None, help="lifted constants to reach (per metric)")
    parser.add_argument("--plot", help="write the certified and fitted lifted constants against k (PNG)")
    arguments = parser.parse_args()
    goals = arguments.goal or [{"maxse": 0.0715, "meanse": 0.0700}[metric] for metric in arguments.metric]
    curves = {}
    for metric, goal in zip(arguments.metric, goals, strict=False):
        rows = certified(metric)
        a, b = fit(rows, smallest=arguments.smallest)
        name = "c₂" if metric == "maxse" else "c_F"
        print(f"\n{metric}: c^(2/3) ≈ {a:.6f}·log₂k + {b:.6f} (least squares over k = {arguments.smallest} … {rows[-1]['k']})")
        print(f"| k | certified {name} | certified lifted | fit's lifted | certified − fit |")
        print("|---:|---:|---:|---:|---:|")
        for row in rows:
            model = fitted_lifted(row["k"], a, b)
            marker = "" if row["k"] >= arguments.smallest else " (not in the fit)"
            print(
                f"| {row['k']}{marker} | {round_up(row['c'], decimals=6)} | {round_up(row['lifted'], decimals=7)} | "
                f"{model:.7f} | {float(row['lifted']) - model:+.7f} |"
            )
        for k in arguments.extrapolate:
            print(f"| {k} (fit) | {(a * math.log2(k) + b) ** 1.5:.6f} | – | {fitted_lifted(k, a, b):.7f} | – |")
        print(f"fit's limit k → ∞: 2a³ = {2 * a**3:.7f}")
        reach = smallest_k_reaching(goal, a, b)
        print(f"least power of two k whose fitted lifted constant is ≤ {goal}: {reach if reach else 'none up to 2^40'}")
        curves[metric] = (rows, a, b)
    if arguments.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(6.5, 4))
        for metric, (rows, a, b) in curves.items():
            ks = [row["k"] for row in rows]
            axis.plot(ks, [float(row["lifted"]) for row in rows], "o", label=f"{metric}: certified")
            grid = np.geomspace(min(arguments.smallest, ks[0]), max(arguments.extrapolate), 200)
            axis.plot(grid, [fitted_lifted(k, a, b) for k in grid], "--", label=f"{metric}: fit (not a bound)")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("base size k")
        axis.set_ylabel("lifted constant 2c²/log₂(2k+1)³")
        axis.legend()
        figure.tight_layout()
        figure.savefig(arguments.plot)
        print(f"plot: {arguments.plot}")


if __name__ == "__main__":
    main()
