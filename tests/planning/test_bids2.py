"""BIDS2 against the single-task runs StreamBed released (data/streambed/README.md) and its definition."""

import math

import pytest

from planning.bids2 import VertexRate, bids2

Q11 = (
    VertexRate("Calc1", 620444, 1.0),
    VertexRate("GroupWindowAggregate", 41731.3, 0.920065),
    VertexRate("Calc2", 1.06689e6, 0.104443),
    VertexRate("Sink", 1.96676e6, 0.104443),
)
JOIN_RATIO = 0.3582 + 1.07702e-4
Q5 = (
    VertexRate("Calc1", 706598, 1.0),
    VertexRate("GWA", 40680.6, 0.919992),
    VertexRate("Calc3", 1.22504e6, 0.3582),
    VertexRate("Calc4", 1.21465e6, 0.3582),
    VertexRate("GroupAgg", 291770, 0.3582),
    VertexRate("Calc6", 10400, 1.07702e-4),
    VertexRate("Join", 237905, JOIN_RATIO),
    VertexRate("Calc8", 1.16719e6, 0.0263355),
    VertexRate("Sink", 1.16729e6, 0.0263355),
)


def test_q11_at_48_slots_reproduces_the_released_configuration():
    result = bids2(Q11, 48)
    # the README gives the rates to 6 digits (41731.3 ± 0.05 → ± 2.3 events/s at 42 tasks)
    assert abs(result.source_rate_rps - 1_904_991) < 3
    assert result.parallelism == (4, 42, 1, 1)
    assert result.binding == "GroupWindowAggregate"


def test_q5_at_48_slots_reproduces_the_released_configuration():
    result = bids2(Q5, 48)
    assert abs(result.source_rate_rps - 1_547_644) < 3  # the README's "≈ 1,547,644"
    assert result.parallelism == (3, 35, 1, 1, 2, 1, 3, 1, 1)


def _need(vertices, rate):
    return sum(max(1, math.ceil(rate * v.input_ratio / v.true_rate_rps - 1e-9)) for v in vertices)


@pytest.mark.parametrize("slots", [9, 10, 17, 48, 200])
def test_the_rate_is_the_largest_the_budget_carries(slots):
    """λ* fits the budget, and any rate 0.01% above it needs more slots than the budget."""
    result = bids2(Q5, slots)
    assert _need(Q5, result.source_rate_rps) <= slots
    assert result.slots == _need(Q5, result.source_rate_rps)
    assert _need(Q5, result.source_rate_rps * 1.0001) > slots


def test_too_small_a_budget_or_a_bad_rate_is_one_clear_error():
    with pytest.raises(ValueError, match="cannot give each of 4 vertices one"):
        bids2(Q11, 3)
    with pytest.raises(ValueError, match="true rate"):
        bids2((VertexRate("x", 0.0, 1.0),), 4)
