"""An idle job: the smallest scale-out the recovery target allows (rule `idle`), never `max-scaleout`,
and no flapping when the load stops or starts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from config.schema import Config
from daemon.simulate import simulate
from mape.knowledge import Knowledge
from mape.proactive import ProactivePolicy
from messages.types import Assessment

NOW_S = 7_200.0


def _idle_assessment(current: int, recovery_s: dict[int, float] | None = None) -> Assessment:
    """What an idle job shows: no input, no forecast load, no backlog, and capacity 0 everywhere
    (nothing to learn capacity from), hence no predicted recovery either."""
    capacities = dict.fromkeys(range(1, 19), 0.0)
    return Assessment(
        time_s=NOW_S,
        current_scaleout=current,
        workload_avg_rps=0.0,
        workload_max_rps=0.0,
        backlog_records=0.0,
        capacities_rps=capacities,
        capacity_sources=dict.fromkeys(capacities, "observed"),
        forecast_rps=np.zeros(900),
        recovery_s=recovery_s if recovery_s is not None else dict.fromkeys(capacities, math.inf),
    )


def _policy(min_scaleout: int = 1, target_s: float = 600.0) -> ProactivePolicy:
    return ProactivePolicy(min_scaleout, 18, recovery_target_s=target_s, loop_interval_s=60.0)


def test_an_idle_job_goes_to_the_smallest_scaleout_not_the_largest():
    target, rule, reasons = _policy().propose(_idle_assessment(current=12), Knowledge())
    assert (target, rule) == (1, "idle")
    assert any("recovers in" in r for r in reasons)


def test_an_idle_job_stays_where_it_is_without_flapping():
    knowledge = Knowledge(last_rescale_s=NOW_S - 240)
    proposals = {_policy().propose(_idle_assessment(current=1), knowledge)[:2] for _ in range(5)}
    assert proposals == {(1, "idle")}


def test_the_recovery_target_decides_how_small_an_idle_job_gets():
    # predicted recoveries where known: 1 and 2 workers would recover too slowly
    recovery = {1: 900.0, 2: 700.0, 3: 400.0, **dict.fromkeys(range(4, 19), 100.0)}
    target, rule, _ = _policy().propose(_idle_assessment(12, recovery), Knowledge())
    assert (target, rule) == (3, "idle")


def test_a_job_with_a_forecast_rise_or_a_backlog_is_not_idle():
    forecast = np.r_[np.full(60, 5_000.0), np.zeros(840)]
    rising = Assessment(**{**_idle_assessment(12).__dict__, "forecast_rps": forecast})
    assert _policy().propose(rising, Knowledge())[1] != "idle"
    waiting = Assessment(**{**_idle_assessment(12).__dict__, "backlog_records": 1e6})
    assert _policy().propose(waiting, Knowledge())[1] != "idle"


def _trace(path: Path, parts: list[tuple[int, float]]) -> Path:
    rates = np.concatenate([np.full(seconds, rate) for seconds, rate in parts])
    path.write_text("second|count\n" + "".join(f"{i}|{r:.0f}\n" for i, r in enumerate(rates)))
    return path


def _decisions(tmp_path: Path, parts: list[tuple[int, float]]) -> list[dict]:
    trace = _trace(tmp_path / "trace.csv", parts)
    no_arima = {"min_history_s": 86_400, "max_history_s": 86_400}  # the linear trend only: fast
    config = Config.model_validate(
        {"twin": {"workload": str(trace)}, "forecast": no_arima, "knowledge": {"path": ":memory:"}}
    )
    simulate(config, audit_path=tmp_path / "audit.jsonl")
    events = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "iteration"]


TRANSITION_WINDOW_S = 600.0
"""Rescales within this long before or after the load starts or stops count as around the transition."""


@pytest.mark.parametrize(
    ("name", "parts", "idle_from_s", "idle_to_s", "transition_s"),
    [
        ("idle-then-busy", [(1_200, 0.0), (3_000, 20_000.0)], 0.0, 1_200.0, 1_200.0),
        ("busy-then-idle", [(2_400, 20_000.0), (1_800, 0.0)], 2_400.0, 4_200.0, 2_400.0),
    ],
)
def test_idle_phases_on_the_twin(tmp_path, name, parts, idle_from_s, idle_to_s, transition_s):
    events = _decisions(tmp_path, parts)
    idle = [e for e in events if idle_from_s + 60 < e["time_s"] <= idle_to_s]  # windows wholly idle
    assert idle and not [e for e in idle if e["decision"]["rule"] == "max-scaleout"]
    assert "idle" in {e["decision"]["rule"] for e in idle}
    targets = [e["decision"]["target_scaleout"] for e in idle]
    assert targets[-1] == 1 and targets == sorted(targets, reverse=True)  # down to the minimum, never back up
    rescales = [e["time_s"] for e in events if e["executed"]]
    around = [t for t in rescales if abs(t - transition_s) <= TRANSITION_WINDOW_S]
    assert 1 <= len(around) <= 2, rescales
    assert len([t for t in rescales if idle_from_s + 60 < t <= idle_to_s]) <= 2  # no flapping while idle
