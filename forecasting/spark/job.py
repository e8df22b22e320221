"""The retraining job on Spark: every job's history in one group, trained in parallel across the cluster.

`groupBy(job).applyInPandas(train)` hands each executor task whole job histories as pandas frames and
runs forecasting/spark/train.py on them; the driver publishes the results in the registry. The same
code runs three ways:
- `foresail retrain --history PATH --registry PATH [--master local[*]|spark://HOST:7077|yarn]`;
- `spark-submit forecasting/spark/job.py --history PATH --registry PATH` (master and resources from
  spark-submit; see README "Retraining on Spark");
- `retrain(spark_session(...), history, registry, settings)` from Python.

Only the driver writes the registry, so it needs a filesystem the driver (and later the daemon) can
reach; the executors need the history path (any Spark-readable URI) and the Python packages.
"""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split
import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import re
import resource
import socket
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

from forecasting.history import csv_header_problem, history_input_problem
from forecasting.registry import ModelRegistry, serialize
from forecasting.spark.seasonal_profile import DAY_S
from forecasting.spark.train import RetrainSettings, train_job

RESULT_SCHEMA = "job string, status string, reason string, metadata string, artifact binary"
LIBRARIES = ("numpy", "pandas", "scipy", "sklearn", "statsmodels", "pmdarima", "pyarrow", "pyspark")
LOCAL_MASTER = re.compile(r"local(\[(\*|[1-9]\d*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]")
"""The local masters Spark parses (local, local[4], local[*,2], local-cluster[2,1,1024])."""
EXECUTOR_WAIT_S = 300.0
"""How long a cluster may take to give the job its first executor: a master without free workers (or
with none that has the cores and memory asked for) would otherwise leave the job waiting for ever."""


