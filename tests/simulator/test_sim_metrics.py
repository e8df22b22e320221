"""What the loop may see of the twin: Prometheus-like samples with Flink's meter and restart semantics."""

from __future__ import annotations

import numpy as np
import pytest

from messages.types import Observation
from simulator.metrics import TwinMetricsSource, TwinScalingTarget
from simulator.params import TwinParams
from simulator.twin import Twin
from tests.simulator import twin_helpers
from tests.simulator.twin_helpers import constant


def quiet(**overrides) -> TwinParams:
    """Deterministic knobs; a capacity that catches up any backlog within one second."""
    return twin_helpers.quiet(**{"worker_capacity_rps": 100_000.0, **overrides})


def test_samples_sit_on_the_scrape_grid_inside_the_window():
    twin = Twin(constant(100, 400), quiet(), parallelism=2)
    twin.advance_to(300)
    source = TwinMetricsSource(twin)
    observation = source.observe(100, 60)
    assert isinstance(observation, Observation)
    expected = np.arange(45, 101, 5, dtype=float)  # (40, 100]
    np.testing.assert_array_equal(observation.input_timestamps_s, expected)
    for worker in observation.workers:
        np.testing.assert_array_equal(worker.timestamps_s, expected)
    odd = source.observe(102.5, 30)  # (72.5, 102.5]
    np.testing.assert_array_equal(odd.input_timestamps_s, np.arange(75, 101, 5, dtype=float))
    coarse = TwinMetricsSource(twin, scrape_interval_s=15).observe(300, 60)  # (240, 300]
    np.testing.assert_array_equal(coarse.input_timestamps_s, [255.0, 270.0, 285.0, 300.0])


def test_observe_never_looks_past_the_twin_clock():
    twin = Twin(np.arange(1000, dtype=float), quiet(failure_rate_per_hour=60.0), parallelism=3, seed=4)
    source = TwinMetricsSource(twin)
    twin.advance_to(400)
    with pytest.raises(ValueError):
        source.observe(401, 60)
    before = source.observe(400, 300)
    twin.scale_to(5, 400)  # an action at 400 changes the state at 400, not the samples before it
    twin.advance_to(1000)
    after = source.observe(400, 300)
    np.testing.assert_array_equal(before.input_rate_rps, after.input_rate_rps)
    for old, new in zip(before.workers, after.workers[:3], strict=True):
        assert old.worker_id == new.worker_id
        np.testing.assert_array_equal(old.cpu, new.cpu)
        np.testing.assert_array_equal(old.throughput_rps, new.throughput_rps)
    history = source.observe(399, 60)
    assert history.parallelism == 3 and len(history.workers) == 3


def test_meter_ramps_up_for_a_minute_after_the_job_starts():
    twin = Twin(constant(600, 300), quiet(), parallelism=1)
    twin.advance_to(200)
    worker = TwinMetricsSource(twin).observe(200, 200).workers[0]
    ramp = worker.timestamps_s <= 60
    np.testing.assert_allclose(worker.throughput_rps[ramp], 600 * worker.timestamps_s[ramp] / 60)
    np.testing.assert_allclose(worker.throughput_rps[~ramp], 600)


