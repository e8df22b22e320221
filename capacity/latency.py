"""Queueing latency of a job graph and the fewest cores that meet a latency target (Elasticutor, §4.1).

Elasticutor (Wang et al., SIGMOD'19) models each operator as an M/M/k queue in a Jackson network: with
λ_j its arrival rate, μ_j one core's service rate and k_j its cores, the mean sojourn time is Erlang C's
waiting time plus the service time, E[T_j](k) = C(k, λ/μ) / (kμ − λ) + 1/μ, bounded only when k > λ/μ.
The end-to-end mean over the network is E[T](k) = (1/λ_0) Σ_j λ_j E[T_j](k_j) (Eq. 1), λ_0 the source rate.
Its scheduler starts every operator at ⌊λ_j/μ_j⌋ + 1 (the least that is stable) and repeatedly adds the
core that cuts E[T] most until E[T] ≤ T_max or the cores run out (a greedy shown optimal for this
separable convex problem).

One difference to Elasticutor matters for Flink: an Elasticutor executor moves key shards between its
cores, so its cores share one queue (M/M/k). A Flink keyed vertex cannot: a key group's records always
go to the subtask that owns it, so each subtask is its own M/M/1 queue fed λ·share_i. A `Station` with
`shares` is modelled so; its hottest subtask decides when it is stable, and a hot key group, which no
parallelism splits, bounds what more subtasks can give.

Pure functions of rates; times in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/k queue (k = `servers`, offered load a = λ/μ); 1 when
    the queue is unstable (a ≥ k). Computed through Erlang B's recursion, stable for large k."""
    if servers < 1 or offered_load >= servers:
        return 1.0
    if offered_load <= 0:
        return 0.0
    blocking = 1.0
    for n in range(1, servers + 1):
        blocking = offered_load * blocking / (n + offered_load * blocking)
    utilization = offered_load / servers
    return blocking / (1.0 - utilization * (1.0 - blocking))


def mmk_sojourn_s(arrival_rps: float, service_rps: float, servers: int) -> float:
    """Mean time in an M/M/k system (waiting + service); inf when it is not stable (k ≤ λ/μ)."""
    if not service_rps > 0 or servers < 1:
        return math.inf
    if arrival_rps <= 0:
        return 1.0 / service_rps
    if servers * service_rps <= arrival_rps:
        return math.inf
    waiting = erlang_c(servers, arrival_rps / service_rps) / (servers * service_rps - arrival_rps)
    return waiting + 1.0 / service_rps


def split_sojourn_s(arrival_rps: float, service_rps: float, shares: np.ndarray) -> float:
    """Mean time in k separate M/M/1 queues, subtask i fed λ·share_i (a keyed vertex: its key groups pin
    records to subtasks); inf when any loaded subtask is not stable."""
    shares = np.asarray(shares, dtype=float)
    total = shares.sum()
    if not service_rps > 0 or total <= 0:
        return math.inf
    shares = shares / total
    loads = arrival_rps * shares
    loaded = shares > 0
    if (loads[loaded] >= service_rps).any():
        return math.inf
    return float((shares[loaded] / (service_rps - loads[loaded])).sum())


def min_stable_cores(arrival_rps: float, service_rps: float) -> int:
    """⌊λ/μ⌋ + 1: the fewest cores with which an M/M/k queue is stable."""
    return math.floor(arrival_rps / service_rps) + 1


