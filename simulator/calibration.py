"""Derive the twin's defaults from the recorded Daedalus runs, so each constant in TwinParams has a source.

Files are the Grafana exports in `data/daedalus/metrics`: a `Time` column and one column per pod.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.skew import operator_index_for_key_group

SINGLE_CPU = "assumptions_cpu_1.csv"
SINGLE_THROUGHPUT = "assumptions_throughput_1.csv"
SKEW_CPU = "data_skew_cpu_12.csv"
SKEW_THROUGHPUT = "data_skew_throughput_12.csv"


def read_metric_csv(path: str | Path) -> pd.DataFrame:
    """One column per pod, indexed by the Time column (the exports start with a byte-order mark)."""
    frame = pd.read_csv(path, encoding="utf-8-sig")
    if "Time" not in frame.columns:
        raise ValueError(f"{path}: no 'Time' column")
    return frame.set_index("Time").astype(float)


def _single_worker(cpu_csv: str | Path, throughput_csv: str | Path) -> tuple[np.ndarray, np.ndarray]:
    cpu, throughput = read_metric_csv(cpu_csv), read_metric_csv(throughput_csv)
    if not cpu.index.equals(throughput.index) or cpu.shape[1] != 1 or throughput.shape[1] != 1:
        raise ValueError("expected one worker with the same timestamps in both files")
    return cpu.iloc[:, 0].to_numpy(), throughput.iloc[:, 0].to_numpy()


def cpu_throughput_line(
    cpu_csv: str | Path, throughput_csv: str | Path, max_cpu: float = 0.8
) -> tuple[float, float]:
    """(slope, intercept) of throughput = slope * cpu + intercept on the unsaturated points (Daedalus §3.1)."""
    cpu, throughput = _single_worker(cpu_csv, throughput_csv)
    linear = cpu < max_cpu
    slope, intercept = np.polyfit(cpu[linear], throughput[linear], 1)
    return float(slope), float(intercept)


def idle_cpu(cpu_csv: str | Path, throughput_csv: str | Path, max_cpu: float = 0.8) -> float:
    """CPU load at zero throughput: where the CPU-throughput line crosses zero."""
    slope, intercept = cpu_throughput_line(cpu_csv, throughput_csv, max_cpu)
    return -intercept / slope


def cpu_residual_sd(cpu_csv: str | Path, throughput_csv: str | Path, max_cpu: float = 0.8) -> float:
    """Scatter of the recorded (already smoothed) CPU around the line, in CPU units."""
    cpu, throughput = _single_worker(cpu_csv, throughput_csv)
    slope, intercept = cpu_throughput_line(cpu_csv, throughput_csv, max_cpu)
    linear = cpu < max_cpu
    residual = cpu[linear] - (throughput[linear] - intercept) / slope
    return float(np.std(residual, ddof=2))


def averaging_factor(tau_s: float, window_s: int) -> float:
    """sd of the window mean of a unit-variance AR(1) per-second process with correlation time tau_s."""
    phi = math.exp(-1.0 / tau_s) if tau_s > 0 else 0.0
    lags = np.arange(1, window_s)
    variance = window_s + 2.0 * np.sum((window_s - lags) * phi**lags)
    return math.sqrt(variance) / window_s


def per_second_noise_sd(observed_sd: float, tau_s: float, window_s: int = 60) -> float:
    """Per-second noise sd whose window mean scatters by observed_sd (metrics average CPU over 60 s)."""
    return observed_sd / averaging_factor(tau_s, window_s)


def single_worker_saturation_cpu(cpu_csv: str | Path, throughput_csv: str | Path) -> float:
    """Highest CPU load the lone worker reached while its throughput was capped."""
    cpu, _ = _single_worker(cpu_csv, throughput_csv)
    return float(cpu.max())


def worker_mean_cpu(cpu_csv: str | Path) -> pd.Series:
    """Mean CPU per worker over a run (the spread is the skew's footprint)."""
    return read_metric_csv(cpu_csv).mean()


def throughput_share_cov(throughput_csv: str | Path) -> float:
    """Coefficient of variation of the workers' mean throughputs: how unevenly the keys spread."""
    means = read_metric_csv(throughput_csv).mean().to_numpy()
    return float(means.std() / means.mean())


def expected_share_cov(num_keys: float, parallelism: int = 12, max_parallelism: int = 128) -> float:
    """Root-mean-square CoV of subtask shares for num_keys equal keys hashed uniformly into key groups.

    Subtask i owns a fraction p_i of the key groups; its key count is Binomial(K, p_i), so
    E[CoV^2] = n * sum_i [p_i (1 - p_i) / K + (p_i - 1/n)^2].
    """
    p = _key_group_fractions(parallelism, max_parallelism)
    n = parallelism
    return math.sqrt(n * float(np.sum(p * (1 - p) / num_keys + (p - 1 / n) ** 2)))


def num_keys_for_share_cov(target_cov: float, parallelism: int = 12, max_parallelism: int = 128) -> float:
    """Number of keys whose expected share CoV at `parallelism` equals target_cov (inverse of the above)."""
    p = _key_group_fractions(parallelism, max_parallelism)
    n = parallelism
    structural = n * float(np.sum((p - 1 / n) ** 2))  # from max_parallelism not divisible by n
    if target_cov**2 <= structural:
        raise ValueError(f"a CoV of {target_cov} is below the structural skew {math.sqrt(structural):.3f}")
    return n * float(np.sum(p * (1 - p))) / (target_cov**2 - structural)


def _key_group_fractions(parallelism: int, max_parallelism: int) -> np.ndarray:
    owners = operator_index_for_key_group(np.arange(max_parallelism), parallelism, max_parallelism)
    return np.bincount(owners, minlength=parallelism) / max_parallelism


def calibrate(metrics_dir: str | Path, cpu_noise_tau_s: float = 60.0, window_s: int = 60) -> dict[str, float]:
    """Every data-derived default of TwinParams, computed from the recorded runs in metrics_dir."""
    d = Path(metrics_dir)
    single = (d / SINGLE_CPU, d / SINGLE_THROUGHPUT)
    slope, intercept = cpu_throughput_line(*single)
    residual = cpu_residual_sd(*single)
    single_sat = single_worker_saturation_cpu(*single)
    cpu_means = worker_mean_cpu(d / SKEW_CPU)
    share_cov = throughput_share_cov(d / SKEW_THROUGHPUT)
    return {
        "line_slope_rps_per_cpu": slope,
        "line_intercept_rps": intercept,
        "idle_cpu": -intercept / slope,
        "observed_cpu_residual_sd": residual,
        "cpu_noise_sd": per_second_noise_sd(residual, cpu_noise_tau_s, window_s),
        "single_worker_saturation_cpu": single_sat,
        "hottest_worker_cpu": float(cpu_means.max()),
        "coolest_worker_cpu": float(cpu_means.min()),
        "saturation_cpu": (single_sat + float(cpu_means.max())) / 2,
        "throughput_share_cov": share_cov,
        "num_keys": num_keys_for_share_cov(share_cov, parallelism=len(cpu_means)),
    }