def test_worker_metrics_are_nan_while_restarting_and_restart_from_zero():
    # failure at 100 (a checkpoint: nothing replayed), down 15 s: the backlog of 15 s is processed at 115
    twin = Twin(constant(600, 400), quiet(), parallelism=1)
    source = TwinMetricsSource(twin, scrape_interval_s=1)
    twin.advance_to(100)
    twin.inject_failure(100)
    twin.advance_to(114)
    down = source.observe(114, 60)
    worker = down.workers[0]
    restarting = worker.timestamps_s > 100
    assert np.isnan(worker.cpu[restarting]).all() and np.isnan(worker.throughput_rps[restarting]).all()
    assert (
        np.isfinite(worker.cpu[~restarting]).all() and np.isfinite(worker.throughput_rps[~restarting]).all()
    )
    assert down.uptime_s == 0 and down.restarts == 1 and down.problems
    np.testing.assert_allclose(down.input_rate_rps, 600)  # the broker keeps reporting
    assert down.backlog_records == 14 * 600

    twin.advance_to(300)
    worker = source.observe(300, 200).workers[0]
    at = {int(t): i for i, t in enumerate(worker.timestamps_s)}
    for k in (1, 30, 60):
        assert worker.throughput_rps[at[115 + k]] == pytest.approx((15 + k) * 600 / 60)  # backlog + ramp
    assert worker.throughput_rps[at[176]] == pytest.approx(600)
    assert np.isnan(worker.throughput_rps[at[115]])  # no second completed since the restart
    p = twin.params
    busy_cpu = p.idle_cpu + (p.saturation_cpu - p.idle_cpu) * 16 * 600 / 100_000
    steady_cpu = p.idle_cpu + (p.saturation_cpu - p.idle_cpu) * 600 / 100_000
    assert worker.cpu[at[116]] == pytest.approx(busy_cpu)  # averaged over the one second since restart
    assert worker.cpu[at[125]] == pytest.approx((busy_cpu + 9 * steady_cpu) / 10)


def test_new_workers_have_no_samples_before_they_exist():
    twin = Twin(constant(100, 400), quiet(), parallelism=2)
    TwinScalingTarget(twin).scale_to(4, 100)
    twin.advance_to(200)
    observation = TwinMetricsSource(twin).observe(200, 150)
    assert [w.worker_id for w in observation.workers] == ["tm-0001", "tm-0002", "tm-0003", "tm-0004"]
    assert observation.parallelism == 4 and observation.uptime_s == 70 and observation.restarts == 1
    old, new = observation.workers[0], observation.workers[3]
    before = old.timestamps_s <= 100
    assert np.isfinite(old.cpu[before]).all()
    assert np.isnan(new.cpu[before]).all() and np.isnan(new.throughput_rps[before]).all()
    assert np.isfinite(new.cpu[old.timestamps_s > 130]).all()


def test_input_rate_is_the_mean_of_the_last_ten_seconds():
    twin = Twin(np.arange(500, dtype=float), quiet(), parallelism=1)  # second s brings s records
    twin.advance_to(300)
    observation = TwinMetricsSource(twin).observe(300, 100)
    t = observation.input_timestamps_s
    np.testing.assert_allclose(observation.input_rate_rps, t - 5.5)  # mean of t-10 .. t-1
    early = TwinMetricsSource(twin).observe(5, 5).input_rate_rps  # only seconds 0..4 exist at 5
    np.testing.assert_allclose(early, [2.0])


def test_backlog_is_the_consumer_lag_including_rolled_back_records():
    twin = Twin(constant(1000, 400), quiet(worker_capacity_rps=500.0), parallelism=1)
    source = TwinMetricsSource(twin)
    twin.advance_to(100)
    assert source.observe(100, 60).backlog_records == 500 * 100
    twin.inject_failure(105)  # checkpoint at 100: 5 s of processing (2500 records) roll back
    assert source.observe(105, 60).backlog_records == 500 * 105 + 2500
    assert source.observe(100, 60).backlog_records == 500 * 100  # history is unchanged


def test_cpu_is_a_one_minute_average_of_the_per_second_cpu():
    twin = Twin(constant(30_000, 600), TwinParams(), parallelism=4, seed=3)
    twin.advance_to(600)
    observation = TwinMetricsSource(twin).observe(600, 120)
    cpu = twin.history.view("cpu")
    for worker in observation.workers:
        position = int(worker.worker_id[3:]) - 1
        for t, value in zip(worker.timestamps_s, worker.cpu, strict=True):
            assert value == pytest.approx(cpu[int(t) - 60 : int(t), position].mean())


def test_invalid_requests_are_rejected():
    twin = Twin(constant(100, 100), quiet(), parallelism=1)
    twin.advance_to(50)
    source = TwinMetricsSource(twin)
    for now_s, window_s in ((-1, 10), (10, 0), (float("nan"), 10)):
        with pytest.raises(ValueError):
            source.observe(now_s, window_s)
    with pytest.raises(ValueError):
        TwinMetricsSource(twin, meter_window_s=2.5)
