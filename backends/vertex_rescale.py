"""Per-vertex rescaling through Flink's adaptive scheduler: the REST resource requirements (FLIP-291).

One rescale: GET `/jobs/:jobid/resource-requirements`, set {lower 1, upper target} on every vertex whose
target differs from its declared upper bound (the others keep theirs), PUT the complete map (Flink answers
400 to an incomplete one). Flink then restarts the whole job once, after its cooldown and the next
checkpoint (`../shared/docs/per-vertex.md`). The rescale is finished when `/jobs/:jobid` shows every vertex
RUNNING at its upper bound; its downtime runs from the PUT to the moment the last subtask switched to
RUNNING, read from Flink's own subtask timestamps (`/jobs/:jobid` is cached for seconds, so polling it
would round the ~3 s rescale up to its refresh interval). That is the issue's measure; it includes the
wait for the next checkpoint, during which the job still processes. The restart alone (the new execution
created → the last subtask RUNNING) is logged beside it as `restart_s`.

Lower bound 1, as the Flink operator's standalone autoscaler does: a vertex that cannot get all its slots
then runs with fewer instead of failing the job.

Errors are told apart because they mean different things: a 400 is a plan Flink cannot run (a vertex
above its max parallelism, a vertex missing) — a planning bug, logged with Flink's answer and never
retried; a 500 naming reactive mode is a cluster configured for the whole-job path (reactive mode refuses
per-vertex requirements) — a configuration error, which `foresail check-config` names before it happens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import requests
import structlog

from backends.flinkrest import BAD_ANSWER, FlinkRest
from backends.retry import described
from messages.types import CompletedRescale

Bounds = tuple[int, int]
REACTIVE_MARKER = "reactive mode"
"""Part of Flink's 500 answer to a PUT on a reactive-mode job ('Cannot change the parallelism of a job
running in reactive mode', as Flink 2.3 words it)."""
CLOCK_SKEW_S = 5.0
"""How far ahead of ours Flink's clock may read a subtask's switch to RUNNING and still be believed."""


class RescaleRejected(RuntimeError):
    """Flink refused the requirements as invalid (HTTP 400), or they name vertices the job lacks: a plan
    that cannot run. Not retried."""


class ReactiveModeRefused(RuntimeError):
    """The job runs in reactive mode, which refuses per-vertex requirements: a configuration error."""


class RescaleRequestFailed(RuntimeError):
    """The requirements could not be read or written (no running job, API down, another error)."""


class PutUnanswered(RescaleRequestFailed):
    """The PUT went out and no answer came back: Flink may have accepted it, so the rescale may still
    happen. Its TaskManagers are kept; a deferred one stays counted as executed, one sent at once fails
    the decision like any execute error (the next iteration decides on what then runs)."""


def new_requirements(
    declared: Mapping[str, Bounds], targets: Mapping[str, int]
) -> tuple[dict[str, Bounds], list[str]]:
    """The complete map to PUT and the vertices it changes: {1, target} where the target differs from the
    declared upper bound, the declared bounds elsewhere (vertices without a target keep theirs)."""
    unknown = sorted(set(targets) - set(declared))
    if unknown:
        raise RescaleRejected(f"the plan names vertices the job does not have: {unknown}")
    bad = {v: p for v, p in targets.items() if not isinstance(p, int) or p < 1}
    if bad:
        raise RescaleRejected(f"the plan asks for parallelism below 1: {bad}")
    requirements, changed = {}, []
    for vertex_id, (lower, upper) in declared.items():
        target = targets.get(vertex_id, upper)
        if target == upper:
            requirements[vertex_id] = (lower, upper)
        else:
            requirements[vertex_id] = (1, target)
            changed.append(vertex_id)
    return requirements, changed


def expected_parallelism(requirements: Mapping[str, Bounds]) -> dict[str, int]:
    """The parallelism each vertex runs at once the requirements apply: its upper bound (a vertex whose
    upper bound is Flink's -1 runs at what its slots allow: not waited for)."""
    return {vertex_id: upper for vertex_id, (_, upper) in requirements.items() if upper != -1}


@dataclass(frozen=True)
class RequestedRescale:
    """A PUT Flink accepted: the job, the vertices' parallelism to wait for, and when it was sent."""

    job_id: str
    vertex_parallelism: dict[str, int]
    requested_s: float
    changed: tuple[str, ...]


