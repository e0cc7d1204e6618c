"""One streaming form (mechanisms/streaming.py): every decoder, from one registry, through the same
checks, as jax_privacy's ``streaming_matrix_test.py`` does: ``next`` in pieces against the dense
matrix that ``materialize`` builds from ``terms``, ``terms`` against each family's own
independent construction (the explicit lift, the explicit tree factorization), ``row_norms_squared``
against the dense rows, and restarts at any row. A new decoder joins by adding one line."""

from __future__ import annotations

import numpy as np
import pytest

from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms import trees
from pure_dp_mf.mechanisms.lift import explicit_lift, lift_plan
from pure_dp_mf.mechanisms.lifted import LiftedDecoder
from pure_dp_mf.mechanisms.streaming import ArraySource, materialize, row_norms_squared, values
from pure_dp_mf.resources import BASE_FOLDER


def _lifted(name: str, n: int, alphas: str = "plan"):
    base = Factorization.load(BASE_FOLDER / name)
    plan = lift_plan(base=base, n=n, metric=base.metric)
    chosen = plan.alphas if alphas == "plan" else [1.0] * (plan.levels - 1)
    decoder = LiftedDecoder(decoder=base.dense()[0], alphas=chosen, rows=n)
    reference = explicit_lift(base=base, levels=plan.levels, alphas=chosen, n=n).dense()[0]
    return decoder, reference


def _tree(mechanism: str, n: int, arity: int | None = None):
    return trees.tree_decoder(mechanism=mechanism, n=n, arity=arity), trees.tree_factorization(
        mechanism=mechanism, n=n, arity=arity
    ).dense()[0]


def _gaussian(mechanism):
    from pure_dp_mf.gaussian.streaming import decoder_of

    reference = np.asarray(mechanism.dense_decoder(), dtype=np.float64)
    return decoder_of(mechanism), reference


def _gaussian_mechanisms():
    from pure_dp_mf.gaussian.fft import FFTMechanism, FFTOptimalDecoderMechanism
    from pure_dp_mf.gaussian.honaker import HonakerMechanism
    from pure_dp_mf.gaussian.stamping import DenseMechanism, StampedMechanism
    from pure_dp_mf.gaussian.toeplitz import BandedStrategy, BufferedToeplitz, ToeplitzStrategy, bisr, square_root_coefficients

    rng = np.random.default_rng(4)
    banded = np.tril(np.triu(rng.uniform(0.5, 1.5, size=(30, 30)), -2))  # three bands
    return {
        "gaussian dense, n = 20": lambda: DenseMechanism(
            decoder=np.tri(20) @ np.linalg.inv(np.tri(20) + 0.3 * np.eye(20)), encoder=np.tri(20) + 0.3 * np.eye(20)
        ),
        "gaussian banded Toeplitz, n = 40": lambda: ToeplitzStrategy(coefficients=square_root_coefficients(40)[:6], n=40),
        "gaussian BLT, n = 40": lambda: BufferedToeplitz(decay=np.array([0.9, 0.5]), scale=np.array([0.3, 0.2])).strategy(40),
        "gaussian BISR, n = 40": lambda: bisr(n=40, bands=4),
        "gaussian column-normalized banded, n = 30": lambda: BandedStrategy(
            encoder=banded / np.linalg.norm(banded, axis=0), bands=3
        ),
        "gaussian Honaker online, n = 13": lambda: HonakerMechanism(13, "online"),
        "gaussian Honaker completion, n = 13": lambda: HonakerMechanism(13, "completion"),
        "gaussian Honaker virtual removed, n = 13": lambda: HonakerMechanism(13, "completion-virtual-removed"),
        "gaussian Honaker full, n = 13": lambda: HonakerMechanism(13, "full"),
        "gaussian FFT, n = 24": lambda: FFTMechanism(24),
        "gaussian FFT optimal decoder, n = 24": lambda: FFTOptimalDecoderMechanism(24),
        "gaussian stamped BISR ×3": lambda: StampedMechanism(bisr(n=10, bands=3), 3),
    }


