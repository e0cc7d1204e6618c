"""Build hook: the shipped data lives in the top-level folders ``base_factorizations/`` and
``certificates/``; the wheel carries them as the package data ``pure_dp_mf/data/…`` (same
relative layout, so each certificate still finds its base). Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"base_factorizations": ("*.npz", "profiles.json", "anytime.json"), "certificates": ("*.json",)}


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for folder, patterns in SHIPPED.items():
            target = Path(self.build_lib) / "pure_dp_mf" / "data" / folder
            target.mkdir(parents=True, exist_ok=True)
            for pattern in patterns:
                for path in sorted((root / folder).glob(pattern)):
                    shutil.copy2(path, target / path.name)


setup(cmdclass={"build_py": BuildWithData})
