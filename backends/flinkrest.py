"""Flink's JobManager REST API: whether the job runs, at which parallelism, and its job graph.

Used to tell when a rescale has taken effect (readiness), by the Monitor for the job graph of the
per-vertex metrics, and by the tests to check the job. Any failure to reach the API or to read its answer
is `None` ("not known to be ready") or, for the graph, `GraphUnavailable` with a one-line reason.

The adaptive scheduler's per-vertex path (FLIP-291, Flink ≥ 1.18; backends/vertex_rescale.py) reads and
writes the job's resource requirements, reads what each vertex runs at, when its subtasks last switched to
RUNNING (exact, from Flink's own timestamps: `/jobs/:jobid` itself is cached for a few seconds), and which
TaskManagers hold no task. Those calls raise `requests` errors; the caller names them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import requests

from backends.bounded_http import BoundedSession
from config.schema import FLINK_MAX_PARALLELISM
from messages.types import JobEdge, JobGraph, JobVertex

TERMINAL = {"FINISHED", "CANCELED", "FAILED"}
BAD_ANSWER = (
    requests.RequestException,
    KeyError,
    IndexError,
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
)
"""What reading an answer of another shape raises (a list where a map was, 1e400 as a count, …), besides
the transport's errors: the callers turn it into None or one line."""


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str
    parallelism: int
    """Subtasks of the job's widest vertex: the scale-out in reactive mode."""
    vertices_running: bool
    start_time_ms: int

    @property
    def running(self) -> bool:
        return self.state == "RUNNING" and self.vertices_running


class GraphUnavailable(Exception):
    """The job graph could not be read (no live job, API down, an answer of another shape): why, in a line."""


