"""The execute side's edge policies, wrapped around any real target: recommend-only, readiness following.

A rescale takes effect seconds to minutes after the request (pods start, Flink restarts the job). The loop
must neither block on it nor decide again before it lands, and a daemon restarted in the middle of one
must notice it. `RescaleFollower` keeps the pending rescale and, on every observation, asks the target
whether it is ready (resource ready *and* the job observed at the new parallelism); until then the
observation carries a problem, so the loop holds. A rescale that never becomes ready is given up after a
timeout, logged and counted. At start-up the follower adopts a rescale it finds in progress (the target
is set to a scale-out the job does not run at), which is what a daemon killed mid-rescale leaves behind.

A per-vertex rescale (`FollowedTarget.scale_vertices`, a target with a `VertexExecution`) is followed the
same way, but the target itself tells when it has finished and how long the job was down; that
`CompletedRescale` rides on the next observation (`Observation.completed_rescales`); one that never
reached Flink (its deferred PUT refused, or given up or dropped while paused before it) rides there as
withdrawn, so the loop does not count it as a restart. Surplus TaskManagers are released on later observations, once their slots
hold no task, and so are those started for a rescale that never went out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import structlog

from backends.retry import described
from backends.vertex_rescale import PutUnanswered, VertexExecution
from mape.interfaces import MetricsSource, NotApplied, ScalingTarget
from messages.types import CompletedRescale, FailedMemoryChange, Observation


class FollowableTarget(ScalingTarget, Protocol):
    def desired(self) -> int | None:
        """The scale-out the target is set to now (None when unknown)."""
        ...

    def ready(self, scaleout: int) -> bool:
        """Whether the resources of `scaleout` are all up (the target's own view)."""
        ...


@dataclass
class PendingRescale:
    scaleout: int
    since_s: float
    origin: str
    """'requested' by this daemon, or 'found at start-up'."""
    managed_mb: float | None = None
    """Managed memory per slot the job must run with once done (None: not part of the change)."""
    vertex_parallelism: dict[str, int] | None = field(default=None)
    """A per-vertex rescale: each vertex's parallelism (`scaleout` then counts TaskManagers)."""


class RescaleFollower:
    """Follows one rescale at a time across iterations (see module docstring)."""

    def __init__(
        self,
        target: FollowableTarget,
        timeout_s: float,
        log: structlog.typing.FilteringBoundLogger | None = None,
        on_outcome: Callable[[str, float], None] | None = None,
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.log = log or structlog.get_logger("foresail.rescale")
        self.on_outcome = on_outcome
        self.pending: PendingRescale | None = None
        self.acting = True
        """False while foresail only recommends (paused, or blocked by another autoscaler): a per-vertex
        rescale is then followed, but its deferred PUT is not sent and no TaskManager is stopped."""
        self._adopted = False
        self._adopt_origin = "found at start-up"
        self.completed: list[CompletedRescale] = []
        """Per-vertex rescales finished since the last `take_completed`."""
        self.withdrawn_s: list[float] = []
        """Request times of per-vertex rescales that never went out since the last `take_completed`."""
        self.failed_memory: list[FailedMemoryChange] = []
        """Memory changes timed out since the last `take_failed_memory`."""

    def requested(self, scaleout: int, now_s: float, managed_mb: float | None = None) -> None:
        self._adopted = True
        self.pending = PendingRescale(scaleout, now_s, "requested", managed_mb)

    def requested_vertices(
        self, vertex_parallelism: Mapping[str, int], taskmanagers: int, now_s: float
    ) -> None:
        self._adopted = True
        self.pending = PendingRescale(taskmanagers, now_s, "requested", None, dict(vertex_parallelism))

    def take_completed(self) -> tuple[tuple[CompletedRescale, ...], tuple[float, ...]]:
        """The per-vertex rescales finished, and the request times of those withdrawn, since the last call."""
        completed, withdrawn = tuple(self.completed), tuple(self.withdrawn_s)
        self.completed, self.withdrawn_s = [], []
        return completed, withdrawn

    def take_failed_memory(self) -> tuple[FailedMemoryChange, ...]:
        """The memory changes timed out since the last call."""
        failed, self.failed_memory = tuple(self.failed_memory), []
        return failed

    def check(
        self, now_s: float, observed_parallelism: int | None, observed_managed_mb: float | None = None
    ) -> str | None:
        """A problem text while a rescale is in progress; None once it is done (or given up). A memory
        change is done when the job also reports the new managed memory (where it reports any)."""
        if not self._adopted:
            self._adopt(now_s, observed_parallelism)
        execution: VertexExecution | None = getattr(self.target, "execution", None)
        if execution is not None and (self.pending is None or self.pending.vertex_parallelism is not None):
            return self._check_vertices(now_s, execution)
        pending = self.pending
        if pending is None:
            return None
        elapsed = now_s - pending.since_s
        try:
            resource_ready = self.target.ready(pending.scaleout)
        except Exception as error:
            resource_ready = False
            self.log.warning("rescale-readiness-unknown", error=described(error))
        memory_done = (
            pending.managed_mb is None
            or observed_managed_mb is None
            or abs(observed_managed_mb - pending.managed_mb) < 1.0
        )
        if resource_ready and observed_parallelism == pending.scaleout and memory_done:
            self._finish("ready", elapsed, pending)
            return None
        if elapsed > self.timeout_s:
            memory_seen = observed_managed_mb is not None and memory_done
            if pending.managed_mb is not None and not memory_seen:  # no level to judge: never run
                self.failed_memory.append(FailedMemoryChange(pending.since_s, pending.managed_mb))
            self._finish("timeout", elapsed, pending, observed_parallelism=observed_parallelism)
            return None
        return (
            f"rescale to {pending.scaleout} in progress for {elapsed:.0f} s ({pending.origin}; "
            f"job at {observed_parallelism}, resources {'ready' if resource_ready else 'not ready'}"
            f"{'' if memory_done else f', managed memory {observed_managed_mb:.0f} MB, not {pending.managed_mb:.0f}'})"
        )

    def _check_vertices(self, now_s: float, execution: VertexExecution) -> str | None:
        """Moves a per-vertex rescale on; a problem text while it is in progress."""
        pending = self.pending
        if not self.acting and execution.waiting is not None:
            execution.abandon()  # not PUT yet: the plan decides again once foresail may act
            if pending is not None:
                self.withdrawn_s.append(pending.since_s)
                self._finish("dropped", now_s - pending.since_s, pending, reason="paused before its PUT")
            return None
        try:
            completed = execution.advance(act=self.acting)
        except Exception as error:  # a refused PUT leaves nothing to follow; an unreachable API, a retry
            completed = None
            self.log.warning("vertex-rescale-step-failed", error=described(error))
            if pending is not None and execution.idle():
                if not isinstance(error, PutUnanswered):  # nothing went out: no restart to count
                    self.withdrawn_s.append(pending.since_s)
                self._finish("failed", now_s - pending.since_s, pending, error=described(error))
                return None
        if pending is None:
            return None
        if completed is not None:
            self.completed.append(completed)
            downtime_s = round(completed.downtime_s, 3) if math.isfinite(completed.downtime_s) else None
            self._finish("ready", now_s - pending.since_s, pending, downtime_s=downtime_s)
            return None
        elapsed = now_s - pending.since_s
        if execution.idle():  # every vertex was declared at its target already: nothing restarted
            self._finish("unchanged", elapsed, pending)
            return None
        if elapsed > self.timeout_s:
            if execution.waiting is not None:  # its TaskManagers never came: no PUT went out
                self.withdrawn_s.append(pending.since_s)
            execution.abandon()
            self._finish("timeout", elapsed, pending)
            return None
        stage = "waiting for TaskManagers" if execution.waiting is not None else "Flink rescaling"
        return f"per-vertex rescale in progress for {elapsed:.0f} s ({stage}; {pending.vertex_parallelism})"

    def unconfirmed(self) -> None:
        """A rescale request failed (a timeout, retries exhausted, or a refusal): the server may have applied
        it. The next check compares what the target wants with what runs, as at start-up, which adopts
        nothing where they agree."""
        self._adopted = False
        self._adopt_origin = "a request whose answer was lost"

    def _adopt(self, now_s: float, observed_parallelism: int | None) -> None:
        if observed_parallelism is None:  # nothing to compare with yet (metrics unreachable): ask again
            return
        self._adopted = True
        try:
            desired = self.target.desired()
        except Exception as error:
            self.log.warning("rescale-adopt-failed", error=described(error))
            self._adopted = False  # ask again next time
            return
        if desired is not None and desired != observed_parallelism:
            self.pending = PendingRescale(desired, now_s, self._adopt_origin)
            self.log.info(
                "rescale-adopted",
                scaleout=desired,
                observed_parallelism=observed_parallelism,
                origin=self._adopt_origin,
            )

    def _finish(self, outcome: str, elapsed_s: float, pending: PendingRescale, **fields: object) -> None:
        self.pending = None
        event = self.log.warning if outcome == "timeout" else self.log.info
        if pending.vertex_parallelism is not None:
            fields = {"vertex_parallelism": pending.vertex_parallelism, **fields}
        event(
            f"rescale-{outcome}",
            scaleout=pending.scaleout,
            seconds=round(elapsed_s, 1),
            origin=pending.origin,
            **fields,
        )
        if self.on_outcome is not None:
            self.on_outcome(outcome, elapsed_s)


class FollowedTarget:
    """`ScalingTarget` that applies the decision (unless recommend-only) and starts following it."""

    def __init__(
        self,
        target: ScalingTarget,
        follower: RescaleFollower,
        recommend_only: bool = False,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.target = target
        self.follower = follower
        self.recommend_only = recommend_only
        self.log = log or structlog.get_logger("foresail.target")

    @property
    def recommend_only(self) -> bool:
        return not self.follower.acting

    @recommend_only.setter
    def recommend_only(self, value: bool) -> None:
        self.follower.acting = not value

    def scale_to(self, scaleout: int, now_s: float) -> None:
        if self.recommend_only:
            self.log.info("recommendation", scaleout=scaleout, time_s=now_s)
            raise NotApplied(f"recommend-only mode: scale-out {scaleout} recommended, not applied")
        with self._unconfirmed_on_failure():
            self.target.scale_to(scaleout, now_s)
        self.follower.requested(scaleout, now_s)

    def scale_vertices(self, vertex_parallelism: Mapping[str, int], taskmanagers: int, now_s: float) -> None:
        """A per-vertex rescale (`VertexScalingTarget`), followed until every vertex runs at its target."""
        if self.recommend_only:
            self.log.info(
                "recommendation",
                vertex_parallelism=dict(vertex_parallelism),
                scaleout=taskmanagers,
                time_s=now_s,
            )
            raise NotApplied(
                f"recommend-only mode: vertex parallelism {dict(vertex_parallelism)} recommended, not applied"
            )
        scale_vertices = getattr(self.target, "scale_vertices", None)
        if scale_vertices is None:
            raise TypeError(
                f"{type(self.target).__name__} cannot set per-vertex parallelism (granularity: vertex)"
            )
        scale_vertices(vertex_parallelism, taskmanagers, now_s)
        self.follower.requested_vertices(vertex_parallelism, taskmanagers, now_s)

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None:
        """A scale-out with new managed memory per slot (memory levels), followed like a rescale."""
        if self.recommend_only:
            self.log.info("recommendation", scaleout=scaleout, managed_mb=managed_mb, time_s=now_s)
            raise NotApplied(
                f"recommend-only mode: scale-out {scaleout} with {managed_mb:.0f} MB managed memory "
                "recommended, not applied"
            )
        reconfigure = getattr(self.target, "reconfigure", None)
        if reconfigure is None:
            raise TypeError(f"{type(self.target).__name__} cannot change the managed memory")
        with self._unconfirmed_on_failure():
            reconfigure(scaleout, managed_mb, now_s)
        self.follower.requested(scaleout, now_s, managed_mb)

    def configured_managed_mb(self) -> float | None:
        configured = getattr(self.target, "configured_managed_mb", None)
        return None if configured is None else configured()

    @contextmanager
    def _unconfirmed_on_failure(self) -> Iterator[None]:
        try:
            yield
        except NotApplied:
            raise
        except Exception:
            self.follower.unconfirmed()
            raise


class FollowingSource:
    """`MetricsSource` whose observations name a rescale in progress as a problem (the loop holds)."""

    def __init__(self, source: MetricsSource, follower: RescaleFollower) -> None:
        self.source = source
        self.follower = follower

    def input_rate(self, now_s: float, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        return self.source.input_rate(now_s, window_s)

    def observe(self, now_s: float, window_s: float) -> Observation:
        observation = self.source.observe(now_s, window_s)
        note = self.follower.check(now_s, observation.parallelism, observation.managed_memory_mb)
        completed, withdrawn = self.follower.take_completed()
        failed_memory = self.follower.take_failed_memory()
        if completed or withdrawn or failed_memory:
            observation = dataclasses.replace(
                observation,
                completed_rescales=(*observation.completed_rescales, *completed),
                withdrawn_rescales_s=(*observation.withdrawn_rescales_s, *withdrawn),
                failed_memory_changes=(*observation.failed_memory_changes, *failed_memory),
            )
        if note is None:
            return observation
        return dataclasses.replace(observation, problems=(*observation.problems, note))