def spark_session(master: str | None = None, app_name: str = "foresail-retrain") -> Any:
    """A session for the job (None: the master spark-submit set, else Spark's default, local). Local masters
    bind to 127.0.0.1."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    # no master: spark-submit's (it started this driver: its settings stand), else Spark's local default
    local = "PYSPARK_GATEWAY_PORT" not in os.environ if master is None else master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # the Python workers run this interpreter: the one with pandas and pmdarima, activated or not
        # (PySpark would start `python3` from the PATH otherwise; it reads the variable, not the conf)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = builder.config("spark.pyspark.python", sys.executable)
    if master:
        builder = builder.master(master)
    for key, value in {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # one BLAS thread per fit: tasks are the parallelism (fits run 20-35 % faster this way)
        "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
        "spark.executorEnv.OMP_NUM_THREADS": "1",
        "spark.executorEnv.MKL_NUM_THREADS": "1",
        "spark.ui.showConsoleProgress": "false",
    }.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def read_history(spark: Any, path: str, fmt: str = "auto") -> Any:
    """The history as a DataFrame (job string, t double epoch seconds, rate double).

    Parquet (a file or a directory, e.g. `export-history`'s job=…/day=… partitions) or CSV with a header;
    columns `job`, `timestamp` (a timestamp, an ISO-8601 string, or epoch seconds) and `rate` (records/s).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    # every column a string (a job named 007 stays 007; timestamp and rate are cast below), and every
    # file's header must name the columns of the first one: Spark would otherwise map them by position
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    if _resolved_format(path, fmt) == "csv":
        frame = spark.read.option("header", "true").option("enforceSchema", "false").csv(path)
    else:
        frame = spark.read.parquet(path)
    missing = {"job", "timestamp", "rate"} - set(frame.columns)
    if missing:
        raise ValueError(
            f"{path}: history lacks the column(s) {sorted(missing)} (schema: job, timestamp, rate)"
        )
    # try_ forms: a row with a bad timestamp or a non-numeric rate becomes null (and is dropped by the
    # training's cleaning), it never aborts the run as Spark's ANSI casts would
    stamp = frame.schema["timestamp"].dataType
    if isinstance(stamp, T.StringType):
        as_number = F.col("timestamp").try_cast("double")
        as_time = F.unix_micros(F.try_to_timestamp(F.col("timestamp"))) / 1e6
        seconds = F.coalesce(as_number, as_time)
    elif isinstance(stamp, T.TimestampType | T.TimestampNTZType):
        seconds = F.unix_micros(F.col("timestamp").cast("timestamp")) / 1e6
    else:
        seconds = F.col("timestamp").try_cast("double")
    return frame.filter(F.col("job").isNotNull()).select(
        F.col("job").cast("string").alias("job"),
        seconds.alias("t"),
        F.col("rate").try_cast("double").alias("rate"),
    )


def _resolved_format(path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    return "csv" if _looks_like_csv(path) else "parquet"


def _looks_like_csv(path: str) -> bool:
    local = Path(path)
    if local.is_dir():
        return any(local.rglob("*.csv")) and not any(local.rglob("*.parquet"))
    return path.lower().endswith((".csv", ".csv.gz"))


def retrain(
    spark: Any,
    history: str,
    registry: str,
    settings: RetrainSettings,
    jobs: list[str] | None = None,
    fmt: str = "auto",
    executor_wait_s: float = EXECUTOR_WAIT_S,
) -> list[dict[str, Any]]:
    """Train every job of `history` (or only `jobs`), publish the good models; one summary row per job.
    A model that cannot be published fails its job only: the others are still published. NoExecutors
    when a cluster gave the job no executor within `executor_wait_s`."""
    problem = registry_problem(registry)
    if problem:  # before the training, not after it
        raise ValueError(problem)
    registry = registry.removeprefix("file://")
    local = spark.sparkContext.master.startswith("local")
    with tempfile.TemporaryDirectory(prefix="foresail-") as shipped, _executor_watch(spark, executor_wait_s):
        if not local:
            _ship_packages(spark, Path(shipped))
        return _train_and_publish(spark, history, registry, settings, jobs, fmt)


def _train_and_publish(
    spark: Any, history: str, registry: str, settings: RetrainSettings, jobs: list[str] | None, fmt: str
) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    frame = read_history(spark, history, fmt)
    if jobs:
        frame = frame.filter(F.col("job").isin(jobs))
    names = [row.job for row in frame.select("job").distinct().collect()]
    if not names:
        return []
    # Range partitioning on the job key balances rows (~ fit cost) over the tasks and already satisfies
    # groupBy(job), so no second shuffle; an explicit count is kept as is by adaptive execution, which
    # would otherwise coalesce a small history into one task and train it on one core.
    partitions = max(1, min(len(names), spark.sparkContext.defaultParallelism * 4))
    results = (
        frame.repartitionByRange(partitions, "job")
        .groupBy("job")
        .applyInPandas(_group_trainer(settings), schema=RESULT_SCHEMA)
        .persist()
    )
    try:
        results.count()  # train all groups in parallel; the loop below only reads the cached rows
        store = ModelRegistry(registry)
        summary = []
        for row in results.toLocalIterator():
            metadata = json.loads(row.metadata)
            status, reason, entry = row.status, row.reason, None
            if status == "ok":
                metadata["created_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                try:
                    entry = store.publish(row.job, bytes(row.artifact), metadata)
                except Exception as error:  # a name the filesystem refuses, a full disk: this job only
                    status = "failed"
                    reason = f"not published: {getattr(error, 'strerror', None) or _first_line(error)}"
            summary.append(_summary_row(row.job, status, reason, metadata, entry.name if entry else None))
    finally:
        results.unpersist()
    return sorted(summary, key=lambda item: item["job"])


def _group_trainer(settings: RetrainSettings) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The function applyInPandas runs per job (a plain function of one frame, as Spark expects)."""

    def train(frame: pd.DataFrame) -> pd.DataFrame:
        return _train_group(settings, frame)

    return train


def _train_group(settings: RetrainSettings, frame: pd.DataFrame) -> pd.DataFrame:
    """One job's history → one result row (runs in the executors' Python workers)."""
    from pyspark import TaskContext

    limit_blas_threads()
    job = str(frame["job"].iloc[0])
    result = train_job(job, frame["t"].to_numpy(), frame["rate"].to_numpy(), settings)
    context = TaskContext.get()
    result.metadata["trained_by"] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "partition": context.partitionId() if context else None,
        "worker_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    result.metadata["libraries"] = library_versions()
    artifact = serialize(result.model) if result.model is not None else None
    return pd.DataFrame(
        [
            {
                "job": job,
                "status": result.status,
                "reason": result.reason,
                "metadata": json.dumps(result.metadata),
                "artifact": artifact,
            }
        ]
    )


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = version("scikit-learn" if name == "sklearn" else name)
        except PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _summary_row(job: str, status: str, reason: str, metadata: dict, version: str | None) -> dict[str, Any]:
    backtest = metadata.get("backtest", {})
    return {
        "job": job,
        "status": status,
        "reason": reason,
        "version": version,
        "model": metadata.get("model", {}).get("label"),
        "best": backtest.get("best"),
        "wape": backtest.get("wape"),
        "train_seconds": metadata.get("train_seconds"),
        "partition": metadata.get("trained_by", {}).get("partition"),
        "worker_peak_rss_mb": metadata.get("trained_by", {}).get("worker_peak_rss_mb"),
    }


EXECUTOR_PACKAGES = ("forecasting", "messages")
"""What the executors import (train.py and grid.py use messages.types); tests/spark checks the closure."""


def _ship_packages(spark: Any, directory: Path) -> None:
    """Send the executors' packages (a cluster's workers do not have this checkout); `directory` must
    outlive the job: Spark serves the archive from there when an executor asks for it."""
    root = Path(__file__).resolve().parents[2]
    archive = directory / "foresail.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for package in EXECUTOR_PACKAGES:
            for file in (root / package).rglob("*.py"):
                zipped.write(file, file.relative_to(root))
    spark.sparkContext.addPyFile(str(archive))


class NoExecutors(RuntimeError):
    """The cluster gave the job no executor in time."""


@contextlib.contextmanager
def _executor_watch(spark: Any, wait_s: float) -> Iterator[None]:
    """Cancel the job's Spark work when no executor registered within `wait_s` (not on a local master,
    whose driver runs the tasks), and raise NoExecutors instead of Spark's cancellation error."""
    context = spark.sparkContext
    if context.master.startswith("local"):
        yield
        return
    done, starved = threading.Event(), threading.Event()

    def watch() -> None:  # the driver counts as one entry of the executors' memory status
        if not done.wait(wait_s) and context._jsc.sc().getExecutorMemoryStatus().size() <= 1:
            starved.set()
            context.cancelAllJobs()

    watcher = threading.Thread(target=watch, name="foresail-executor-watch", daemon=True)
    watcher.start()
    try:
        yield
    except Exception:
        if starved.is_set():
            raise NoExecutors(
                f"no executor started within {wait_s:g} s at {context.master}: no worker alive, or none "
                "with the cores and memory asked for (--executor-wait-s)"
            ) from None
        raise
    finally:
        done.set()
        watcher.join()


