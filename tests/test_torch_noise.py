"""The torch correlated-noise generator: covariance B·Bᵀ, seeded and secure modes, streaming."""

import numpy as np
import pytest
import torch

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.fft import FFTMechanism, FFTOptimalDecoderMechanism
from pure_dp_mf.gaussian.honaker import HonakerMechanism, HonakerNoiseStream
from pure_dp_mf.gaussian.stamping import DenseMechanism, StampedMechanism
from pure_dp_mf.gaussian.torch_noise import CorrelatedNoise, secure_standard_normal

SHAPES = [(50, 200), (100, 100), (10000,)]  # d = 30000 coordinates, each an independent sample of B·z
D = 30_000


def empirical(generator):
    steps = [torch.cat([part.reshape(-1) for part in generator.next()]) for _ in range(generator.n)]
    Y = torch.stack(steps).double().numpy()
    return Y @ Y.T / Y.shape[1]


def assert_covariance(covariance, reference):
    # each entry is a mean of D products; standard error √((Σ_ss Σ_tt + Σ_st²)/D); allow 5 of them
    d = np.diag(reference)
    error = np.sqrt((np.outer(d, d) + reference**2) / D)
    assert np.max(np.abs(covariance - reference) / error) < 5


MECHANISMS = [
    lambda: FFTMechanism(6),
    lambda: FFTOptimalDecoderMechanism(5),
    lambda: HonakerMechanism(6, "completion"),
    lambda: HonakerMechanism(7, "completion-virtual-removed"),
    lambda: StampedMechanism(HonakerMechanism(3, "online"), 2),
    lambda: StampedMechanism(FFTOptimalDecoderMechanism(3), 2),
    lambda: DenseMechanism(
        decoder=np.tri(4) @ np.linalg.inv(np.eye(4) + np.tri(4, k=-1) / 3), encoder=np.eye(4) + np.tri(4, k=-1) / 3
    ),
]


@pytest.mark.parametrize("make", MECHANISMS)
def test_empirical_covariance_matches_decoder_gram(make):
    mechanism = make()
    B = mechanism.dense_decoder()
    generator = CorrelatedNoise(mechanism, SHAPES, noise_std=1.5, seed=11)
    assert generator.mode == "seeded"
    assert_covariance(empirical(generator), 1.5**2 * B @ B.T)


@pytest.mark.parametrize("make", [MECHANISMS[1], MECHANISMS[3]])
def test_secure_mode_covariance(make):
    mechanism = make()
    generator = CorrelatedNoise(mechanism, SHAPES)
    assert generator.mode == "secure"
    B = mechanism.dense_decoder()
    assert_covariance(empirical(generator), B @ B.T)


def test_seeded_is_reproducible_and_secure_is_not():
    mechanism = FFTOptimalDecoderMechanism(4)

    def first(seed):
        return CorrelatedNoise(mechanism, [(3, 2)], seed=seed).next()[0]

    assert torch.equal(first(5), first(5))
    assert not torch.equal(first(5), first(6))
    assert not torch.equal(first(None), first(None))


def test_outputs_have_parameter_shapes_and_run_out():
    generator = CorrelatedNoise(HonakerMechanism(3, "online"), [(2, 3), (4,)], dtype=torch.float64, seed=0)
    for _ in range(3):
        a, b = generator.next()
        assert a.shape == (2, 3) and b.shape == (4,) and a.dtype == torch.float64
    with pytest.raises(InvalidInputError, match="all 3 steps"):
        generator.next()


def test_tree_stream_keeps_only_log_n_node_estimates():
    n = 1000
    stream = HonakerNoiseStream(n, "completion-virtual-removed", lambda: np.zeros(4))
    largest = 0
    for _ in stream:
        largest = max(largest, len(stream._stack))
    assert largest <= stream.height + 1
    assert CorrelatedNoise(HonakerMechanism(n), [(4,)], seed=0).buffered_steps == 0
    assert CorrelatedNoise(StampedMechanism(FFTMechanism(250), 4), [(4,)], seed=0).buffered_steps == 250


def test_secure_standard_normal_moments():
    x = secure_standard_normal(200_001)
    assert x.shape == (200_001,)
    assert abs(x.mean()) < 5 / np.sqrt(x.size) and abs(x.var() - 1) < 5 * np.sqrt(2 / x.size)
    assert abs(np.mean(x**4) - 3) < 0.1


@pytest.mark.parametrize(
    "kwargs,message",
    [({"noise_std": 0.0}, "noise_std"), ({"noise_std": float("nan")}, "noise_std"), ({"seed": -1}, "seed")],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        CorrelatedNoise(FFTMechanism(4), [(2,)], **kwargs)
    with pytest.raises(InvalidInputError, match="parameter shape"):
        CorrelatedNoise(FFTMechanism(4), [])


def test_tree_streams_beyond_the_dense_limit():
    generator = CorrelatedNoise(HonakerMechanism(100_000, "completion-virtual-removed"), [(3,)], seed=1)
    assert generator.buffered_steps == 0
    assert generator.next()[0].shape == (3,)
    with pytest.raises(InvalidInputError, match="dense tree matrices"):
        HonakerMechanism(100_000).dense_encoder()


def test_scratch_file_holds_the_buffer_and_is_removed(tmp_path):
    mechanism = FFTOptimalDecoderMechanism(4)
    on_disk = CorrelatedNoise(mechanism, [(3,)], seed=3, scratch_dir=tmp_path)
    in_memory = CorrelatedNoise(mechanism, [(3,)], seed=3)
    first = on_disk.next()[0]
    assert [p.stat().st_mode & 0o777 for p in tmp_path.iterdir()] == [0o600]
    assert torch.equal(first, in_memory.next()[0])
    for _ in range(3):
        assert torch.equal(on_disk.next()[0], in_memory.next()[0])
    with pytest.raises(InvalidInputError):
        on_disk.next()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidInputError, match="not a folder"):
        CorrelatedNoise(mechanism, [(3,)], scratch_dir=tmp_path / "missing")


def test_from_file_of_multi_epoch_optimize(tmp_path):
    from conftest import run_cli

    from pure_dp_mf.factorizations.factorization import Factorization
    from pure_dp_mf.gaussian.stamping import sensitivity_of
    from pure_dp_mf.resources import BASE_FOLDER

    path = tmp_path / "mech.npz"
    made = run_cli("multi-epoch", "optimize", "--n", "8", "--participations", "2", "--out", str(path))
    assert made.returncode == 0, made.stderr
    generator = CorrelatedNoise.from_file(path, SHAPES, noise_multiplier=1.5, clip_norm=0.5, seed=3)
    written = Factorization.load(path)
    sens2, _ = sensitivity_of(generator.mechanism, max_participations=2, min_sep=4)
    assert sens2 == pytest.approx(written.metadata["made_by"]["sensitivity_squared"], rel=1e-6)
    assert generator.noise_std == pytest.approx(1.5 * 0.5 * np.sqrt(sens2), rel=1e-12)
    B = written.decoder
    assert_covariance(empirical(generator) / generator.noise_std**2, B @ B.T)
    with pytest.raises(InvalidInputError, match="not a multi-epoch factorization"):
        CorrelatedNoise.from_file(BASE_FOLDER / "k008_maxse.npz", SHAPES, noise_multiplier=1.0)