TEST_DECODERS = {
    "lifted k4 maxse, n = 100": lambda: _lifted("k004_maxse.npz", 100),
    "lifted k8 meanse, n = 200, α = 1": lambda: _lifted("k008_meanse.npz", 200, alphas="one"),
    "lifted k16 maxse, n = 16": lambda: _lifted("k016_maxse.npz", 16),
    "binary tree, n = 100": lambda: _tree("binary", 100),
    "binary tree, n = 64": lambda: _tree("binary", 64),
    "kary tree, arity 3, n = 90": lambda: _tree("kary", 90, 3),
    "kary-subtraction, arity 4, n = 77": lambda: _tree("kary-subtraction", 77, 4),
    "kary-subtraction, arity 5, n = 125": lambda: _tree("kary-subtraction", 125, 5),
    "smooth-binary, n = 70": lambda: _tree("smooth-binary", 70),
    "averaged-kary-subtraction, arity 3, n = 81": lambda: _tree("averaged-kary-subtraction", 81, 3),
    "averaged-kary-subtraction, arity 2, n = 50": lambda: _tree("averaged-kary-subtraction", 50, 2),
    **{name: (lambda make=make: _gaussian(make())) for name, make in _gaussian_mechanisms().items()},
}


def _source(coordinates, seed: int = 0) -> ArraySource:
    sizes: dict[int, int] = {}
    for level, index in coordinates:
        sizes[level] = max(sizes.get(level, 0), index + 1)
    rng = np.random.default_rng(seed)
    return ArraySource({level: rng.standard_normal(size) for level, size in sizes.items()})


@pytest.mark.parametrize("name", sorted(TEST_DECODERS))
def test_next_equals_the_materialized_matrix_in_any_pieces(name):
    decoder, _ = TEST_DECODERS[name]()
    n = decoder.rows
    matrix, coordinates = materialize(decoder, n)
    source = _source(coordinates)
    z = np.array([source.z[level][index] for level, index in coordinates])
    dense = matrix @ z
    tolerance = 1e-9 + 4 * getattr(decoder, "relative_precision", 0.0) * float(np.abs(dense).max())  # block decoders keep float32
    assert np.allclose(values(decoder, source, start=0, stop=n), dense, atol=tolerance, rtol=0)
    state, pieces = decoder.init(), []
    for steps in (1, 2, 5, n):
        steps = min(steps, n - state.t)
        if steps:
            part, state = decoder.next(state, source, steps=steps)
            pieces.append(part)
    assert np.allclose(np.concatenate(pieces), dense, atol=tolerance, rtol=0)
    for start in (0, n // 3, n - 1) if not name.startswith("gaussian stamped") else (0,):  # a restart reads the same noise
        assert np.allclose(values(decoder, source, start=start, stop=n), dense[start:], atol=tolerance, rtol=0)


@pytest.mark.parametrize("name", sorted(TEST_DECODERS))
def test_terms_are_the_independently_built_matrix(name):
    """The columns of the two matrices may be ordered differently (and the explicit lift keeps
    columns no row reads), so compare L·Lᵀ (every row norm and every row pair) and the sorted
    norms of the columns in use."""
    decoder, reference = TEST_DECODERS[name]()
    matrix, _ = materialize(decoder, decoder.rows)
    reference = reference[:, np.any(reference != 0, axis=0)]
    assert matrix.shape == reference.shape
    assert np.allclose(matrix @ matrix.T, reference @ reference.T, atol=1e-9, rtol=0)
    assert np.allclose(np.sort((matrix**2).sum(axis=0)), np.sort((reference**2).sum(axis=0)), atol=1e-9, rtol=0)


@pytest.mark.parametrize("name", sorted(TEST_DECODERS))
def test_row_norms_and_term_arrays(name):
    decoder, reference = TEST_DECODERS[name]()
    n = decoder.rows
    assert np.allclose(row_norms_squared(decoder, n), (reference**2).sum(axis=1), atol=1e-9, rtol=0)
    assert max(len(decoder.terms(t)) for t in range(n)) <= decoder.max_terms(n)
    positions, levels, rows, weights = decoder.term_arrays(0, n)
    walked = sorted((t, term.level, term.row, float(term.weight)) for t in range(n) for term in decoder.terms(t))
    assert sorted(zip(positions.tolist(), levels.tolist(), rows.tolist(), weights.tolist(), strict=True)) == walked


def test_tree_noise_addresses_do_not_depend_on_the_horizon():
    """A tree's node noise is addressed by (height, index): the binary and k-ary trees are the
    trees of the infinite stream, so the rows of a shorter horizon read the same coordinates as
    those of a longer one. (The subtraction and smooth trees change shape with n by construction.)"""
    for mechanism, arity in (("binary", None), ("kary", 3), ("kary", 7)):
        short = trees.tree_decoder(mechanism=mechanism, n=40, arity=arity)
        long = trees.tree_decoder(mechanism=mechanism, n=400, arity=arity)
        for t in range(40):
            assert short.terms(t) == long.terms(t)