class FlinkRest:
    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = BoundedSession()

    def job_status(self) -> JobStatus | None:
        """The (only) live job of the cluster; None when there is none or the API does not answer."""
        try:
            job = self._live_job()
            if job is None:
                return None
            detail = self._get(f"/jobs/{job['jid']}")
            vertices = detail["vertices"]
            return JobStatus(
                job_id=job["jid"],
                state=detail["state"],
                parallelism=max(_parallelism(v) for v in vertices),
                vertices_running=all(v.get("status") == "RUNNING" for v in vertices),
                start_time_ms=int(detail.get("start-time", 0)),
            )
        except BAD_ANSWER:
            return None

    def job_graph(self) -> JobGraph:
        """The live job's vertices (what runs now: `/jobs/:jobid`) in topological order and its edges with
        their ship strategies (the plan's inputs); raises `GraphUnavailable` with the reason otherwise."""
        try:
            job = self._live_job()
            if job is None:
                raise GraphUnavailable("no running job")
            detail = self._get(f"/jobs/{job['jid']}")
            plan = detail.get("plan") or self._get(f"/jobs/{job['jid']}/plan")["plan"]
            vertices = [_vertex(v) for v in detail["vertices"]]
            edges = [
                JobEdge(str(i["id"]), str(node["id"]), str(i.get("ship_strategy") or "FORWARD").upper())
                for node in plan["nodes"]
                for i in node.get("inputs") or ()
            ]
            planned = {str(node["id"]) for node in plan["nodes"]}
        except requests.RequestException as error:
            raise GraphUnavailable(f"Flink REST API {self.url}: {type(error).__name__}") from error
        except BAD_ANSWER as error:
            raise GraphUnavailable(
                f"Flink REST API {self.url}: unexpected answer ({error!r:.120})"
            ) from error
        graph = _topological(vertices, edges)
        missing = sorted({v.vertex_id for v in vertices} - planned)
        if missing:  # its inputs unknown, such a vertex would pass for a source
            raise GraphUnavailable(f"the plan leaves out vertices the job has: {missing}")
        return graph

    def _live_job(self) -> dict | None:
        """The newest job that has not ended (in reactive mode: the only one)."""
        live = [job for job in self._get("/jobs/overview")["jobs"] if job.get("state") not in TERMINAL]
        return max(live, key=lambda j: j.get("start-time", 0)) if live else None

    def live_job_id(self) -> str | None:
        job = self._live_job()
        return None if job is None else str(job["jid"])

    def resource_requirements(self, job_id: str) -> dict[str, tuple[int, int]]:
        """Declared parallelism bounds per vertex id (lower, upper): what was asked, not what runs. Whole
        numbers within 1..32,768 with lower ≤ upper, or Flink's -1 (1 as a lower bound, the max parallelism
        as an upper one), else ValueError: the map is PUT back, and an upper bound of 2.7 read as 2 would
        rescale a vertex the plan left alone."""
        body = self._get(f"/jobs/{job_id}/resource-requirements")
        requirements = {}
        for vertex_id, bounds in body.items():
            lower, upper = bounds["parallelism"]["lowerBound"], bounds["parallelism"]["upperBound"]
            if not (_bound(lower) and _bound(upper) and (upper == -1 or 1 <= lower <= upper)):
                raise ValueError(f"vertex {vertex_id}: parallelism bounds {lower!r}..{upper!r}")
            requirements[str(vertex_id)] = (lower, upper)
        return requirements

    def put_resource_requirements(
        self, job_id: str, requirements: dict[str, tuple[int, int]]
    ) -> requests.Response:
        """PUT the complete map; the response is returned whatever its status (the caller classifies it)."""
        body = {
            vertex_id: {"parallelism": {"lowerBound": lower, "upperBound": upper}}
            for vertex_id, (lower, upper) in requirements.items()
        }
        return self._session.put(
            f"{self.url}/jobs/{job_id}/resource-requirements",
            json=body,
            timeout=self.timeout_s,
            allow_redirects=False,  # a redirect turns the PUT into a GET, whose 200 accepts nothing
        )

    def running_vertex_parallelism(self, job_id: str) -> dict[str, int] | None:
        """Vertex id → parallelism while the job and every vertex run; None while any is not RUNNING."""
        detail = self._get(f"/jobs/{job_id}")
        vertices = detail["vertices"]
        if detail["state"] != "RUNNING" or any(v.get("status") != "RUNNING" for v in vertices):
            return None
        return {str(v["id"]): int(v["parallelism"]) for v in vertices}

    def scheduled_s(self, job_id: str) -> float:
        """Epoch seconds at which the job's current execution was created: on the adaptive scheduler, when
        its last restart (a rescale) stopped the previous one."""
        return int(self._get(f"/jobs/{job_id}")["timestamps"]["CREATED"]) / 1000

    def last_subtask_running_s(self, job_id: str, vertex_ids: list[str]) -> float:
        """Epoch seconds at which the last subtask of these vertices switched to RUNNING (Flink's clock; 0
        when none says)."""
        latest_ms = 0
        for vertex_id in vertex_ids:
            times = self._get(f"/jobs/{job_id}/vertices/{vertex_id}/subtasktimes")
            for subtask in times["subtasks"]:
                latest_ms = max(latest_ms, int(subtask["timestamps"].get("RUNNING", 0)))
        return latest_ms / 1000

    def taskmanager_tasks(self) -> dict[str, int]:
        """TaskManager id (its resource id) → tasks deployed on it (0: every slot free of tasks)."""
        return {str(t["id"]): int(t["assignedTasks"]) for t in self._get("/taskmanagers")["taskmanagers"]}

    def scheduler(self) -> str:
        """'reactive', 'adaptive' or 'default': the JobManager's scheduler, from its configuration."""
        settings = {c["key"]: str(c["value"]) for c in self._get("/jobmanager/config")}
        if settings.get("scheduler-mode", "").lower() == "reactive":
            return "reactive"
        return settings.get("jobmanager.scheduler", "default").lower()

    def flink_version(self) -> str:
        """The cluster's Flink version, e.g. '2.3.0' (the web UI's /config)."""
        return str(self._get("/config")["flink-version"])

    def taskmanager_count(self) -> int | None:
        """TaskManagers registered now: entries with an id (a string of ten characters is not ten of them);
        None when the API does not say."""
        try:
            taskmanagers = self._get("/taskmanagers")["taskmanagers"]
        except BAD_ANSWER:
            return None
        if not isinstance(taskmanagers, list):
            return None
        return sum(1 for t in taskmanagers if isinstance(t, dict) and t.get("id"))

    def _get(self, path: str) -> Any:
        response = self._session.get(self.url + path, timeout=self.timeout_s)
        response.raise_for_status()
        try:
            return response.json()
        except RecursionError as error:  # a body nested deeper than the parser goes: a bad answer
            raise requests.exceptions.InvalidJSONError(f"{path}: JSON nested too deeply") from error


