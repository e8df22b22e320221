"""Key skew that scaling cannot fix: per keyed vertex, the imbalance δ = max / mean of the subtasks' busy
time (and records in), whether it persists, and how much of the records its hottest key group carries.

Elasticutor (§2, §6) shows that under key skew a hot subtask limits the vertex and that adding subtasks
does not help it: a key group's records always go to one subtask (Flink's KeyGroupRangeAssignment), so no
parallelism moves a hot key's load. Elasticutor rebalances shards inside its executor when δ > 1.2; Flink
has no such mechanism, so foresail names the skew (audit log, metrics) and stops adding subtasks that the
hot key group cannot use.

The hot key group's share is estimated from one window: the hottest subtask's share of the records, less
what its other key groups carry at the typical per-group load of the other subtasks (the conservative
reading: the excess sits in one group, which no rescale splits). This is an analysis extension
(mape/extensions.py); its state is saved in the knowledge under "skew".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
import structlog

from capacity.key_groups import key_group_owner
from capacity.subtask_windows import subtask_windows
from mape.extensions import ObservingExtension
from mape.knowledge import Knowledge
from messages.types import CAPACITY_RESOLUTION, Assessment, Observation

SKEW = "skew"
IMBALANCE_THRESHOLD = 1.2
"""Elasticutor's trigger: the hottest subtask carries 20% more than the mean."""
PERSIST_WINDOWS = 3
"""Loop windows in a row above the threshold before the skew counts as persistent (not a blip)."""

_log = structlog.get_logger("foresail.skew")


