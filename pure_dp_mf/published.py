"""The papers' published numbers, in one place, for side-by-side comparison only.

Nothing here proves anything: these are the values printed in Arkhipov & Kalinin (Tables 1 and 2), shown
next to what this library computes and certifies.
"""

from __future__ import annotations

import math

TABLE1 = {
    # mechanism: (MaxSE·ε²/log₂(n)³, MeanSE·ε²/log₂(n)³) as n → ∞, best arity per metric
    "binary": (2.0, 1.0),
    "smooth-binary": (0.25, 0.25),
    "kary": (32 / math.log2(17) ** 3, 16 / math.log2(17) ** 3),
    "kary-subtraction": (16 / math.log2(17) ** 3, 180 / (19 * math.log2(19) ** 3)),
    "averaged-kary-subtraction": (8 / math.log2(17) ** 3, 8 / math.log2(17) ** 3),
    "lifted": (0.0778, 0.0710),  # the factorization mechanism with the paper's k = 1024 bases
}
"""Arkhipov & Kalinin, Table 1 (tree rows as the closed forms printed there)."""

TABLE2 = {
    # k: (2C₂², 2C_F², (log₂k/log₂(2k+1))³, lifted MaxSE, lifted MeanSE)
    1024: (0.1032, 0.0944, 0.7512, 0.0775, 0.0709),
    512: (0.1094, 0.1009, 0.7287, 0.0797, 0.0735),
    256: (0.1191, 0.1099, 0.7017, 0.0836, 0.0771),
    128: (0.1322, 0.1207, 0.6685, 0.0884, 0.0807),
    64: (0.1527, 0.1370, 0.6267, 0.0957, 0.0859),
    32: (0.1938, 0.1609, 0.5723, 0.1109, 0.0921),
    16: (0.2455, 0.2093, 0.4986, 0.1224, 0.1044),
    8: (0.3831, 0.3288, 0.3954, 0.1515, 0.1300),
    4: (0.8293, 0.6259, 0.2512, 0.2083, 0.1572),
}
"""Arkhipov & Kalinin, Table 2, as printed (4 decimals)."""

CERTIFIED_K1024 = {
    # metric: the upper bounds Arkhipov & Kalinin state for their own k = 1024 matrices (§2.1)
    "maxse": {
        "encoder_max_column_sum": 3.8417,  # ‖R‖₁→₁, as their verification script asserts
        "approximate_decoder_norm": 1.8691,  # ‖L̃‖₂→∞ of their float decoder L̃, before the correction
        "decoder_norm": 1.8730,  # ‖L‖₂→∞ ≤ 1.8691 + 0.0039, L = T_k·R⁻¹
        "leading_constant": 0.1036,
        "lifted_constant": 0.0778,
    },
    "meanse": {
        "encoder_max_column_sum": 14.3098,
        "approximate_decoder_norm": 15.3624,  # ‖L̃‖_F
        "decoder_norm": 15.3661,  # ‖L‖_F ≤ 15.3624 + 0.0037
        "leading_constant": 0.0945,
        "lifted_constant": 0.0710,
    },
}
"""Arkhipov & Kalinin's certificate of their k = 1024 bases, as printed: the norms and the constants
2C² and 2C²·(log₂k/log₂(2k+1))³ they prove from them (Table 1 prints the lifted ones)."""


def implied_constants(metric: str, norm: str, *, k: int = 1024) -> tuple[float, float]:
    """(2C², lifted constant) that ``CERTIFIED_K1024[metric]``'s ‖R‖₁→₁ and decoder norm ``norm``
    ("decoder_norm": the proven bound on L; "approximate_decoder_norm": the float decoder L̃) give:
    c = ‖L‖₂→∞·‖R‖₁→₁ (MaxSE) or ‖L‖_F·‖R‖₁→₁/√k (MeanSE), 2c²/log₂(k)³ and 2c²/log₂(2k+1)³."""
    printed = CERTIFIED_K1024[metric]
    c = printed[norm] * printed["encoder_max_column_sum"] / (1.0 if metric == "maxse" else math.sqrt(k))
    return 2 * c * c / math.log2(k) ** 3, 2 * c * c / math.log2(2 * k + 1) ** 3
