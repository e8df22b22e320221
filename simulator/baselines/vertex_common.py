"""What the per-vertex baselines share: the running configuration, bounds, and the proposal they make."""

from __future__ import annotations

import math
from collections.abc import Mapping

from mape.knowledge import Knowledge
from mape.plan import Proposal
from mape.vertex_knowledge import VertexKnowledge, vertex_knowledge
from mape.vertex_plan import slots_needed, taskmanagers_for
from messages.types import JobGraph


def running(knowledge: Knowledge) -> tuple[VertexKnowledge, JobGraph, dict[str, int]] | None:
    """The per-vertex state, the graph and each vertex's parallelism now; None before the first graph."""
    state = vertex_knowledge(knowledge)
    if state is None or state.graph is None:
        return None
    return state, state.graph, {v.vertex_id: v.parallelism for v in state.graph.vertices}


def bounded(graph: JobGraph, vertex_id: str, parallelism: float, max_slots: int) -> int:
    """A parallelism within 1..min(max parallelism, the slots the TaskManagers can offer)."""
    top = min(graph.vertex(vertex_id).max_parallelism, max_slots)
    return int(min(max(math.ceil(parallelism), 1), top))


def vertex_proposal(
    graph: JobGraph,
    current: Mapping[str, int],
    target: Mapping[str, int],
    rules: Mapping[str, str],
    rule: str,
    reasons: tuple[str, ...],
    slots_per_taskmanager: int = 1,
) -> Proposal:
    """A whole configuration: every vertex's parallelism, the TaskManagers that carry it, rules per vertex."""
    names = {v.vertex_id: v.name for v in graph.vertices}
    described = ", ".join(f"{names[v]} {current[v]}→{p} ({rules.get(v, 'keep')})" for v, p in target.items())
    return Proposal(
        taskmanagers_for(slots_needed(target), slots_per_taskmanager),
        rule,
        (*reasons, described),
        vertex_parallelism=dict(target),
        vertex_rules={v: rules.get(v, "keep") for v in target},
        current_vertex_parallelism=dict(current),
    )


def hold(graph: JobGraph, current: Mapping[str, int], rule: str, *reasons: str) -> Proposal:
    return vertex_proposal(graph, current, current, {}, rule, reasons)
