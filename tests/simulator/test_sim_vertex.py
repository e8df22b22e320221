"""The twin at vertex granularity: slot sharing, per-subtask costs, the per-vertex rescale path."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.metrics import TwinMetricsSource, TwinScalingTarget
from simulator.subtask_memory import network_buffer_mb, subtask_memory_mb
from simulator.topology import load_topology
from simulator.twin import Twin
from tests.simulator.twin_helpers import constant, quiet


def vertex_twin(name: str, rate_rps: float = 3_000.0, parallelism: int = 4, seconds: int = 1_200) -> Twin:
    return Twin(
        constant(rate_rps, seconds),
        quiet(),
        parallelism=parallelism,
        topology=load_topology(name),
        granularity="vertex",
    )


def test_job_granularity_reports_every_vertex_at_the_scaleout():
    twin = Twin(constant(3_000.0, 100), quiet(), parallelism=5, topology=load_topology("wordcount"))
    assert twin.vertex_parallelism == {"source": 5, "tokenizer": 5, "count": 5, "sink": 5}
    assert twin.slot_seconds == twin.worker_seconds


def test_slots_are_the_widest_vertex_and_only_existing_subtasks_report():
    twin = vertex_twin("wordcount")
    twin.scale_vertices({"source": 1, "tokenizer": 3, "count": 6, "sink": 1}, 100)
    assert twin.parallelism == 6  # TaskManagers = max parallelism, one slot each
    twin.advance_to(400)
    observation = TwinMetricsSource(twin).observe(400, 60)
    reported = {}
    for series in observation.subtasks:
        reported[series.vertex_id] = reported.get(series.vertex_id, 0) + 1
    shown = {v.name: v.parallelism for v in observation.job_graph.vertices}
    assert shown == {"source": 1, "tokenizer": 3, "count": 6, "sink": 1}
    assert sorted(reported.values()) == [1, 1, 3, 6]


def test_a_slot_holding_every_vertex_binds_before_the_evenly_spread_job():
    """Slot sharing: with cheap vertices at one subtask, slot 0 carries all of their work on its core."""
    twin = vertex_twin("wordcount")
    even = twin._deployment.vertex_capacity_rps_for((6, 6, 6, 6))
    lopsided = twin._deployment.vertex_capacity_rps_for((1, 6, 6, 1))
    assert lopsided < even


def test_a_per_vertex_rescale_is_short_reports_its_downtime_and_replays_nothing():
    twin = vertex_twin("wordcount")
    source = TwinMetricsSource(twin)
    target = TwinScalingTarget(twin, source)
    twin.advance_to(305)  # mid checkpoint interval: a reactive restart would replay 5 s
    processed = twin.records_processed_total
    ids = {v.name: source.vertex_id(v.name) for v in twin.topology.vertices}
    target.scale_vertices({ids["source"]: 2, ids["tokenizer"]: 4, ids["count"]: 8, ids["sink"]: 2}, 8, 305)
    twin.advance_to(400)
    assert twin.rescales == 1 and twin.parallelism == 8
    assert twin.records_processed_total - twin.records_processed == 0  # nothing replayed
    assert twin.records_processed_total > processed
    first = source.observe(400, 60).completed_rescales
    assert len(first) == 1 and first[0].granularity == "vertex"
    assert 2.0 <= first[0].downtime_s <= 4.0  # per-vertex.md: 3.0-3.2 s
    assert first[0].vertex_parallelism[ids["count"]] == 8
    twin.advance_to(460)
    assert source.observe(460, 60).completed_rescales == ()  # reported once


def test_scale_to_at_vertex_granularity_sets_every_vertex():
    twin = vertex_twin("ysb")
    twin.scale_to(7, 60)
    assert set(twin.vertex_parallelism.values()) == {7}


def test_bad_vertex_requests_are_refused_with_one_line():
    twin = vertex_twin("wordcount")
    with pytest.raises(ValueError, match="unknown vertices"):
        twin.scale_vertices({"nope": 2}, 10)
    with pytest.raises(ValueError, match="count: parallelism"):
        twin.scale_vertices({"count": 0}, 10)
    job = Twin(constant(3_000.0, 100), quiet(), topology=load_topology("wordcount"))
    with pytest.raises(ValueError, match="vertex granularity"):
        job.scale_vertices({"count": 2}, 10)


def test_fewer_subtasks_hold_less_memory_and_use_less_cpu():
    topology = load_topology("wordcount")
    assert network_buffer_mb(topology, (2, 4, 8, 2)) < network_buffer_mb(topology, (8, 8, 8, 8))
    assert subtask_memory_mb(topology, (2, 4, 8, 2)) < subtask_memory_mb(topology, (8, 8, 8, 8))
    wide, narrow = vertex_twin("wordcount", parallelism=8), vertex_twin("wordcount", parallelism=8)
    narrow.scale_vertices({"source": 1, "tokenizer": 5, "count": 8, "sink": 1}, 0)
    for twin in (wide, narrow):
        twin.advance_to(600)
    assert narrow.subtask_memory_mb_seconds < wide.subtask_memory_mb_seconds
    assert narrow.cpu_used_seconds < wide.cpu_used_seconds  # per-subtask overheads
    assert narrow.worker_seconds == wide.worker_seconds


def test_a_saturated_slot_reads_busy_on_every_subtask_that_computes():
    """On the slot whose core binds, subtasks wait for the CPU with records queued: Flink counts it busy."""
    twin = vertex_twin("wordcount", rate_rps=20_000.0, parallelism=1, seconds=400)
    twin.advance_to(300)
    assert twin.true_bottleneck() == "cpu"
    busy = [np.nanmean(s.busy_ms_per_s) for s in TwinMetricsSource(twin).observe(300, 60).subtasks]
    assert min(busy) > 990.0
