"""Factorizations T_n = L·R and what is measured on them: the workloads (``workloads``), the
``Factorization`` type and its file format (``factorization``), matrices as people publish them
(``matrix_files``), norms and errors (``costs``), and the trainer of base factorizations
(``train``, Arkhipov & Kalinin section 2.1)."""
