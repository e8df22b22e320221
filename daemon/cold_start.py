"""Cold start at vertex granularity: every vertex at parallelism 1, a constant source rate that needs many
subtasks; how many rescales a policy takes to a configuration that holds the rate (DS2 §5.2: one step on
wordcount, at most three in every run of §5.4).

"Holds" is the twin's ground truth: the configuration's true capacity carries the rate. The rate is the
trace's, so the twin's sizing (12 workers carry the peak + headroom) makes the bottleneck need about
12 / (1 + headroom) subtasks.
"""

from __future__ import annotations

import numpy as np

from config.schema import Config
from daemon.build import knowledge_settings, loop_interval_s, make_loop, make_twin
from forecasting.executor import InlineExecutor
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore


def cold_start(config: Config) -> dict[str, object]:
    """Run `config` (a constant-rate workload, vertex granularity, twin.initial_scaleout 1) to its end."""
    world = make_twin(config)
    twin = world.twin
    rate_rps = float(np.max(twin.trace_rps))
    store = KnowledgeStore(":memory:")
    knowledge = Knowledge.fresh(knowledge_settings(config, InlineExecutor))
    loop = make_loop(config, world.source, world.target, knowledge, store)
    steps: list[dict[str, object]] = []
    holds_after = 0 if twin.true_capacity_rps() >= rate_rps else None
    interval_s = loop_interval_s(config)
    now_s = interval_s
    while now_s <= world.end_s:
        twin.advance_to(now_s)
        result = loop.iterate(now_s)
        if result.executed:
            capacity = twin.true_capacity_rps()
            steps.append(
                {
                    "time_s": now_s,
                    "rule": result.decision.rule,
                    "vertex_parallelism": twin.vertex_parallelism,
                    "true_capacity_rps": round(capacity, 1),
                    "holds": capacity >= rate_rps,
                }
            )
            if holds_after is None and capacity >= rate_rps:
                holds_after = len(steps)
        now_s += interval_s
    knowledge.close()
    store.close()
    uniform = next(
        (n for n in range(1, config.scaling.max_scaleout + 1) if twin.reference_capacity_rps(n) >= rate_rps),
        None,
    )
    return {
        "topology": twin.topology.name,
        "policy": config.scaling.policy,
        "rate_rps": rate_rps,
        "uniform_parallelism_needed": uniform,
        "steps_to_hold": holds_after,
        "rescales": twin.rescales,
        "holds_at_end": twin.true_capacity_rps() >= rate_rps,
        "final_vertex_parallelism": twin.vertex_parallelism,
        "steps": steps,
    }
