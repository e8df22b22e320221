"""Stored knowledge of the right shape but impossible values (a hand edit, a bug of another version, a
store from a host whose clock ran ahead): each part is judged where it is restored. What no window could
have taught starts that part fresh with one line, or is dropped alone; what stays is what the daemon could
have learned. Before, every case below was restored as it was and drove the plan (the review of
2026-12-01 reproduced each on a resumed `foresail run`)."""

from __future__ import annotations

import copy
import json
import sqlite3

import numpy as np
import pytest
from structlog.testing import capture_logs

from config.schema import Config
from daemon.build import knowledge_settings
from daemon.simulate import simulate
from forecasting.executor import InlineExecutor
from mape.knowledge import Knowledge
from mape.vertex_knowledge import VertexKnowledge
from messages.types import Observation
from recovery.monitor import RecoveryMonitor

CONFIG = Config.model_validate({"recovery": {"downtime_out_s": 90.0}})


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """The state a daemon saved after 40 minutes of the sine trace on the twin."""
    folder = tmp_path_factory.mktemp("store")
    trace = folder / "sine_40min.csv"
    trace.write_text("second|count\n" + "".join(f"{t}|{30_000 + 20 * t}\n" for t in range(2_400)))
    store = folder / "k.sqlite"
    simulate(Config.model_validate({"twin": {"workload": str(trace)}}), store_path=str(store))
    with sqlite3.connect(store) as db:
        state = {key: json.loads(value) for key, value in db.execute("SELECT key, value FROM state")}
        (model,) = db.execute("SELECT value FROM blobs WHERE key = 'forecaster_model'").fetchone()
    state["forecaster"]["model"] = model  # as the store reads it back
    return state


def _restored(stored: dict, part: str, edit) -> tuple[Knowledge, list[str]]:
    state = copy.deepcopy(stored)
    edit(state[part])
    with capture_logs() as events:
        knowledge = Knowledge.from_state(state, knowledge_settings(CONFIG, InlineExecutor))
    return knowledge, [e["part"] for e in events if e["event"] == "knowledge-store-part-unreadable"]


@pytest.mark.parametrize(
    ("part", "edit"),
    [
        ("loop", lambda s: s.update(last_rescale_s="noon")),  # crashed every iteration after the start
        (
            "capacity",
            lambda s: s["observed"].update(
                {"1": {**next(iter(s["observed"].values())), "capacity_rps": 1e300}}
            ),
        ),
        ("capacity", lambda s: s["observed"].update({"-4": next(iter(s["observed"].values()))})),
        ("cores", lambda s: s["stats"].update(c_xy=1000.0, m2_y=1e6)),  # a CPU spread of ~38 on a 0..1 gauge
    ],
    ids=["rescale-time-text", "capacity-1e300", "scaleout-negative", "cores-impossible-spread"],
)
def test_a_part_no_window_could_have_taught_starts_fresh_alone(stored, part, edit):
    knowledge, unreadable = _restored(stored, part, edit)
    assert unreadable == [part]
    assert knowledge.iteration == (0 if part == "loop" else stored["loop"]["iteration"])


def test_a_damaged_last_forecast_is_dropped_alone(stored):
    """An upper bound shorter than its rates failed every analysis: each iteration a phase error."""
    knowledge, unreadable = _restored(
        stored,
        "forecaster",
        lambda s: s["last_forecast"].update(upper_rps=s["last_forecast"]["rates_rps"][:5]),
    )
    assert unreadable == [] and knowledge.forecaster.last_forecast is None
    assert knowledge.forecaster.forecast(2_460.0).rates_rps.size  # the history was kept: it forecasts


def test_a_next_fit_far_ahead_waits_no_longer_than_a_back_off(stored):
    knowledge, _ = _restored(
        stored, "forecaster", lambda s: s.update(next_fit_iteration=10**12, fit_in_flight=False)
    )
    forecaster = knowledge.forecaster
    assert forecaster._model is not None  # the saved model came back: the stored next fit was read
    assert forecaster._next_fit_iteration <= forecaster._iteration + CONFIG.forecast.retrain_after_poor


