"""Per-operator decision history: what each reconfiguration did to a stateful operator, and the state
signals it showed just before, so the next decision can tell whether a memory step helped (Justin §4.1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from messages.types import Decision, OperatorState


@dataclass(frozen=True)
class OperatorDecision:
    """One executed reconfiguration as one stateful operator saw it (Justin's C^t, with o.v^t)."""

    operator: str
    time_s: float
    from_scaleout: int
    to_scaleout: int
    from_level: int | None
    to_level: int | None
    rule: str
    hit_rate_before: float = math.nan
    latency_ns_before: float = math.nan

    @property
    def scaled_up(self) -> bool:
        """Justin's o.v^t: the decision raised the operator's memory level."""
        return _rank(self.to_level) > _rank(self.from_level)

    def to_dict(self) -> dict:
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()
        }

    @classmethod
    def from_dict(cls, data: dict) -> OperatorDecision:
        nan_if_none = {
            k: math.nan if data.get(k) is None else float(data[k])
            for k in ("hit_rate_before", "latency_ns_before")
        }
        return cls(
            operator=str(data["operator"]),
            time_s=float(data["time_s"]),
            from_scaleout=int(data["from_scaleout"]),
            to_scaleout=int(data["to_scaleout"]),
            from_level=data.get("from_level"),
            to_level=data.get("to_level"),
            rule=str(data["rule"]),
            **nan_if_none,
        )


class MemoryHistory:
    """The stateful operators seen so far and the last reconfiguration of each."""

    def __init__(self) -> None:
        self.stateful: set[str] = set()
        self.readers: set[str] = set()
        """Stateful operators that read through the block cache (they have shown a hit rate)."""
        self.last: dict[str, OperatorDecision] = {}
        self.new_records: list[OperatorDecision] = []
        """Records of this iteration: stored in the knowledge store's table with it, then cleared."""

    def observe(self, operators: tuple[OperatorState, ...]) -> None:
        """Remember every operator that ever showed state: a window without its metrics (a restart, a
        failed query) does not make a stateful operator stateless."""
        self.stateful.update(o.name for o in operators if o.stateful)
        self.readers.update(o.name for o in operators if o.stateful and math.isfinite(o.cache_hit_rate))

    def record(
        self,
        decision: Decision,
        from_level: int | None,
        to_level: int | None,
        operators: tuple[OperatorState, ...],
    ) -> None:
        """An executed reconfiguration, once per stateful operator, with its signals before it."""
        signals = {o.name: o for o in operators}
        for name in sorted(self.stateful):
            before = signals.get(name, OperatorState(name, stateful=True))
            entry = OperatorDecision(
                operator=name,
                time_s=decision.time_s,
                from_scaleout=decision.current_scaleout,
                to_scaleout=decision.target_scaleout,
                from_level=from_level,
                to_level=to_level,
                rule=decision.rule,
                hit_rate_before=before.cache_hit_rate,
                latency_ns_before=before.state_latency_ns,
            )
            self.last[name] = entry
            self.new_records.append(entry)

    def to_dict(self) -> dict:
        return {
            "stateful": sorted(self.stateful),
            "readers": sorted(self.readers),
            "last": {name: entry.to_dict() for name, entry in self.last.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> MemoryHistory:
        history = cls()
        history.stateful = set(data.get("stateful", []))
        history.readers = set(data.get("readers", []))
        history.last = {name: OperatorDecision.from_dict(e) for name, e in data.get("last", {}).items()}
        return history


def _rank(level: int | None) -> int:
    return -1 if level is None else level