class VertexRescaler:
    """Requests per-vertex rescales and tells when one has finished (see the module docstring)."""

    def __init__(
        self,
        rest: FlinkRest,
        clock: Callable[[], float] = time.time,
        log: structlog.typing.FilteringBoundLogger | None = None,
        may_write: Callable[[], None] = lambda: None,
    ) -> None:
        self.rest = rest
        self.clock = clock
        self.log = log or structlog.get_logger("foresail.target")
        self.may_write = may_write
        """Raises when the PUT must not go out (a replica that lost leadership since the decision: the PUT
        of a scale-up waits for TaskManagers and goes out loops later, from `VertexExecution.advance`)."""

    def live_job_id(self) -> str | None:
        return self.rest.live_job_id()

    def declared(self, targets: Mapping[str, int]) -> tuple[str, dict[str, Bounds], list[str]]:
        """The live job, the complete map to PUT for `targets` and the vertices it changes."""
        try:
            job_id = self.rest.live_job_id()
            if job_id is None:
                raise RescaleRequestFailed(f"Flink REST API {self.rest.url}: no running job")
            declared = self.rest.resource_requirements(job_id)
        except BAD_ANSWER as error:
            raise RescaleRequestFailed(
                f"Flink REST API {self.rest.url}: resource requirements unreadable ({type(error).__name__})"
            ) from error
        return job_id, *new_requirements(declared, targets)

    def request(self, targets: Mapping[str, int]) -> RequestedRescale | None:
        """PUT the requirements for `targets`; None when every vertex is already declared at its target
        (nothing restarts, so there is no downtime to measure)."""
        job_id, requirements, changed = self.declared(targets)
        if not changed:
            return None
        self.may_write()
        requested_s = self.clock()
        try:
            response = self.rest.put_resource_requirements(job_id, requirements)
        except requests.RequestException as error:
            raise PutUnanswered(
                f"Flink REST API {self.rest.url}: PUT resource requirements failed ({type(error).__name__})"
            ) from error
        if response.status_code == 400:
            self.log.error(
                "vertex-rescale-rejected", job_id=job_id, requirements=requirements, body=response.text
            )
            raise RescaleRejected(
                f"Flink rejected the requirements (HTTP 400, a planning bug): {_first_error(response)}"
            )
        if response.status_code >= 500 and REACTIVE_MARKER in response.text.lower():
            raise ReactiveModeRefused(
                "the job runs in reactive mode, which refuses per-vertex parallelism: configure "
                "jobmanager.scheduler: adaptive without scheduler-mode: reactive (or granularity: job)"
            )
        if not 200 <= response.status_code < 300:  # a redirect is not followed: nothing was accepted
            raise RescaleRequestFailed(
                f"Flink answered HTTP {response.status_code}: {_first_error(response)}"
            )
        parallelism = expected_parallelism(requirements)
        self.log.info(
            "vertex-rescale-requested",
            job_id=job_id,
            changed={v: parallelism[v] for v in changed},
            time_s=requested_s,
        )
        return RequestedRescale(job_id, parallelism, requested_s, tuple(changed))

    def finished(self, rescale: RequestedRescale) -> CompletedRescale | None:
        """The completed rescale once every vertex runs at its target; None until then or when the API
        cannot tell (it is asked again next time). Its downtime is NaN (measured nothing, learned nothing)
        when Flink's last switch to RUNNING is not after the PUT (no subtask restarted, or none says when)
        or lies ahead of our clock."""
        try:
            running = self.rest.running_vertex_parallelism(rescale.job_id)
            if running is None or any(running.get(v) != p for v, p in rescale.vertex_parallelism.items()):
                return None
            restarted_s = self.rest.last_subtask_running_s(rescale.job_id, list(running))
        except BAD_ANSWER:
            return None
        now_s = self.clock()
        measured = rescale.requested_s < restarted_s <= now_s + CLOCK_SKEW_S
        completed = CompletedRescale(
            requested_s=rescale.requested_s,
            finished_s=restarted_s if measured else math.nan,
            granularity="vertex",
            vertex_parallelism=dict(running),
        )
        if not measured:
            self.log.warning(
                "vertex-rescale-downtime-unknown",
                job_id=rescale.job_id,
                requested_s=rescale.requested_s,
                last_running_s=restarted_s,
                now_s=now_s,
            )
            return completed
        self.log.info(
            "vertex-rescale-finished",
            job_id=rescale.job_id,
            downtime_s=round(completed.downtime_s, 3),
            restart_s=self._restart_s(rescale, restarted_s),
        )
        return completed

    def _restart_s(self, rescale: RequestedRescale, restarted_s: float) -> float | None:
        """The restart alone (the new execution created → the last subtask RUNNING), for the log; None when
        Flink does not say when the execution was created, or it was before the PUT."""
        try:
            created_s = self.rest.scheduled_s(rescale.job_id)
        except BAD_ANSWER:
            return None
        return round(restarted_s - created_s, 3) if created_s >= rescale.requested_s else None