def test_impossible_ratios_downtimes_and_shares_are_dropped_or_bounded(stored):
    knowledge, unreadable = _restored(stored, "track_record", lambda s: s.update(ratios=[1e6, 1.1, 1e6]))
    assert unreadable == [] and list(knowledge.track_record.ratios) == [1.1]
    knowledge, _ = _restored(
        stored,
        "downtime",
        lambda s: s.update(observed_s={"out": [1e9, 40.0], "in": [1e9]}, initial_out_s=5.0),
    )
    assert (
        knowledge.downtime.observations_s("out") == [40.0] and knowledge.downtime.observations_s("in") == []
    )
    assert knowledge.downtime.initial_s["out"] == 90.0  # the configuration's, not the store's
    knowledge, _ = _restored(stored, "downtime", lambda s: s.update(observed_s={"out": [3_900.0], "in": []}))
    assert knowledge.downtime.observations_s("out") == [3_900.0]  # a big state's restore: a downtime
    vertex = VertexKnowledge.from_dict(
        {**VertexKnowledge.fresh(3.0).to_dict(), "cpu_per_busy": 1e6, "cpu_per_busy_by_vertex": {"v1": 1e6}}
    )
    assert vertex.cpu_per_busy == 2.0 and vertex.cpu_per_busy_by_vertex == {"v1": 2.0}
    with pytest.raises(ValueError):  # NaN stayed NaN for good: the part starts fresh instead
        VertexKnowledge.from_dict({**VertexKnowledge.fresh(3.0).to_dict(), "cpu_per_busy": float("nan")})


def test_a_rescale_or_backlog_recorded_after_now_does_not_stay_ahead(stored):
    knowledge, _ = _restored(stored, "plausibility", lambda s: s["backlogs"].insert(0, [1e12, 0.0]))
    stamps = np.arange(2_405.0, 2_465.0, 5.0)
    observation = Observation(2_460.0, 60.0, stamps, np.full(len(stamps), 30_000.0), (), 0.0, 8, 3_000.0)
    for _ in range(3):
        knowledge.plausibility.record(observation, {})
    assert all(t <= 2_460.0 for t, _ in knowledge.plausibility.backlogs)


def test_a_recovery_monitor_that_saw_samples_from_the_future_learns_again(stored):
    """Every later sample was dropped as already seen: no recovery was observed again, for good."""
    state = {**stored["recovery"], "last_timestamp_s": 1e12}
    monitor = RecoveryMonitor.from_dict(state, InlineExecutor())
    stamps = np.arange(2_405.0, 2_465.0, 5.0)
    monitor.submit(stamps, np.full(len(stamps), 30_000.0), np.full(len(stamps), 30_000.0))
    assert monitor.to_dict()["last_timestamp_s"] == 2_460.0
    monitor.close()


def test_what_a_window_can_teach_is_kept_and_a_worker_line_it_cannot_is_dropped_alone(stored):
    """An idle window at a scale-out seen for the first time stores a capacity of 0 (the job read as
    saturated at 0 rps): a bound that refused it threw every capacity away at the next start."""
    first = next(iter(stored["capacity"]["observed"]))
    worker = next(iter(stored["capacity"]["workers"].values()))
    impossible = {**worker, "stats": {**worker["stats"], "m2_x": 1e9}}  # a CPU spread no gauge gives

    def edit(capacity: dict) -> None:
        capacity["observed"]["17"] = {**capacity["observed"][first], "capacity_rps": 0.0}
        capacity["workers"]["tm-x"] = impossible

    knowledge, unreadable = _restored(stored, "capacity", edit)
    assert unreadable == [] and knowledge.capacity.observed[17].capacity_rps == 0.0
    assert set(knowledge.capacity.workers) == set(stored["capacity"]["workers"])  # all but tm-x
