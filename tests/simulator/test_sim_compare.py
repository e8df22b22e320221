"""`daemon.compare`: policies × seeds on one trace, aggregated, tabulated and plotted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.schema import Config
from daemon.compare import (
    ORACLE,
    aggregate,
    fmt,
    per_run_metrics,
    run_comparison,
    target_check,
    write_outputs,
)
from tests.conftest import trace_head

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def one_hour_trace(tmp_path_factory, recorded_workloads) -> Path:
    """The first hour of the recorded WordCount sine: the load rises from its mean to near its peak."""
    return trace_head(recorded_workloads, "sine_60000_6h.csv", 3600, tmp_path_factory.mktemp("traces"))


@pytest.fixture(scope="module")
def comparison(one_hour_trace):
    config = Config.model_validate({"twin": {"workload": str(one_hour_trace)}})
    return run_comparison(config, ["static", "flink-operator", "hpa-80"], seeds=2, jobs=2)


@pytest.fixture(scope="module")
def written(comparison, tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    return out, write_outputs(comparison, out)


def test_every_policy_runs_on_every_seed_with_its_series(comparison):
    assert comparison.policies == ["static", "flink-operator", "hpa-80"]
    for runs in comparison.runs.values():
        assert sorted(r["seed"] for r in runs) == [0, 1]
        assert all(len(r["series"]["workers"]) == 3600 for r in runs)
    seeds = [r["floor_avg_workers"] for r in comparison.runs["static"]]
    assert seeds[0] != seeds[1]  # a seed changes the twin (skew, speeds), hence its floor


def test_aggregate_is_mean_and_sample_sd_over_seeds_with_ratios_to_static_and_oracle(comparison):
    stats = aggregate(per_run_metrics(comparison, static_scaleout=12))
    hpa = [r["avg_workers"] for r in comparison.runs["hpa-80"]]
    assert stats["hpa-80"]["avg_workers"]["mean"] == pytest.approx(sum(hpa) / 2)
    assert stats["hpa-80"]["avg_workers"]["sd"] == pytest.approx(abs(hpa[0] - hpa[1]) / 2**0.5)
    assert stats["static"]["worker_seconds_vs_static"]["mean"] == 1.0
    ratio = [h / 12 for h in hpa]  # static keeps 12 workers for the whole hour
    assert stats["hpa-80"]["worker_seconds_vs_static"]["mean"] == pytest.approx(sum(ratio) / 2)
    floors = [r["floor_avg_workers"] for r in comparison.runs["static"]]
    assert stats[ORACLE]["avg_workers"]["mean"] == pytest.approx(sum(floors) / 2)
    gap = [100 * (12 / f - 1) for f in floors]
    assert stats["static"]["gap_to_oracle_pct"]["mean"] == pytest.approx(sum(gap) / 2)


def test_oracle_floor_is_below_every_policy_that_kept_up(comparison):
    kept_up = [r for runs in comparison.runs.values() for r in runs if r["seconds_over_slo"] == 0]
    assert len(kept_up) >= 4  # static and the Flink operator on both seeds
    assert all(r["avg_workers"] >= r["floor_avg_workers"] for r in kept_up)


def test_outputs_are_a_summary_a_table_and_four_plots(written):
    out, summary = written
    saved = json.loads((out / "summary.json").read_text())
    assert saved["policies"] == ["static", "flink-operator", "hpa-80"] and saved["seeds"] == [0, 1]
    assert set(saved["stats"]) == {"static", "flink-operator", "hpa-80", ORACLE}
    assert saved["target"] is None  # foresail did not run
    table = (out / "table.md").read_text()
    for policy in ("static", "flink-operator", "hpa-80", ORACLE):
        assert f"| {policy} |" in table
    assert fmt(saved["stats"]["hpa-80"]["avg_workers"]) in table
    names = {"workload_capacity.png", "workers.png", "latency_ecdf.png", "resources.png"}
    assert {Path(p).name for p in summary["plots"]} == names
    for name in names:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


def test_target_check_takes_the_cheaper_hpa_and_its_slo_seconds():
    def stats(ws: float, slo: float) -> dict:
        return {"worker_seconds": {"mean": ws}, "seconds_over_slo": {"mean": slo}}

    check = target_check(
        {"foresail": stats(45, 10), "static": stats(100, 0), "hpa-80": stats(70, 5), "hpa-85": stats(60, 20)}
    )
    assert check["better_hpa"] == "hpa-85" and check["saving_vs_better_hpa"] == pytest.approx(0.25)
    assert check["static_met"] and check["hpa_met"] and check["slo_met"] and check["met"]
    check = target_check({"foresail": stats(45, 30), "static": stats(100, 0), "hpa-85": stats(60, 20)})
    assert not check["slo_met"] and not check["met"]


def test_a_policy_can_name_its_capacity_model_so_both_run_side_by_side(one_hour_trace):
    config = Config.model_validate({"twin": {"workload": str(one_hour_trace), "topology": "io-sink"}})
    comparison = run_comparison(config, ["static:dag", "static:job"], seeds=1, jobs=1, keep_series=False)
    assert comparison.policies == ["static:dag", "static:job"]
    dag, job = comparison.runs["static:dag"][0], comparison.runs["static:job"][0]
    assert (dag["capacity_model"], job["capacity_model"]) == ("dag", "job")
    assert dag["bottleneck_vertex"] == "sink" and job["bottleneck_vertex"] is None
