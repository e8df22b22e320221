"""Per-operator decision history: what each reconfiguration did to a stateful operator, and the state
signals it showed just before, so the next decision can tell whether a memory step helped (Justin §4.1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import structlog

from memory.signals import hit_rate_of, latency_ns_of, plausible_hit_rate, plausible_latency_ns
from messages.types import Decision, OperatorState

LOG = structlog.get_logger("foresail.memory")


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
        """A stored entry, type-checked (a hand edit such as `"to_level": "1"` would otherwise fail a
        comparison in the plan much later); raises ValueError or TypeError for one that is not an entry."""
        # judged as the live signals are: a hit rate of 5.0 stored made a step from 0.5 to 0.9 read as
        # one that improved nothing, rolled back with a restart
        before = {
            k: math.nan if data.get(k) is None else plausible(_number(data[k]))
            for k, plausible in (
                ("hit_rate_before", plausible_hit_rate),
                ("latency_ns_before", plausible_latency_ns),
            )
        }
        return cls(
            operator=_text(data["operator"]),
            time_s=_number(data["time_s"]),
            from_scaleout=_count(data["from_scaleout"]),
            to_scaleout=_count(data["to_scaleout"]),
            from_level=_level(data.get("from_level")),
            to_level=_level(data.get("to_level")),
            rule=_text(data["rule"]),
            **before,
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
        self.readers.update(o.name for o in operators if o.stateful and math.isfinite(hit_rate_of(o)))

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
                hit_rate_before=hit_rate_of(before),
                latency_ns_before=latency_ns_of(before),
            )
            self.last[name] = entry
            self.new_records.append(entry)

    def withdraw(self, requested_s: float) -> OperatorDecision | None:
        """A memory change requested at `requested_s` never ran (it timed out): the operators' entries of
        it become steps that changed no level, so no later decision judges a level by it. Returns the
        change as it was recorded (None: no entry of it changed a level)."""
        changed = None
        for name, entry in list(self.last.items()):
            if entry.time_s == requested_s and entry.to_level != entry.from_level:
                withdrawn = replace(entry, to_level=entry.from_level, rule=f"{entry.rule} (timed out)")
                self.last[name] = withdrawn
                self.new_records.append(withdrawn)
                changed = entry
        return changed

    def to_dict(self) -> dict:
        return {
            "stateful": sorted(self.stateful),
            "readers": sorted(self.readers),
            "last": {name: entry.to_dict() for name, entry in self.last.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> MemoryHistory:
        """The stored history, read entry by entry: one that is not an operator name or a decision is
        dropped with one warning, so a hand edit costs that entry, not every later save and the loop."""
        history, dropped = cls(), 0
        for part in ("stateful", "readers"):
            names = _entries(data, part, list)
            valid = {name for name in names if isinstance(name, str)}
            dropped += len(names) - len(valid)
            setattr(history, part, valid)
        for name, entry in _entries(data, "last", dict).items():
            decision = _decision(entry)
            if isinstance(name, str) and decision is not None and decision.operator == name:
                history.last[name] = decision
            else:
                dropped += 1
        history.readers &= history.stateful
        if dropped:
            LOG.warning("memory-history-entries-dropped", dropped_entries=dropped)
        return history


def stored_decisions(entries: list) -> list[OperatorDecision]:
    """Stored decision records, the ones that are not decisions dropped with one warning."""
    decisions = [_decision(entry) for entry in entries]
    valid = [d for d in decisions if d is not None]
    if len(valid) < len(decisions):
        LOG.warning("memory-decision-records-dropped", dropped_entries=len(decisions) - len(valid))
    return valid


def _decision(entry: object) -> OperatorDecision | None:
    try:
        return OperatorDecision.from_dict(entry)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _entries(data: dict, part: str, kind: type) -> list | dict:
    """One part of the stored history; an ill-typed part counts as empty (one warning)."""
    value = data.get(part, kind())
    if isinstance(value, kind):
        return value
    LOG.warning("memory-history-part-dropped", part=part, found=type(value).__name__)
    return kind()


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"not a string: {value!r}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def _count(value: object) -> int:
    """A non-negative whole number (a JSON 4.0 counts; "4", 4.5 and True do not)."""
    number = _number(value)
    if not (number.is_integer() and number >= 0):
        raise ValueError(f"not a count: {value!r}")
    return int(number)


def _level(value: object) -> int | None:
    return None if value is None else _count(value)


def _rank(level: int | None) -> int:
    return -1 if level is None else level
