"""Benchmark: the cost of counting one step from a cold process, side by side with ``import numpy``.

    .venv/bin/python benchmarks/bench_startup.py [--repeats 7]

Runs, alternately and ``--repeats`` times each, (a) ``python -c "import numpy"`` and (b)
``pure-dp-mf count --epsilon 1 --horizon 10`` on one input line, each in a fresh process, and
prints the median wall time and the median peak RSS (``resource.getrusage`` of the child) of
each, their ratio and difference, and which heavy modules (the Gaussian side, scipy.signal,
torch, matplotlib, pyspark) the count process imported. Goals: at most 1 s and 150 MB for (b).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COUNT = (
    "import sys, io; sys.stdin = io.StringIO('1\\n'); sys.argv = ['pure-dp-mf', 'count', '--epsilon', '1', '--horizon', '10']\n"
    "from pure_dp_mf.cli import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "heavy = sorted({m.split('.')[0] + ('.' + m.split('.')[1] if m.startswith(('scipy.', 'pure_dp_mf.')) else '') for m in sys.modules\n"
    "    if m.startswith(('torch', 'scipy.signal', 'pure_dp_mf.gaussian', 'matplotlib', 'pyspark'))})\n"
    "print('heavy modules:', heavy or 'none', file=sys.stderr)\n"
)


def _run(code: str) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB, stderr) of ``python -c code`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far, in KB
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return wall, max(peak, before) / 1024, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    numpy_times, count_times, count_rss, numpy_rss = [], [], [], []
    heavy = ""
    for _ in range(arguments.repeats):
        wall, _, _ = _run("import numpy")
        numpy_times.append(wall)
        wall, _, stderr = _run(COUNT)
        count_times.append(wall)
        heavy = [line for line in stderr.splitlines() if line.startswith("heavy modules:")][-1]
    # peak RSS per kind: measured in separate processes so that one kind's peak does not mask the other's
    for code, into in (("import numpy", numpy_rss), (COUNT, count_rss)):
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                f"{code}\nimport resource, sys; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)",
            ],
            capture_output=True,
            text=True,
        )
        into.append(int(probe.stderr.strip().splitlines()[-1]) / 1024)
    numpy_median, count_median = statistics.median(numpy_times), statistics.median(count_times)
    print(f"{'process':<44} {'median wall s':>14} {'peak RSS MB':>12}")
    label = 'python -c "import numpy"'
    print(f"{label:<44} {numpy_median:>14.3f} {numpy_rss[0]:>12.1f}")
    print(f"{'pure-dp-mf count --epsilon 1 --horizon 10':<44} {count_median:>14.3f} {count_rss[0]:>12.1f}")
    print(f"count / numpy: {count_median / numpy_median:.2f}x; count − numpy: {count_median - numpy_median:.3f} s")
    print(heavy)
    print(f"goals: ≤ 1 s ({'met' if count_median <= 1 else 'not met'}), ≤ 150 MB ({'met' if count_rss[0] <= 150 else 'not met'})")


if __name__ == "__main__":
    main()
