"""The per-vertex path on the real stack: the chain job on Flink's adaptive scheduler (not reactive mode)
and foresail's loop, as `make_loop` builds it from the test's config (`scaling.granularity: vertex`: the
per-vertex plan and its analysis extensions), in this process with the local per-vertex target."""

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
from mape.knowledge_store import KnowledgeStore
from mape.loop import IterationResult, MapeLoop
from messages.types import CompletedRescale
from tests.e2e.dag import DAG_FLINK_CONF
from tests.e2e.stack import FlinkStack

VERTEX_FLINK_CONF: dict[str, str | None] = {
    **DAG_FLINK_CONF,
    "scheduler-mode": None,  # not reactive mode: it refuses per-vertex requirements
    "jobmanager.scheduler": "adaptive",
    "parallelism.default": "1",
    "taskmanager.numberOfTaskSlots": "1",
}


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

    def completed(self) -> list[CompletedRescale]:
        """Every rescale the loop's observations reported finished, in order."""
        return [c for r in self.snapshot() if r.observation for c in r.observation.completed_rescales]

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
    return VertexLoop(loop, store, interval_s)
