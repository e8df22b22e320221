"""The twin as a job graph: topologies as data, Flink's task metrics per vertex and subtask, bottlenecks."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from simulator.metrics import TwinMetricsSource
from simulator.params import TwinParams
from simulator.topology import TopologyError, load_topology, shipped_topologies
from simulator.twin import Twin

ALL = shipped_topologies()


def twin_at(topology: str, rate_rps: float, seconds: int = 900, parallelism: int = 4, **params) -> Twin:
    """A twin whose reference deployment (12 workers) carries 12,000 rps + 10%, run at a constant rate."""
    sizing = Twin(np.full(10, 12_000.0), TwinParams(), topology=load_topology(topology))
    knobs = {"worker_capacity_rps": sizing.worker_capacity_rps, **params}
    twin = Twin(
        np.full(seconds, rate_rps),
        TwinParams(**knobs),
        parallelism=parallelism,
        topology=load_topology(topology),
    )
    twin.advance_to(seconds)
    return twin


def by_vertex(observation) -> dict[str, list]:
    names = {v.vertex_id: v.name for v in observation.job_graph.vertices}
    grouped: dict[str, list] = {}
    for series in observation.subtasks:
        grouped.setdefault(names[series.vertex_id], []).append(series)
    return grouped


def test_the_shipped_topologies_are_the_ones_the_issue_names():
    assert set(ALL) >= {"single", "wordcount", "ysb", "session", "io-sink"}


@pytest.mark.parametrize("name", ALL)
def test_every_topology_is_sized_like_the_shared_traces(name):
    twin = Twin(np.full(10, 30_000.0), TwinParams(), topology=load_topology(name))
    assert twin.reference_capacity_rps(12) == pytest.approx(1.10 * 30_000.0, rel=1e-9)


def test_the_single_topology_file_is_the_default_one_operator_twin():
    trace = np.full(600, 9_000.0)
    default = Twin(trace, TwinParams(), parallelism=6, seed=3)
    from_file = Twin(trace, TwinParams(), parallelism=6, seed=3, topology=load_topology("single"))
    for twin in (default, from_file):
        twin.advance_to(600)
    assert from_file.true_capacity_rps() == default.true_capacity_rps()
    a, b = (TwinMetricsSource(t).observe(600, 60) for t in (default, from_file))
    for wa, wb in zip(a.workers, b.workers, strict=True):
        np.testing.assert_array_equal(wa.cpu, wb.cpu)
        np.testing.assert_array_equal(wa.throughput_rps, wb.throughput_rps)


@pytest.mark.parametrize("name", ALL)
def test_busy_backpressured_and_idle_add_up_to_a_second(name):
    for rate in (4_000.0, 20_000.0):  # below and above what 4 workers carry
        observation = TwinMetricsSource(twin_at(name, rate)).observe(900, 60)
        for series in observation.subtasks:
            waiting = series.backpressured_ms_per_s + series.idle_ms_per_s
            assert np.all(series.backpressured_ms_per_s >= -1e-9) and np.all(series.idle_ms_per_s >= -1e-9)
            if np.isnan(series.busy_ms_per_s).all():  # a legacy source: Flink reports no busy time
                assert np.all(waiting <= 1000.0 + 1e-9)
            else:
                np.testing.assert_allclose(series.busy_ms_per_s + waiting, 1000.0, atol=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_records_flow_along_the_edges(name):
    observation = TwinMetricsSource(twin_at(name, 6_000.0)).observe(900, 60)
    grouped = by_vertex(observation)
    graph = observation.job_graph
    for vertex in graph.vertices:
        inputs = graph.inputs(vertex.vertex_id)
        if len(inputs) != 1:
            continue
        upstream = graph.vertex(inputs[0].source_id).name
        sent = sum(s.records_out_rps[-1] for s in grouped[upstream])
        received = sum(s.records_in_rps[-1] for s in grouped[vertex.name])
        assert received == pytest.approx(sent, rel=1e-9)


def test_a_saturated_bottleneck_backpressures_what_is_upstream_and_leaves_downstream_idle():
    twin = twin_at("io-sink", 20_000.0)  # four workers carry ~9,000 rps
    assert twin.true_bottleneck() == "sink" and twin.backlog_records > 0
    grouped = by_vertex(TwinMetricsSource(twin).observe(900, 60))
    hottest = max(grouped["sink"], key=lambda s: s.busy_ms_per_s[-1])
    assert hottest.busy_ms_per_s[-1] == pytest.approx(1000.0)
    for upstream in ("source", "enrich"):
        assert all(s.backpressured_ms_per_s[-1] > 500.0 for s in grouped[upstream])
    assert all(s.backpressured_ms_per_s[-1] == 0.0 for s in grouped["sink"])


def test_a_store_bound_sink_saturates_at_low_cpu_while_a_cpu_bound_job_saturates_its_cores():
    sink_bound = TwinMetricsSource(twin_at("io-sink", 20_000.0, cpu_noise_sd=0.0)).observe(900, 60)
    assert max(w.cpu[-1] for w in sink_bound.workers) < 0.5
    cpu_bound = TwinMetricsSource(twin_at("wordcount", 20_000.0, cpu_noise_sd=0.0)).observe(900, 60)
    assert max(w.cpu[-1] for w in cpu_bound.workers) == pytest.approx(0.95, abs=0.01)


def test_a_legacy_source_reports_no_busy_time():
    grouped = by_vertex(TwinMetricsSource(twin_at("ysb", 6_000.0)).observe(900, 60))
    assert all(np.isnan(s.busy_ms_per_s).all() for s in grouped["source"])
    assert all(np.isfinite(s.busy_ms_per_s).all() for s in grouped["filter"])


def test_keyed_vertices_show_key_group_skew_and_rebalanced_ones_do_not():
    grouped = by_vertex(TwinMetricsSource(twin_at("ysb", 6_000.0, parallelism=12)).observe(900, 60))
    window = [s.records_in_rps[-1] for s in grouped["window"]]  # 100 campaigns in 128 key groups
    filtered = [s.records_in_rps[-1] for s in grouped["filter"]]
    assert max(window) / np.mean(window) > 1.1
    assert max(filtered) / np.mean(filtered) == pytest.approx(1.0)


def test_after_a_rescale_only_the_current_runs_samples_are_reported():
    twin = twin_at("wordcount", 6_000.0, seconds=2_000)
    twin.scale_to(6, 2_000)
    twin.advance_to(2_200)  # restarted within a few dozen seconds of the stop
    restarted = twin.state_at(2_200).run_start_s
    assert restarted is not None and 2_000 < restarted < 2_200 - 60
    observation = TwinMetricsSource(twin).observe(2_200, 300)
    assert {s.subtask_index for s in observation.subtasks} == set(range(6))
    for series in observation.subtasks:
        earlier_run = series.timestamps_s <= restarted
        assert np.isnan(series.records_in_rps[earlier_run]).all()
        assert np.isfinite(series.records_in_rps[series.timestamps_s > restarted + 1]).all()


def test_the_session_windows_true_rate_rises_with_parallelism():
    twin = twin_at("session", 1_000.0)
    rates = {}
    for n in (2, 8):
        twin.scale_to(n, twin.now_s)
        load = twin.load
        session = twin.topology.index("session")
        # a subtask's records per busy second: its share of the input over its busy time per source record
        rates[n] = float(
            np.mean(
                load.shares[session] * twin.topology.input_ratios[session] / load.busy_per_record[session]
            )
        )
    assert rates[8] > 1.5 * rates[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\nvertices: [{name: a}, {name: b, inputs: [c]}]", "not declared before it"),
        ("name: x\nvertices: [{name: a}, {name: b}]", "exactly one source"),
        ("name: x\nvertices: [{name: a}, {name: b, inputs: [a], ship: HASH}]", "needs num_keys"),
        ("name: x\nvertices: [{name: a, cost: -1}]", "greater than 0"),
        ("name: x\nvertices: [{name: a, speed: 3}]", "Extra inputs are not permitted"),
        ("name: [unclosed", "not valid YAML"),
        # a key-group matrix over a billion groups took the machine's 24 GB: Flink's bound is 32,768
        ("name: x\nvertices: [{name: a}, {name: b, inputs: [a], ship: HASH, num_keys: 9, "
         "max_parallelism: 1000000000}]", "less than or equal to 32768"),
        ("name: x\nvertices: [{name: a, cost: .inf}]", "finite number"),  # was a ZeroDivisionError
        ("name: x\nvertices: [{name: a, cost: 1.0e+308}]", "less than or equal to 10000"),  # infinite capacity
        ("name: x\nvertices: [{name: a}, {name: b, inputs: [a, a]}]", "an input named twice"),
        # each below 1000 ms, together a slot's whole core: was a ZeroDivisionError sizing the workers
        ("name: x\nvertices: [{name: a, overhead_busy_ms: 500}, {name: b, inputs: [a], overhead_busy_ms: 500}]",
         "add up to 1000 ms"),
        # key settings on a vertex the twin hashes no keys for: a KeyError at its first second
        ("name: x\nvertices: [{name: a}, {name: b, inputs: [a], cost_per_1k_keys_held: 1}]",
         "apply to a keyed \\(HASH\\) vertex only"),
        # each broadcast subtask emits the whole input: 110,000 of 120,000 records/s vanished downstream
        ("name: x\nvertices: [{name: a}, {name: b, inputs: [a], ship: BROADCAST}, {name: c, inputs: [b]}]",
         "reads the copies BROADCAST vertex 'b' emits"),
        ("name: x\nvertices: [{name: a}, {name: b, inputs: [a], ship: HASH, num_keys: 6000000}, "
         "{name: c, inputs: [b], ship: HASH, num_keys: 6000000}]", "12000000 keys together"),
    ],
)  # fmt: skip
def test_a_broken_topology_file_names_its_problem(tmp_path, text, expected):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError, match=expected):
        load_topology(str(path))


def test_the_cli_refuses_an_unknown_topology_with_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", "--workload", "builtin:sine", "--topology", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "twin.topology: topology nope: no such topology: use one of" in result.stderr
