"""`foresail retrain` against hostile input: what can be told before Spark starts (options, master URL,
a truncated Parquet history, an unusable registry) is one line and exit 2 without starting it; a job
whose model cannot be published fails alone, the others are still published and summarised."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from forecasting.history import write_history
from forecasting.registry import ModelRegistry
from forecasting.spark import job as spark_job
from forecasting.spark.arguments import add_retrain_arguments
from forecasting.spark.models import RegistryModel, SeasonalNaive, resampled
from forecasting.spark.train import train_job
from forecasting.synthetic import DAY_S, generate_jobs
from tests.conftest import REPO
from tests.e2e.stack import free_port

LONG_NAME = "x" * 300  # a valid job name, but no filesystem takes it as a directory name


@pytest.fixture(scope="module")
def two_days(tmp_path_factory) -> Path:
    """Jobs "a", a 300-char name, "" and "z": two days at 5 minutes, one Parquet file."""
    frame = generate_jobs(1, seed=4, duration_s=2 * DAY_S, step_s=300.0)
    frames = [frame.assign(job=name) for name in ("a", LONG_NAME, "", "z")]
    path = tmp_path_factory.mktemp("hostile") / "history.parquet"
    pd.concat(frames, ignore_index=True).to_parquet(path)
    return path


@pytest.fixture
def no_spark(monkeypatch) -> list[str]:
    """Records a start of Spark instead of starting it: the checks must answer before."""
    started: list[str] = []

    def refuse(master=None, app_name=""):
        started.append(master)
        raise AssertionError("Spark started")

    monkeypatch.setattr(spark_job, "spark_session", refuse)
    return started


def _run(history, registry, *options: str, settings, capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    add_retrain_arguments(parser)
    argv = ["--history", str(history), "--registry", str(registry), "--master", "local[1]", *options]
    code = spark_job.run(parser.parse_args(argv), settings)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    assert err.strip() and "\n" not in err.strip(), err
    return err.strip()


def test_a_job_that_cannot_be_published_fails_alone(spark, two_days, small_settings, tmp_path, capsys):
    code, out, err = _run(two_days, tmp_path / "m", settings=small_settings, capsys=capsys)
    assert code == 1, err  # a job failed
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert sorted(lines) == ['""', "a", LONG_NAME, "z"]
    assert lines[LONG_NAME] == "failed: not published: File name too long"
    assert lines['""'] == "failed: not published: a job name must not be empty"
    assert lines["a"].startswith("v000001 ") and lines["z"].startswith("v000001 ")
    assert ModelRegistry(tmp_path / "m").jobs() == ["a", "z"]


@pytest.mark.parametrize(
    "registry, problem",
    [
        ("history.csv", "not a directory"),
        ("history.csv/models", "Not a directory"),
        ("y" * 300, "File name too long"),
    ],
)
def test_an_unusable_registry_is_one_line_before_spark(
    tmp_path, small_settings, no_spark, capsys, registry, problem
):
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    code, out, err = _run(history, tmp_path / registry, settings=small_settings, capsys=capsys)
    assert code == 2 and not no_spark and out == ""
    line = _one_line(err)
    assert line.startswith("retrain: --registry ") and line.endswith(problem)


def test_a_missing_registry_is_created_before_spark(tmp_path, small_settings, no_spark, capsys):
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    code, _, err = _run(history, tmp_path / "new" / "models", settings=small_settings, capsys=capsys)
    assert code == 2 and no_spark == ["local[1]"]  # the checks passed, Spark was next
    assert "cannot start Spark" in err and sorted((tmp_path / "new").iterdir()) == [tmp_path / "new/models"]
    assert list((tmp_path / "new" / "models").iterdir()) == []  # the write test left nothing


def test_a_bogus_master_is_one_line_without_a_jvm_trace(tmp_path):
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    command = [sys.executable, "-m", "daemon.cli", "retrain", "--history", str(history)]
    command += ["--registry", str(tmp_path / "m"), "--master", "bogus"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done.stderr).startswith("retrain: cannot start Spark at --master bogus: ")


def test_spark_that_cannot_start_is_one_line_with_the_java_reason(
    tmp_path, small_settings, monkeypatch, capsys
):
    def unreachable(master=None, app_name=""):
        raise RuntimeError(  # a Py4JJavaError's text: the failed call, the Java exception, its stack
            "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
            ": org.apache.spark.SparkException: Could not connect to the master\n"
            "\tat org.apache.spark.SparkContext.<init>(SparkContext.scala:603)"
        )

    monkeypatch.setattr(spark_job, "spark_session", unreachable)
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    code, _, err = _run(history, tmp_path / "m", settings=small_settings, capsys=capsys)
    assert code == 2
    assert _one_line(err) == (
        "retrain: cannot start Spark at --master local[1]: "
        "org.apache.spark.SparkException: Could not connect to the master"
    )


@pytest.mark.parametrize("master", ["local[abc]", "local[0]", "localhost"])
def test_a_master_spark_cannot_parse_is_one_line_before_spark(
    tmp_path, small_settings, no_spark, capsys, master
):
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    parser = argparse.ArgumentParser()
    add_retrain_arguments(parser)
    args = parser.parse_args(
        ["--history", str(history), "--registry", str(tmp_path / "m"), "--master", master]
    )
    assert spark_job.run(args, small_settings) == 2 and not no_spark
    assert _one_line(capsys.readouterr().err).startswith(
        f"retrain: cannot start Spark at --master {master}: "
    )


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # PAR1 at the start, no footer


def test_a_truncated_parquet_history_is_one_line_before_spark(tmp_path, small_settings, no_spark, capsys):
    frame = generate_jobs(1, seed=2, duration_s=2 * DAY_S, step_s=300.0)
    single = tmp_path / "single.parquet"
    frame.to_parquet(single)
    _truncated(single)
    partitioned = tmp_path / "partitioned"
    write_history(frame, partitioned)
    parts = sorted(partitioned.rglob("*.parquet"))
    assert len(parts) >= 2
    _truncated(parts[-1])
    for history, broken in ((single, single), (partitioned, parts[-1])):
        code, _, err = _run(history, tmp_path / "m", settings=small_settings, capsys=capsys)
        assert code == 2 and not no_spark
        line = _one_line(err)
        assert "not a readable Parquet history" in line and broken.name in line


def test_a_file_that_is_not_parquet_is_named_and_what_spark_skips_is_not(
    tmp_path, small_settings, no_spark, capsys
):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")  # Spark skips it: so does the check
    (folder / "c.yaml").write_text("loop: {interval_s: 60}\n")
    code, _, err = _run(folder, tmp_path / "m", "--format", "parquet", settings=small_settings, capsys=capsys)
    assert code == 2 and not no_spark and "c.yaml" in _one_line(err)


def test_a_remote_history_is_left_to_spark(tmp_path, small_settings, no_spark, capsys):
    code, _, err = _run("s3a://bucket/history", tmp_path / "m", settings=small_settings, capsys=capsys)
    assert code == 2 and no_spark == ["local[1]"] and "cannot start Spark" in err


@pytest.mark.parametrize(
    "option, value",
    [
        ("--select-window-s", "inf"),
        ("--select-window-s", "0"),
        ("--backtest-s", "-5"),
        ("--backtest-s", "0"),
        ("--backtest-s", "1"),  # shorter than the 900 s horizon: no origin to score
        ("--season-resolution-s", "nan"),
        ("--season-resolution-s", "1e9"),
        ("--season-resolution-s", "-1"),
        ("--min-history-s", "nan"),
        ("--min-history-s", "inf"),
    ],
)
def test_absurd_options_are_one_line_before_spark(tmp_path, small_settings, no_spark, capsys, option, value):
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    code, _, err = _run(history, tmp_path / "m", option, value, settings=small_settings, capsys=capsys)
    assert code == 2 and not no_spark
    assert _one_line(err).startswith(f"retrain: {option} must be ")
    assert not (tmp_path / "m").exists()  # nothing touched either


def test_sensible_options_are_taken(small_settings):
    parser = argparse.ArgumentParser()
    add_retrain_arguments(parser)
    argv = ["--history", "h", "--registry", "r", "--backtest-s", "900", "--season-resolution-s", "3600"]
    settings = spark_job.settings_from_args(
        parser.parse_args([*argv, "--min-history-s", "1"]), small_settings
    )
    assert (settings.backtest_s, settings.season_resolution_s, settings.min_history_s) == (900, 3600, 1)


def test_a_failure_reason_is_one_line(monkeypatch, small_settings, capsys):
    def fails(*args):
        raise ValueError("Could not fit a viable ARIMA model.\nSee http://alkaline-ml.com/… for more.")

    monkeypatch.setattr("forecasting.spark.train._train", fails)
    result = train_job("j", np.arange(10.0), np.ones(10), small_settings)
    assert (result.status, result.reason) == ("failed", "ValueError: Could not fit a viable ARIMA model.")
    spark_job.print_summary([{"job": "j", "status": "failed", "reason": "first\nsecond"}], as_json=False)
    assert capsys.readouterr().out == "j: failed: first\n"


def test_a_resampled_model_keeps_its_season_in_its_label():
    times_s = np.arange(0.0, 2 * DAY_S, 600.0)
    naive = SeasonalNaive.from_history(times_s, np.ones(times_s.size), DAY_S)
    model = RegistryModel(
        estimator=naive, period_s=None, fourier_order=0, family="seasonal-naive", resolution_s=600.0
    )
    assert resampled(model, 300.0).label == "seasonal-naive(86400s)"


def test_a_registry_uri_is_one_line_before_spark_and_file_uris_are_paths(
    tmp_path, small_settings, no_spark, capsys, monkeypatch
):
    """The driver writes the registry with file operations: s3a://… made a directory named 's3a:'."""
    monkeypatch.chdir(tmp_path)
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    code, out, err = _run(history, "s3a://models/foresail", settings=small_settings, capsys=capsys)
    assert code == 2 and not no_spark and out == ""
    assert _one_line(err).startswith("retrain: --registry s3a://models/foresail: not a local path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.csv"]
    assert spark_job.registry_problem(f"file://{tmp_path}/models") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.csv", "models"]


