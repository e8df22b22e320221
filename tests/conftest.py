"""Shared test helpers: where the recorded Flink data lives (data/daedalus/, shipped in the repository)."""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split
import csv
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import structlog

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO / "data" / "daedalus"
PROVISION_HINT = "scripts/test.sh installs it (as root; Debian packages prometheus, default-jdk-headless)"


def require_tool(name: str) -> str:
    """The path of a program the real stack needs (prometheus, promtool, java, javac).

    Missing, the test is skipped with the reason, unless scripts/test.sh provisioned the machine
    (FORESAIL_REQUIRE_STACK=1): then a missing program is a failure, not a silent skip.
    """
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} is not installed; {PROVISION_HINT}"
    if os.environ.get("FORESAIL_REQUIRE_STACK") == "1":
        pytest.fail(message)
    pytest.skip(message)


def pytest_configure(config: pytest.Config) -> None:
    limit_blas_threads()  # as the CLI does: ARIMA fits are many times faster with one BLAS thread


@pytest.fixture(autouse=True)
def _fresh_structlog():
    """A test that configures logging (the CLI does) must not leak its stream or level into the next."""
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="session")
def recorded_metrics() -> Path:
    path = SHARED_DATA / "metrics"
    assert path.is_dir(), f"recorded Flink metrics expected in the repository at {path}"
    return path


@pytest.fixture(scope="session")
def recorded_workloads() -> Path:
    path = SHARED_DATA / "workloads"
    assert path.is_dir(), f"recorded workloads expected in the repository at {path}"
    return path


def trace_head(workloads: Path, name: str, seconds: int, directory: Path) -> Path:
    """The first `seconds` of a recorded `second|count` trace (header kept), written into `directory`."""
    lines = (workloads / name).read_text().splitlines()
    path = directory / f"{Path(name).stem}_{seconds}s.csv"
    path.write_text("\n".join(lines[: 1 + seconds]) + "\n")
    return path


def read_columns(path: Path) -> dict[str, np.ndarray]:
    """A Grafana-style CSV export: first column time, then one column per series (by name)."""
    with path.open(encoding="utf-8-sig") as handle:
        rows = [row for row in csv.reader(handle) if row]
    header, body = rows[0], rows[1:]
    return {
        name: np.array([float(row[i]) if row[i] else np.nan for row in body])
        for i, name in enumerate(header)
        if i > 0
    }
