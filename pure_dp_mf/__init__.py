"""pure_dp_mf: pure-DP continual counting by matrix factorization, with machine-checked bounds.

Notation follows ``docs/architecture.md``: the workload T_n (lower-triangular all-ones) is factored as
T_n = L·R with the decoder L and the encoder R; Laplace noise of scale ‖R‖₁→₁/ε is added to R·x
and the released prefix sums are L·(R·x + z) = T_n·x + L·z.
"""

__version__ = "0.1.0"

__all__ = ["Counter", "__version__", "private_running_counts"]


def __getattr__(name: str):
    """``pure_dp_mf.Counter`` (``counter.py``) and ``pure_dp_mf.private_running_counts``
    (``engines/dataframe.py``), imported on first use so that ``import pure_dp_mf`` stays light."""
    if name == "Counter":
        from pure_dp_mf.engines.counter import Counter

        return Counter
    if name == "private_running_counts":
        from pure_dp_mf.engines.dataframe import private_running_counts

        return private_running_counts
    raise AttributeError(f"module 'pure_dp_mf' has no attribute {name!r}")