def test_csv_files_with_their_columns_in_another_order_are_one_line_before_spark(
    tmp_path, small_settings, no_spark, capsys
):
    """Spark maps CSV columns by position: the second file's rates became timestamps."""
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "part1.csv").write_text("job,timestamp,rate\na,1767571200,1\n")
    (tmp_path / "history" / "part2.csv").write_text("job,rate,timestamp\na,1,1767571500\n")
    code, out, err = _run(tmp_path / "history", tmp_path / "m", settings=small_settings, capsys=capsys)
    assert code == 2 and not no_spark and out == ""
    assert "part2.csv:1: header job,rate,timestamp differs from part1.csv's" in _one_line(err)


def test_a_pandas_parquet_with_nanosecond_timestamps_is_one_line_before_spark(
    tmp_path, small_settings, no_spark, capsys
):
    """pandas writes datetime64[ns] as Parquet timestamp[ns], which Spark stops on with 83 lines of trace."""
    frame = generate_jobs(1, seed=4, duration_s=DAY_S, step_s=300.0)
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], unit="s", utc=True)
    frame.to_parquet(tmp_path / "history.parquet")
    code, out, err = _run(
        tmp_path / "history.parquet", tmp_path / "m", settings=small_settings, capsys=capsys
    )
    assert code == 2 and not no_spark and out == ""
    assert "coerce_timestamps='us'" in _one_line(err)


