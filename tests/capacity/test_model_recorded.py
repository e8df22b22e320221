"""Capacity estimates against metrics recorded on a real Flink cluster (Daedalus data)."""

from __future__ import annotations

import numpy as np
import pytest

from capacity.model import CapacityModel, CapacitySettings, line_key, valid_windows
from messages.types import WorkerSeries
from tests.conftest import read_columns

STEP_S = 15.0  # the recorded series have a 15 s step


def _workers(
    cpu: dict[str, np.ndarray], tput: dict[str, np.ndarray], rows: slice
) -> tuple[WorkerSeries, ...]:
    assert set(cpu) == set(tput), "CPU and throughput files must name the same pods"
    series = []
    for pod in sorted(cpu):
        values = cpu[pod][rows]
        stamps = np.arange(len(cpu[pod]))[rows] * STEP_S
        series.append(WorkerSeries(pod, stamps, values, tput[pod][rows]))
    return tuple(series)


@pytest.mark.parametrize("run", ["data_skew", "max"])
def test_saturated_parallelism_12_run_is_estimated_within_5_percent(recorded_metrics, run):
    cpu = read_columns(recorded_metrics / f"{run}_cpu_12.csv")
    tput = read_columns(recorded_metrics / f"{run}_throughput_12.csv")
    samples = len(next(iter(cpu.values())))
    model = CapacityModel(CapacitySettings(warmup_s=0))
    errors = []
    for start in range(0, samples - 3, 4):  # one 60 s loop window = 4 samples
        rows = slice(start, start + 4)
        workers = _workers(cpu, tput, rows)
        windows = valid_windows(workers, uptime_s=None, now_s=start * STEP_S, warmup_s=0)
        model.learn(windows, now_s=start * STEP_S, scaleout=12)
        estimate = model.estimate(windows, current_scaleout=12, max_scaleout=18, now_s=start * STEP_S)
        observed = sum(float(np.nanmean(tput[pod][rows])) for pod in tput)
        errors.append(abs(estimate.current_rps - observed) / observed)
    # the first windows have few points for a line; nine in ten windows must be close all the same
    assert np.median(errors) < 0.05
    assert np.percentile(errors, 90) < 0.05


def test_skew_is_visible_in_per_worker_capacities(recorded_metrics):
    cpu = read_columns(recorded_metrics / "data_skew_cpu_12.csv")
    tput = read_columns(recorded_metrics / "data_skew_throughput_12.csv")
    workers = _workers(cpu, tput, slice(None))
    windows = valid_windows(workers, None, 0.0, 0.0)
    model = CapacityModel()
    model.learn(windows, 0.0, 12)
    estimate = model.estimate(windows, 12, 18, 0.0)
    coldest = min(cpu, key=lambda pod: np.nanmean(cpu[pod]))
    # a cold worker is capped by the hottest one: far below what its own line gives at full CPU
    own_line_at_saturation = model.worker_line_at(line_key(coldest, 12), 0.95, model.pooled_slope(12))
    assert estimate.per_worker_rps[coldest] < 0.85 * own_line_at_saturation
    total = float(np.nanmean(read_columns(recorded_metrics / "data_skew_total_throughput.csv")["Value"]))
    assert abs(estimate.current_rps - total) / total < 0.05
    # the naive 'every worker at saturation CPU' sum overestimates the skewed job by far
    naive = sum(model.worker_line_at(line_key(pod, 12), 0.95, model.pooled_slope(12)) for pod in cpu)
    assert naive > 1.15 * total


def test_single_worker_line_below_80_percent_cpu_predicts_saturation(recorded_metrics):
    cpu = read_columns(recorded_metrics / "assumptions_cpu_1.csv")
    tput = read_columns(recorded_metrics / "assumptions_throughput_1.csv")
    pod = next(iter(cpu))
    x, y = cpu[pod], tput[pod]
    below = x < 0.80
    saturated = x >= 0.90
    assert below.sum() > 30 and saturated.sum() > 10
    stamps = np.arange(len(x)) * STEP_S
    worker = WorkerSeries(pod, stamps[below], x[below], y[below])
    model = CapacityModel()
    windows = valid_windows((worker,), None, 0.0, 0.0)
    model.learn(windows, 0.0, 1)
    estimate = model.estimate(windows, current_scaleout=1, max_scaleout=4, now_s=0.0)
    saturation_throughput = float(y[saturated].mean())
    # 5.2% high: the real worker's CPU rises a little faster than linearly near saturation
    assert abs(estimate.current_rps - saturation_throughput) / saturation_throughput < 0.06
    # unseen scale-outs are extrapolated from the average worker
    assert estimate.sources[3] == "extrapolated"
    assert estimate.per_scaleout_rps[3] == pytest.approx(3 * estimate.current_rps)


