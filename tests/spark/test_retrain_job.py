"""The retraining job on real PySpark (local[2]): jobs trained in parallel by groupBy(job).applyInPandas,
results published in the registry; the same job through `foresail retrain` and through spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyspark
import pytest
import yaml

from daemon.cli import main
from forecasting.history import write_history
from forecasting.registry import ModelRegistry
from forecasting.replay import read_trace
from forecasting.spark.job import read_history, retrain
from forecasting.spark.train import RetrainSettings
from forecasting.synthetic import DAY_S, MONDAY_2026_01_05_S, generate_jobs

REPO = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
"""pyspark ships spark-submit; from a venv that is not activated it is not on PATH, so take it from there."""


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """Three 4-day jobs at 5 minutes, one with 3 hours only, one exported at a 1-hour step: Parquet."""
    frame = generate_jobs(3, seed=8, duration_s=4 * DAY_S, step_s=300.0)
    short = frame[(frame.job == "job-0000") & (frame.timestamp < MONDAY_2026_01_05_S + 3 * 3600)]
    coarse = frame[(frame.job == "job-0001") & (frame.timestamp % 3600 == 0)]
    everything = pd.concat([frame, short.assign(job="short"), coarse.assign(job="hourly")])
    path = tmp_path_factory.mktemp("history") / "parquet"
    write_history(everything, path)
    return path


def test_every_job_is_trained_in_parallel_and_the_good_ones_published(
    spark, history, small_settings, tmp_path
):
    summary = retrain(spark, str(history), str(tmp_path), small_settings)
    by_job = {row["job"]: row for row in summary}
    assert sorted(by_job) == ["hourly", "job-0000", "job-0001", "job-0002", "short"]
    assert by_job["short"]["status"] == "skipped" and "history covers" in by_job["short"]["reason"]
    assert by_job["hourly"]["status"] == "skipped" and "coarser" in by_job["hourly"]["reason"]
    registry = ModelRegistry(tmp_path)
    assert registry.jobs() == ["job-0000", "job-0001", "job-0002"]
    for job in registry.jobs():
        assert by_job[job]["version"] == "v000001"
        metadata = registry.newest(job).metadata()
        assert metadata["backtest"]["best"] == min(
            metadata["backtest"]["wape"], key=metadata["backtest"]["wape"].get
        )
        assert metadata["libraries"]["pyspark"] == "4.3.0" and metadata["libraries"]["pmdarima"]
        assert metadata["training_range"]["samples"] == 4 * 288
    assert len({row["partition"] for row in summary}) >= 2  # not coalesced into one task
    assert len({registry.newest(j).metadata()["trained_by"]["pid"] for j in registry.jobs()}) >= 2
    again = retrain(spark, str(history), str(tmp_path), small_settings, jobs=["job-0002"])
    assert [row["version"] for row in again] == ["v000002"]


def test_the_shared_six_hour_traces_train_at_the_daemons_resolution(spark, recorded_workloads, tmp_path):
    rows = []
    for trace in sorted(recorded_workloads.glob("*.csv")):
        rates = read_trace(str(trace))
        seconds = pd.Series(rates).dropna()
        rows.append(
            pd.DataFrame(
                {"job": trace.stem, "timestamp": MONDAY_2026_01_05_S + seconds.index, "rate": seconds}
            )
        )
    write_history(pd.concat(rows), tmp_path / "traces")
    settings = RetrainSettings(
        resolution_s=10.0, max_history_s=1800.0, season_resolution_s=60.0, select_window_s=3600.0,
        backtest_s=5400.0, backtest_origins=12, min_history_s=4 * 3600.0,
    )  # fmt: skip
    summary = retrain(spark, str(tmp_path / "traces"), str(tmp_path / "registry"), settings)
    assert [row["status"] for row in summary] == ["ok", "ok", "ok"], summary
    sine = ModelRegistry(tmp_path / "registry").newest("sine_60000_6h").metadata()
    assert sine["resolution_s"] == 10.0 and sine["backtest"]["origins"] == 12
    # its 3-hour period shows only 1.5 times before the backtest: no season is invented from that
    assert sine["seasonality"]["profile"] is None and sine["model"]["label"].startswith(("arima(", "holt"))
    assert all(
        row["wape"][row["best"]] <= min(v for v in row["wape"].values() if v is not None) for row in summary
    )


def test_csv_histories_read_the_same_as_parquet(spark, history, tmp_path):
    parquet = read_history(spark, str(history)).toPandas().sort_values(["job", "t"], ignore_index=True)
    csv = tmp_path / "history.csv"
    iso = pd.to_datetime(parquet.t, unit="s", utc=True).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    parquet.assign(timestamp=iso)[["job", "timestamp", "rate"]].to_csv(csv, index=False)
    from_csv = read_history(spark, str(csv)).toPandas().sort_values(["job", "t"], ignore_index=True)
    pd.testing.assert_frame_equal(parquet, from_csv)
    (tmp_path / "bad.csv").write_text("job,time,rate\nx,1,2\n")
    with pytest.raises(ValueError, match="timestamp"):
        read_history(spark, str(tmp_path / "bad.csv"))


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "foresail.yaml"
    forecast = {"resolution_s": 300.0, "max_history_s": 21600.0, "max_interpolated_gap_s": 600.0}
    config.write_text(yaml.safe_dump({"forecast": forecast}))
    return config


SMALL = ["--min-history-s", "86400", "--backtest-s", "86400", "--select-window-s", "43200"]


def test_foresail_retrain_runs_the_job_and_prints_the_summary(spark, history, tmp_path, capsys):
    argv = ["retrain", "--history", str(history), "--registry", str(tmp_path / "r"), "--master", "local[2]"]
    code = main([*argv, "--config", str(_config(tmp_path)), "--jobs", "job-0001,short", "--json", *SMALL])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and [row["status"] for row in summary] == ["ok", "skipped"]
    metadata = ModelRegistry(tmp_path / "r").newest("job-0001").metadata()
    assert metadata["resolution_s"] == 300.0  # from the config's forecast section


def test_the_same_job_runs_under_spark_submit(history, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [
        str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        str(REPO / "forecasting" / "spark" / "job.py"), "--history", str(history), "--registry", str(tmp_path / "r"),
        "--config", str(_config(tmp_path)), "--jobs", "job-0002", *SMALL,
    ]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "job-0002: v000001 arima(" in result.stdout or "job-0002: v000001" in result.stdout
    assert ModelRegistry(tmp_path / "r").newest("job-0002").name == "v000001"
