"""TwinParams' constants against what the recorded Daedalus runs say, with the tolerance for each."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator import calibration
from simulator.params import TwinParams
from simulator.skew import key_group_counts, subtask_shares
from simulator.twin import Twin
from tests.conftest import SHARED_DATA

METRICS = SHARED_DATA / "metrics"
DEFAULTS = TwinParams()


@pytest.fixture(scope="module")
def calibrated(recorded_metrics) -> dict[str, float]:
    assert recorded_metrics.resolve() == METRICS.resolve()
    return calibration.calibrate(METRICS, cpu_noise_tau_s=DEFAULTS.cpu_noise_tau_s)


def test_cpu_throughput_line_of_the_single_worker(calibrated):
    # the figures the design notes quote for this fit: throughput = 61342 cpu - 6882
    assert calibrated["line_slope_rps_per_cpu"] == pytest.approx(61_342, abs=1)
    assert calibrated["line_intercept_rps"] == pytest.approx(-6_882, abs=1)
    assert DEFAULTS.idle_cpu == pytest.approx(calibrated["idle_cpu"], abs=0.002)


def test_saturation_cpu_lies_between_the_lone_and_the_hottest_worker(calibrated):
    assert (
        calibrated["single_worker_saturation_cpu"]
        <= DEFAULTS.saturation_cpu
        <= calibrated["hottest_worker_cpu"]
    )
    assert DEFAULTS.saturation_cpu == pytest.approx(calibrated["saturation_cpu"], abs=0.01)


def test_cpu_noise_reproduces_the_recorded_scatter(calibrated):
    assert DEFAULTS.cpu_noise_sd == pytest.approx(calibrated["cpu_noise_sd"], rel=0.05)
    # and the twin's one-minute CPU averages scatter like the recorded ones around the line
    twin = Twin(np.full(7200, 20_000.0), TwinParams(worker_capacity_rps=50_000.0), parallelism=12, seed=1)
    twin.advance_to(7200)
    cpu = twin.history.view("cpu")[:, :12]
    minute_means = cpu.reshape(120, 60, 12).mean(axis=1)
    residual = minute_means - minute_means.mean(axis=0)
    assert residual.std() == pytest.approx(calibrated["observed_cpu_residual_sd"], rel=0.2)


def test_number_of_keys_reproduces_the_recorded_share_spread(calibrated):
    assert DEFAULTS.num_keys == pytest.approx(calibrated["num_keys"], rel=0.05)
    assert calibration.expected_share_cov(DEFAULTS.num_keys) == pytest.approx(
        calibrated["throughput_share_cov"], abs=0.005
    )


def test_expected_share_cov_matches_hashing_keys_for_real():
    rng = np.random.default_rng(0)
    squares = []
    for _ in range(3000):
        shares = subtask_shares(key_group_counts(680, 128, rng), 12)
        squares.append((shares.std() / shares.mean()) ** 2)
    assert math.sqrt(np.mean(squares)) == pytest.approx(calibration.expected_share_cov(680), rel=0.02)
    assert calibration.num_keys_for_share_cov(calibration.expected_share_cov(680)) == pytest.approx(680)


def test_averaging_factor_limits():
    assert calibration.averaging_factor(0.0, 60) == pytest.approx(1 / math.sqrt(60))  # white noise
    assert calibration.averaging_factor(1e9, 60) == pytest.approx(1.0, abs=1e-6)  # a constant offset