def _topological(vertices: list[JobVertex], edges: list[JobEdge]) -> JobGraph:
    """Vertices ordered so every edge runs forward (Kahn; ties keep the API's order)."""
    ids = [v.vertex_id for v in vertices]
    if len(set(ids)) != len(ids):
        raise GraphUnavailable("the job lists a vertex id twice")
    unknown = {e.source_id for e in edges} | {e.target_id for e in edges}
    unknown -= set(ids)
    if unknown:
        raise GraphUnavailable(f"plan names vertices the job does not have: {sorted(unknown)}")
    pending = dict.fromkeys(ids, 0)
    downstream: dict[str, list[str]] = {vertex_id: [] for vertex_id in ids}
    for edge in edges:
        pending[edge.target_id] += 1
        downstream[edge.source_id].append(edge.target_id)
    position = {vertex_id: i for i, vertex_id in enumerate(ids)}
    ready = [position[v] for v in ids if pending[v] == 0]  # a heap of API positions: ties keep its order
    order: list[str] = []
    while ready:
        vertex_id = ids[heapq.heappop(ready)]
        order.append(vertex_id)
        for target in downstream[vertex_id]:
            pending[target] -= 1
            if pending[target] == 0:
                heapq.heappush(ready, position[target])
    if len(order) < len(ids):
        raise GraphUnavailable("the job graph has a cycle")
    by_id = {v.vertex_id: v for v in vertices}
    return JobGraph(tuple(by_id[v] for v in order), tuple(edges))


def _parallelism(vertex: dict) -> int:
    """A vertex's parallelism as `/jobs/:jobid` gives it, checked as `_vertex` checks it."""
    parallelism = vertex["parallelism"]
    if not _whole(parallelism) or not 1 <= parallelism <= FLINK_MAX_PARALLELISM:
        raise ValueError(
            f"vertex {vertex.get('name')!r}: parallelism {parallelism!r} is not 1..{FLINK_MAX_PARALLELISM}"
        )
    return parallelism


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bound(value: object) -> bool:
    """A declared parallelism bound: 1..32,768, or -1 (Flink's 'unset')."""
    return _whole(value) and (value == -1 or 1 <= value <= FLINK_MAX_PARALLELISM)


def _vertex(answer: dict) -> JobVertex:
    """A vertex of `/jobs/:jobid`, its counts checked: whole numbers, 1 ≤ parallelism ≤ max parallelism ≤
    Flink's 32,768 (a max parallelism of 10^8 took gigabytes in the key-group arrays, 2.7 read as 2)."""
    parallelism, max_parallelism = answer["parallelism"], answer["maxParallelism"]
    for name, value in (("parallelism", parallelism), ("maxParallelism", max_parallelism)):
        if not _whole(value):
            raise ValueError(f"vertex {answer.get('name')!r}: {name} {value!r} is not a whole number")
    if not 1 <= parallelism <= max_parallelism <= FLINK_MAX_PARALLELISM:
        raise ValueError(
            f"vertex {answer.get('name')!r}: parallelism {parallelism} / maxParallelism {max_parallelism} "
            f"outside 1 ≤ parallelism ≤ maxParallelism ≤ {FLINK_MAX_PARALLELISM}"
        )
    return JobVertex(str(answer["id"]), str(answer["name"]), parallelism, max_parallelism)
