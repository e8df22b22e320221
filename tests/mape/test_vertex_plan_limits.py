"""The per-vertex plan within what Flink runs: no vertex above its max parallelism (Flink answers HTTP 400)
and both ends of a forward edge at one parallelism, on the real per-vertex model (capacity/dag.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from capacity.dag import DagModel, VertexSeed
from mape.knowledge import Knowledge
from mape.vertex_knowledge import VERTEX, VertexKnowledge
from mape.vertex_plan import Sizing, VertexPolicy
from messages.types import JobEdge, JobGraph, JobVertex
from tests.mape.test_vertex_plan import assessment


def seeded_dag(graph: JobGraph, rates: dict[str, float], hot: dict[str, float] | None = None) -> DagModel:
    """The model a testbed's capacity plan starts from: each vertex's per-subtask rate; a keyed one's hot
    key taking `hot[v]` of its input at parallelism 2."""
    seeds = []
    for v in graph.vertices:
        keyed, share = graph.keyed(v.vertex_id), (hot or {}).get(v.vertex_id)
        shares = {2: (share, 1.0 - share)} if keyed and share and v.max_parallelism >= 2 else {}
        key_groups = v.max_parallelism if keyed else 0
        seeds.append(
            VertexSeed(v.name, {1: rates[v.vertex_id], 2: rates[v.vertex_id]}, 1.0, key_groups, shares)
        )
    dag = DagModel()
    dag.seed(seeds)
    dag.learn(graph, [])
    return dag


def knowledge_of(graph: JobGraph, dag: DagModel, cpu_by_vertex=None) -> Knowledge:
    knowledge = Knowledge()
    knowledge.dag = dag
    state = VertexKnowledge.fresh(3.0)
    state.graph, state.cpu_per_busy = graph, 1.0
    state.cpu_per_busy_by_vertex = dict(cpu_by_vertex or {})
    knowledge.extensions[VERTEX] = state
    return knowledge


def three(map_max: int, strategy: str) -> JobGraph:
    """source → map (`strategy`, map's max parallelism `map_max`) → agg."""
    return JobGraph(
        (
            JobVertex("src", "source", 2, 128),
            JobVertex("map", "map", 2, map_max),
            JobVertex("agg", "agg", 2, 128),
        ),
        (JobEdge("src", "map", strategy), JobEdge("map", "agg", "REBALANCE")),
    )


def propose(graph: JobGraph, rates: dict[str, float], rate_rps: float) -> dict[str, int]:
    knowledge = knowledge_of(graph, seeded_dag(graph, rates))
    proposal = VertexPolicy(1, 32, 600.0, 60.0).propose_configuration(
        assessment(rate_rps, graph=graph), knowledge
    )
    return proposal.vertex_parallelism


def test_slot_placement_keeps_a_vertex_within_its_max_parallelism():
    # map (max parallelism 2) fills its slots' cores: the placement search used to give it a third subtask
    graph = three(2, "REBALANCE")
    planned = propose(graph, {"src": 100_000.0, "map": 1_500.0, "agg": 100_000.0}, 2_800.0)
    assert planned["map"] <= 2


def test_a_forward_unit_runs_no_wider_than_its_narrowest_vertex():
    # the source needs 10 subtasks, its forward partner map allows 4: both run at 4
    graph = three(4, "FORWARD")
    planned = propose(graph, {"src": 1_000.0, "map": 100_000.0, "agg": 100_000.0}, 9_500.0)
    assert planned["src"] == planned["map"] <= 4


def test_the_slot_cpu_step_widens_both_ends_of_a_forward_edge():
    graph = three(128, "FORWARD")
    for rates in (
        {"src": 1_000.0, "map": 100_000.0, "agg": 100_000.0},
        {"src": 1_000.0, "map": 3_000.0, "agg": 1_500.0},
    ):
        planned = propose(graph, rates, 9_500.0)
        assert planned["src"] == planned["map"]


def test_a_forward_diamond_counts_each_vertex_once():
    graph = JobGraph(
        tuple(JobVertex(v, v, 2, 128) for v in "abcd"),
        tuple(JobEdge(s, t, "FORWARD") for s, t in ("ab", "ac", "bd", "cd")),
    )
    sizing = Sizing(graph, seeded_dag(graph, dict.fromkeys("abcd", 1_000.0)), 32, 1.0)
    assert [sorted(unit) for unit in sizing._forward_units()] == [["a", "b", "c", "d"]]


STRATEGIES = st.sampled_from(("FORWARD", "REBALANCE", "HASH"))


@st.composite
def jobs(draw):
    """A random job graph (2 to 5 vertices, each fed by an earlier one), its running parallelism equal
    across forward edges and within every max parallelism, and its model."""
    n = draw(st.integers(2, 5))
    names = [f"v{i}" for i in range(n)]
    edges = [JobEdge(names[draw(st.integers(0, i - 1))], names[i], draw(STRATEGIES)) for i in range(1, n)]
    maxima = {v: draw(st.integers(1, 12)) for v in names}
    unit_of = {v: {v} for v in names}
    for e in edges:
        if e.ship_strategy == "FORWARD":
            joined = unit_of[e.source_id] | unit_of[e.target_id]
            unit_of.update(dict.fromkeys(joined, joined))
    running = {v: min(maxima[u] for u in unit_of[v]) for v in names}
    graph = JobGraph(tuple(JobVertex(v, v, running[v], maxima[v]) for v in names), tuple(edges))
    rates = {v: draw(st.floats(50.0, 1e5)) for v in names}
    hot = {v: draw(st.floats(0.5, 0.95)) for v in names}
    cpu = {v: draw(st.floats(0.05, 1.0)) for v in names}
    return graph, seeded_dag(graph, rates, hot), cpu


def assert_runnable(graph: JobGraph, parallelism: dict[str, int]) -> None:
    for v in graph.vertices:
        assert 1 <= parallelism[v.vertex_id] <= v.max_parallelism, (v, parallelism)
    for e in graph.edges:
        if e.ship_strategy == "FORWARD":
            assert parallelism[e.source_id] == parallelism[e.target_id], (e, parallelism)


@settings(max_examples=150, deadline=None)
@given(jobs(), st.floats(1.0, 1e6), st.integers(1, 40), st.lists(st.integers(0, 20), min_size=5, max_size=5))
def test_every_configuration_is_one_flink_runs(job, rate_rps, max_slots, floors):
    graph, dag, cpu = job
    sizing = Sizing(graph, dag, max_slots, {v.vertex_id: cpu[v.name] for v in graph.vertices})
    current = {v.vertex_id: v.parallelism for v in graph.vertices}
    latency_floors = dict(zip(current, floors, strict=False))  # the latency objective's, unbounded
    for rate in (rate_rps, float("inf")):
        assert_runnable(graph, sizing.configuration(rate, current).parallelism)
        assert_runnable(graph, sizing.configuration(rate, current, latency_floors).parallelism)


@settings(max_examples=40, deadline=None)
@given(jobs(), st.floats(1.0, 1e6))
def test_every_proposal_is_one_flink_runs(job, rate_rps):
    graph, dag, cpu = job
    knowledge = knowledge_of(graph, dag, cpu)
    proposal = VertexPolicy(1, 16, 600.0, 60.0).propose_configuration(
        assessment(rate_rps, graph=graph), knowledge
    )
    assert_runnable(graph, proposal.vertex_parallelism)
