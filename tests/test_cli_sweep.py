"""Every subcommand, given a folder where a file belongs, a missing file, or an ε of 0, −1,
1e-300, 1e300, NaN or ∞, ends with one ``error: …`` line and exit 2: never a traceback."""

from __future__ import annotations

import pytest
from test_fuzz_inputs import run_cli

from pure_dp_mf.resources import BASE_FOLDER, CERTIFICATE_FOLDER

BASE = str(BASE_FOLDER / "k004_maxse.npz")
CERTIFICATE = str(CERTIFICATE_FOLDER / "k004_maxse.json")
BAD_EPSILONS = ["0", "-1", "1e-300", "1e300", "nan", "inf"]

# Each command with its file arguments marked "{FILE}" (an input) or "{OUT}" (an output).
FILE_COMMANDS = [
    ["info", "{FILE}"],
    ["certify", "{FILE}", "--out", "{OUT}"],
    ["verify", "{FILE}"],
    ["check-claims", "{FILE}"],
    ["lift", "{FILE}", "--n", "100"],
    ["count", "{FILE}", "--epsilon", "1", "--horizon", "5", "--base", BASE],
    ["count", "--epsilon", "1", "--horizon", "5", "--base", "{FILE}"],
    ["count", "--epsilon", "1", "--horizon", "5", "--certificate", "{FILE}"],
    ["audit", "--mechanism", "lifted", "--n", "8", "--epsilon", "1", "--trials", "100", "--base", "{FILE}"],
    ["lower-bound", "{FILE}"],
    ["train", "--base-size", "4", "--metric", "maxse", "--out", "{OUT}", "--adam-steps", "1", "--lbfgs-steps", "0"],
    ["train", "--base-size", "4", "--metric", "maxse", "--out", "{OUT}", "--init", "{FILE}"],
    ["compare", "--n", "100", "--plot", "{OUT}"],
    ["reproduce", "--quick", "--out", "{OUT}/x/y", "--certificates", "{FILE}"],
    ["multi-epoch", "optimize", "--n", "8", "--participations", "2", "--out", "{OUT}"],
    ["bounds", "{FILE}", "--epsilon", "0.3", "--user-column", "u", "--step-column", "d", "--horizon", "5"],
]
EPSILON_COMMANDS = [
    ["info", BASE, "--epsilon"],
    ["lift", BASE, "--n", "100", "--epsilon"],
    ["compare", "--n", "100", "--epsilon"],
    ["count", "--horizon", "5", "--base", BASE, "--epsilon"],
    ["audit", "--mechanism", "binary", "--n", "8", "--trials", "100", "--epsilon"],
    ["multi-epoch", "noise", "--delta", "1e-6", "--epsilon"],
    ["multi-epoch", "compare", "--n", "8", "--participations", "2", "--epsilon"],
    ["bounds", "--user-column", "u", "--step-column", "d", "--horizon", "5", "--epsilon"],
]


def _clean_error(code: int, out: str, err: str, case: object) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (case, code, out[-500:], err[-2000:])
    assert "Traceback" not in err + out and "╭" not in err, (case, err[-2000:])
    assert lines and lines[-1].startswith("error: "), (case, err[-2000:])


@pytest.mark.parametrize("command", FILE_COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("problem", ["folder", "missing"])
def test_a_folder_or_a_missing_file_is_one_error_line(tmp_path, command, problem):
    path = str(tmp_path) if problem == "folder" else str(tmp_path / "absent.npz")
    if "{FILE}" not in command and problem == "missing":
        pytest.skip("the command reads no file; a missing output folder is the folder case")
    out_target = str(tmp_path) if problem == "folder" else str(tmp_path / "no" / "such" / "folder" / "x.npz")
    arguments = [part.replace("{FILE}", path).replace("{OUT}", out_target) for part in command]
    if "{FILE}" in command and "{OUT}" in " ".join(command):  # keep the output valid when the input is the point
        arguments = [part.replace(out_target, str(tmp_path / "fine.json")) if part == out_target else part for part in arguments]
    stdin = "1\n0\n" if command[0] == "count" else ""
    _clean_error(*run_cli(*arguments, stdin=stdin), (problem, arguments))


@pytest.mark.parametrize("command", EPSILON_COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("epsilon", BAD_EPSILONS)
def test_every_bad_epsilon_is_one_error_line(command, epsilon):
    stdin = "1\n0\n" if command[0] == "count" else ""
    _clean_error(*run_cli(*command, epsilon, stdin=stdin), (command, epsilon))
