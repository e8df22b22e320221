"""Session fixtures: one real local[2] SparkSession for the folder, a real Prometheus for the export."""

from __future__ import annotations

import os

import pytest

from forecasting.spark.train import RetrainSettings
from tests.conftest import require_tool


@pytest.fixture(scope="session")
def spark():
    """Real PySpark in local mode (2 cores, as on the CI machines); started once, ~5-20 s."""
    require_tool("java")  # Spark's driver is a JVM
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from forecasting.spark.job import spark_session

    session = spark_session("local[2]", app_name="foresail-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def small_settings() -> RetrainSettings:
    """Retraining at 5-minute buckets on days of history: the whole pipeline in a few seconds per job."""
    return RetrainSettings(
        resolution_s=300.0,
        max_history_s=6 * 3600.0,
        max_interpolated_gap_s=600.0,
        season_resolution_s=300.0,
        select_window_s=12 * 3600.0,
        backtest_s=86_400.0,
        backtest_origins=24,
        min_history_s=86_400.0,
    )


@pytest.fixture(scope="session")
def trained(small_settings):
    """One job retrained on 4 days of 5-minute synthetic history (in-process), and that history."""
    from forecasting.spark.train import train_job
    from forecasting.synthetic import DAY_S, WorkloadShape, generate

    frame = generate(
        WorkloadShape(missing_per_week=0, spikes_per_week=0), seed=21, duration_s=5 * DAY_S, step_s=300.0
    )
    history = frame[frame.timestamp < frame.timestamp.iloc[0] + 4 * DAY_S]
    result = train_job("shop", history.timestamp.to_numpy(), history.rate.to_numpy(), small_settings)
    assert result.status == "ok", result.reason
    return result, frame
