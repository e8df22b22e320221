"""The twin's latency gauge in the Observation, its hot-key topology, and the skew watch on it (issue 15)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daemon.health import DaemonMetrics
from mape.knowledge import Knowledge
from mape.loop import IterationResult, _dag_summary
from mape.skew import SKEW, SkewWatch
from messages.types import Assessment, Decision
from simulator.metrics import TwinMetricsSource, mean_latency_per_second_s
from simulator.skew import KeyGroups
from simulator.topology import load_topology
from simulator.twin import Twin, _hash_keys


def _step_trace() -> np.ndarray:
    """10 min at 30% of the capacity of 4 workers, then 5 min at 150%, then 10 min at 20%."""
    return np.concatenate([np.full(600, 3_000.0), np.full(300, 15_000.0), np.full(600, 2_000.0)])


def test_per_second_latency_weighs_up_to_the_twins_own_mean():
    twin = Twin(_step_trace(), parallelism=4, seed=1)
    twin.advance_to(500)
    twin.scale_to(2, 500)  # a restart: the job is down, records wait
    twin.advance_to(1_500)
    latency = mean_latency_per_second_s(twin)
    processed = twin.history.view("processed").astype(float)
    done = processed > 0
    weighted = float((latency[done] * processed[done]).sum() / processed[done].sum())
    assert weighted == pytest.approx(twin.latency.summary()["mean_latency_s"], rel=1e-12)
    assert latency[100] == pytest.approx(twin.latency.base_latency_s)  # unsaturated: no queueing
    assert np.nanmax(latency[500:520]) > 5  # down: the oldest waiting record's age


def test_the_observation_carries_the_latency_the_job_shows():
    twin = Twin(_step_trace(), parallelism=4, seed=1)
    source = TwinMetricsSource(twin)
    twin.advance_to(600)
    calm = source.observe(600, 60)
    assert calm.latency_ms is not None and len(calm.latency_ms) == len(calm.input_timestamps_s)
    assert np.allclose(calm.latency_ms, 500.0)
    twin.advance_to(900)
    overloaded = source.observe(900, 60)
    assert overloaded.latency_ms.min() > 10_000  # five minutes at 150%: a growing Kafka backlog
    assert np.all(np.diff(overloaded.latency_ms) > 0)


def test_the_hot_key_topology_has_one_key_with_at_least_a_tenth_of_the_records():
    topology = load_topology("hot-key")
    count = topology.vertices[topology.index("count")]
    weights = np.arange(1, count.num_keys + 1, dtype=float) ** -count.zipf_exponent
    assert weights[0] / weights.sum() >= 0.10
    groups: KeyGroups = _hash_keys(topology, np.random.SeedSequence(0))[topology.index("count")]
    assert groups.loads.max() / groups.loads.sum() >= 0.10  # one key group no rescale can split


def _hot_twin_observed(knowledge: Knowledge, parallelism: int, loops: int) -> Twin:
    twin = Twin(np.full(3_600, 30_000.0), parallelism=parallelism, topology=load_topology("hot-key"))
    source = TwinMetricsSource(twin)
    watch = SkewWatch()
    for loop in range(1, loops + 1):
        now_s = 180.0 + 60.0 * loop
        twin.advance_to(now_s)
        observation = source.observe(now_s, 60.0)
        assessment = Assessment(now_s, parallelism, 30_000.0, 30_000.0, 0.0, {}, {})
        watch.refine(observation, knowledge, assessment)
    return twin


def test_the_skew_watch_names_the_hot_key_and_estimates_its_group():
    knowledge = Knowledge()
    twin = _hot_twin_observed(knowledge, 8, loops=4)
    skew = knowledge.extensions[SKEW].by_name()
    assert set(skew) == {"count"}  # only keyed vertices
    count = skew["count"]
    assert count.persistent and count.busy_imbalance > 1.2 and count.windows_over == 4
    groups = _hash_keys(twin.topology, np.random.SeedSequence(0))[twin.topology.index("count")]
    true_hot = groups.loads.max() / groups.loads.sum()
    assert count.hot_group_share == pytest.approx(true_hot, rel=0.35)
    assert count.hot_group_share >= 0.10
    # the audit names it, the metrics show it
    result = IterationResult(
        600.0,
        skew={
            "count": {
                "imbalance_busy": 2.0,
                "imbalance_records": 2.1,
                "skew_persistent": True,
                "hot_key_group_share": 0.2,
            }
        },
    )
    result.decision = Decision(600.0, 8, 8, "current-valid")
    summary = _dag_summary(
        Assessment(600.0, 8, 1.0, 1.0, 0.0, {8: 1.0}, {8: "observed"}), knowledge.extensions[SKEW]
    )
    assert summary["skew"] and "key skew persists on count" in summary["skew"][0]
    metrics = DaemonMetrics()
    metrics.record(result, 0.01)
    assert metrics.registry.get_sample_value("foresail_vertex_skew_persistent", {"vertex": "count"}) == 1
    assert metrics.registry.get_sample_value("foresail_vertex_skew_imbalance", {"vertex": "count"}) == 2.0


def test_an_even_keyed_vertex_is_not_named():
    knowledge = Knowledge()
    twin = Twin(np.full(1_200, 20_000.0), parallelism=8, topology=load_topology("ysb"))
    source = TwinMetricsSource(twin)
    for loop in range(1, 5):
        now_s = 180.0 + 60.0 * loop
        twin.advance_to(now_s)
        SkewWatch().refine(
            source.observe(now_s, 60.0), knowledge, Assessment(now_s, 8, 1.0, 1.0, 0.0, {}, {})
        )
    join = knowledge.extensions[SKEW].by_name()["join"]
    assert math.isfinite(join.busy_imbalance) and join.busy_imbalance < 1.2 and not join.persistent
