"""Throughput of the Spark retraining: series and points per minute, and peak memory, on local[2].

`python benchmarks/retrain_throughput.py [--jobs 10,100,500] [--weeks 4] [--master local[2]] [--json]`
generates that many synthetic job histories (4 weeks at 1-minute resolution: 40,320 points each, with
daily and weekly seasons, trend, noise, spikes and gaps), writes them as Parquet by job and day, and
times `retrain` on each set with one SparkSession (its start-up is reported apart). Models are trained
at the 1-minute resolution of the data (forecast.resolution_s = 60).

Memory: the peak resident set of the whole process tree (this driver, the JVM, the Python workers),
sampled every 0.2 s from /proc, and the largest peak RSS a Python worker reported (exact, getrusage).
"""

from __future__ import annotations

import forecasting.blas  # noqa: F401  first: one BLAS thread for every library loaded later

# isort: split

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from forecasting.history import write_history
from forecasting.spark.job import retrain, spark_session
from forecasting.spark.train import RetrainSettings
from forecasting.synthetic import WEEK_S, generate_jobs

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree_rss_mb(root: int) -> float:
    """Resident memory of `root` and all its descendants, in MB (Linux /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text().split()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        rss[int(entry.name)] = int(statm[1]) * PAGE_KB
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(rss.get(pid, 0) for pid in tree) / 1024


class PeakMemory:
    """Samples the process tree's RSS in a thread while the block runs."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_mb = max(self.peak_mb, tree_rss_mb(os.getpid()))

    def __enter__(self) -> PeakMemory:
        self.peak_mb = tree_rss_mb(os.getpid())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def write_jobs(path: Path, jobs: int, weeks: float, seed: int) -> int:
    """Histories of `jobs` jobs into a Parquet dataset, 25 jobs at a time; returns the number of points."""
    points = 0
    for first in range(0, jobs, 25):
        frame = generate_jobs(min(25, jobs - first), seed + first, weeks * WEEK_S, step_s=60.0)
        frame["job"] = frame["job"].str.replace("job-", f"job-{first:04d}-")
        points += write_history(frame, path)
    return points


def measure(spark: object, jobs: int, weeks: float, workdir: Path, settings: RetrainSettings) -> dict:
    history = workdir / f"history-{jobs}"
    points = write_jobs(history, jobs, weeks, seed=jobs)
    registry = workdir / f"registry-{jobs}"
    with PeakMemory() as memory:
        started = time.perf_counter()
        summary = retrain(spark, str(history), str(registry), settings)
        elapsed_s = time.perf_counter() - started
    shutil.rmtree(history)
    minutes = elapsed_s / 60
    return {
        "jobs": jobs,
        "points": points,
        "seconds": round(elapsed_s, 1),
        "series_per_min": round(jobs / minutes, 2),
        "points_per_min": round(points / minutes),
        "ok": sum(row["status"] == "ok" for row in summary),
        "failed": sum(row["status"] == "failed" for row in summary),
        "mean_train_seconds_per_job": round(sum(row["train_seconds"] or 0 for row in summary) / jobs, 2),
        "peak_tree_rss_mb": round(memory.peak_mb),
        "peak_worker_rss_mb": max(row["worker_peak_rss_mb"] or 0 for row in summary),
        "mean_backtest_wape_best": _mean(
            [row["wape"][row["best"]] for row in summary if row["status"] == "ok"]
        ),
        "mean_backtest_wape": {
            name: _mean([row["wape"].get(name) for row in summary if row["status"] == "ok"])
            for name in ("arima", "holt-winters", "seasonal-naive")
        },
        "winners": {
            name: sum(row["best"] == name for row in summary)
            for name in ("arima", "holt-winters", "seasonal-naive")
        },
    }


def _mean(values: list[float | None]) -> float | None:
    numbers = [v for v in values if v is not None]
    return round(sum(numbers) / len(numbers), 5) if numbers else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="10,100,500", help="comma-separated numbers of job histories")
    parser.add_argument("--weeks", type=float, default=4.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--log", type=Path, help="append each size's result to this JSON-lines file")
    parser.add_argument(
        "--select-window-s",
        type=float,
        default=RetrainSettings.select_window_s,
        help="ARIMA order-selection window (86400: the setting before 2026-11, for a before/after figure)",
    )
    args = parser.parse_args(argv)
    settings = RetrainSettings(resolution_s=60.0, select_window_s=args.select_window_s)
    started = time.perf_counter()
    spark = spark_session(args.master, app_name="foresail-retrain-benchmark")
    spark.sparkContext.setLogLevel("ERROR")
    startup_s = time.perf_counter() - started
    results = []
    with tempfile.TemporaryDirectory(prefix="foresail-bench-") as workdir:
        for jobs in (int(n) for n in args.jobs.split(",")):
            result = measure(spark, jobs, args.weeks, Path(workdir), settings)
            results.append(result)
            if args.log:
                with args.log.open("a") as log:
                    log.write(json.dumps(result) + "\n")
            if not args.json:
                print(
                    f"{jobs:>4} jobs × {result['points'] / jobs:,.0f} points: {result['seconds']:>7.1f} s, "
                    f"{result['series_per_min']:>6.2f} series/min, {result['points_per_min']:>10,} points/min, "
                    f"peak RSS {result['peak_tree_rss_mb']} MB (tree), {result['peak_worker_rss_mb']} MB "
                    f"(worker); ok {result['ok']}, failed {result['failed']}, winners {result['winners']}; "
                    f"mean backtest WAPE of the chosen models {result['mean_backtest_wape_best']} "
                    f"(by family {result['mean_backtest_wape']})",
                    flush=True,
                )
    spark.stop()
    summary = {
        "master": args.master,
        "cpus": os.cpu_count(),
        "weeks": args.weeks,
        "session_start_s": round(startup_s, 1),
        "results": results,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"SparkSession start-up: {startup_s:.1f} s on {os.cpu_count()} CPUs ({args.master})")


if __name__ == "__main__":
    main()