def _first_error(response: requests.Response) -> str:
    """Flink's error text in one line (its first line, without the Java stack)."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        body = None
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(errors, list) or not errors:
        errors = [response.text]
    text = " ".join(str(e) for e in errors if "Internal server error" not in str(e)) or str(errors[0])
    line = text.strip().splitlines()[0] if text.strip() else f"HTTP {response.status_code}"
    return line.removeprefix("org.apache.flink.runtime.rest.handler.RestHandlerException: ")[:300]


class TaskManagerPool(Protocol):
    """The TaskManagers carrying the job's slots, as one execute target runs them."""

    def grow_to(self, count: int) -> int | None:
        """Start TaskManagers until `count` are set to run (never stops any); the count set to run before
        (None where Flink starts them itself)."""
        ...

    def registered(self) -> int:
        """TaskManagers registered with the JobManager now."""
        ...

    def shrink_to(self, count: int) -> bool:
        """Stop surplus TaskManagers whose slots hold no task, down to `count`; True when none is left."""
        ...

    def pending_release(self) -> tuple[int, str] | None:
        """The count a release of surplus TaskManagers waits to shrink to and the job it was for, as last
        remembered; None: none."""
        ...

    def remember_release(self, count: int | None, job_id: str | None) -> None:
        """Keep the count a release waits for, and its job, where a restarted daemon finds it (None: nothing
        to release)."""
        ...


def remembered_release(remembered: object) -> tuple[int, str] | None:
    """A remembered release ({'count': n ≥ 1, 'job': id}); None for anything else."""
    if not isinstance(remembered, dict):
        return None
    count, job = remembered.get("count"), remembered.get("job")
    valid = isinstance(count, int) and not isinstance(count, bool) and count >= 1 and isinstance(job, str)
    return (count, job) if valid else None


