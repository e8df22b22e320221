"""The per-vertex requirement of a capacity plan: DS2's walk, with the hottest subtask's key-group share,
the work that splits with the state and the slowest subtask's true rate."""

import numpy as np
import pytest

from planning.bids2 import VertexRate, needed_parallelism
from planning.plan import vertex_parallelism
from planning.skew import GroupLoads, SkewModel, hottest_share
from planning.speeds import SlotSpeeds
from planning.state_cost import StateCost, VertexCost
from planning.testbed import VertexReading


def loads_with_a_hot_group(hot_share: float) -> GroupLoads:
    loads = np.full(128, (1 - hot_share) / 127)
    loads[40] = hot_share
    return GroupLoads(loads, tuple(np.arange(128)[:, None]), np.inf)


def test_a_plain_vertex_gets_ds2s_parallelism():
    rates = [VertexRate("parse", 10_000.0, 1.0)]
    assert vertex_parallelism(rates, 95_000.0, 8, None, None, 128) == {"parse": 10}
    assert needed_parallelism(rates, 95_000.0) == (10,)


def test_a_hot_key_group_needs_the_parallelism_where_its_subtask_carries_the_rate():
    count = VertexRate("count", 10_000.0, 1.0)
    skew = SkewModel({"count": 1.0}, {"count": loads_with_a_hot_group(0.05)})
    needs = vertex_parallelism([count], 95_000.0, 8, skew, None, 128)["count"]
    loads = skew.loads["count"].mean
    assert 10_000.0 / hottest_share(loads, needs) >= 95_000.0 > 10_000.0 / hottest_share(loads, needs - 1)
    assert needs > needed_parallelism([count], 95_000.0)[0]


def test_hosts_of_differing_speed_raise_a_keyed_vertexs_parallelism():
    """Sized on the key-group shares alone, a vertex planned for 1.10x the target carried 0.96-0.98x where
    a slow host ran its hottest subtask; the hosts' spread paces it as it paces the job's slots."""
    count = VertexRate("count", 10_000.0, 1.0)
    even = GroupLoads(np.full(128, 1 / 128), tuple(np.arange(128)[:, None]), np.inf)
    equal = SkewModel({"count": 1.0}, {"count": even})
    spread = SkewModel({"count": 1.0}, {"count": even}, speeds=SlotSpeeds((1.0, 0.84, 1.1), 0.1))
    at_equal = vertex_parallelism([count], 95_000.0, 8, equal, None, 128)["count"]
    at_spread = vertex_parallelism([count], 95_000.0, 8, spread, None, 128)["count"]
    assert at_equal == 10 and at_spread > at_equal
    assert spread.hottest_paced("count", at_spread) * 95_000.0 <= 10_000.0


def test_a_hot_group_no_parallelism_can_carry_is_capped_at_the_key_groups():
    count = VertexRate("count", 10_000.0, 1.0)
    skew = SkewModel({"count": 1.0}, {"count": loads_with_a_hot_group(0.25)})
    assert vertex_parallelism([count], 95_000.0, 8, skew, None, 400)["count"] == 128


def test_work_that_splits_with_the_state_needs_fewer_subtasks_than_its_rate_at_eight_says():
    """Measured at 8 subtasks at 100 + 400/8 µs a record; at 40 a record costs 110 µs."""
    session = VertexRate("session", 1e6 / 150.0, 1.0)
    cost = StateCost((VertexCost("session", 100e-6, 400e-6),))
    needs = vertex_parallelism([session], 300_000.0, 8, None, cost, 128)["session"]
    assert needs == 34  # 34 / (100 + 400/34) µs = 304k >= 300k; 33 carry 294k
    assert needed_parallelism([session], 300_000.0) == (45,)


def test_the_slowest_subtask_sets_the_true_rate_where_subtasks_were_read():
    even = VertexReading("parse", 3000.0, 0.5, 3, (1 / 3, 1 / 3, 1 / 3), 0, (0.4, 0.5, 0.6))
    assert even.true_rate_rps == pytest.approx(2000.0)
    assert even.slowest_true_rate_rps == pytest.approx(1000.0 / 0.6)
    unread = VertexReading("parse", 3000.0, 0.5, 3)
    assert unread.slowest_true_rate_rps == unread.true_rate_rps
