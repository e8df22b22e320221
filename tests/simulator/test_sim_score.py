"""The score of a run: cost and quality as plain numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.params import TwinParams
from simulator.score import floor_avg_workers, score
from simulator.twin import Twin

QUIET = TwinParams(worker_capacity_rps=1000.0, speed_cov=0.0, cpu_noise_sd=0.0, scale_out_downtime_sd_s=0.0)


def test_score_of_a_run_with_one_rescale():
    twin = Twin(np.full(400, 100.0), QUIET, parallelism=2)
    twin.scale_to(4, 105)  # checkpoint at 100: 5 s replayed; down 105..134
    twin.advance_to(400)
    result = score(twin)
    json.dumps(result, allow_nan=False)
    assert result["duration_s"] == 400
    assert result["worker_seconds"] == 2 * 105 + 4 * 295
    assert result["avg_workers"] == pytest.approx((2 * 105 + 4 * 295) / 400)
    assert result["rescales"] == 1 and result["restarts"] == 1 and result["downtime_s"] == 30
    assert result["records_in"] == result["records_processed"] == 40_000
    assert result["records_replayed"] == 500 and result["backlog_end_records"] == 0
    assert result["max_latency_s"] == 30 + 5 + 0.5
    assert result["seconds_over_slo"] == twin.seconds_over_slo(30.0) == 6  # seconds 130..135
    assert result["seconds_over_slo_after_restart"] == 6  # all while the job was down
    # 40,500 processings: 37,000 at delay 0, then 100 at each delay 1..35; 95 % = 38,475 is reached at 15
    assert result["p95_latency_s"] == 15 + 0.5
    assert result["mean_latency_s"] == pytest.approx(100 * sum(range(1, 36)) / 40_500 + 0.5)
    assert all(isinstance(v, int | float) for v in result.values())


def test_floor_needs_one_worker_per_capacity_step():
    twin = Twin(np.repeat([500.0, 1500.0], 100), QUIET, parallelism=1)
    assert twin.reference_capacity_rps(1) == 1000.0 and twin.reference_capacity_rps(2) >= 1500.0
    twin.advance_to(200)
    assert floor_avg_workers(twin) == 1.5
