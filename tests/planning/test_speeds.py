"""Host speeds read from the runs: evenly fed subtasks are busy in proportion to 1/speed of their slot."""

import numpy as np
import pytest

from planning.estimator import Estimate
from planning.estimator import Test as RateTest
from planning.skew import SkewModel, group_loads
from planning.speeds import SlotSpeeds, slot_speeds
from planning.state_cost import state_cost
from planning.testbed import PhaseReading, VertexReading

RATE_RPS = 1000.0
SPEEDS = np.array([0.8, 1.1, 1.0, 0.95, 1.2, 0.9, 1.05, 1.0])


def run(parallelism: int, work_s: dict[str, float], speeds=SPEEDS, keyed=(), extra=()) -> Estimate:
    """A run on the first `parallelism` hosts whose vertices take `work_s` busy seconds per source record
    at a mean host, spread evenly over their subtasks (and `extra` vertex readings)."""
    vertices = list(extra)
    for name, work in work_s.items():
        busy = RATE_RPS * work / parallelism / speeds[:parallelism]
        vertices.append(
            VertexReading(
                name,
                RATE_RPS,
                float(busy.mean()),
                parallelism,
                tuple(np.full(parallelism, 1 / parallelism)),
                128 if name in keyed else 0,
                tuple(busy),
            )
        )
    reading = PhaseReading(RATE_RPS, RATE_RPS, 0.0, 0.0, tuple(vertices))
    return Estimate(parallelism, 512.0, RATE_RPS, (RateTest(RATE_RPS, True, reading),), reading, 60.0)


def relative(speeds):
    speeds = np.asarray(speeds, dtype=float)
    return speeds / np.exp(np.log(speeds).mean())


def test_the_hosts_speeds_come_back_from_runs_that_share_them():
    runs = [run(n, {"parse": 1e-4, "count": 2e-4}, keyed=("count",)) for n in (1, 2, 4, 8)]
    speeds = slot_speeds(runs)
    assert speeds.speeds == pytest.approx(relative(SPEEDS), rel=1e-9)
    assert speeds.log_sd == pytest.approx(np.std(np.log(SPEEDS), ddof=1), rel=1e-9)


def test_keyed_subtasks_tell_hosts_apart_only_where_no_vertex_is_fed_evenly():
    keyed_only = [run(n, {"count": 2e-4}, keyed=("count",)) for n in (1, 2, 4, 8)]
    assert slot_speeds(keyed_only).speeds == pytest.approx(relative(SPEEDS), rel=1e-9)
    # a window whose later subtasks hold more state (dearer records) would read as slower hosts
    both = []
    for p in (1, 2, 4, 8):
        busy = np.linspace(1.0, 1.5, p) * 2e-4 * RATE_RPS / p / SPEEDS[:p]
        window = VertexReading("window", RATE_RPS, float(busy.mean()), p, (1 / p,) * p, 128, tuple(busy))
        both.append(run(p, {"parse": 1e-4}, extra=(window,)))
    assert slot_speeds(both).speeds == pytest.approx(relative(SPEEDS), rel=1e-9)


def test_saturated_or_single_subtasks_tell_no_hosts_apart():
    saturated = [run(n, {"parse": 4 * n / RATE_RPS}) for n in (2, 8)]  # every subtask busy ≥ 1
    assert slot_speeds(saturated) is None
    assert slot_speeds([run(1, {"parse": 1e-4})]) is None


def test_a_slow_first_host_is_not_read_as_work_that_splits():
    """Runs at 1, 2, 4, 8 slots add hosts to a slow first one: the work per record seems to fall with n."""
    slow_first = np.array([0.7, *[1.0] * 7])
    runs = [run(n, {"parse": 1e-4}, speeds=slow_first) for n in (1, 2, 4, 8)]
    assert state_cost(runs) is not None  # the spurious split the raw busy times show
    assert state_cost(runs, slot_speeds(runs)) is None


def test_the_measured_imbalance_counts_each_slot_at_its_hosts_pace():
    loads = group_loads(128, [(4, (0.25, 0.25, 0.25, 0.25))])
    speeds = SlotSpeeds((0.9, 1.0, 1.1, 1.0), 0.08)
    model = SkewModel({"count": 1.0}, {"count": loads}, speeds=speeds)
    assert model.realized(4) == pytest.approx(1 / 0.9, rel=1e-9)  # every slot carries 1/4: the slowest binds
    alike = SkewModel({"count": 1.0}, {"count": loads})
    assert alike.realized(4) == pytest.approx(1.0, rel=1e-9)
    assert model.imbalance(40) > alike.imbalance(40)  # new hosts differ as the testbed's did
    same = SkewModel({"count": 1.0}, {"count": loads}, speeds=SlotSpeeds((1.0,) * 4, 0.0))
    assert same.imbalance(40) == alike.imbalance(40)


def test_differences_within_the_readings_noise_are_no_host_speeds():
    """Equal hosts read with 2% noise, and a lone run of two slots (no degree of freedom for the noise)."""
    rng = np.random.default_rng(7)
    noisy = [
        run(n, {"parse": 1e-4, "sink": 3e-4}, speeds=np.exp(rng.normal(0.0, 0.02, 8)))
        for n in (2, 2, 4, 4, 8, 8)
    ]
    assert slot_speeds(noisy) is None
    assert slot_speeds([run(1, {"parse": 1e-4}), run(2, {"parse": 1e-4})]) is None
    real = [run(n, {"parse": 1e-4, "sink": 3e-4}) for n in (2, 4, 8)]
    assert slot_speeds(real).speeds == pytest.approx(relative(SPEEDS), rel=1e-9)
