"""Ground-truth recovery times of the twin, against the closed form for a constant load."""

from __future__ import annotations

import math

import numpy as np

from simulator.params import TwinParams
from simulator.recoveries import recovery_summary, true_recoveries
from simulator.twin import Twin

RATE = 10_000.0


def _twin() -> Twin:
    params = TwinParams(
        worker_capacity_rps=2_000, speed_cov=0.0, cpu_noise_sd=0.0, scale_out_downtime_sd_s=0.0
    )
    return Twin(np.full(3_000, RATE), params, parallelism=8, seed=1)


def test_recovery_of_a_scale_out_matches_the_closed_form():
    twin = _twin()
    twin.advance_to(500)
    twin.scale_to(10, 500)
    twin.advance_to(2_000)
    (recovery,) = true_recoveries(twin)
    spare = twin.true_capacity_rps() - RATE
    downtime = 30.0
    tolerance = 2.0 * RATE  # caught up = lag within 2 s of input
    shortest = downtime + (downtime * RATE - tolerance) / spare  # no records to replay
    longest = downtime + ((downtime + 10.0) * RATE - tolerance) / spare  # a checkpoint interval replayed
    assert recovery.stop_s == 500
    assert math.floor(shortest) <= recovery.recovery_s <= math.ceil(longest) + 1


def test_a_restart_cut_short_by_the_next_one_is_not_recovered():
    twin = _twin()
    twin.advance_to(500)
    twin.scale_to(10, 500)
    twin.advance_to(540)  # the backlog is still draining
    twin.scale_to(9, 540)
    twin.advance_to(2_000)
    first, second = true_recoveries(twin)
    assert first.recovery_s is None and first.next_stop_s == 540
    assert second.recovery_s is not None
    summary = recovery_summary(twin, target_s=600)
    assert summary["recoveries"] == 2
    assert summary["recovery_within_target_share"] == 0.5
