"""Score a finished twin run from its ground truth: cost (worker-seconds) against quality (latency, SLO)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.baselines.oracle import fewest_workers_with_rescales, oracle_workers
from simulator.twin import Twin

RESCALE_BUDGET_PER_H = 3.0
"""The rescales per hour issue 16 allows: `floor_avg_workers_within_budget` is the floor under that budget."""


def score(twin: Twin, slo_s: float = 30.0) -> dict[str, float | int]:
    """Plain-number summary of a run so far, JSON-serialisable (latencies are NaN if nothing was processed).

    Cost: `cpu_seconds` and `memory_mb_seconds` are what the TaskManagers hold (cores and process plus
    managed memory); `slot_seconds` the task slots; `cpu_used_seconds` the CPU they used (per-subtask
    overheads and idle JVMs included); `subtask_memory_mb_seconds` the memory that grows with the subtasks
    (per-subtask overhead and network buffers, simulator/subtask_memory.py), which per-vertex parallelism
    saves where reactive mode runs every vertex at the job's scale-out."""
    needed = oracle_workers(twin)  # both floors start from the oracle's workers per second
    return {
        **_figures_since(twin, ScoreMark(0, 0, None), needed, slo_s),
        "worker_seconds": int(twin.worker_seconds),
        "floor_avg_workers_within_budget": _floor_within_budget(needed, twin.now_s, RESCALE_BUDGET_PER_H),
        "rescales": twin.rescales,
        "reconfigurations": twin.rescales,
        "memory_reconfigurations": twin.memory_changes,
        "cpu_seconds": float(twin.worker_seconds * twin.params.cores_per_worker),
        "memory_mb_seconds": float(
            twin.worker_seconds * twin.params.process_base_mb + twin.managed_mb_seconds
        ),
        "managed_memory_mb_seconds": float(twin.managed_mb_seconds),
        "final_scaleout": twin.parallelism,
        "final_managed_mb": float(twin.managed_mb),
        "restarts": twin.restarts,
        "downtime_s": twin.downtime_s,
        "backlog_end_records": int(twin.backlog_records),
        "records_in": int(twin.records_in),
        "records_processed": int(twin.records_processed),
        "records_replayed": int(twin.records_processed_total - twin.records_processed),
        "worker_capacity_rps": float(twin.worker_capacity_rps),
        "slot_seconds": int(twin.slot_seconds),
        "subtask_seconds": int(twin.subtask_seconds),
        "cpu_used_seconds": round(float(twin.cpu_used_seconds), 1),
        "subtask_memory_mb_seconds": round(float(twin.subtask_memory_mb_seconds), 1),
        "reference_capacity_rps": float(twin.reference_capacity_rps(twin.params.reference_scaleout)),
    }


@dataclass(frozen=True)
class ScoreMark:
    """Where a run began on a twin that already holds history (a resumed daemon's twin replays the trace
    up to where the daemon left it, at one scale-out: not what happened then)."""

    t_s: int
    worker_seconds: int
    latency_histogram: np.ndarray | None


def mark(twin: Twin) -> ScoreMark:
    return ScoreMark(int(twin.now_s), int(twin.worker_seconds), twin.latency.histogram)


def score_since(twin: Twin, start: ScoreMark, slo_s: float = 30.0) -> dict[str, float | int]:
    """The figures a run's summary prints, over the seconds since `start` only."""
    return _figures_since(twin, start, oracle_workers(twin)[start.t_s :], slo_s)


def _figures_since(twin: Twin, start: ScoreMark, needed: np.ndarray, slo_s: float) -> dict[str, float | int]:
    duration_s = int(twin.now_s) - start.t_s
    return {
        "duration_s": duration_s,
        "avg_workers": (twin.worker_seconds - start.worker_seconds) / duration_s if duration_s else math.nan,
        "floor_avg_workers": _mean_floor(needed),
        **twin.latency.summary(before=start.latency_histogram),
        "slo_s": float(slo_s),
        "seconds_over_slo": twin.seconds_over_slo(slo_s, start.t_s),
        "seconds_over_slo_after_restart": twin.seconds_over_slo_after_restart(slo_s, start.t_s),
    }


def floor_avg_workers(twin: Twin) -> float:
    """Mean over the run of the fewest workers whose fresh deployment carries each second's input.

    The unreachable lower bound (no restart cost, perfect foresight) to report a policy's gap against.
    """
    return _mean_floor(oracle_workers(twin))


def floor_avg_workers_within_budget(twin: Twin, per_h: float = RESCALE_BUDGET_PER_H) -> float:
    """The same floor for a schedule that rescales at most `per_h` times per hour of the run: how close to
    the per-second floor a policy within that budget can come at all (still without restart cost)."""
    return _floor_within_budget(oracle_workers(twin), twin.now_s, per_h)


def _mean_floor(needed: np.ndarray) -> float:
    return float(needed.mean()) if len(needed) else float("nan")


def _floor_within_budget(needed: np.ndarray, duration_s: float, per_h: float) -> float:
    return fewest_workers_with_rescales(needed, math.floor(per_h * duration_s / 3600))
