"""`foresail compare` and `foresail simulate --policy <baseline>` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main
from tests.conftest import trace_head


@pytest.fixture(scope="module")
def half_hour_trace(tmp_path_factory, recorded_workloads) -> Path:
    return trace_head(recorded_workloads, "tm_6h_100K_max.csv", 1800, tmp_path_factory.mktemp("traces"))


@pytest.mark.parametrize(
    ("policy", "iterations"),
    [("static", 30), ("hpa-80", 120), ("hpa-85", 120), ("flink-operator", 30), ("ds2", 30)],
)
def test_every_baseline_runs_alone_at_its_own_loop_interval(capsys, half_hour_trace, policy, iterations):
    assert main(["simulate", "--json", "--workload", str(half_hour_trace), "--policy", policy]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["policy"] == policy
    assert summary["iterations"] == iterations  # the HPA syncs every 15 s, the rest every 60 s
    assert summary["records_in"] == summary["records_processed"] + summary["backlog_end_records"]


def test_compare_writes_summary_table_and_plots_and_prints_the_table(capsys, tmp_path, half_hour_trace):
    out = tmp_path / "out"
    argv = ["compare", "--workload", str(half_hour_trace), "--policies", "static,ds2", "--seeds", "1"]
    assert main([*argv, "--out", str(out), "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed == (out / "table.md").read_text()
    assert "| static |" in printed and "| ds2 |" in printed and "| oracle |" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert [r["policy"] for r in summary["runs"]["ds2"]] == ["ds2"]
    assert sorted(p.name for p in out.glob("*.png")) == [
        "latency_ecdf.png",
        "resources.png",
        "workers.png",
        "workload_capacity.png",
    ]


def test_compare_rejects_an_unknown_policy_or_trace(capsys, tmp_path, half_hour_trace):
    argv = [
        "compare",
        "--workload",
        str(half_hour_trace),
        "--policies",
        "static,magic",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 2
    assert "scaling.policy" in capsys.readouterr().err
    assert main(["compare", "--workload", str(tmp_path / "none.csv"), "--out", str(tmp_path)]) == 2
    assert "twin.workload" in capsys.readouterr().err
