"""The comparison's figures, like the Daedalus paper's (workload, workers, latency ECDF, resource usage).

Time series come from the first seed's run of each policy; the latency ECDF pools every seed's records.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a display

import matplotlib.pyplot as plt
import numpy as np

from simulator.baselines import ORACLE

HOUR_S = 3600.0


def write_plots(runs: dict[str, list[dict]], stats: dict, out_dir: Path) -> list[Path]:
    """The four PNGs from each policy's runs; policies without kept series are left out of the time-series
    plots."""
    with_series = {
        p: policy_runs for p, policy_runs in runs.items() if policy_runs and "series" in policy_runs[0]
    }
    paths = []
    if with_series:
        paths += [
            _capacity_plot(with_series, out_dir / "workload_capacity.png"),
            _workers_plot(with_series, out_dir / "workers.png"),
            _latency_plot(with_series, out_dir / "latency_ecdf.png"),
        ]
    paths.append(_resources_plot(stats, out_dir / "resources.png"))
    return paths


def _hours(length: int) -> np.ndarray:
    return np.arange(length) / HOUR_S


def _first_seed(runs: dict[str, list[dict]]) -> object:
    """The seed of the runs the time series show (each policy's first: twin.seed, not necessarily 0)."""
    return next(iter(runs.values()))[0]["seed"]


def _capacity_plot(runs: dict[str, list[dict]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    first = next(iter(runs.values()))[0]["series"]
    arrivals = first["arrivals_rps"]
    ax.plot(_hours(len(arrivals)), arrivals, color="black", linewidth=0.8, label="workload")
    for policy, policy_runs in runs.items():
        capacity = policy_runs[0]["series"]["capacity_rps"]
        ax.step(_hours(len(capacity)), capacity, where="post", linewidth=0.9, label=f"{policy} capacity")
    title = f"Workload and each policy's true capacity (seed {_first_seed(runs)})"
    ax.set(xlabel="time (h)", ylabel="records/s", title=title)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    return _save(fig, path)


def _workers_plot(runs: dict[str, list[dict]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    for policy, policy_runs in runs.items():
        workers = policy_runs[0]["series"]["workers"]
        ax.step(_hours(len(workers)), workers, where="post", linewidth=0.9, label=policy)
    floor = next(iter(runs.values()))[0]["series"]["oracle_workers"]
    ax.step(_hours(len(floor)), floor, where="post", color="grey", linestyle=":", linewidth=0.8, label=ORACLE)
    ax.set(xlabel="time (h)", ylabel="workers", title=f"Workers over time (seed {_first_seed(runs)})")
    ax.legend(fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    return _save(fig, path)


def _latency_plot(runs: dict[str, list[dict]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy, policy_runs in runs.items():
        size = max(len(r["series"]["latency_histogram"]) for r in policy_runs)
        counts = np.zeros(size)
        for run in policy_runs:
            histogram = run["series"]["latency_histogram"]
            counts[: len(histogram)] += histogram
        latency_s = np.arange(size) + policy_runs[0]["series"]["base_latency_s"]
        seen = counts > 0
        if not seen.any():  # no record processed (a trace of less than one record per second)
            continue
        share = np.cumsum(counts)[seen] / counts.sum()
        # start from 0 at the lowest latency, so a policy whose records all share one latency shows a step
        ax.step(np.r_[latency_s[seen][0], latency_s[seen]], np.r_[0.0, share], where="post", label=policy)
    ax.set_xscale("log")
    ax.set(xlabel="latency (s, log)", ylabel="share of records ≤ latency", title="Latency ECDF (all seeds)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _resources_plot(stats: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    policies = [p for p in stats if p != ORACLE] + [ORACLE]
    means = [stats[p]["worker_seconds_vs_static"]["mean"] for p in policies]
    sds = [stats[p]["worker_seconds_vs_static"]["sd"] or 0.0 for p in policies]
    bars = ax.bar(policies, means, yerr=sds, capsize=3, color=[f"C{i}" for i in range(len(policies))])
    bars[-1].set_hatch("//")
    ax.bar_label(bars, labels=[f"{m:.2f}" for m in means], fontsize=8)
    ax.set(ylabel="worker-seconds / static", title="Resource usage normalized to static")
    ax.tick_params(axis="x", labelrotation=30)
    return _save(fig, path)


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
