"""Benchmark: the exact lattice release against the float-Laplace release, side by side, in one run.

Three paths at n = 10^6 (``--n``), each for the exact path of this version and the float path of
the last version that had one (float Laplace noise, not pure DP: kept here only as the yardstick):

* **library batch**: ``ContinualCounter.counts`` on chunks of 2^16 steps, on the mechanism
  ``mechanisms.mechanism.lifted(base=…, horizon=n)``. The float path is rebuilt from this
  version's parts: a ``LiftedDecoder`` with the mechanism's real α's (as floats) streamed by
  ``init``/``next`` over a ``GeneratorSource`` (float Laplace from a keyed ``NoiseGenerator``),
  scaled by the counter's Δ/ε and rounded with ``round_to_integers``, as the float counter did;
  both use the same decoder code and the same chunking;
* **count, stdin → stdout, no state**: the real command on a file of n lines of 0/1;
* **count with --state and --output**: ``--state`` is a SQLite journal with group commits
  (``--commit-every``, default 65536 lines per transaction). The float path wrote its state
  before every single step (two fsyncs a step), so its rate is measured at ``--float-state-n``
  steps (default 2·10⁴; the rate is fsync-bound and does not depend on n).

For the command the float path is the ``pure-dp-mf count`` of git revision ``--float-revision``
(default 1f18a8c, the last release with float noise), exported with ``git archive`` into a
temporary folder and run with the same interpreter (the script checks that each command imports
the package from the tree it is meant to). Each command figure is given end to end (n / wall
time, start-up included: for the exact path that includes the base's exact decoder, computed
once per process) and in steady state (n / (T(n) − T(1 line)), start-up excluded). Medians of
``--repeats`` runs; the ratios are exact/float of the steady-state rates (end to end for the
library row, which has no start-up). One BLAS thread (``threadpoolctl`` here, the
``*_NUM_THREADS`` variables in the commands). The lineage registry of the states is a temporary
file (``PURE_DP_MF_REGISTRY``), never the user's. Usage:

    .venv/bin/python benchmarks/bench_count.py [--n 1000000] [--repeats 3] [--base FILE]
    .venv/bin/python benchmarks/bench_count.py --quick     # n = 5·10^4, one run, k = 256 base

``--against REV`` prints the speed goals' table: the library row (CPU time), the two command
rows (end to end) and their peak memory at n/10 and n, this tree against git revision ``REV``
(``git archive``), runs interleaved, with the goals and the ratios. Both trees are byte-compiled
first, as an installed package is.

``--quick`` (a smoke test that finishes well under a minute) is too small to resolve the commands'
steady state (their start-up, a few seconds, dwarfs the work): a steady rate that T(n) − T(1 line)
does not resolve prints as "—" and its ratio falls back to end to end. ``--no-command`` times
the library row only.

Default base: the shipped k = 1024 MaxSE base (``--quick``: k = 256). The k = 2048 base also
ships; its exact decoder takes about half a minute to compute per process, which the end-to-end
command figures would include.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1 << 16
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
QUICK = {"n": 50_000, "repeats": 1, "float_state_n": 300, "base_size": 256}
_RUNS = itertools.count()


def one_thread() -> None:
    """One BLAS thread here (threadpoolctl) and in every child process (environment)."""
    for variable in THREAD_VARIABLES:
        os.environ[variable] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)


def library_rates(base: Path, n: int, repeats: int) -> tuple[float, float]:
    """(exact counts/s, float counts/s), medians, same base, same n, same chunking."""
    import numpy as np

    from pure_dp_mf.engines.continual import ContinualCounter
    from pure_dp_mf.engines.generator import GeneratorSource, NoiseGenerator, round_to_integers
    from pure_dp_mf.factorizations.factorization import Factorization
    from pure_dp_mf.mechanisms.lifted import LiftedDecoder
    from pure_dp_mf.mechanisms.mechanism import lifted

    x = (np.random.default_rng(0).random(n) < 0.3).astype(np.int64)
    mechanism = lifted(base=base, horizon=n)  # set-up, not timed: the exact decoder, the lift plan
    # The float yardstick: the same lift with the real α's in the decoder (the exact path keeps
    # every α = 1 in its decoder and puts the α's in the noise rates).
    float_decoder = LiftedDecoder(
        decoder=Factorization.load(base).dense()[0], alphas=[float(alpha) for alpha in mechanism.alphas or ()], rows=n
    )
    exact, floating = [], []
    for _ in range(repeats):
        counter = ContinualCounter(epsilon=1.0, mechanism=mechanism, generator=NoiseGenerator.secure())
        started = time.perf_counter()
        for start in range(0, n, CHUNK):
            counter.counts(x[start : start + CHUNK])
        exact.append(n / (time.perf_counter() - started))
        assert counter.released == n

        scale = counter.scale  # b = Δ/ε rounded up, as the float counter computed it
        source = GeneratorSource(NoiseGenerator.secure())
        state, sums = float_decoder.init(), 0
        started = time.perf_counter()
        for start in range(0, n, CHUNK):
            stop = min(n, start + CHUNK)
            values, state = float_decoder.next(state, source, steps=stop - start)
            prefix = sums + np.cumsum(x[start:stop])
            released = prefix + round_to_integers(scale * values)
            sums = int(prefix[-1])
        floating.append(n / (time.perf_counter() - started))
        assert released.dtype == np.int64 and state.t == n
    return statistics.median(exact), statistics.median(floating)


PROGRAM = r"""
import atexit, os, sys
def peak():  # VmHWM: this process's own peak (a child's ru_maxrss would count its parent's at fork)
    with open("/proc/self/status") as status, open(os.environ["BENCH_PEAK_FILE"], "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(peak)
from pure_dp_mf.cli import main
main()
"""


def command_seconds(command: list[str], *, stdin: Path | None, cwd: Path, env: dict) -> tuple[float, float]:
    """(wall seconds, peak resident memory in MiB, Linux ``VmHWM``) of one run of ``command``."""
    peak_file = cwd / "peak.txt"
    started = time.perf_counter()
    with open(stdin, "rb") if stdin is not None else open(os.devnull, "rb") as source:
        result = subprocess.run(
            command,
            stdin=source,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env={**env, "BENCH_PEAK_FILE": str(peak_file)},
        )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {result.stderr.decode()[-400:]}")
    return elapsed, int(peak_file.read_text()) / 1024


def compile_tree(root: Path) -> None:
    """Byte-compile the package of ``root``, as an installed package is (``pip`` compiles it at
    install time): with ``PYTHONDONTWRITEBYTECODE`` set, a command would otherwise compile its
    modules again in every run (about 0.1 s), on both sides of a comparison."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "pure_dp_mf")], check=True, stdout=subprocess.DEVNULL)


def command_environment(root: Path) -> dict:
    """The environment of a command run from source tree ``root``, checked to import from it."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    found = subprocess.run(
        [sys.executable, "-c", "import pure_dp_mf; print(pure_dp_mf.__file__)"],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"the command for {root} imports pure_dp_mf from {found}, not from that tree")
    return env


def command_rates(
    *, root: Path, base: Path, n: int, repeats: int, state: bool, folder: Path, memory: dict | None = None
) -> tuple[float, float | None]:
    """(end-to-end counts/s, steady-state counts/s) of ``pure-dp-mf count`` from source tree ``root``;
    the steady rate is None when T(n) − T(1 line) is within the noise of the start-up (the larger
    of the start-ups' spread and a tenth of their median): n too small to resolve it. ``memory``,
    when given, receives the largest peak resident memory (MiB) of the n-line runs under ``n``."""
    import numpy as np

    env = command_environment(root)
    program = [sys.executable, "-c", PROGRAM, "count"]
    data, one = folder / f"bits{n}.txt", folder / "one.txt"
    if not data.exists():
        rng = np.random.default_rng(1)
        data.write_text("".join("1\n" if v else "0\n" for v in (rng.random(n) < 0.3)))
        one.write_text("1\n")
    totals, starts, peaks = [], [], []
    for _ in range(repeats):
        for path, sink in ((data, totals), (one, starts)):
            arguments = ["--epsilon", "1", "--horizon", str(n), "--base", str(base)]
            if state:
                run = folder / f"run{next(_RUNS)}"  # a fresh state every run (the registry knows the old ones)
                arguments += ["--state", f"{run}.state", "--output", f"{run}.out"]
            seconds, peak = command_seconds([*program, *arguments], stdin=path, cwd=folder, env=env)
            sink.append(seconds)
            if path == data:
                peaks.append(peak)
    if memory is not None:
        memory[n] = max(peaks)
    total, start = statistics.median(totals), statistics.median(starts)
    resolved = total - start > max(max(starts) - min(starts), 0.1 * start)
    return n / total, n / (total - start) if resolved else None


def float_tree(revision: str, folder: Path) -> Path:
    """The package of ``revision`` (the float path), exported under ``folder`` (no worktree)."""
    target = folder / "float_path"
    target.mkdir()
    archive = folder / "float_path.tar"
    with open(archive, "wb") as stream:
        subprocess.run(["git", "archive", "--format=tar", revision, "pure_dp_mf"], cwd=ROOT, check=True, stdout=stream)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target


GOALS = {"library exact release (CPU)": 1.5e6, "count, stdin → stdout": 7e5, "count --state --output": 5e5}  # counts/s


def against(revision: str, *, base: Path, n: int, repeats: int, folder: Path) -> None:
    """The speed goals' rows, this tree against ``revision`` (``git archive``), runs interleaved
    (old, new, old, new, …: the machine is shared), medians; the goal, both rates and their
    ratio. The library row is ``bench_sampler.py``'s (CPU seconds of ``ContinualCounter.counts``
    at n, in a fresh process per run); the command rows are end to end (start-up included); the
    memory row is each command's peak resident memory at n/10 and at n lines (flat in n: it
    does not grow with the stream)."""
    from bench_sampler import export, measure

    old = float_tree(revision, folder)
    whole = export(revision, folder)  # the library row reads the shipped bases of that revision
    for root in (old, whole, ROOT):
        compile_tree(root)
    env = {**os.environ, "PURE_DP_MF_REGISTRY": os.environ["PURE_DP_MF_REGISTRY"]}
    print(f"| what (n = {n:,}, median of {repeats}) | goal | {revision} | this tree | ratio |")
    print("|---|---|---|---|---|")
    rates: dict[Path, list[float]] = {whole: [], ROOT: []}
    for _ in range(repeats):
        for root in (whole, ROOT):
            rates[root].append(measure(root, "library", n, 0, env)["rate"])
    before, after = statistics.median(rates[whole]), statistics.median(rates[ROOT])
    label = "library exact release (CPU)"
    print(f"| {label} | {rate(GOALS[label])} | {rate(before)} | {rate(after)} | {after / before:.2f}× |", flush=True)
    memory: dict[tuple[Path, bool], dict[int, float]] = {}
    for label, state in (("count, stdin → stdout", False), ("count --state --output", True)):
        rates = {old: [], ROOT: []}
        for _ in range(repeats):
            for root in (old, ROOT):
                peaks = memory.setdefault((root, state), {})
                rates[root].append(
                    command_rates(root=root, base=base, n=n, repeats=1, state=state, folder=folder, memory=peaks)[0]
                )
        before, after = statistics.median(rates[old]), statistics.median(rates[ROOT])
        print(
            f"| {label}, end to end | {rate(GOALS[label])} | {rate(before)} | {rate(after)} | {after / before:.2f}× |", flush=True
        )
    small = max(1, n // 10)
    for root in (old, ROOT):
        for state in (False, True):
            command_rates(root=root, base=base, n=small, repeats=1, state=state, folder=folder, memory=memory[(root, state)])

    def peaks(root: Path) -> str:
        return "; ".join(
            f"{'--state' if state else 'stdin'} {memory[(root, state)][small]:.0f} → {memory[(root, state)][n]:.0f} MiB"
            for state in (False, True)
        )

    print(f"| memory: peak RSS of count at n/10 → n | flat in n | {peaks(old)} | {peaks(ROOT)} | |")


def rate(value: float | None) -> str:
    if value is None:
        return "—"
    exponent = math.floor(math.log10(value))
    return f"{value / 10**exponent:.2f}·10^{exponent}/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"small sizes, well under a minute: {QUICK}")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base", default=None, help="base factorization (default: the shipped MaxSE base of --base-size)")
    parser.add_argument("--base-size", type=int, default=1024, help="k of the default base (default 1024)")
    parser.add_argument("--float-revision", default="1f18a8c")
    parser.add_argument("--float-state-n", type=int, default=20_000)
    parser.add_argument("--no-command", action="store_true", help="the library row only (no git, no commands)")
    parser.add_argument(
        "--against", metavar="REV", help="only the command rows of this tree against git revision REV (interleaved)"
    )
    if parser.parse_known_args()[0].quick:
        parser.set_defaults(**QUICK)
    args = parser.parse_args()
    one_thread()
    from pure_dp_mf.resources import base_file

    base = Path(args.base).resolve() if args.base else base_file(base_size=args.base_size, metric="maxse")
    with tempfile.TemporaryDirectory(prefix="bench_count_") as scratch:
        folder = Path(scratch)
        os.environ["PURE_DP_MF_REGISTRY"] = str(folder / "registry.sqlite3")  # never the user's registry
        print(
            f"base {base.name}, n = {args.n:,}, medians of {args.repeats} runs, python {sys.version.split()[0]}, "
            f"{os.cpu_count()} cores, 1 BLAS thread"
        )
        if args.against:
            against(args.against, base=base, n=args.n, repeats=args.repeats, folder=folder)
            return
        exact_batch, float_batch = library_rates(base, args.n, args.repeats)
        rows = [("library batch", exact_batch, None, float_batch, None)]
        if not args.no_command:
            old = float_tree(args.float_revision, folder)
            for root in (old, ROOT):
                compile_tree(root)
            for label, state in (("count, stdin → stdout", False), ("count --state --output", True)):
                exact = command_rates(root=ROOT, base=base, n=args.n, repeats=args.repeats, state=state, folder=folder)
                float_n = args.float_state_n if state else args.n
                floating = command_rates(root=old, base=base, n=float_n, repeats=args.repeats, state=state, folder=folder)
                rows.append((label, exact[0], exact[1], floating[0], floating[1]))
            print(f"(float path: revision {args.float_revision}; its --state row at n = {args.float_state_n:,})")

    print("| path | exact (end to end) | exact (steady) | float (end to end) | float (steady) | exact/float |")
    print("|---|---|---|---|---|---|")
    unresolved = False
    for label, exact_total, exact_steady, float_total, float_steady in rows:
        if exact_steady is not None and float_steady is not None:
            ratio = f"{exact_steady / float_steady:.2f}×"
        else:  # the library row, or a steady rate that n is too small to resolve: end to end
            ratio = f"{exact_total / float_total:.2f}×" + ("" if label == "library batch" else " (end to end)")
            unresolved |= label != "library batch"
        print(f"| {label} | {rate(exact_total)} | {rate(exact_steady)} | {rate(float_total)} | {rate(float_steady)} | {ratio} |")
    if unresolved:
        print("(— steady: T(n) − T(1 line) is within the start-up's noise; take a larger --n)")


if __name__ == "__main__":
    main()