@dataclass(frozen=True)
class Station:
    """One vertex as a queue: its arrival rate, one core's (subtask's) service rate, and, for a keyed
    vertex, each subtask's share of its input at a given parallelism (None: the cores share one queue)."""

    name: str
    arrival_rps: float
    service_rps: float
    shares: Callable[[int], np.ndarray] | None = None
    max_cores: int | None = None
    vertex_id: str = ""
    """The vertex it models (names need not be unique: two un-chained `Map`s)."""

    def sojourn_s(self, cores: int) -> float:
        if self.shares is None:
            return mmk_sojourn_s(self.arrival_rps, self.service_rps, cores)
        return split_sojourn_s(self.arrival_rps, self.service_rps, self.shares(cores))

    def first_cores(self) -> int:
        """Where the greedy starts: ⌊λ/μ⌋ + 1, or, for split queues, the first parallelism whose hottest
        subtask is stable (its max_cores when none is)."""
        start = min_stable_cores(self.arrival_rps, self.service_rps) if self.service_rps > 0 else 1
        if self.shares is None:
            return start
        top = self.max_cores or start
        for cores in range(min(start, top), top + 1):
            if math.isfinite(self.sojourn_s(cores)):
                return cores
        return top


def network_latency_s(stations: Sequence[Station], cores: Sequence[int], source_rps: float) -> float:
    """Elasticutor's Eq. 1: E[T](k) = (1/λ_0) Σ_j λ_j E[T_j](k_j)."""
    if not source_rps > 0:
        return math.nan
    total = 0.0
    for station, k in zip(stations, cores, strict=True):
        if station.arrival_rps > 0:
            total += station.arrival_rps * station.sojourn_s(k)
    return total / source_rps


def service_floor_s(stations: Sequence[Station], source_rps: float) -> float:
    """E[T] with cores enough that nothing queues, (1/λ_0) Σ_j λ_j / μ_j: no parallelism gets below it, so
    a target under it cannot be met (the greedy would add cores up to every vertex's limit trying)."""
    if not source_rps > 0:
        return math.nan
    return (
        sum(s.arrival_rps / s.service_rps for s in stations if s.arrival_rps > 0 and s.service_rps > 0)
        / source_rps
    )


@dataclass(frozen=True)
class Allocation:
    """The greedy's result: cores per station, the latency they give, whether it meets the target, and
    every allocation it went through (first = the stable start)."""

    cores: tuple[int, ...]
    latency_s: float
    met: bool
    path: tuple[tuple[tuple[int, ...], float], ...] = field(default=())
    reason: str = ""


def greedy_allocation(
    stations: Sequence[Station], source_rps: float, target_s: float, max_total_cores: int | None = None
) -> Allocation:
    """Start each station at its first stable core count, then add the core that cuts E[T] most until
    E[T] ≤ `target_s`, the core budget is spent, or no station can take another core (its max_cores)."""
    cores = [s.first_cores() for s in stations]
    latency = network_latency_s(stations, cores, source_rps)
    path = [(tuple(cores), latency)]
    while not latency <= target_s:
        if max_total_cores is not None and sum(cores) >= max_total_cores:
            return Allocation(tuple(cores), latency, False, tuple(path), "core budget spent")
        best, best_latency = None, latency
        for j, station in enumerate(stations):
            if station.max_cores is not None and cores[j] >= station.max_cores:
                continue
            trial = cores.copy()
            trial[j] += 1
            candidate = network_latency_s(stations, trial, source_rps)
            if candidate < best_latency:
                best, best_latency = j, candidate
        if best is None:
            return Allocation(tuple(cores), latency, False, tuple(path), "no core lowers the latency")
        cores[best] += 1
        latency = best_latency
        path.append((tuple(cores), latency))
    return Allocation(tuple(cores), latency, True, tuple(path), "target met")


def seconds_over_target_after_pause(pause_s: float, slack_s: float, utilization: float) -> float:
    """Seconds a pause (a rescale's downtime) keeps a FIFO job's latency above its target, when the steady
    latency is `slack_s` below the target and the job then runs at `utilization` of its capacity.

    Records arriving during the pause wait; after it, the record served t seconds in waited
    pause − t·(1 − u)/u, so the latency is above target for pause − slack seconds of the pause and
    (pause − slack)·u/(1 − u) after it: (pause − slack) / (1 − u) in all; inf when it never catches up.
    """
    over_s = pause_s - slack_s
    if over_s <= 0:
        return 0.0
    if not utilization < 1.0:
        return math.inf
    return over_s / (1.0 - max(utilization, 0.0))
