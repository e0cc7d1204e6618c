"""Bad input to the command line ends in one line ``error: …`` naming the problem, never a
traceback or a box: unknown flags, values that do not parse, folders given as output files,
ε so small that the errors overflow, noise multipliers the accountant cannot hold."""

from __future__ import annotations

import pytest
from conftest import one_error_line  # noqa: E402
from test_fuzz_inputs import run_cli

from pure_dp_mf.errors import InvalidInputError
from pure_dp_mf.gaussian.accounting import MIN_NOISE_MULTIPLIER, epsilon_for, noise_multiplier_for
from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER

BASE = str(BASE_FOLDER / "k004_maxse.npz")


@pytest.mark.parametrize(
    "arguments, needles",
    [
        (["info", "--bogus"], ["--bogus", "pure-dp-mf info --help"]),
        (["compare", "--n", "abc"], ["--n"]),
        (["info"], ["file"]),
        (["count", "--epsilon", "x", "--horizon", "3"], ["--epsilon"]),
    ],
)
def test_usage_errors_are_one_line(arguments, needles):
    one_error_line(*run_cli(*arguments), *needles)


def test_a_folder_as_output_file_is_refused_before_any_work(tmp_path):
    for arguments, flag in (
        (["compare", "--n", "100", "--plot", str(tmp_path)], "--plot"),
        (["lift", BASE, "--n", "100", "--plot", str(tmp_path)], "--plot"),
        (["lift", BASE, "--n", "10", "--out", str(tmp_path)], "--out"),
        (["certify", BASE, "--out", str(tmp_path)], "--out"),
    ):
        code, out, err = run_cli(*arguments)
        one_error_line(code, out, err, flag, "is a folder")
        assert out == "", arguments  # nothing computed and printed first


@pytest.mark.parametrize("command", [["info", BASE], ["lift", BASE, "--n", "100"], ["compare", "--n", "100"]])
def test_an_epsilon_whose_errors_overflow_is_refused(command):
    one_error_line(*run_cli(*command, "--epsilon", "1e-300"), "epsilon")


def test_the_accountant_refuses_what_it_cannot_hold():
    with pytest.raises(InvalidInputError, match="noise_multiplier"):
        epsilon_for(noise_multiplier=1e-4, delta=1e-6)
    assert epsilon_for(noise_multiplier=MIN_NOISE_MULTIPLIER, delta=1e-6) < 200
    for epsilon in (1e-300, 1e5):
        with pytest.raises(InvalidInputError, match="noise multiplier outside"):
            noise_multiplier_for(epsilon=epsilon, delta=1e-6)
    one_error_line(*run_cli("multi-epoch", "noise", "--epsilon", "1e5", "--delta", "1e-6"), "epsilon")
    one_error_line(*run_cli("multi-epoch", "epsilon", "--noise-multiplier", "1e-4", "--delta", "1e-6"), "noise_multiplier")


def test_verify_of_a_good_certificate_still_exits_zero():
    code, out, err = run_cli("verify", str(CERTIFICATE_FOLDER / "k004_maxse.json"))
    assert code == 0 and "OK" in out, err
