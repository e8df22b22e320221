"""capacity/model.py: a worker's CPU line belongs to the scale-out it was learned at."""

from __future__ import annotations

import numpy as np
import pytest

from capacity.model import CapacityModel, valid_windows
from messages.types import WorkerSeries

T = np.arange(5.0, 65.0, 5.0)
IDLE_CPU = 0.11


def _windows(scaleout: int, cost_per_krecord: float, load: float) -> list:
    """Each worker at `load` of its CPU range, spending `cost_per_krecord` CPU per 1,000 records/s."""
    cpu = IDLE_CPU + load * np.linspace(0.6, 1.0, len(T)) * (0.95 - IDLE_CPU)
    throughput = (cpu - IDLE_CPU) / cost_per_krecord * 1000.0
    workers = tuple(WorkerSeries(f"tm-{i}", T, cpu, throughput) for i in range(scaleout))
    return valid_windows(workers, None, 60.0, 0.0)


def test_a_cost_per_record_that_changes_with_the_scaleout_is_not_carried_across():
    # a session window: each record costs more at 2 subtasks (more state each) than at 6
    model = CapacityModel()
    expensive, cheap = 0.84 / 1000.0 * 1000, 0.42 / 1000.0 * 1000  # CPU per 1,000 records/s
    for _ in range(3):
        model.learn(_windows(2, expensive, 0.5), 60.0, 2)
    for _ in range(3):
        model.learn(_windows(6, cheap, 0.5), 120.0, 6)
    at_2 = model.estimate(_windows(2, expensive, 0.5), 2, 6, 180.0).current_rps
    at_6 = model.estimate(_windows(6, cheap, 0.5), 6, 6, 180.0).current_rps
    assert at_2 == pytest.approx(2 * 1000.0, rel=0.01)  # (0.95 − 0.11) / 0.84 per 1,000 records/s
    assert at_6 == pytest.approx(6 * 2000.0, rel=0.01)


def test_a_scaleout_without_lines_of_its_own_borrows_the_slope_pooled_over_all():
    model = CapacityModel()
    for _ in range(3):
        model.learn(_windows(3, 0.8, 0.6), 60.0, 3)
        model.learn(_windows(5, 0.4, 0.6), 60.0, 5)
    at_3, at_5, at_4 = model.pooled_slope(3), model.pooled_slope(5), model.pooled_slope(4)
    assert at_3 == pytest.approx(1000.0 / 0.8) and at_5 == pytest.approx(1000.0 / 0.4)  # records/s per CPU
    assert at_3 < at_4 < at_5