def settings_from_args(args: argparse.Namespace, base: RetrainSettings) -> RetrainSettings:
    """`base` with the options given; a ValueError naming the option for a value the training cannot use
    (NaN or inf overflow the bucket counts, a span of 0 s has no data: Spark would start for nothing)."""
    overrides = {
        "season_resolution_s": args.season_resolution_s,
        "backtest_s": args.backtest_s,
        "select_window_s": args.select_window_s,
        "min_history_s": args.min_history_s,
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    for name, value in given.items():
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{_option(name)} must be a number of seconds > 0, got {value:g}")
    settings = RetrainSettings(**{**base.__dict__, **given})
    if "backtest_s" in given and settings.backtest_s < settings.horizon_s:
        raise ValueError(  # no backtest origin would have a whole horizon to score
            f"--backtest-s must be at least the forecast horizon ({settings.horizon_s:g} s), "
            f"got {settings.backtest_s:g}"
        )
    if "season_resolution_s" in given and settings.season_resolution_s > MAX_SEASON_RESOLUTION_S:
        raise ValueError(
            f"--season-resolution-s must be at most {MAX_SEASON_RESOLUTION_S:g} s (a daily profile needs "
            f"its buckets), got {settings.season_resolution_s:g}"
        )
    return settings


MAX_SEASON_RESOLUTION_S = DAY_S / 24
"""The daily profile's 10th harmonic needs more than 20 buckets a day."""


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def run(args: argparse.Namespace, base: RetrainSettings) -> int:
    """Run the job as the command line asked: 0 when every job trained or was skipped with its reason and
    at least one model was published; 1 when a job failed or nothing was trained (one line per job says
    why); 2 when an option or the input is unusable (one line, before Spark starts when it can be told)."""
    try:
        settings = settings_from_args(args, base)
        wait_s = _executor_wait_s(args)
    except ValueError as error:
        print(f"retrain: {error}", file=sys.stderr)
        return 2
    problem = (
        _master_problem(args.master)
        or history_problem(args.history, args.format)
        or registry_problem(args.registry)
        or _master_unreachable(args.master)
    )
    if problem:
        print(f"retrain: {problem}", file=sys.stderr)
        return 2
    try:
        spark = spark_session(args.master)
    except Exception as error:  # Java missing: PySpark's error, then the JVM's
        print(f"retrain: cannot start Spark at --master {args.master}: {_first_line(error)}", file=sys.stderr)
        return 2
    jobs = [name.strip() for name in args.jobs.split(",")] if args.jobs else None
    try:
        summary = retrain(spark, args.history, args.registry, settings, jobs, args.format, wait_s)
    except NoExecutors as error:
        print(f"retrain: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # unreadable input: Spark's AnalysisException, our ValueError
        failed = _executor_failure(error)
        if failed:
            print(f"retrain: an executor's Python failed: {failed}", file=sys.stderr)
            return 1
        message = _first_line(error)
        named = message if message.startswith(args.history) else f"{args.history}: {message}"
        print(f"retrain: {named}", file=sys.stderr)
        return 2
    print_summary(summary, args.json)
    if not any(item["status"] == "ok" for item in summary):
        print(f"retrain: nothing trained: no model published from {args.history}", file=sys.stderr)
        return 1
    return 1 if any(item["status"] == "failed" for item in summary) else 0


def _master_problem(master: str | None) -> str | None:
    """Spark's own rule for a master URL: for any other, Spark logs a JVM stack trace before failing."""
    if (
        master is None
        or master == "yarn"
        or master.startswith(("spark", "k8s"))
        or LOCAL_MASTER.fullmatch(master)
    ):
        return None
    return f"cannot start Spark at --master {master}: not a master URL (local[N], spark://HOST:PORT, k8s://…, yarn)"


def _executor_wait_s(args: argparse.Namespace) -> float:
    wait_s = getattr(args, "executor_wait_s", None)
    if wait_s is None:
        return EXECUTOR_WAIT_S
    if not (math.isfinite(wait_s) and wait_s > 0):
        raise ValueError(f"--executor-wait-s must be a number of seconds > 0, got {wait_s:g}")
    return wait_s


MASTER_CONNECT_S = 5.0
"""How long `retrain` tries to reach a spark:// master before starting Spark (which retries for a minute
and then blames the application)."""


def _master_unreachable(master: str | None) -> str | None:
    """Why a standalone master cannot be reached (None when one of its hosts answers, or not spark://)."""
    if not master or not master.startswith("spark://"):
        return None
    errors = []
    for address in master.removeprefix("spark://").split(","):  # a list of masters: high availability
        try:
            url = urlsplit(f"spark://{address}")
            with socket.create_connection((url.hostname, url.port or 7077), MASTER_CONNECT_S):
                return None
        except (OSError, ValueError) as error:
            errors.append(f"{address}: {getattr(error, 'strerror', None) or error}")
    return f"cannot reach --master {master}: {'; '.join(errors)}"


def _executor_failure(error: Exception) -> str | None:
    """The last line of the Python traceback of an executor's failure (None for other errors): Spark's
    message begins with the JVM's side, the cause (a module missing on the workers) ends it."""
    from pyspark.errors import PythonException

    if not isinstance(error, PythonException):
        return None
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__


def history_problem(history: str, fmt: str = "auto") -> str | None:
    """Why a local history cannot be read (None when it can), told before Spark fails on it with pages of
    JVM trace. Remote paths are Spark's to read; a CSV's bad rows are dropped, not fatal, so of a CSV
    only the headers are checked (Spark's error for a missing column is one line)."""
    if "://" in history and not history.startswith("file://"):
        return None
    path = history.removeprefix("file://")
    if not os.path.exists(path):  # False for a name too long too
        return f"--history: no such file or directory: {path}"
    if _resolved_format(path, fmt) == "csv":
        return csv_header_problem(path)
    return history_input_problem(path, "parquet")


def registry_problem(registry: str) -> str | None:
    """Why models cannot be published in `registry` (None when they can): it is created if absent and
    written to once, so that a read-only or misnamed registry fails the run before hours of training.
    Only the driver writes it, with plain file operations: a file:// URI is its path, other URIs fail."""
    if "://" in registry and not registry.startswith("file://"):
        return (
            f"--registry {registry}: not a local path (the driver writes the registry as files: give a "
            "directory the driver and the daemons share, e.g. a mounted volume)"
        )
    root = Path(registry.removeprefix("file://"))
    try:
        if root.exists() and not root.is_dir():
            return f"--registry {registry}: not a directory"
        root.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".writable-", dir=root))
    except OSError as error:
        return f"--registry {registry}: {error.strerror or error}"
    return None


