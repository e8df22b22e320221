"""A registry version whose metadata names another job or version (a directory copied or synced into the
wrong place) is refused like a version of another format: one log line, the running model kept."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from structlog.testing import capture_logs

from forecasting.executor import InlineExecutor
from forecasting.online import WorkloadForecaster
from forecasting.registry import ModelRegistry, RegistrySource, serialize
from forecasting.spark.models import RegistryModel, SeasonalNaive
from forecasting.types import ForecastSettings
from tests.forecasting.fakes import ConstantModel

RESOLUTION_S = 10.0
DAY_S = 86_400.0
START_S = 1.7e9


def _flat_model(level_rps: float) -> bytes:
    """A seasonal-naive table of a load that ran at `level_rps` all of the last day."""
    times_s = START_S + RESOLUTION_S * np.arange(int(DAY_S / RESOLUTION_S)) + RESOLUTION_S / 2
    table = SeasonalNaive.from_history(times_s, np.full(len(times_s), level_rps), DAY_S)
    model = RegistryModel(
        estimator=table, period_s=None, fourier_order=0, family="seasonal-naive", resolution_s=RESOLUTION_S
    )
    return serialize(model)


@pytest.fixture(scope="module")
def orders_model() -> bytes:
    return _flat_model(50_000.0)


def _copied(registry: ModelRegistry, orders_model: bytes, job: str, version: str) -> None:
    entry = registry.publish("orders", orders_model, {"resolution_s": RESOLUTION_S})
    shutil.copytree(entry.path, registry.job_dir(job) / version)


def test_a_version_copied_from_another_job_is_refused(tmp_path, orders_model):
    registry = ModelRegistry(tmp_path)
    _copied(registry, orders_model, "payments", "v000007")
    assert RegistrySource(tmp_path, "orders", RESOLUTION_S).load("v000001") is not None  # at home it loads
    with pytest.raises(ValueError, match="metadata says job 'orders' version 1, not 'payments' v000007"):
        RegistrySource(tmp_path, "payments", RESOLUTION_S).load("v000007")


def test_a_version_copied_under_another_number_of_its_job_is_refused(tmp_path, orders_model):
    registry = ModelRegistry(tmp_path)
    _copied(registry, orders_model, "orders", "v000005")
    with pytest.raises(ValueError, match="version 1, not 'orders' v000005"):
        RegistrySource(tmp_path, "orders", RESOLUTION_S).load("v000005")


@pytest.mark.parametrize("dropped", ["job", "version"])
def test_a_version_whose_metadata_names_no_job_or_number_is_refused(tmp_path, orders_model, dropped):
    """Every version publish writes names both: one that does not was not written by it."""
    entry = ModelRegistry(tmp_path).publish("orders", orders_model, {"resolution_s": RESOLUTION_S})
    metadata = json.loads((entry.path / "metadata.json").read_text())
    del metadata[dropped]
    (entry.path / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match="a version copied from elsewhere"):
        RegistrySource(tmp_path, "orders", RESOLUTION_S).load("v000001")


def test_the_forecaster_keeps_its_model_and_logs_one_line_for_another_jobs_version(tmp_path, orders_model):
    """The payments job (300 rps) finds a copy of the orders job's 50,000 rps model as its newest version:
    it is refused once, the forecast stays at the payments load, and a genuine version is taken later."""
    registry = ModelRegistry(tmp_path)
    _copied(registry, orders_model, "payments", "v000007")
    settings = ForecastSettings(resolution_s=RESOLUTION_S, horizon_s=300.0, min_history_s=300.0)
    source = RegistrySource(tmp_path, "payments", RESOLUTION_S, poll_interval_s=60.0)
    forecaster = WorkloadForecaster(
        settings, InlineExecutor(), fit=lambda y, X=None: ConstantModel(y, 300.0), model_source=source
    )
    now_s = START_S + DAY_S

    def step() -> np.ndarray:
        nonlocal now_s
        seconds = np.arange(now_s + 1, now_s + 61)
        now_s += 60.0
        forecaster.observe(seconds, np.full(len(seconds), 300.0))
        return forecaster.forecast(now_s).rates_rps

    with capture_logs() as logs:
        forecasts = [step() for _ in range(10)]
    rejected = [e for e in logs if e["event"] == "forecast_registry_model_rejected"]
    assert len(rejected) == 1 and "job 'orders'" in rejected[0]["error"]
    assert forecaster.model_version is None
    assert max(f.max() for f in forecasts) < 1_000.0
    registry.publish("payments", _flat_model(300.0), {"resolution_s": RESOLUTION_S})
    step()
    assert forecaster.model_version == "v000008"
