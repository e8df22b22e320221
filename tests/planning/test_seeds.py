"""planning/seeds.py: what the testbed's CPU and busy readings teach the daemon's CPU-per-busy-second line."""

import math

import pytest

from capacity.cores import CoreModel
from mape.vertex_knowledge import VertexKnowledge
from planning.estimator import Estimate
from planning.estimator import Test as RateTest
from planning.seeds import core_points
from planning.testbed import PhaseReading, VertexReading


def _reading(rate_rps: float, sink_busy: float, cpu_load: float) -> PhaseReading:
    """Two slots: a legacy source (no busy time) and a sink that waits on its store."""
    vertices = (
        VertexReading("source", rate_rps, math.nan, 2),
        VertexReading("sink", rate_rps, sink_busy, 2),
    )
    return PhaseReading(rate_rps, rate_rps, 0.0, 0.0, vertices, cpu_load)


def _estimate(memory_mb: float, tests: tuple[RateTest, ...]) -> Estimate:
    return Estimate(2, memory_mb, max(t.rate_rps for t in tests if t.passed), tests, tests[0].reading, 60.0)


def test_every_passed_test_at_the_memory_is_a_point_of_busy_per_taskmanager_and_cpu():
    planned = _estimate(
        158.0,
        (
            RateTest(100.0, True, _reading(100.0, 0.3, 0.14)),
            RateTest(200.0, True, _reading(200.0, 0.6, 0.17)),
            RateTest(400.0, False, _reading(330.0, 1.0, 0.20)),  # saturated: busy may include waiting
            RateTest(300.0, True, _reading(300.0, 0.9, 0.20)),
        ),
    )
    other_memory = _estimate(316.0, (RateTest(100.0, True, _reading(100.0, 0.2, 0.12)),))
    unread_cpu = _estimate(158.0, (RateTest(100.0, True, _reading(100.0, 0.3, math.nan)),))

    points = core_points([planned, other_memory, unread_cpu], 158.0)

    assert points == pytest.approx([(0.3, 0.14), (0.6, 0.17), (0.9, 0.20)])


def test_the_points_make_a_waiting_vertex_cheap_for_the_core_line_and_the_vertex_plan():
    points = [(0.3, 0.14), (0.6, 0.17), (0.9, 0.20)]  # 0.1 CPU per busy second over an idle 0.11
    cores = CoreModel()
    prior_per_busy = cores.line()[1]

    assert cores.seed(points) == 3
    idle, per_busy = cores.line()
    assert per_busy == pytest.approx(0.1, abs=0.02) and prior_per_busy > 0.8
    assert idle == pytest.approx(0.11, abs=0.01)

    vertex = VertexKnowledge.fresh(3.0)
    assert vertex.seed_cpu_share(points, idle_cpu=0.11, saturation_cpu=0.95)
    # the loop's share: (CPU - idle) / (saturation - idle) per busy second, the median over the points
    assert vertex.cpu_per_busy == pytest.approx(0.1 / 0.84, rel=0.05)


def test_what_the_daemon_learned_itself_is_never_replaced_by_a_seed():
    cores = CoreModel()
    cores.learn({"tm-1": 0.5, "tm-2": 0.7}, {"tm-1": 0.5, "tm-2": 0.65}, 60.0)
    learned = cores.line()
    assert cores.seed([(0.3, 0.14), (0.9, 0.20)]) == 0 and cores.line() == learned

    vertex = VertexKnowledge.fresh(3.0)
    vertex.learn_cpu_share(0.9)
    assert not vertex.seed_cpu_share([(0.6, 0.17)], 0.11, 0.95) and vertex.cpu_per_busy == 0.9


def test_points_too_light_or_near_saturation_seed_no_cpu_share():
    vertex = VertexKnowledge.fresh(3.0)
    assert not vertex.seed_cpu_share([(0.1, 0.12), (1.0, 0.94)], 0.11, 0.95)
    assert math.isnan(vertex.cpu_per_busy)
