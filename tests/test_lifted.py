"""mechanisms/lifted.py: the streamed lift L_p·z against the explicit lifted matrices (Noise,
NoiseReversed, any row range, any order), and the keyed generator as one fixed z."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import dyadic_binary_tree

from pure_dp_mf.engines.generator import GeneratorSource, NoiseGenerator
from pure_dp_mf.factorizations.factorization import Factorization
from pure_dp_mf.mechanisms.lift import explicit_lift, lift_plan
from pure_dp_mf.mechanisms.lifted import LiftedDecoder, noise, noise_reversed
from pure_dp_mf.mechanisms.streaming import ArraySource


def _grid_base(k: int, seed: int) -> Factorization:
    """A square base of T_k: a random encoder on the 2⁻³² grid, decoder T_k·R⁻¹."""
    rng = np.random.default_rng(seed)
    encoder = np.round((np.eye(k) + 0.3 * np.triu(rng.normal(size=(k, k)), 1)) * 2**32) / 2**32
    return Factorization.from_encoder(encoder, metadata={"metric": "maxse"})


def _tree_base(k: int) -> Factorization:
    decoder, encoder = dyadic_binary_tree(k)
    return Factorization(decoder=decoder, encoder=encoder, metadata={"metric": "meanse"})


BASES = {"grid k=3": _grid_base(3, 0), "tree k=4 (r=7)": _tree_base(4), "k=1": _tree_base(1)}


def _levels_source(z: np.ndarray, levels: int) -> ArraySource:
    """z as every level's noise: the lift addresses coarse blocks by their column in L_p."""
    return ArraySource({level: z for level in range(1, levels + 1)})


@pytest.mark.parametrize("name", sorted(BASES))
def test_streamed_noise_equals_dense_lift_for_every_n(name):
    base = BASES[name]
    decoder = base.dense()[0]
    rng = np.random.default_rng(7)
    full = {}  # p -> (dense L_p, z); explicit_lift(n=n) is L_p[:n] (checked for a few n)
    for n in range(1, 301):
        plan = lift_plan(base=base, n=n, metric=base.metric)
        if plan.levels not in full:
            L = explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas).dense()[0]
            full[plan.levels] = (L, rng.laplace(size=L.shape[1]))
        L, z = full[plan.levels]
        if n % 37 == 0:
            truncated = explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas, n=n).dense()[0]
            assert np.array_equal(truncated, L[:n])
        engine = LiftedDecoder(decoder=decoder, alphas=plan.alphas, rows=n)
        assert np.max(np.abs(engine.values(_levels_source(z, plan.levels), 0, n) - L[:n] @ z)) <= 1e-9, n
    assert len(full) >= 3
    for p, (L, z) in full.items():  # NoiseReversed(p) is the reverse of Noise(p), also in pieces
        alphas = lift_plan(base=base, n=L.shape[0], metric=base.metric).alphas
        engine = LiftedDecoder(decoder=decoder, alphas=alphas)
        source = _levels_source(z, p)
        dense = L @ z
        assert np.max(np.abs(np.array(list(noise(engine, source, block=5))) - dense)) <= 1e-9
        assert np.max(np.abs(np.array(list(noise_reversed(engine, source, block=7))) - dense[::-1])) <= 1e-9
        for start, stop in [(0, 1), (1, min(4, engine.n)), (engine.n // 3, engine.n - 1), (engine.n - 1, engine.n)]:
            assert np.allclose(engine.values(source, start, stop), dense[start:stop], atol=1e-9, rtol=0)
            assert np.allclose(engine.reversed_values(source, start, stop), dense[::-1][start:stop], atol=1e-9, rtol=0)


def test_single_steps_in_any_order_match_and_memory_stays_per_level():
    base = BASES["grid k=3"]
    alphas = lift_plan(base=base, n=1000, metric="maxse").alphas
    engine = LiftedDecoder(decoder=base.dense()[0], alphas=alphas)
    source = GeneratorSource(NoiseGenerator.from_seed(5))
    whole = engine.values(source, 0, engine.n)
    state = engine.init()
    for t in np.random.default_rng(0).permutation(engine.n)[:200]:
        state.t = int(t)
        value, state = engine.next(state, source)
        assert value[0] == pytest.approx(whole[t], abs=1e-12)
    assert len(state.coarse) <= engine.levels - 1  # one coarse vector per level, one base block


def test_a_restarted_stream_continues_the_same_values():
    base = BASES["tree k=4 (r=7)"]
    engine = LiftedDecoder(decoder=base.dense()[0], alphas=lift_plan(base=base, n=300, metric="meanse").alphas, rows=300)
    source = GeneratorSource(NoiseGenerator.from_seed(1))
    state = engine.init()
    pieces = []
    for steps in (1, 7, 40, 2, 250):
        values, state = engine.next(state, source, steps=steps)
        pieces.append(values)
    assert np.array_equal(np.concatenate(pieces), engine.values(source, 0, 300))
    values, _ = engine.next(engine.init(start=48), source, steps=10)  # a restart at row 48
    assert np.array_equal(values, engine.values(source, 48, 58))


def test_generator_source_is_a_fixed_z():
    """The keyed generator defines one z (blocks of r columns at their offsets): the streamed
    noise equals L_p·z for that z."""
    base = BASES["tree k=4 (r=7)"]
    plan = lift_plan(base=base, n=300, metric="meanse")
    L = explicit_lift(base=base, levels=plan.levels, alphas=plan.alphas).dense()[0]
    generator = NoiseGenerator.from_seed(3)
    r = base.inner_size
    z = np.concatenate([generator.laplace(index=offset, size=r) for offset in range(0, L.shape[1], r)])
    engine = LiftedDecoder(decoder=base.dense()[0], alphas=plan.alphas)
    assert np.max(np.abs(engine.values(GeneratorSource(generator), 0, engine.n) - L @ z)) <= 1e-9


def test_term_arrays_are_the_terms():
    base = BASES["grid k=3"]
    engine = LiftedDecoder(decoder=base.dense()[0], alphas=[0.5, 2.0, 0.25])
    positions, levels, rows, weights = engine.term_arrays(100, 700)
    walked = sorted((t - 100, term.level, term.row, float(term.weight)) for t in range(100, 700) for term in engine.terms(t))
    assert sorted(zip(positions.tolist(), levels.tolist(), rows.tolist(), weights.tolist(), strict=True)) == walked