def test_an_unreachable_master_is_one_line_before_spark(tmp_path, small_settings, no_spark, capsys):
    """Spark retried for a minute, then blamed the application."""
    history = tmp_path / "history.csv"
    history.write_text("job,timestamp,rate\na,1767571200,1\n")
    port = free_port()  # nobody listens on it
    parser = argparse.ArgumentParser()
    add_retrain_arguments(parser)
    argv = [
        "--history",
        str(history),
        "--registry",
        str(tmp_path / "m"),
        "--master",
        f"spark://127.0.0.1:{port}",
    ]
    code = spark_job.run(parser.parse_args(argv), small_settings)
    out, err = capsys.readouterr()
    assert code == 2 and not no_spark and out == ""
    assert _one_line(err).startswith(f"retrain: cannot reach --master spark://127.0.0.1:{port}: ")


def test_an_executors_python_failure_is_its_last_traceback_line(spark):
    """Spark's message starts with the JVM's side: the cause (a module missing on a worker) ends it."""

    def fail(frames):
        raise ModuleNotFoundError("No module named 'messages'")
        yield from frames

    with pytest.raises(Exception) as caught:
        spark.range(1).mapInPandas(fail, schema="id long").collect()
    assert spark_job._executor_failure(caught.value) == "ModuleNotFoundError: No module named 'messages'"
    assert spark_job._executor_failure(ValueError("not an executor's")) is None
