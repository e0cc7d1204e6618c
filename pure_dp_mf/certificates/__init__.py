"""Proofs in exact arithmetic: integer and rational primitives (``exact``), certificates of a
base factorization's costs and their independent verification (``certify``), and published
claims checked exactly (``claims``). Floats may search; only integers and rationals prove."""
