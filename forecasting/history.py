"""Workload histories: exported from Prometheus, stored as Parquet by job and day, read back.

The history schema, for files produced elsewhere too (Parquet or CSV with a header):
    job        string      the job's name (the registry key; `forecast.registry_job` in the daemon)
    timestamp  timestamp   UTC; in CSV an ISO-8601 string or epoch seconds
    rate       double      input rate in records/s (NaN, negative: dropped)
Duplicated (job, timestamp) rows are allowed: the last one read wins, so overlapping exports are harmless.

Prometheus refuses a range query of more than 11,000 points per series, so `export_history` walks
the range in chunks of at most that many steps, on the grid of multiples of the step (each timestamp
lands in exactly one chunk: no overlap, no hole).
"""

from __future__ import annotations

import csv
import math
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

MAX_POINTS = 11_000
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class RangeClient(Protocol):
    """A Prometheus range query answering the HTTP API's `data.result` (backends/prometheus.py)."""

    def range(self, query: str, start_s: float, end_s: float, step_s: float) -> object: ...


class ExportError(ValueError):
    """Prometheus answered something that cannot be stored as a history."""


def parse_time(text: str, now_s: float) -> float:
    """Epoch seconds from '28d'/'12h'/'90m'/'2w' (that long before now), ISO-8601, or epoch seconds."""
    text = text.strip()
    match = _DURATION.match(text)
    if match:
        return now_s - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def chunks(
    start_s: float, end_s: float, step_s: float, max_points: int = MAX_POINTS
) -> Iterator[tuple[float, float]]:
    """(start, end) of range queries of at most `max_points` points covering the multiples of `step_s`
    in [start_s, end_s]."""
    first = math.ceil(start_s / step_s - 1e-9)
    last = math.floor(end_s / step_s + 1e-9)
    for begin in range(first, last + 1, max_points):
        yield begin * step_s, min(begin + max_points - 1, last) * step_s


def export_history(
    client: RangeClient,
    query: str,
    start_s: float,
    end_s: float,
    step_s: float,
    job: str | None = None,
    job_label: str | None = None,
    max_points: int = MAX_POINTS,
) -> pd.DataFrame:
    """The input-rate series of [start_s, end_s] as rows (job, timestamp, rate), one query per chunk.

    One series per job: with `job_label`, each series is a job named by that label; without it the
    query must return a single series (aggregate it in PromQL), which gets the name `job`.
    """
    if job_label is None and not job:
        raise ExportError(
            "name the job (--job / forecast.registry_job) or a label that names jobs (--job-label)"
        )
    frames = []
    for chunk_start, chunk_end in chunks(start_s, end_s, step_s, max_points):
        result = client.range(query, chunk_start, chunk_end, step_s)
        if not isinstance(result, list):
            raise ExportError(f"range result is {type(result).__name__}, expected a list of series")
        if job_label is None and len(result) > 1:
            raise ExportError(
                f"the query returns {len(result)} series: aggregate it, or name jobs by --job-label"
            )
        chunk = [_series_frame(series, job, job_label) for series in result]
        _check_one_series_per_job(chunk, job_label)
        frames.extend(chunk)
    if not frames:
        return pd.DataFrame({"job": pd.Series(dtype=str), "timestamp": pd.Series(dtype=float), "rate": []})
    frame = pd.concat(frames, ignore_index=True)
    return frame.drop_duplicates(["job", "timestamp"], keep="last").sort_values(
        ["job", "timestamp"], ignore_index=True
    )


def _check_one_series_per_job(frames: list[pd.DataFrame], job_label: str | None) -> None:
    """Several series naming one job (per subtask, per instance) are parts of its rate or copies of it:
    which, only the query can say, so it must aggregate them (keeping one would store a part as the whole)."""
    names = [str(frame["job"].iloc[0]) for frame in frames if len(frame)]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ExportError(
            f"the query returns {names.count(repeated[0])} series with {job_label}={repeated[0]!r}: "
            f"aggregate them, e.g. sum by ({job_label}) (…)"
        )