class VertexExecution:
    """One per-vertex rescale at a time, in order: TaskManagers up, PUT, follow, surplus TaskManagers down.

    Non-blocking: `scale_vertices` starts what is missing and PUTs at once only when the TaskManagers are
    registered already (a scale-down, or a scale-up with spare slots); `advance`, called on every
    observation, PUTs once they are (a PUT before would restart the job twice: at the slots there are,
    then again when the rest arrive), reports the rescale when it has finished, then stops the TaskManagers
    left without tasks.

    What a release waits for is remembered by the pool (`remember_release`), with the job it is for, so a
    daemon restarted meanwhile still stops the surplus (those a finished scale-down left, and those started
    for a rescale that never went out), and a new job on the cluster does not inherit it: at its start every
    TaskManager is free, and a release left by the job before cut it down to that job's count."""

    def __init__(
        self,
        rescaler: VertexRescaler,
        pool: TaskManagerPool,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.rescaler = rescaler
        self.pool = pool
        self.log = log or structlog.get_logger("foresail.target")
        self.waiting: tuple[dict[str, int], int, int | None] | None = None
        """Targets, TaskManagers and the TaskManagers set to run before, of a rescale that is not PUT yet."""
        self.requested: RequestedRescale | None = None
        self.keep_taskmanagers: int | None = None
        """TaskManagers to keep once the rescale has finished (surplus ones are stopped when free)."""
        self._remembered: tuple[int | None] | None = None
        """The release count the pool holds, once read or written (None: not read yet)."""
        self._recall_error: str | None = None

    def scale_vertices(self, vertex_parallelism: Mapping[str, int], taskmanagers: int) -> None:
        if taskmanagers < 1:
            raise RescaleRejected(f"the plan asks for {taskmanagers} TaskManagers")
        self._recall()
        before = self.pool.grow_to(taskmanagers)
        self.requested = None
        self.waiting = (dict(vertex_parallelism), taskmanagers, before)
        try:
            self._request_when_registered()
        except Exception:
            if self.waiting is not None:  # failed before the PUT: what it started is surplus
                self._release_started(before)
            self.waiting = None  # failed here, the rescale is not followed: it must not be PUT later either
            raise
        finally:
            self._remember()

    def advance(self, act: bool = True) -> CompletedRescale | None:
        """Moves the rescale on (see the class docstring); the completed rescale, once, when it finishes.
        Without `act` (foresail only recommends) it follows only: no PUT, no TaskManager stopped."""
        if not act:
            return self._follow()
        self._recall()
        try:
            self._request_when_registered()
            completed = self._follow()
            self._release_surplus()
            return completed
        finally:
            self._remember()

    def _follow(self) -> CompletedRescale | None:
        if self.requested is None:
            return None
        completed = self.rescaler.finished(self.requested)
        if completed is not None:
            self.requested = None
        return completed

    def _release_surplus(self) -> None:
        if not self.idle() or self.keep_taskmanagers is None:
            return
        try:
            if self.pool.shrink_to(self.keep_taskmanagers):
                self.keep_taskmanagers = None
        except Exception as error:  # the rescale finished all the same; the release is tried again
            self.log.warning("taskmanagers-release-failed", error=described(error))

    def idle(self) -> bool:
        """No rescale waits for TaskManagers or for Flink."""
        return self.waiting is None and self.requested is None

    def abandon(self) -> None:
        """Stop following (the follower gave up on it, or foresail was paused before its PUT); surplus
        TaskManagers are still released, and those started for a rescale never PUT are surplus."""
        if self.waiting is not None:
            self._release_started(self.waiting[2])
        self.waiting = self.requested = None
        self._remember()

    def _recall(self) -> None:
        """A restarted daemon takes up the release its predecessor left for the job that runs (once, when
        the pool and Flink answer)."""
        if self._remembered is not None:
            return
        try:
            remembered = self.pool.pending_release()
            job_id = self._job_id() if remembered is not None else None
        except Exception as error:  # asked again at the next step (a standby replica: until it leads)
            said, self._recall_error = self._recall_error, described(error)
            (self.log.debug if said == self._recall_error else self.log.warning)(
                "taskmanagers-release-unknown", error=self._recall_error
            )
            return
        if remembered is not None and job_id is None:
            return  # no live job to tell it by yet: asked again
        if remembered is not None and remembered[1] != job_id:
            self._remembered = (remembered[0],)  # another job's: cleared by the next `_remember`
            self.log.info("taskmanagers-release-dropped", keep_taskmanagers=remembered[0], job=remembered[1])
            return
        self._remembered = (None if remembered is None else remembered[0],)
        if remembered is not None and self.keep_taskmanagers is None and self.idle():
            self.keep_taskmanagers = remembered[0]
            self.log.info("taskmanagers-release-resumed", keep_taskmanagers=remembered[0])

    def _remember(self) -> None:
        """The count a restarted daemon must release to: the pending release, else the count before a
        rescale still waiting for its TaskManagers (it never went out if the daemon stops now)."""
        if self._remembered is None:
            return  # not read yet: writing now could drop what a predecessor left
        count = self.keep_taskmanagers
        if count is None and self.waiting is not None:
            count = self.waiting[2]
        if (count,) == self._remembered:
            return
        try:
            job_id = None if count is None else self._job_id()
            if count is not None and job_id is None:
                return  # no live job to tie it to: written at the next step
            self.pool.remember_release(count, job_id)
        except Exception as error:  # kept in memory all the same; written again at the next change
            self.log.warning("taskmanagers-release-not-remembered", error=described(error))
            return
        self._remembered = (count,)

    def _job_id(self) -> str | None:
        live = getattr(self.rescaler, "live_job_id", None)
        return None if live is None else live()

    def _request_when_registered(self) -> None:
        if self.waiting is None:
            return
        targets, taskmanagers, before = self.waiting
        if self.pool.registered() < taskmanagers:
            return
        self.waiting = None
        try:
            self.requested = self.rescaler.request(targets)
        except PutUnanswered:  # Flink may rescale onto the TaskManagers started for it
            raise
        except Exception:
            self._release_started(before)
            raise
        # only a rescale Flink accepted releases TaskManagers: one it refused left the job as it ran, and
        # its smaller count stopped TaskManagers the job needed at its next failover
        self.keep_taskmanagers = taskmanagers

    def _release_started(self, before: int | None) -> None:
        """The TaskManagers a rescale that never went out started are stopped once free (on an `advance`
        while foresail acts), down to the count set before it; a release already pending keeps its count."""
        if before is not None and self.keep_taskmanagers is None:
            self.keep_taskmanagers = before