def _first_line(error: Exception) -> str:
    """Spark's errors carry the JVM stack after the message: keep the message. Py4J's first line only
    says which Java call failed; the Java exception follows on the next one, after ": "."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        return lines[1].removeprefix(": ")
    return lines[0]


def print_summary(summary: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    if not summary:
        print("no job in the history")
    for item in summary:
        job = item["job"] or '""'
        if item["status"] == "ok":
            scores = ", ".join(f"{k} {v:.4f}" for k, v in item["wape"].items() if v is not None)
            print(f"{job}: {item['version']} {item['model']} (backtest WAPE: {scores})")
        else:
            print(f"{job}: {item['status']}: {(item['reason'].splitlines() or [''])[0]}")


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point; the model settings come from a foresail config file (--config)."""
    from forecasting.spark.arguments import add_retrain_arguments

    parser = argparse.ArgumentParser(description="foresail: retrain the forecasters on Spark")
    add_retrain_arguments(parser)
    parser.add_argument("--config", default=None, help="foresail config (its forecast section)")
    args = parser.parse_args(argv)
    return run(args, base_settings(args.config))


def base_settings(config_path: str | None) -> RetrainSettings:
    """The retraining settings matching the daemon's forecast section (defaults without a config)."""
    from config.load import load_config

    forecast = load_config(config_path).forecast
    return RetrainSettings(
        resolution_s=forecast.resolution_s,
        horizon_s=forecast.horizon_s,
        max_history_s=forecast.max_history_s,
        max_interpolated_gap_s=forecast.max_interpolated_gap_s,
        max_differencing=getattr(forecast, "max_differencing", 1),
    )


if __name__ == "__main__":
    # spark-submit runs this file as __main__: call the importable module, so the functions shipped to
    # the executors are pickled by reference to it rather than by value from __main__
    from forecasting.spark.job import main as module_main

    sys.exit(module_main())
