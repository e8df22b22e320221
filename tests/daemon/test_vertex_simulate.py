"""`foresail simulate --granularity vertex` and the cold start from every vertex at parallelism 1."""

from __future__ import annotations

import json

import pytest

from config.load import parse_config
from daemon.cli import main
from daemon.cold_start import cold_start
from tests.conftest import trace_head

VERTEX_KEYS = {
    "slot_seconds",
    "cpu_seconds",
    "cpu_used_seconds",
    "memory_mb_seconds",
    "subtask_memory_mb_seconds",
    "final_vertex_parallelism",
    "avg_workers",
    "seconds_over_slo",
    "rescales",
    "capacity_estimate_error_pct",
}


@pytest.fixture(scope="module")
def short_trace(tmp_path_factory, recorded_workloads):
    return trace_head(recorded_workloads, "sine_60000_6h.csv", 1800, tmp_path_factory.mktemp("traces"))


def test_simulate_at_vertex_granularity_reports_slots_cpu_memory_and_each_vertex(capsys, short_trace):
    argv = ["simulate", "--json", "--workload", str(short_trace), "--topology", "ysb"]
    assert main([*argv, "--granularity", "vertex"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary.keys() >= VERTEX_KEYS
    assert summary["granularity"] == "vertex"
    assert set(summary["final_vertex_parallelism"]) == {
        "source",
        "filter",
        "projection",
        "join",
        "window",
        "sink",
    }
    assert summary["slot_seconds"] == summary["worker_seconds"]
    assert summary["records_in"] == summary["records_processed"] + summary["backlog_end_records"]
    assert main(argv) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["granularity"] == "job" and len(set(job["final_vertex_parallelism"].values())) == 1


@pytest.mark.parametrize("topology", ["wordcount", "ysb"])
def test_cold_start_reaches_a_configuration_that_holds_in_at_most_two_rescales(tmp_path, topology):
    trace = tmp_path / "constant.csv"
    trace.write_text("second|count\n" + "".join(f"{s}|40000\n" for s in range(600)))
    config = parse_config(
        {
            "twin": {"workload": str(trace), "topology": topology, "initial_scaleout": 1},
            "scaling": {"granularity": "vertex"},
            "knowledge": {"path": ":memory:"},
        },
        "test",
    )
    result = cold_start(config)
    assert result["uniform_parallelism_needed"] >= 8  # the bottleneck needs ≥ 8 subtasks
    assert result["steps_to_hold"] is not None and result["steps_to_hold"] <= 2
    assert result["steps"][0]["rule"].startswith("vertex-")


def test_compare_runs_the_per_vertex_baselines_at_vertex_granularity(tmp_path, short_trace, capsys):
    out = tmp_path / "out"
    argv = ["compare", "--workload", str(short_trace), "--policies", "foresail,ds2", "--seeds", "1"]
    assert (
        main([*argv, "--jobs", "1", "--granularity", "vertex", "--topology", "wordcount", "--out", str(out)])
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    for policy in ("foresail", "ds2"):
        (run,) = summary["runs"][policy]
        assert run["granularity"] == "vertex" and run["slot_seconds"] > 0
    capsys.readouterr()
