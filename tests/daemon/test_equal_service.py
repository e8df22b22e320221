"""Baselines at equal service: the knob search on a short trace, and the table it renders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from config.schema import Config
from daemon.equal_service import (
    FAMILIES,
    STATIC_LIKE_SHARE,
    Family,
    equal_service,
    held_share,
    markdown,
    search_family,
)
from tests.daemon.equal_service_data import found, result


@pytest.fixture(scope="module")
def short_trace(tmp_path_factory) -> Path:
    """20 minutes of a load that 12 workers carry with 10 % to spare, dipping to a third in between."""
    t = np.arange(1200)
    rates = 30_000 + 15_000 * np.cos(2 * np.pi * t / 1200)
    path = tmp_path_factory.mktemp("trace") / "short.csv"
    path.write_text("second|count\n" + "".join(f"{i}|{round(r)}\n" for i, r in enumerate(rates)))
    return path


def _config(trace: Path) -> Config:
    return Config.model_validate({"twin": {"workload": str(trace)}})


def test_the_search_stops_at_the_cheapest_setting_that_serves_as_well_as_the_reference(short_trace):
    static = Family("static", "workers", (2, 12, 14))
    found = search_family(_config(short_trace), static, {"seconds_over_slo": 0.0}, seeds=1, jobs=1, batch=1)
    tried = [t["knob"] for t in found["tried"]]
    assert tried == [2, 12]  # 14 is never run: 12 already matched
    assert found["tried"][0]["seconds_over_slo"] > 0  # 2 workers fall behind the peak
    hit = found["at_equal_service"]
    assert (hit["policy"], hit["seconds_over_slo"], hit["avg_workers"]) == ("static-12", 0.0, 12.0)
    assert hit["held_share"] == 1.0 and found["never_scales"]  # 12 is where the twin starts: no rescale


def test_of_a_round_s_settings_that_serve_as_well_the_cheaper_one_is_taken(short_trace):
    """A round runs two settings; the first in the grid that got there cost more than the second."""
    family = Family("static", "workers", (14, 12))
    found = search_family(_config(short_trace), family, {"seconds_over_slo": 0.0}, seeds=1, jobs=1, batch=2)
    assert [t["knob"] for t in found["tried"]] == [14, 12]
    assert found["at_equal_service"]["policy"] == "static-12"


def test_a_run_that_holds_one_scaleout_nine_tenths_of_the_time_is_static_like():
    assert held_share(np.array([3] * 9 + [5])) >= STATIC_LIKE_SHARE > held_share(np.array([3] * 8 + [5, 5]))
    assert held_share(np.array([3, 4, 5, 5])) == 0.5 and held_share(np.array([])) == 0.0


def test_a_family_that_never_serves_as_well_is_reported_with_every_setting_tried(short_trace):
    static = Family("static", "workers", (1, 2))
    found = search_family(_config(short_trace), static, {"seconds_over_slo": 0.0}, seeds=1, jobs=1, batch=2)
    assert [t["knob"] for t in found["tried"]] == [1, 2]
    assert found["at_equal_service"] is None and not found["never_scales"]
    assert "not reached (workers up to 2)" in markdown(
        [{"workload": "short.csv", "reference_policy": "x", "reference": _ref(), "families": [found]}]
    )


def _ref(seconds_over_slo: float = 0.0) -> dict[str, float]:
    return {
        "avg_workers": 6.0,
        "worker_seconds": 7200.0,
        "seconds_over_slo": seconds_over_slo,
        "rescales": 4.0,
    }


def test_given_reference_figures_are_not_run_again_and_every_family_is_searched(short_trace, monkeypatch):
    import daemon.equal_service as module

    ran: list[str] = []
    real = module.run_comparison

    def counting(config, policies, seeds, jobs=None, keep_series=True):
        ran.extend(policies)
        return real(config, policies, seeds, jobs, keep_series)

    monkeypatch.setattr(module, "run_comparison", counting)
    monkeypatch.setitem(module.FAMILIES, "static", Family("static", "workers", (12,)))
    monkeypatch.setitem(module.FAMILIES, "ds2", Family("ds2", "target-rate ratio", (1.5,)))
    results = equal_service(
        [short_trace], 1, ["static", "ds2"], references={str(short_trace): _ref(1e9)}, jobs=1
    )
    assert ran == ["static-12", "ds2-r1.5"]  # no reference run: its figures were given
    (result,) = results
    assert [f["family"] for f in result["families"]] == ["static", "ds2"]
    assert all(f["at_equal_service"] is not None for f in result["families"])  # anything beats 1e9 s
    with pytest.raises(ValueError, match="unknown policy families"):
        equal_service([short_trace], 1, ["hpa", "magic"])


def test_the_reactive_family_sets_its_headroom_and_every_grid_runs_cheapest_first():
    config = FAMILIES["reactive"].config(Config(), 0.3)
    assert config.scaling.reactive_headroom == 0.3 and FAMILIES["reactive"].policy(0.3) == "reactive"
    assert FAMILIES["static"].grid == tuple(sorted(FAMILIES["static"].grid))
    assert FAMILIES["hpa"].grid == tuple(sorted(FAMILIES["hpa"].grid, reverse=True))
    assert FAMILIES["flink-operator"].grid == tuple(sorted(FAMILIES["flink-operator"].grid, reverse=True))
    assert FAMILIES["ds2"].grid == tuple(sorted(FAMILIES["ds2"].grid))
    assert {50, 90} <= set(FAMILIES["hpa"].grid)  # the 50–90 %, and above


def test_the_operator_is_also_swept_with_its_scale_down_delay_halved():
    """Its second knob: the one-hour delay halved served as well for fewer worker-seconds on the sine."""
    family = FAMILIES["flink-operator-30min"]
    config = family.config(Config(), 0.6)
    assert config.baselines.operator_scale_down_interval_s == 1800.0
    assert FAMILIES["flink-operator"].config(Config(), 0.6).baselines.operator_scale_down_interval_s == 3600.0
    assert family.policy(0.65) == "flink-operator-u0.65" and family.grid == FAMILIES["flink-operator"].grid
    assert 0.65 in family.grid and min(family.grid) == 0.3


def test_the_table_marks_a_static_like_baseline_and_says_who_is_cheapest():
    data = result(
        7_200.0, found("static", 12, "static-12", 14_400.0, 0.0), found("ds2", 1.2, "ds2-r1.2", 6_000.0, 9.0)
    )
    text = markdown([data], {"sine_60000_6h.csv": "WordCount (sine)"})
    assert (
        "| WordCount (sine) | static-12 | workers 12 | 14,400 | 2.00 | 0 | 0.0 | never scales: static-like (one scale-out 100% of the time) |"
        in text
    )
    assert "ds2-r1.2 reaches equal service with no more worker-seconds than foresail" in text
