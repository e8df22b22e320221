"""The per-vertex path on the real stack: the chain job on Flink's adaptive scheduler (not reactive mode),
foresail's loop in this process with the local per-vertex target, and — until the per-vertex policy of
issue 13 point 2 is merged — a minimal test policy that raises the vertex the DAG analysis names as the
bottleneck.

THE SEAM: `BottleneckVertexPlan` stands in for the real per-vertex plan. Once it is merged, drop
`vertex_loop`'s `loop.plan = BottleneckVertexPlan(...)` and give the test's config `scaling.granularity:
vertex` (and the policy to test, instead of the forecast-free `ds2` it names now) so that `make_loop` builds
the real plan and its analysis extensions; the test waits for applied per-vertex decisions by action
(`VertexLoop.executed`), not by rule, so its assertions do not depend on which plan decides.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from backends.execution import FollowedTarget, FollowingSource, RescaleFollower
from backends.flinkrest import FlinkRest
from backends.localflink import LocalFlinkVertexTarget
from backends.prometheus import PrometheusMetricsSource
from config.load import load_config
from daemon.build import knowledge_settings, make_loop
from mape.knowledge import Knowledge, KnowledgeStore
from mape.loop import IterationResult, MapeLoop
from messages.types import Assessment, Decision
from tests.e2e.dag import DAG_FLINK_CONF
from tests.e2e.stack import FlinkStack

VERTEX_FLINK_CONF: dict[str, str | None] = {
    **DAG_FLINK_CONF,
    "scheduler-mode": None,  # not reactive mode: it refuses per-vertex requirements
    "jobmanager.scheduler": "adaptive",
    "parallelism.default": "1",
    "taskmanager.numberOfTaskSlots": "1",
}


class BottleneckVertexPlan:
    """Test-side per-vertex policy (see the module docstring): raise the bottleneck vertex to its needed
    parallelism, else lower every vertex whose needed parallelism is below what it runs at; TaskManagers =
    the largest vertex parallelism (one slot each, one slot-sharing group). Holds on bad data and for
    `stabilization_s` after a rescale."""

    def __init__(self, stabilization_s: float) -> None:
        self.stabilization_s = stabilization_s

    def decide(self, assessment: Assessment, knowledge: Knowledge) -> Decision:
        now_s, current = assessment.time_s, assessment.current_scaleout
        running = {v.vertex_id: v.parallelism for v in assessment.vertices}

        def hold(rule: str, *reasons: str) -> Decision:
            return Decision(now_s, current, current, rule, reasons)

        if assessment.problems:
            return hold("hold-bad-data", *assessment.problems)
        if not running:
            return hold("hold-no-vertices")
        since = None if knowledge.last_rescale_s is None else now_s - knowledge.last_rescale_s
        if since is not None and since < self.stabilization_s:
            return hold("stabilization", f"last rescale {since:.0f} s ago")
        target = dict(running)
        bottleneck = next((v for v in assessment.vertices if v.name == assessment.bottleneck_vertex), None)
        if bottleneck is not None and (bottleneck.needed_parallelism or 0) > bottleneck.parallelism:
            target[bottleneck.vertex_id] = bottleneck.needed_parallelism
            rule = "test-raise-bottleneck"
        else:
            for v in assessment.vertices:
                if v.needed_parallelism is not None and v.needed_parallelism < v.parallelism:
                    target[v.vertex_id] = v.needed_parallelism
            rule = "test-lower-vertices"
        if target == running:
            return hold("hold-vertices-fit")
        names = {v.vertex_id: v.name for v in assessment.vertices}
        changes = [f"{names[v]} {running[v]} → {p}" for v, p in target.items() if p != running[v]]
        return Decision(
            now_s,
            current,
            max(target.values()),
            rule,
            tuple(changes),
            target_vertex_parallelism=target,
            current_vertex_parallelism=running,
        )


class VertexLoop:
    """foresail's MAPE loop over the real Prometheus and the local per-vertex target, iterated by a thread
    every `interval_s` (as the daemon's scheduler does); results are kept for the test to poll."""

    def __init__(self, loop: MapeLoop, store: KnowledgeStore, interval_s: float) -> None:
        self.loop, self.store, self.interval_s = loop, store, interval_s
        self.results: list[IterationResult] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vertex-loop", daemon=True)

    def __enter__(self) -> VertexLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.loop.knowledge.close()
        self.store.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            result = self.loop.iterate(time.time())
            with self._lock:
                self.results.append(result)
            self._stop.wait(self.interval_s)

    def snapshot(self) -> list[IterationResult]:
        with self._lock:
            return list(self.results)

    def executed(self, action: str) -> IterationResult | None:
        """The first iteration that applied a per-vertex decision of this action (scale_out: some vertex
        gets more subtasks; scale_in: fewer), whichever plan decided it."""
        return next(
            (
                r
                for r in self.snapshot()
                if r.executed and r.decision.changes_vertices and r.decision.action == action
            ),
            None,
        )


def vertex_loop(config_dict: dict, flink: FlinkStack, workdir: Path, interval_s: float) -> VertexLoop:
    import yaml

    path = workdir / "vertex.yaml"
    path.write_text(yaml.safe_dump(config_dict, sort_keys=False))
    config = load_config(path)
    rest = FlinkRest(flink.rest_url)
    target = LocalFlinkVertexTarget(flink.cluster, rest)
    follower = RescaleFollower(target, config.local_flink.readiness_timeout_s)
    source = FollowingSource(PrometheusMetricsSource(config.prometheus, rest=rest), follower)
    store = KnowledgeStore(config.knowledge.path)
    knowledge = store.load(knowledge_settings(config))
    loop = make_loop(config, source, FollowedTarget(target, follower), knowledge, store)
    loop.plan = BottleneckVertexPlan(config.scaling.stabilization_s)  # THE SEAM (module docstring)
    return VertexLoop(loop, store, interval_s)