def _series_frame(series: object, job: str | None, job_label: str | None) -> pd.DataFrame:
    if not isinstance(series, dict) or not isinstance(series.get("values"), list):
        raise ExportError(f"series {str(series)[:120]!r} has no 'values'")
    name = job if job_label is None else series.get("metric", {}).get(job_label)
    if not isinstance(name, str) or not name:
        raise ExportError(f"series {series.get('metric')} has no {job_label!r} label to name its job")
    points = np.array([(float(t), float(v)) for t, v in series["values"]], dtype=float).reshape(-1, 2)
    keep = np.isfinite(points[:, 1])
    return pd.DataFrame({"job": name, "timestamp": points[keep, 0], "rate": points[keep, 1]})


def write_history(frame: pd.DataFrame, out: str | Path) -> int:
    """Append rows (job, timestamp epoch seconds, rate) to a Parquet dataset partitioned job=…/day=…;
    returns the rows written. Files get unique names, so a second export adds to the first."""
    if frame.empty:
        return 0
    stamps = pd.to_datetime(frame["timestamp"].astype(float), unit="s", utc=True)
    table = pa.table(
        {
            "timestamp": pa.array(stamps.to_numpy(dtype="datetime64[ms]"), pa.timestamp("ms", tz="UTC")),
            "rate": pa.array(frame["rate"].astype(float).to_numpy()),
            "job": pa.array(frame["job"].astype(str).to_numpy()),
            "day": pa.array(stamps.dt.strftime("%Y-%m-%d").to_numpy()),
        }
    )
    ds.write_dataset(
        table,
        str(out),
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("job", pa.string()), ("day", pa.string())]), flavor="hive"),
        basename_template=f"part-{uuid.uuid4().hex[:12]}-{{i}}.parquet",
        existing_data_behavior="overwrite_or_ignore",
    )
    return len(frame)


