"""Memory levels through the real loop on the twin: analysis per level, execution, persisted history."""

from __future__ import annotations

import math

import numpy as np

from config.schema import Config
from daemon.build import knowledge_settings, make_loop, make_twin
from forecasting.executor import InlineExecutor
from mape.knowledge_store import KnowledgeStore
from memory.knowledge import memory_decisions as stored_memory_decisions
from memory.knowledge import memory_of
from messages.types import Observation


def _config(profile: str, policy: str = "foresail", **twin) -> Config:
    return Config.model_validate(
        {
            "twin": {"workload": "builtin:sine", "job_profile": profile, "initial_scaleout": 4, **twin},
            "scaling": {"policy": policy},
        }
    )


def _run(config: Config, store: KnowledgeStore, until_s: float, target=None, stop=None):
    world = make_twin(config)
    knowledge = store.load(knowledge_settings(config, InlineExecutor))
    loop = make_loop(config, world.source, target or world.target, knowledge, store)
    results, now = [], 0.0
    while now < until_s:
        now += 60.0
        world.twin.advance_to(now)
        results.append(loop.iterate(now))
        if stop is not None and stop(results[-1]):
            break
    knowledge.close()
    return world, knowledge, results


def test_a_stateless_job_is_analysed_with_the_one_capacity_model_and_no_memory_levels():
    store = KnowledgeStore(":memory:")
    _, knowledge, results = _run(_config("stateless"), store, 600)
    memory = results[-1].assessment.memory
    assert memory is not None and not memory.stateful and memory.capacities_by_level == {}
    assert knowledge.capacity.observed and memory_of(knowledge).capacities.models == {}


def test_the_cpu_only_policy_is_not_memory_aware():
    store = KnowledgeStore(":memory:")
    _, _, results = _run(_config("read-heavy", "foresail-cpu-only"), store, 600)
    assert all(r.assessment.memory is None for r in results)
    assert all(r.decision.target_managed_mb is None for r in results)


def test_a_read_heavy_job_scales_memory_up_and_the_history_survives_a_restart(tmp_path):
    # 4 workers at level 0 miss most reads (hit rate ~0.19): the first scale-out becomes a scale-up
    path = tmp_path / "k.sqlite"
    store = KnowledgeStore(path)
    config = _config("read-heavy", initial_scaleout=2)
    world, knowledge, results = _run(
        config, store, 3600, stop=lambda r: r.decision.changes_memory and r.executed
    )
    decision = results[-1].decision
    assert decision.rule == "memory-up" and decision.target_memory_level == 1
    assert world.twin.managed_mb == 316.0 and world.twin.memory_changes == 1
    assert memory_of(knowledge).level == 1
    entries = stored_memory_decisions(store, "lookup")
    assert len(entries) == 1 and entries[0].scaled_up and 0 < entries[0].hit_rate_before < 0.8
    assert math.isfinite(entries[0].latency_ns_before)
    store.close()

    restored = KnowledgeStore(path).load(knowledge_settings(config, InlineExecutor))
    memory = memory_of(restored)
    assert memory.level == 1
    assert memory.history.last["lookup"] == entries[0]
    assert memory.history.stateful == {"lookup"} and memory.history.readers == {"lookup"}
    assert memory.capacities.known_levels() == [0]
    restored.close()


def test_capacity_is_learned_per_level_and_offered_for_the_other_known_levels():
    store = KnowledgeStore(":memory:")
    config = _config("read-heavy", initial_scaleout=2)
    _, knowledge, results = _run(config, store, 2400)
    last = results[-1].assessment
    levels = memory_of(knowledge).capacities.known_levels()
    assert len(levels) >= 2 and last.memory.level in levels
    assert set(last.memory.capacities_by_level) == set(levels) - {last.memory.level}
    assert all(len(per) == config.scaling.max_scaleout for per in last.memory.capacities_by_level.values())
    assert set(last.capacity_sources.values()) <= {"observed", "cache-curve"}
    # each other level's restarts judged against the lag SLO on that level's own capacities
    for level, per in last.memory.capacities_by_level.items():
        catch_up = last.memory.lag_catch_up_by_level[level]
        assert set(catch_up) == set(per)
        by_capacity = [catch_up[n] for n in sorted(per, key=per.get)]
        assert by_capacity == sorted(by_capacity, reverse=True)


class _ScaleOnly:
    """A target that cannot change memory (an old backend)."""

    def __init__(self, twin) -> None:
        self.twin = twin

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.twin.scale_to(scaleout, now_s)


def test_a_target_that_cannot_change_memory_gets_the_scaleout_and_never_a_crash():
    store = KnowledgeStore(":memory:")
    config = _config("read-heavy", initial_scaleout=2)
    world = make_twin(config)
    knowledge = store.load(knowledge_settings(config, InlineExecutor))
    loop = make_loop(config, world.source, _ScaleOnly(world.twin), knowledge, store)
    memory_decisions = []
    for now in np.arange(60.0, 3600.0, 60.0):
        world.twin.advance_to(now)
        result = loop.iterate(now)
        if result.decision.changes_memory:
            memory_decisions.append(result)
    assert memory_decisions and world.twin.memory_changes == 0
    for result in memory_decisions:
        if result.decision.action == "hold":  # memory alone: nothing the target can do
            assert "cannot change the managed memory" in result.errors["execute"] and not result.executed
        else:  # the scale-out part is applied; the memory level stays as the job runs it
            assert result.executed and "execute" not in result.errors
    assert memory_of(knowledge).level == 0
    knowledge.close()


class _Blind:
    """The twin's observations without memory signals (a backend that reports no operators)."""

    def __init__(self, source) -> None:
        self.source = source

    def observe(self, now_s: float, window_s: float) -> Observation:
        observation = self.source.observe(now_s, window_s)
        return Observation(**{**observation.__dict__, "operators": (), "managed_memory_mb": None})


def test_without_memory_signals_the_memory_aware_policy_decides_like_cpu_only():
    runs = []
    for policy in ("foresail", "foresail-cpu-only"):
        config = _config("read-heavy", policy, initial_scaleout=2)
        world = make_twin(config)
        store = KnowledgeStore(":memory:")
        knowledge = store.load(knowledge_settings(config, InlineExecutor))
        loop = make_loop(config, _Blind(world.source), world.target, knowledge, store)
        decisions = []
        for now in np.arange(60.0, 1800.0, 60.0):
            world.twin.advance_to(now)
            decision = loop.iterate(now).decision
            decisions.append((decision.target_scaleout, decision.rule, decision.target_managed_mb))
        knowledge.close()
        runs.append(decisions)
    assert runs[0] == runs[1]
    assert all(managed is None for _, _, managed in runs[0])
