"""`foresail simulate`: a whole trace on the twin, one JSON summary scored on the twin's ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main
from tests.conftest import trace_head

KEYS = {
    "avg_workers",
    "worker_seconds",
    "mean_latency_s",
    "p95_latency_s",
    "max_latency_s",
    "seconds_over_slo",
    "rescales",
    "backlog_end_records",
    "capacity_estimate_error_pct",
}


@pytest.fixture(scope="module")
def two_hour_trace(tmp_path_factory, recorded_workloads) -> Path:
    """The first two hours of the recorded WordCount sine: one rise and fall of the load."""
    return trace_head(recorded_workloads, "sine_60000_6h.csv", 7200, tmp_path_factory.mktemp("traces"))


def _simulate(capsys, *args: str) -> dict:
    assert main(["simulate", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_summary_has_every_metric_and_accounts_for_every_record(capsys, two_hour_trace):
    summary = _simulate(capsys, "--workload", str(two_hour_trace))
    assert summary.keys() >= KEYS
    assert summary["records_in"] == summary["records_processed"] + summary["backlog_end_records"]
    assert summary["worker_seconds"] == pytest.approx(summary["avg_workers"] * 7200, rel=1e-9)
    assert 1 <= summary["avg_workers"] <= 18
    assert summary["mean_latency_s"] <= summary["p95_latency_s"] <= summary["max_latency_s"]
    assert summary["capacity_estimate_error_pct"] < 5.0
    assert summary["iterations"] == 120


def test_same_seed_same_run_other_seed_other_run(capsys, two_hour_trace):
    runs = [_simulate(capsys, "--workload", str(two_hour_trace), "--seed", seed) for seed in ("1", "1", "2")]
    for run in runs:
        run.pop("wall_time_s")
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_audit_log_file_has_one_event_per_iteration(capsys, tmp_path, two_hour_trace):
    audit = tmp_path / "audit.jsonl"
    summary = _simulate(capsys, "--workload", str(two_hour_trace), "--audit-log", str(audit))
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    assert len(events) == summary["iterations"]
    rescales = [e for e in events if e["executed"]]
    assert len(rescales) == summary["rescales"]


def test_unknown_trace_or_policy_is_a_config_error(capsys, tmp_path):
    assert main(["simulate", "--workload", str(tmp_path / "none.csv")]) == 2
    assert "twin.workload" in capsys.readouterr().err
    assert main(["simulate", "--workload", "builtin:sine", "--policy", "magic"]) == 2
    assert "scaling.policy" in capsys.readouterr().err
