"""Releasing under exact pure ε-DP: keyed noise generators (``generator``), the exact discrete
Laplace sampler (``discrete_laplace``), the exact lattice release (``lattice``), error bars
(``error_bars``), post-processing (``postprocess``) and the statistical audit (``audit``)."""
