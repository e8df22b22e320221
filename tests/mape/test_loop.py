"""The loop never dies: a failing phase or bad data yields a logged hold, and knowledge is kept.

Backends that raise are small in-process stand-ins for an unreachable Prometheus or API server (the real
clients arrive with the real-backend issue); everything else is the real loop on the digital twin.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from structlog.testing import capture_logs

from config.schema import Config
from daemon.build import make_loop, make_twin
from mape.extensions import ObservingExtension
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore
from messages.types import Decision, Observation


class Unreachable:
    def observe(self, now_s: float, window_s: float) -> Observation:
        raise ConnectionError("prometheus: connection refused")

    def scale_to(self, scaleout: int, now_s: float) -> None:
        raise ConnectionError("api server: 503")


class Scripted:
    """Returns prepared observations in order (to inject gaps and NaN)."""

    def __init__(self, *observations: Observation) -> None:
        self.observations = list(observations)

    def observe(self, now_s: float, window_s: float) -> Observation:
        return self.observations.pop(0)


def _config(**scaling) -> Config:
    return Config.model_validate({"scaling": {"stabilization_s": 0, **scaling}})


def _twin_loop(config: Config, store: KnowledgeStore, *, source=None, target=None):
    world = make_twin(config)
    loop = make_loop(config, source or world.source, target or world.target, Knowledge(), store)
    return world, loop


def _warm(world, loop, until_s: float) -> list:
    now, results = 0.0, []
    while now < until_s:
        now += 60.0
        world.twin.advance_to(now)
        results.append(loop.iterate(now))
    return results


def test_unreachable_metrics_hold_and_still_persist(tmp_path):
    store = KnowledgeStore(tmp_path / "k.sqlite")
    _world, loop = _twin_loop(_config(), store, source=Unreachable())
    with capture_logs() as events:
        result = loop.iterate(60.0)
    assert result.decision.rule == "hold-phase-error"
    assert result.decision.action == "hold"
    assert "ConnectionError" in result.errors["monitor"]
    assert store.load().iteration == 1
    (event,) = [e for e in events if e["event"] == "iteration"]
    assert event["errors"]["monitor"].startswith("ConnectionError")
    assert event["decision"]["rule"] == "hold-phase-error"


def test_failed_execution_is_recorded_and_not_counted_as_a_rescale(tmp_path):
    config = Config.model_validate({"twin": {"initial_scaleout": 2}})  # far too few for the load
    store = KnowledgeStore(":memory:")
    world, loop = _twin_loop(config, store, target=Unreachable())
    attempts = [r for r in _warm(world, loop, 600.0) if r.decision.action == "scale_out"]
    assert attempts, "the plan should have asked for more workers"
    assert all("ConnectionError" in r.errors["execute"] and not r.executed for r in attempts)
    assert loop.knowledge.last_rescale_s is None and not loop.knowledge.rescale_times_s
    assert world.twin.parallelism == 2


def test_every_executed_rescale_is_recorded_for_the_rescale_budget():
    config = Config.model_validate({"twin": {"initial_scaleout": 2}})
    world, loop = _twin_loop(config, KnowledgeStore(":memory:"))
    executed = [r.time_s for r in _warm(world, loop, 900.0) if r.executed]
    assert executed, "the plan should have asked for more workers"
    assert list(loop.knowledge.rescale_times_s) == executed
    assert loop.knowledge.last_rescale_s == executed[-1]


def test_nan_and_gaps_in_metrics_hold_the_decision(tmp_path):
    store = KnowledgeStore(":memory:")
    world, loop = _twin_loop(_config(), store)
    _warm(world, loop, 600.0)
    good = world.source.observe(600.0, 60.0)
    learned = loop.knowledge.capacity.to_dict()
    gaps = Observation(
        time_s=660.0,
        window_s=60.0,
        input_timestamps_s=good.input_timestamps_s + 60,
        input_rate_rps=np.full(len(good.input_rate_rps), np.nan),
        workers=good.workers,
        backlog_records=None,
        parallelism=None,
        uptime_s=math.nan,
    )
    loop.source = Scripted(gaps)
    result = loop.iterate(660.0)
    assert result.decision.rule == "hold-bad-data"
    assert any("input-rate" in r for r in result.decision.reasons)
    assert any("backlog" in r for r in result.decision.reasons)
    assert any("parallelism" in r for r in result.decision.reasons)
    # what was learned before survives the bad window
    assert set(loop.knowledge.capacity.to_dict()["observed"]) >= set(learned["observed"])


def test_a_failing_store_does_not_stop_the_loop(tmp_path):
    store = KnowledgeStore(tmp_path / "k.sqlite")
    world, loop = _twin_loop(_config(), store)
    store.close()  # every save now raises
    world.twin.advance_to(60.0)
    result = loop.iterate(60.0)
    assert "persist" in result.errors
    world.twin.advance_to(120.0)
    assert loop.iterate(120.0).time_s == 120.0
    assert loop.knowledge.iteration == 2


def test_an_extension_failing_after_a_rescale_does_not_stop_the_loop(tmp_path):
    config = Config.model_validate({"twin": {"initial_scaleout": 2}})  # far too few for the load
    store = KnowledgeStore(tmp_path / "k.sqlite")
    world, loop = _twin_loop(config, store)

    class Broken(ObservingExtension):
        def after_execute(self, assessment, decision, applied, knowledge):
            raise TypeError("'<' not supported between instances of 'int' and 'str'")

    loop.analyzer.extensions = (Broken(),)
    executed = [r for r in _warm(world, loop, 900.0) if r.executed]
    assert executed, "the plan should have asked for more workers"
    assert all(r.errors["after-execute"].startswith("TypeError") for r in executed)
    assert store.load().iteration == loop.knowledge.iteration == 15
    assert loop.knowledge.last_rescale_s == executed[-1].time_s


def test_a_skew_summary_that_fails_does_not_stop_the_iteration(tmp_path, monkeypatch):
    store = KnowledgeStore(tmp_path / "k.sqlite")
    world, loop = _twin_loop(_config(), store)

    def broken(knowledge):
        raise TypeError("'>=' not supported between instances of 'str' and 'int'")

    monkeypatch.setattr("mape.loop.skew_of", broken)
    world.twin.advance_to(60.0)
    result = loop.iterate(60.0)
    assert result.errors["skew"].startswith("TypeError") and result.decision is not None
    assert store.load().iteration == 1


def test_an_audit_line_that_cannot_be_written_does_not_stop_the_loop(tmp_path):
    world, loop = _twin_loop(_config(), KnowledgeStore(tmp_path / "k.sqlite"))

    class FullDisk:
        def info(self, *args, **kwargs):
            raise OSError(28, "No space left on device")

    loop.log = FullDisk()
    world.twin.advance_to(60.0)
    result = loop.iterate(60.0)
    assert result.errors["audit"].startswith("OSError") and loop.knowledge.iteration == 1
    world.twin.advance_to(120.0)
    assert loop.iterate(120.0).time_s == 120.0


def test_audit_event_carries_inputs_capacities_and_reasons():
    store = KnowledgeStore(":memory:")
    world, loop = _twin_loop(_config(), store)
    with capture_logs() as events:
        _warm(world, loop, 300.0)
    last = [e for e in events if e["event"] == "iteration"][-1]
    assert last["inputs"]["parallelism"] == world.twin.parallelism or last["executed"]
    assert last["inputs"]["workload_avg_rps"] > 0
    assert set(last["capacity_rps"]) == set(range(1, 19))
    assert last["decision"]["rule"] and last["decision"]["reasons"]
    # the default 30 s lag SLO: each candidate's seconds over it after its restart, fewer with more capacity
    catch_up = last["lag_catch_up_s"]
    assert set(catch_up) == set(range(1, 19))
    current = last["inputs"]["parallelism"]
    outward = [math.inf if catch_up[n] is None else catch_up[n] for n in range(current + 1, 19)]
    assert outward and all(s >= 0 for s in outward) and outward == sorted(outward, reverse=True)


def test_on_flink_2_a_scale_out_is_predicted_without_replay():
    """recovery.scale_out_at_checkpoint (FLIP-461): a scale-out's restart replays nothing, so its lag is back
    within the SLO sooner; a scale-in is a failover from the last checkpoint, predicted as before."""
    last = {}
    for at_checkpoint in (False, True):
        config = Config.model_validate(
            {"scaling": {"stabilization_s": 0}, "recovery": {"scale_out_at_checkpoint": at_checkpoint}}
        )
        world, loop = _twin_loop(config, KnowledgeStore(":memory:"))
        with capture_logs() as events:
            _warm(world, loop, 300.0)
        last[at_checkpoint] = [e for e in events if e["event"] == "iteration"][-1]
    assert last[True]["inputs"] == last[False]["inputs"]  # the same run up to the prediction

    def lag(at_checkpoint: bool, n: int) -> float:
        s = last[at_checkpoint]["lag_catch_up_s"][n]
        return math.inf if s is None else s

    current = last[False]["inputs"]["parallelism"]
    outward, inward = range(current + 1, 19), range(1, current)
    assert all(lag(True, n) <= lag(False, n) for n in outward)
    assert any(lag(True, n) < lag(False, n) for n in outward)
    recovery = {flag: last[flag]["recovery_s"] for flag in last}
    assert inward and all(recovery[True][n] == recovery[False][n] for n in inward)  # replay included


@pytest.mark.parametrize("scaleout", [6, 18])
def test_capacity_estimate_tracks_the_twin_truth(scaleout):
    config = Config.model_validate(
        {
            "twin": {"initial_scaleout": scaleout},
            "scaling": {"min_scaleout": scaleout, "max_scaleout": scaleout},
        }
    )
    world, loop = _twin_loop(config, KnowledgeStore(":memory:"))
    errors = []
    now = 0.0
    while now < world.end_s:  # the whole 6-hour built-in trace: low and high load
        now += 60.0
        world.twin.advance_to(now)
        truth = world.twin.true_capacity_rps()
        result = loop.iterate(now)
        estimate = result.assessment.capacity(scaleout)
        if math.isfinite(estimate):
            errors.append(abs(estimate - truth) / truth)
    assert len(errors) > 300
    assert np.median(errors) < 0.05


def test_a_rescale_recorded_after_now_is_taken_as_just_happened():
    """A clock stepped back an hour left the last rescale 3,600 s in the future: the stabilization read
    "last rescale -3600 s ago" and held every decision but a surge until the clock caught up."""
    config = Config.model_validate(
        {"twin": {"initial_scaleout": 18}, "scaling": {"stabilization_s": 180, "necessary_window_s": 0}}
    )
    world, loop = _twin_loop(config, KnowledgeStore(":memory:"))
    loop.knowledge.record_rescale(3_660.0, 18)
    loop.knowledge.recent_decisions.append(Decision(3_660.0, 12, 18, "surge"))
    with capture_logs() as events:
        results = _warm(world, loop, 900.0)
    assert loop.knowledge.recent_decisions[0].time_s == 60.0  # the plan finds a surge's hold by it
    assert [e["ahead_s"] for e in events if e["event"] == "rescale-recorded-after-now"] == [3_600.0]
    ages = [r.decision.reasons[0] for r in results if r.decision.rule == "stabilization"]
    assert ages[:2] == ["last rescale 60 s ago < 180 s", "last rescale 120 s ago < 180 s"]
    assert any(r.executed and r.decision.target_scaleout < 18 for r in results)  # 18 is far too many
