"""What an installed foresail (`pip install .`, the Dockerfile) carries: every file its packages read.

A plain install copies only the .py files and the package data pyproject.toml names. The topology files
were left out (pyproject named a workloads folder that no longer exists), so the image's own
`foresail check-config` step failed with "no such topology"; an editable install hides that."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_data_file_in_a_package_is_installed():
    setuptools = _setuptools()
    packages = setuptools["packages"]
    package_data = setuptools.get("package-data", {})
    left_out = []
    for package in packages:
        folder = REPO / package.replace(".", "/")
        for file in folder.rglob("*"):
            if file.is_dir() or file.suffix in {".py", ".pyc"} or "__pycache__" in file.parts:
                continue
            relative = file.relative_to(folder)
            if ".".join((package, *relative.parts[:-1])) in packages and relative.parent != Path("."):
                continue  # a subpackage's file: judged under its own name
            if not any(fnmatch.fnmatch(str(relative), pattern) for pattern in package_data.get(package, [])):
                left_out.append(str(file.relative_to(REPO)))
    assert left_out == []


def test_every_package_data_pattern_matches_a_file():
    """A pattern that matches nothing is a file that moved (the workloads folder did)."""
    for package, patterns in _setuptools().get("package-data", {}).items():
        folder = REPO / package.replace(".", "/")
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches no file"


def test_every_package_with_python_files_is_listed():
    listed = set(_setuptools()["packages"])
    tops = [
        d for d in REPO.iterdir() if (d / "__init__.py").is_file() and d.name not in {"tests", "benchmarks"}
    ]
    for top in tops:
        for init in top.rglob("__init__.py"):
            package = ".".join(init.parent.relative_to(REPO).parts)
            assert package in listed, f"{package} is not installed"
