"""A memory-aware decision: what it changes, how the audit log and the store see it."""

from __future__ import annotations

from messages.types import Decision


def test_a_memory_only_change_reconfigures_although_the_scaleout_holds():
    decision = Decision(60.0, 4, 4, "memory-up", ("pressure",), 158.0, 316.0, 1)
    assert (decision.action, decision.memory_action) == ("hold", "memory_up")
    assert decision.changes_memory and decision.reconfigures


def test_a_decision_that_leaves_memory_alone_is_judged_by_its_scaleout():
    holding = Decision(60.0, 4, 4, "current-valid", (), 158.0, None, None)
    assert not holding.changes_memory and not holding.reconfigures
    same = Decision(60.0, 4, 5, "long-lived", (), 158.0, 158.0, 0)
    assert not same.changes_memory and same.reconfigures and same.memory_action == "hold"
    released = Decision(60.0, 4, 5, "long-lived", (), 158.0, 0.0, None)
    assert released.memory_action == "memory_down"


def test_memory_fields_round_trip_and_cpu_only_decisions_keep_their_old_form():
    decision = Decision(60.0, 4, 2, "cheaper-level", ("cost",), 158.0, 632.0, 2)
    assert Decision.from_dict(decision.to_dict()) == decision
    assert decision.to_dict()["memory_action"] == "memory_up"
    cpu_only = Decision(60.0, 4, 5, "long-lived", ("load",))
    assert set(cpu_only.to_dict()) == {
        "time_s",
        "current_scaleout",
        "target_scaleout",
        "action",
        "rule",
        "reasons",
    }
    assert Decision.from_dict(cpu_only.to_dict()) == cpu_only
