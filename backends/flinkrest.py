"""Flink's JobManager REST API: whether the job runs, and at which parallelism.

Used to tell when a rescale has taken effect (readiness) and by the tests to check the job. Any failure
to reach the API or to read its answer is `None`: "not known to be ready", never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

import requests

TERMINAL = {"FINISHED", "CANCELED", "FAILED"}


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


class FlinkRest:
    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def job_status(self) -> JobStatus | None:
        """The (only) live job of the cluster; None when there is none or the API does not answer."""
        try:
            jobs = self._get("/jobs/overview")["jobs"]
            live = [job for job in jobs if job.get("state") not in TERMINAL]
            if not live:
                return None
            job = max(live, key=lambda j: j.get("start-time", 0))
            detail = self._get(f"/jobs/{job['jid']}")
            vertices = detail["vertices"]
            return JobStatus(
                job_id=job["jid"],
                state=detail["state"],
                parallelism=max(int(v["parallelism"]) for v in vertices),
                vertices_running=all(v.get("status") == "RUNNING" for v in vertices),
                start_time_ms=int(detail.get("start-time", 0)),
            )
        except (requests.RequestException, KeyError, TypeError, ValueError):
            return None

    def taskmanager_count(self) -> int | None:
        try:
            return len(self._get("/taskmanagers")["taskmanagers"])
        except (requests.RequestException, KeyError, TypeError, ValueError):
            return None

    def _get(self, path: str) -> dict:
        response = requests.get(self.url + path, timeout=self.timeout_s)
        response.raise_for_status()
        return response.json()