def read_history(path: str | Path) -> pd.DataFrame:
    """Any history of the documented schema as (job, timestamp epoch seconds, rate), without Spark."""
    path = Path(path)
    csv = path.suffix.lower() == ".csv" or (
        path.is_dir() and any(path.rglob("*.csv")) and not any(path.rglob("*.parquet"))
    )
    if csv:
        files = (
            sorted(f for f in path.rglob("*.csv") if not f.name.startswith(("_", ".")) and f.stat().st_size)
            if path.is_dir()
            else [path]
        )  # Spark skips files named _… or .… and reads an empty one as no rows
        frame = pd.concat([pd.read_csv(file) for file in files], ignore_index=True)
    else:
        frame = pq.read_table(path, partitioning="hive").to_pandas()
    missing = {"job", "timestamp", "rate"} - set(frame.columns)
    if missing:
        raise ValueError(
            f"{path}: history lacks the column(s) {sorted(missing)} (schema: job, timestamp, rate)"
        )
    stamps = frame["timestamp"]
    if pd.api.types.is_numeric_dtype(stamps):
        seconds = stamps.astype(float)
    else:  # timestamps of any unit, or ISO-8601 strings
        seconds = (pd.to_datetime(stamps, utc=True) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    result = pd.DataFrame(
        {
            "job": frame["job"].astype(str),
            "timestamp": seconds.to_numpy(),
            "rate": frame["rate"].astype(float),
        }
    )
    return result.sort_values(["job", "timestamp"], kind="stable", ignore_index=True)


# ---- input checks (before Spark starts: one clear line instead of a JVM stack trace) -------------
MAX_HISTORY_ROWS = 200_000_000
"""Most rows a history may hold (500 jobs × a year of minutes is 263 M: split such a history by job)."""
MAX_HISTORY_SPAN_S = 3 * 366 * 86_400
"""Widest time range a history may cover (three years)."""


def history_input_problem(
    path: str | Path,
    fmt: str = "auto",
    max_rows: int = MAX_HISTORY_ROWS,
    max_span_s: float = MAX_HISTORY_SPAN_S,
) -> str | None:
    """Why `path` cannot be read as a history (None when it can): a missing path, no data files, missing
    columns, more than `max_rows` rows, timestamps spanning more than `max_span_s`, or, in CSV, the first
    row whose timestamp or rate is not one (with its file and line). CSV is read row by row."""
    path = Path(path)
    if not path.exists():
        return f"--history: no such file or directory: {path}"
    csv_files = sorted(path.rglob("*.csv")) if path.is_dir() else [path]
    parquet = fmt == "parquet" or (
        fmt == "auto" and ((path.is_dir() and any(path.rglob("*.parquet"))) or path.suffix == ".parquet")
    )
    if parquet:
        return _parquet_problem(path, max_rows, max_span_s)
    if not csv_files:
        return f"--history: no .csv or .parquet files under {path}"
    rows, first_s, last_s = 0, math.inf, -math.inf
    for csv_file in csv_files:
        with csv_file.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
            reader = csv.reader(handle)
            header = [name.strip().lower() for name in next(reader, [])]
            missing = [c for c in ("job", "timestamp", "rate") if c not in header]
            if missing:
                return f"{csv_file}:1: missing column(s) {', '.join(missing)} (need job,timestamp,rate)"
            at_time, at_rate = header.index("timestamp"), header.index("rate")
            for fields in reader:
                line_no = reader.line_num
                if not fields:
                    continue
                if len(fields) != len(header):
                    return f"{csv_file}:{line_no}: {len(fields)} fields, the header has {len(header)}"
                try:
                    time_s = _epoch_s(fields[at_time])
                    float(fields[at_rate] or "nan")
                except (ValueError, OverflowError):
                    return f"{csv_file}:{line_no}: timestamp or rate not readable: {','.join(fields)[:80]!r}"
                rows += 1
                first_s, last_s = min(first_s, time_s), max(last_s, time_s)
                if rows > max_rows:
                    return f"{csv_file}:{line_no}: more than {max_rows} rows"
                if last_s - first_s > max_span_s:
                    return f"{csv_file}:{line_no}: timestamps span more than {max_span_s:.0f} s"
    return None if rows else f"--history: {path} holds no rows"


def csv_header_problem(path: str | Path) -> str | None:
    """Why the CSV files of `path` cannot be read as one table (None when they can): Spark takes the first
    file's header as the schema and fails on a file whose header names the columns in another order."""
    path = Path(path)
    files = (
        sorted(f for f in path.rglob("*.csv") if not f.name.startswith(("_", ".")) and f.stat().st_size)
        if path.is_dir()
        else [path]
    )  # Spark skips files named _… or .… and reads an empty one as no rows
    headers = {}
    for csv_file in files:
        with csv_file.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
            headers[csv_file] = [name.strip().lower() for name in next(csv.reader(handle), [])]
    first = next(iter(headers), None)
    for csv_file, header in headers.items():
        if header != headers[first]:
            return (
                f"{csv_file}:1: header {','.join(header)} differs from {first.name}'s "
                f"{','.join(headers[first])}: write every file with the same columns in the same order"
            )
    return None


def _epoch_s(text: str) -> float:
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        value = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _parquet_problem(path: Path, max_rows: int, max_span_s: float) -> str | None:
    try:
        dataset = ds.dataset(path, format="parquet", partitioning="hive")
        names = set(dataset.schema.names)
        missing = [c for c in ("job", "timestamp", "rate") if c not in names]
        if missing:
            return f"{path}: missing column(s) {', '.join(missing)} (need job, timestamp, rate)"
        stamp = dataset.schema.field("timestamp").type
        if pa.types.is_timestamp(stamp) and stamp.unit == "ns":  # Spark stops with a page of JVM trace
            return (
                f"{path}: timestamp is in nanoseconds (pandas' default), which Spark does not read: write "
                "it with to_parquet(..., coerce_timestamps='us') or as epoch seconds"
            )
        rows = dataset.count_rows()
    except (OSError, pa.ArrowException) as error:
        return f"{path}: not a readable Parquet history: {str(error).splitlines()[0]}"
    if rows == 0:
        return f"--history: {path} holds no rows"
    if rows > max_rows:
        return f"{path}: {rows} rows, more than {max_rows}"
    return None
