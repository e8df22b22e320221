"""`foresail compare --suite`: a policy set over a family of loads, one table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.schema import Config
from daemon.cli import main
from daemon.suite import run_suite, suite_rows, suite_table, suite_workloads, write_suite
from simulator.shapes import DEVELOPMENT, HELD_OUT
from tests.conftest import trace_head


def test_suites_name_the_shared_traces_and_the_two_parts_of_the_family():
    held_out = suite_workloads("held-out")
    assert set(held_out) == {s.name for s in HELD_OUT}
    assert all(spec == f"shape:{name}" for name, spec in held_out.items())
    assert set(suite_workloads("development")) == {s.name for s in DEVELOPMENT}
    shared = suite_workloads("shared")
    assert set(shared) == {"sine", "ysb", "traffic"} and all(Path(p).is_file() for p in shared.values())
    assert set(suite_workloads("all")) == set(shared) | set(suite_workloads("family"))


def test_an_unknown_suite_is_a_configuration_error_naming_the_suites(capsys, tmp_path):
    assert main(["compare", "--suite", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--suite: no suite 'nope'" in err and "held-out" in err and "Traceback" not in err


def test_the_table_has_a_row_per_load_and_policy_and_marks_missed_targets(tmp_path, recorded_workloads):
    short = trace_head(recorded_workloads, "tm_6h_100K_max.csv", 1800, tmp_path)
    results = run_suite(Config(), {"a": str(short), "b": str(short)}, ["static", "reactive"], 1, jobs=1)
    rows = suite_rows(results, static_scaleout=12)
    assert [(r["load"], r["policy"]) for r in rows] == [
        ("a", "static"),
        ("a", "reactive"),
        ("b", "static"),
        ("b", "reactive"),
    ]
    for row in rows:
        assert row["oracle_ratio"] == pytest.approx(row["avg_workers"] / row["oracle_avg_workers"])
        assert row["rescales_per_h"] == pytest.approx(row["rescales"] * 2)  # half an hour
        assert row["meets"]["slo"] == (row["slo_share"] <= 0.01)
        assert row["meets"]["workers"] == (row["oracle_ratio"] <= 1.15)
        assert row["budget_floor_ratio"] == pytest.approx(
            row["budget_floor_avg_workers"] / row["oracle_avg_workers"]
        )
        assert row["budget_floor_ratio"] >= 1.0
        assert 0 <= row["seconds_over_slo_after_restart"] <= row["seconds_over_slo"]
    static = rows[0]
    assert static["rescales"] == 0 and static["meets"]["rescales"]
    assert static["seconds_over_slo_after_restart"] == 0  # no failures configured: it never restarts
    assert not static["meets"]["workers"]  # 12 workers on a load the oracle carries with far fewer
    assert static["oracle_ratio"] >= static["budget_floor_ratio"]  # within any budget, above its floor
    table = write_suite(rows, 1, tmp_path / "out")
    assert table == suite_table(rows, 1) == (tmp_path / "out" / "suite.md").read_text()
    assert table.count("\n| a |") == 2 and "✗" in table
    saved = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert len(saved["rows"]) == 4


def test_an_installed_foresail_without_the_shared_traces_says_where_they_are(monkeypatch, tmp_path):
    """`pip install .` ships no data/ folder: the suite named a trace path inside site-packages."""
    import daemon.suite as suite

    monkeypatch.setattr(suite, "WORKLOADS", tmp_path / "absent")
    for name in ("shared", "all"):
        with pytest.raises(KeyError, match="ship with a checkout"):
            suite.suite_workloads(name)
    assert all(spec.startswith("shape:") for spec in suite.suite_workloads("family").values())


def test_a_figure_next_to_a_mark_is_never_rounded_onto_the_other_side_of_its_target():
    """1.15091 printed '1.15 ✗' against '≤ 1.15×': the figure gets the digits that show why it missed."""
    from daemon.suite import shown

    assert shown(1.15091, 1.15, 2) == "1.151" and shown(1.1449, 1.15, 2) == "1.14"
    assert shown(1.0049, 1.0, 2) == "1.005" and shown(3.04, 3.0, 1) == "3.04"
    assert shown(1.150001, 1.15, 2) == "1.150001"  # as many digits as it takes
    assert shown(1.15, 1.15, 2) == "1.15" and shown(0.79996, 0.8, 2) == "0.80"
