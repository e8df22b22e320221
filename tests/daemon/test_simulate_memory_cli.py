"""`foresail simulate --job-profile … --policy foresail|foresail-cpu-only --json`: cost and steps in the
summary, and a stateless job planned exactly as without memory levels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main
from tests.conftest import trace_head

MEMORY_KEYS = {
    "memory_mb_seconds",
    "managed_memory_mb_seconds",
    "memory_reconfigurations",
    "final_managed_mb",
}


@pytest.fixture(scope="module")
def one_hour_trace(tmp_path_factory, recorded_workloads) -> Path:
    """The first hour of the recorded WordCount sine: the load rises, so the job scales out."""
    return trace_head(recorded_workloads, "sine_60000_6h.csv", 3600, tmp_path_factory.mktemp("traces"))


def _simulate(capsys, trace: Path, profile: str, policy: str) -> dict:
    args = ["simulate", "--json", "--workload", str(trace), "--job-profile", profile, "--policy", policy]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    summary.pop("wall_time_s")
    return summary


def test_a_stateless_job_runs_exactly_as_cpu_only_and_drops_its_managed_memory(capsys, one_hour_trace):
    cpu_only = _simulate(capsys, one_hour_trace, "stateless", "foresail-cpu-only")
    memory = _simulate(capsys, one_hour_trace, "stateless", "foresail")
    differs = {k for k in cpu_only if cpu_only[k] != memory[k]}
    assert differs == MEMORY_KEYS | {"policy"}
    assert cpu_only["rescales"] >= 1  # it did scale out, and released its memory on the way
    assert memory["final_managed_mb"] == 0.0 and cpu_only["final_managed_mb"] == 158.0
    assert memory["memory_mb_seconds"] < cpu_only["memory_mb_seconds"]
    assert memory["cpu_seconds"] == cpu_only["cpu_seconds"] == cpu_only["worker_seconds"]


def test_a_read_heavy_job_reports_cpu_memory_and_reconfigurations(capsys, one_hour_trace):
    summary = _simulate(capsys, one_hour_trace, "read-heavy", "foresail")
    assert summary["reconfigurations"] == summary["rescales"] >= summary["memory_reconfigurations"] >= 1
    assert summary["memory_mb_seconds"] == pytest.approx(
        summary["worker_seconds"] * 1890.0 + summary["managed_memory_mb_seconds"]
    )


def test_an_unknown_job_profile_is_a_config_error(capsys):
    assert main(["simulate", "--workload", "builtin:sine", "--job-profile", "cache-heavy"]) == 2
    assert "twin.job_profile" in capsys.readouterr().err
