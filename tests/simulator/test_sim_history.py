"""The twin's record: the running sum of arrivals that the metrics windows read."""

from __future__ import annotations

import numpy as np

from simulator.history import TwinHistory


def test_arrived_before_is_the_running_sum_of_arrivals_as_the_record_grows():
    """Read between writes and across the record's growth (it doubles past its expected length), the sum
    is extended, never recomputed from second 0, and equals a sum from scratch."""
    rng = np.random.default_rng(0)
    history = TwinHistory(expected_seconds=5, expected_workers=1)
    arrivals = rng.integers(0, 10**9, size=40)
    for t, count in enumerate(arrivals):
        history.ensure(t, 1)
        history.series("arrivals")[t] = count
        history.length = t + 1
        if t % 3 == 0:  # reads at some seconds only: the sum catches up over several at once
            assert np.array_equal(
                history.arrived_before(), np.concatenate(([0], np.cumsum(arrivals[: t + 1])))
            )
    assert np.array_equal(history.arrived_before(), np.concatenate(([0], np.cumsum(arrivals))))
    assert not history.arrived_before().flags.writeable