@dataclass
class VertexSkew:
    name: str
    parallelism: int = 0
    max_parallelism: int = 128
    busy_imbalance: float = math.nan
    """max / mean of the subtasks' busy share over the window (NaN: no busy time reported)."""
    records_imbalance: float = math.nan
    windows_over: int = 0
    hot_group_share: float = math.nan
    """Estimated share of the vertex's records its hottest key group carries."""
    typical_group_share: float = math.nan
    """Share of the records a typical (not hot) key group carries."""

    @property
    def imbalance(self) -> float:
        """δ: the busy imbalance, else (no busy time) the records imbalance."""
        return self.busy_imbalance if math.isfinite(self.busy_imbalance) else self.records_imbalance

    @property
    def persistent(self) -> bool:
        return self.windows_over >= PERSIST_WINDOWS

    def hot_subtask_share(self, parallelism: int) -> float:
        """Least share of the records the subtask holding the hot key group gets at `parallelism`: the hot
        group plus its other groups at the typical load (NaN when unknown)."""
        if not (math.isfinite(self.hot_group_share) and math.isfinite(self.typical_group_share)):
            return math.nan
        groups = math.ceil(self.max_parallelism / max(parallelism, 1))
        return min(1.0, self.hot_group_share + (groups - 1) * self.typical_group_share)

    def useful_parallelism(self, max_parallelism: int, tolerance: float = CAPACITY_RESOLUTION) -> int:
        """The smallest parallelism whose hot subtask's share is within `tolerance` of the least any
        parallelism up to `max_parallelism` reaches: beyond it the hot subtask gains (almost) nothing."""
        shares = {p: self.hot_subtask_share(p) for p in range(1, max_parallelism + 1)}
        if not all(math.isfinite(s) for s in shares.values()):
            return max_parallelism
        best = min(shares.values())
        return min(p for p, s in shares.items() if s <= best * (1 + tolerance))

    def describe(self) -> str:
        text = f"{self.name}: imbalance {self.imbalance:.2f} (max/mean busy) for {self.windows_over} loops"
        if math.isfinite(self.hot_group_share):
            text += f"; its hottest key group carries ~{self.hot_group_share:.0%} of its records"
        return text

    def to_dict(self) -> dict:
        return {k: _finite_or_none(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict) -> VertexSkew:
        """The entry `to_dict` wrote; ValueError where a field is not of its type (a hand-edited
        `"windows_over": "3"` failed every start of `foresail run` at the first comparison)."""
        values = {}
        for f in fields(cls):
            if f.name in data:
                values[f.name] = _typed(f.name, data[f.name], type(getattr(_DEFAULTS, f.name)))
        if values.get("max_parallelism", 1) < 1:
            raise ValueError(f"max_parallelism {values['max_parallelism']} < 1")
        return cls(**values)


@dataclass
class SkewKnowledge:
    vertices: dict[str, VertexSkew] = field(default_factory=dict)
    """By vertex id; keyed vertices only."""
    new_records: list = field(default_factory=list)

    def persistent(self) -> list[VertexSkew]:
        return [v for v in self.vertices.values() if v.persistent]

    def by_name(self) -> dict[str, VertexSkew]:
        return {v.name: v for v in self.vertices.values()}

    def to_dict(self) -> dict:
        return {vid: v.to_dict() for vid, v in self.vertices.items()}

    @classmethod
    def from_dict(cls, data: dict) -> SkewKnowledge:
        """The state `to_dict` wrote; an entry that cannot be one is dropped with one warning (it is
        re-measured in the next windows)."""
        vertices, dropped = {}, []
        for vid, entry in data.items() if isinstance(data, dict) else ():
            try:
                vertices[str(vid)] = VertexSkew.from_dict(entry)
            except (TypeError, ValueError, AttributeError):
                dropped.append(str(vid))
        if dropped or not isinstance(data, dict):
            _log.warning("skew-store-entries-dropped", vertices=dropped or "all")
        return cls(vertices)


def skew_of(knowledge: Knowledge) -> SkewKnowledge | None:
    state = knowledge.extensions.get(SKEW)
    return state if isinstance(state, SkewKnowledge) else None


class SkewWatch(ObservingExtension):
    """Analysis extension: measures δ per keyed vertex in every window and keeps how long it persists."""

    def refine(self, observation: Observation, knowledge: Knowledge, assessment: Assessment) -> Assessment:
        state = knowledge.extensions.setdefault(SKEW, SkewKnowledge())
        graph = observation.job_graph
        if graph is None or not observation.subtasks or assessment.problems:
            return assessment
        windows = subtask_windows(
            observation.subtasks,
            graph,
            observation.uptime_s,
            observation.time_s,
            knowledge.dag.settings.learning_warmup_s,
        )
        for vertex in graph.vertices:
            mine = [w for w in windows if w.vertex_id == vertex.vertex_id]
            if not graph.keyed(vertex.vertex_id) or len(mine) != vertex.parallelism or vertex.parallelism < 2:
                continue
            known = state.vertices.setdefault(vertex.vertex_id, VertexSkew(vertex.name))
            # a rescale keeps the count: the hot key stays hot at any parallelism (an even window resets it)
            known.name, known.parallelism = vertex.name, vertex.parallelism
            known.max_parallelism = vertex.max_parallelism
            records = np.array([w.records_in_rps for w in sorted(mine, key=lambda w: w.subtask_index)])
            busy = np.array([w.busy for w in mine])
            known.records_imbalance = _imbalance(records)
            known.busy_imbalance = _imbalance(busy) if np.isfinite(busy).all() else math.nan
            over = known.imbalance > IMBALANCE_THRESHOLD
            known.windows_over = known.windows_over + 1 if over else 0
            known.hot_group_share, known.typical_group_share = hot_key_group(records, vertex.max_parallelism)
        return assessment


def hot_key_group(records_rps: np.ndarray, max_parallelism: int) -> tuple[float, float]:
    """(hottest key group's share, typical key group's share) from the subtasks' records at one
    parallelism: the hottest subtask's excess over its groups at the other subtasks' median per-group
    load is put in one group (NaN, NaN without records)."""
    total = float(records_rps.sum())
    parallelism = len(records_rps)
    if not total > 0 or parallelism < 2:
        return math.nan, math.nan
    shares = records_rps / total
    groups = np.bincount(key_group_owner(max_parallelism, parallelism), minlength=parallelism)
    hot = int(np.argmax(shares))
    others = [shares[i] / groups[i] for i in range(parallelism) if i != hot and groups[i] > 0]
    typical = float(np.median(others)) if others else 0.0
    hot_group = max(shares[hot] - (groups[hot] - 1) * typical, shares[hot] / max(groups[hot], 1))
    return float(hot_group), typical


def _imbalance(values: np.ndarray) -> float:
    mean = float(np.mean(values)) if len(values) else math.nan
    return float(np.max(values)) / mean if mean > 0 else math.nan


_DEFAULTS = VertexSkew("")


def _typed(name: str, value: object, kind: type) -> object:
    """`value` as a field of type `kind` (None: NaN for a float); ValueError where it is not one."""
    if kind is float and value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, kind if kind is not float else int | float):
        raise ValueError(f"{name}: {value!r} is no {kind.__name__}")
    if kind is int and value < 0:
        raise ValueError(f"{name}: {value!r} is negative")
    return float(value) if kind is float else value


def _finite_or_none(value: object) -> object:
    return None if isinstance(value, float) and not math.isfinite(value) else value
