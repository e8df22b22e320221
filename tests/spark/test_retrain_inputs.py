"""`foresail retrain` cannot silently do nothing: the workers run the driver's interpreter, a 60 s history
trains (at 60 s, resampled by the daemon), nothing trained is a non-zero exit with one line per job, and
bad input is one clear line (a bad row is dropped, never the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyspark
import pytest

from daemon.cli import main
from forecasting.history import write_history
from forecasting.registry import ModelRegistry, RegistrySource
from forecasting.spark import job as spark_job
from forecasting.spark.models import Resampled, install
from forecasting.synthetic import DAY_S, generate_jobs
from tests.conftest import REPO

SPARK_HOME = Path(pyspark.__file__).parent
SMALL = ["--min-history-s", "86400", "--backtest-s", "43200", "--select-window-s", "21600"]


@pytest.fixture(scope="module")
def minute_history(tmp_path_factory) -> Path:
    """Two jobs, 3 days at a 60 s step (the usual Prometheus export), in Parquet."""
    path = tmp_path_factory.mktemp("minute") / "history"
    write_history(generate_jobs(2, seed=5, duration_s=3 * DAY_S, step_s=60.0), path)
    return path


def test_workers_run_the_drivers_interpreter_with_one_blas_thread(spark):
    assert spark.conf.get("spark.pyspark.python") == sys.executable

    def probe(frames):
        from threadpoolctl import threadpool_info

        for _ in frames:
            threads = max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
            yield pd.DataFrame({"python": [sys.executable], "blas_threads": [threads]})

    rows = spark.range(2).mapInPandas(probe, "python string, blas_threads long").collect()
    assert {row.python for row in rows} == {sys.executable}
    assert {row.blas_threads for row in rows} == {1}


def test_retrain_from_an_unactivated_venv_trains_a_60s_history(minute_history, tmp_path):
    # the PATH holds only the system's python3 (without pandas), as for a venv that is not activated
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    env.pop("PYSPARK_PYTHON", None)
    command = [
        sys.executable, "-m", "daemon.cli", "retrain", "--history", str(minute_history),
        "--registry", str(tmp_path / "models"), "--master", "local[2]", *SMALL,
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    registry = ModelRegistry(tmp_path / "models")
    assert registry.jobs() == ["job-0000", "job-0001"]
    for job in registry.jobs():
        metadata = registry.newest(job).metadata()
        assert metadata["resolution_s"] == 60.0 and metadata["daemon_resolution_s"] == 10.0
        assert metadata["training_range"]["history_step_s"] == 60.0

    # the daemon (10 s buckets) resamples: fed 10 s buckets, it forecasts at 10 s
    source = RegistrySource(tmp_path / "models", "job-0000", resolution_s=10.0)
    model = source.load(source.newest_version())
    assert isinstance(model.estimator, Resampled) and model.estimator.factor == 6
    end_s = registry.newest("job-0000").metadata()["training_range"]["end"]
    start_s = pd.Timestamp(end_s).timestamp() + 3600
    times_s = start_s + 5 + 10.0 * np.arange(360)
    level = float(np.median(pd.read_parquet(minute_history).rate))
    model = install(model, np.full(times_s.size, level), times_s, max_buckets=720)
    future_s = times_s[-1] + 10.0 * np.arange(1, 91)
    predicted = model.estimator.predict(90, X=model.exog(future_s))
    assert predicted.shape == (90,) and np.all(np.isfinite(predicted))
    assert np.all(predicted[:6] == predicted[0])  # one coarse step covers six buckets


def test_nothing_trained_is_a_failure_with_one_line_per_job(spark, tmp_path, capsys):
    frame = generate_jobs(2, seed=3, duration_s=4 * 3600.0, step_s=60.0)  # 4 hours < --min-history-s
    write_history(frame, tmp_path / "short")
    code = main(["retrain", "--history", str(tmp_path / "short"), "--registry", str(tmp_path / "m"), *SMALL])
    out, err = capsys.readouterr()
    assert code == 1
    assert [line.split(":")[0] for line in out.splitlines()] == ["job-0000", "job-0001"]
    assert all("skipped: history covers" in line for line in out.splitlines())
    assert "nothing trained" in err
    assert not (tmp_path / "m").exists() or ModelRegistry(tmp_path / "m").jobs() == []


def _retrain(history: Path, registry: Path, capsys) -> tuple[int, str, str]:
    code = main(["retrain", "--history", str(history), "--registry", str(registry), "--json", *SMALL])
    out, err = capsys.readouterr()
    return code, out, err


def test_input_errors_are_one_line_each(spark, tmp_path, capsys):
    code, _, err = _retrain(tmp_path / "absent", tmp_path / "m", capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "no such file or directory" in err
    (tmp_path / "columns.csv").write_text("job,time,rate\nx,1,2\n")
    code, _, err = _retrain(tmp_path / "columns.csv", tmp_path / "m", capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "lacks the column(s) ['timestamp']" in err


def test_bad_rows_are_dropped_and_the_run_goes_on(spark, tmp_path, capsys):
    frame = generate_jobs(1, seed=9, duration_s=3 * DAY_S, step_s=60.0)
    lines = ["job,timestamp,rate"] + [f"{j},{t:.0f},{r:.3f}" for j, t, r in frame.itertuples(index=False)]
    lines[100] = "job-0000,not-a-time,12.5"
    lines[200] = f"job-0000,{frame.timestamp.iloc[210]:.0f},lots"
    lines[300] = f"job-0000,{frame.timestamp.iloc[310]:.0f},"
    (tmp_path / "history.csv").write_text("\n".join(lines) + "\n")
    code, out, err = _retrain(tmp_path / "history.csv", tmp_path / "m", capsys)
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["status"] == "ok"
    metadata = ModelRegistry(tmp_path / "m").newest("job-0000").metadata()
    assert metadata["training_range"]["rows_dropped"] >= 3


def test_numeric_looking_job_names_are_kept_as_written(spark, tmp_path):
    """CSV schema inference and Parquet partition inference read the job 007 as the number 7."""
    frame = generate_jobs(1, seed=4, duration_s=3600.0, step_s=300.0)
    both = pd.concat([frame.assign(job=name) for name in ("007", "0042")], ignore_index=True)
    both.to_csv(tmp_path / "history.csv", index=False)
    write_history(both, tmp_path / "exported")
    for path in (tmp_path / "history.csv", tmp_path / "exported"):
        read = spark_job.read_history(spark, str(path))
        assert sorted(row.job for row in read.select("job").distinct().collect()) == ["0042", "007"]
        assert read.where("t is null or rate is null").count() == 0


def test_spark_submit_keeps_the_executors_python_it_was_given(tmp_path):
    """Under spark-submit (no --master) the session must not replace spark.pyspark.python by the driver's."""
    executor_python = tmp_path / "executor-python"
    executor_python.write_text(
        f'#!/bin/sh\nexport FORESAIL_EXECUTOR_PYTHON=given\nexec {sys.executable} "$@"\n'
    )
    executor_python.chmod(0o755)
    app = tmp_path / "app.py"
    app.write_text(
        "import os\n"
        "from forecasting.spark.job import spark_session\n"
        "spark = spark_session(None)\n"
        "probe = spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get('FORESAIL_EXECUTOR_PYTHON'))\n"
        "print('executor python:', probe.collect()[0])\n"
        "spark.stop()\n"
    )
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(REPO),
    }
    env.pop("PYSPARK_PYTHON", None)
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[1]",
        "--conf", f"spark.pyspark.python={executor_python}",
        "--conf", f"spark.pyspark.driver.python={sys.executable}", str(app),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "executor python: given" in done.stdout.splitlines()


def test_retrain_run_directly_without_a_master_runs_its_workers_on_this_python(monkeypatch):
    """Outside spark-submit no --master means Spark's local default: the workers must run this interpreter
    (the one with pandas), as for local[...]; a first fix for spark-submit had left them PATH's python3.
    Only the settings the session is built with are checked: a stand-in builder records them."""

    class Builder:
        def __init__(self) -> None:
            self.settings: dict[str, str] = {}

        def appName(self, name: str) -> Builder:
            return self

        def master(self, master: str) -> Builder:
            self.settings["spark.master"] = master
            return self

        def config(self, key: str, value: str) -> Builder:
            self.settings[key] = value
            return self

        def getOrCreate(self) -> dict[str, str]:
            return self.settings

    import pyspark.sql

    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", Builder())
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    settings = spark_job.spark_session(None)
    assert settings["spark.pyspark.python"] == sys.executable == os.environ["PYSPARK_PYTHON"]
    assert "spark.master" not in settings  # Spark's default master
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")  # under spark-submit: its settings stand
    monkeypatch.delenv("PYSPARK_PYTHON")
    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", Builder())
    assert "spark.pyspark.python" not in spark_job.spark_session(None)