def test_capacity_is_stable_across_a_sine_load_at_parallelism_2(recorded_metrics):
    """The same job at low and high load has one capacity; low-load windows must not corrupt it."""
    cpu = read_columns(recorded_metrics / "sine_cpu_p2.csv")
    tput = read_columns(recorded_metrics / "sine_throughput_p2.csv")
    pods = sorted(cpu)
    total = tput[pods[0]] + tput[pods[1]]
    saturated_rps = float(np.nanmax(total))  # the run reaches the job's limit at its peak
    model = CapacityModel()
    step_s, per_window = 20.0, 3
    loaded_errors = []
    for start in range(0, len(total) - per_window, per_window):
        rows = slice(start, start + per_window)
        stamps = np.arange(start, start + per_window) * step_s
        workers = tuple(WorkerSeries(p, stamps, cpu[p][rows], tput[p][rows]) for p in pods)
        windows = valid_windows(workers, None, stamps[-1], 0.0)
        model.learn(windows, stamps[-1], 2)
        estimate = model.estimate(windows, 2, 4, stamps[-1])
        if start > 60 and estimate.current_rps is not None:
            loaded_errors.append(abs(estimate.current_rps - saturated_rps) / saturated_rps)
    assert np.median(loaded_errors) < 0.05
    assert np.percentile(loaded_errors, 90) < 0.10
    assert abs(model.observed[2].capacity_rps - saturated_rps) / saturated_rps < 0.05


def test_low_load_estimates_do_not_poison_extrapolation():
    """A capacity seen only at low load is extrapolation noise: reliable knowledge elsewhere wins."""
    model = CapacityModel()
    model._remember(12, 3_500.0, 0.0, hottest_cpu=0.12, method="regression")  # idle job: unreliable
    model._remember(2, 22_000.0, 60.0, hottest_cpu=0.8, method="regression")
    estimate = model.estimate([], current_scaleout=2, max_scaleout=12, now_s=120.0)
    assert estimate.per_scaleout_rps[12] == pytest.approx(12 * 11_000.0)
    assert estimate.sources[12] == "extrapolated"
    alone = CapacityModel()
    alone._remember(12, 3_500.0, 0.0, hottest_cpu=0.12, method="regression")
    assert alone.estimate([], 12, 12, 60.0).per_scaleout_rps[12] == 3_500.0  # better than nothing


def test_unseen_scaleouts_between_two_seen_ones_are_interpolated():
    model = CapacityModel()
    model._remember(10, 58_000.0, 0.0, hottest_cpu=0.8, method="regression")
    model._remember(13, 70_000.0, 60.0, hottest_cpu=0.8, method="regression")
    estimate = model.estimate([], current_scaleout=13, max_scaleout=14, now_s=120.0)
    assert estimate.per_scaleout_rps[12] == pytest.approx(66_000.0)
    assert estimate.sources[12] == "interpolated"
    assert estimate.per_scaleout_rps[14] == pytest.approx(14 * 70_000.0 / 13)
    assert estimate.per_scaleout_rps[5] == pytest.approx(5 * 5_800.0)


def test_low_load_lines_are_not_flattened_by_cpu_gauge_noise():
    """An hour of light load: CPU barely above the idle floor, gauge noise as recorded (sd 0.027, 15 s step).
    Regressing throughput on such CPU flattens the line and the capacity with it; the model must not."""
    rng = np.random.default_rng(3)
    idle, per_worker_at_saturation, saturation = 0.112, 50_000.0, 0.95
    workers, step_s, windows_per_hour = 12, 15.0, 60
    model = CapacityModel(CapacitySettings(warmup_s=0))
    for window in range(windows_per_hour):
        stamps = (window * 4 + np.arange(4)) * step_s
        load = 0.02 + 0.10 * window / windows_per_hour  # 2% → 12% of capacity, a slow morning ramp
        series = []
        for w in range(workers):
            tput = np.full(4, load * per_worker_at_saturation) * (1 + 0.01 * rng.standard_normal(4))
            cpu = (
                idle + (saturation - idle) * tput / per_worker_at_saturation + 0.027 * rng.standard_normal(4)
            )
            series.append(WorkerSeries(f"w{w}", stamps, cpu, tput))
        windows = valid_windows(tuple(series), None, stamps[-1], 0.0)
        model.learn(windows, stamps[-1], workers)
        estimate = model.estimate(windows, workers, 18, stamps[-1])
    true_rps = workers * per_worker_at_saturation
    assert abs(estimate.current_rps - true_rps) / true_rps < 0.15
    assert abs(estimate.per_scaleout_rps[6] - true_rps / 2) / (true_rps / 2) < 0.15
