"""export-history against a real Prometheus (Debian's package) over backfilled data: chunks under the
11,000-point limit, every sample exactly once, Parquet partitioned by job and day."""

from __future__ import annotations

import math
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
import yaml

from backends.prometheus import PrometheusClient
from config.backends import PrometheusConfig
from daemon.cli import main
from forecasting.history import ExportError, chunks, export_history, parse_time, read_history, write_history
from tests.conftest import require_tool
from tests.e2e.stack import PrometheusServer

STEP_S = 5
MIDNIGHT_S = (math.floor(time.time() / 86_400) - 1) * 86_400  # yesterday 00:00 UTC: well in the past
START_S, END_S = MIDNIGHT_S - 8 * 3600, MIDNIGHT_S + 8 * 3600  # 16 h over midnight: two days
SAMPLES = (END_S - START_S) // STEP_S + 1  # 11,521 per series: more than one query may return


def rate(job: str, t: np.ndarray) -> np.ndarray:
    return (1000.0 if job == "a" else 7.0) + ((t - START_S) // STEP_S) % 500


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus whose TSDB holds two jobs' input rates every 5 s, backfilled with promtool."""
    promtool = require_tool("promtool")
    workdir = tmp_path_factory.mktemp("prometheus-history")
    times = np.arange(START_S, END_S + 1, STEP_S)
    lines = ["# TYPE foresail_test_input_rate gauge"]
    for job in ("a", "b"):
        lines += [
            f'foresail_test_input_rate{{job_name="{job}"}} {v:g} {t}'
            for t, v in zip(times, rate(job, times), strict=True)
        ]
    (workdir / "data.om").write_text("\n".join([*lines, "# EOF", ""]))
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "data.om"), str(workdir / "tsdb")],
        check=True, capture_output=True,
    )  # fmt: skip
    server = PrometheusServer(workdir, tsdb=workdir / "tsdb")
    yield server
    server.stop()


class CountingClient:
    def __init__(self, url: str) -> None:
        self.client = PrometheusClient(PrometheusConfig(url=url, timeout_s=30))
        self.calls: list[tuple[float, float]] = []

    def range(self, query: str, start_s: float, end_s: float, step_s: float) -> object:
        self.calls.append((start_s, end_s))
        return self.client.range(query, start_s, end_s, step_s)


def test_the_export_walks_the_range_in_chunks_and_returns_every_sample_once(prometheus):
    client = CountingClient(prometheus.url)
    frame = export_history(client, "foresail_test_input_rate", START_S, END_S, STEP_S, job_label="job_name")
    assert len(client.calls) == 2
    assert all((end - start) / STEP_S + 1 <= 11_000 for start, end in client.calls)
    assert client.calls[1][0] == client.calls[0][1] + STEP_S  # no overlap, no hole
    for job in ("a", "b"):
        rows = frame[frame.job == job]
        np.testing.assert_array_equal(rows.timestamp, np.arange(START_S, END_S + 1, STEP_S))
        np.testing.assert_array_equal(rows.rate, rate(job, rows.timestamp.to_numpy()))


def test_one_query_over_the_whole_range_is_refused_by_prometheus(prometheus):
    client = CountingClient(prometheus.url)
    with pytest.raises(Exception, match=r"11,000 points|exceeded maximum resolution"):
        export_history(
            client, "foresail_test_input_rate", START_S, END_S, STEP_S, "x", "job_name", max_points=20_000
        )


def test_several_series_without_a_job_label_are_an_error(prometheus):
    client = CountingClient(prometheus.url)
    with pytest.raises(ExportError, match="2 series"):
        export_history(client, "foresail_test_input_rate", START_S, START_S + 600, STEP_S, job="x")


def test_the_cli_writes_parquet_by_job_and_day_from_the_configured_query(prometheus, tmp_path):
    config = tmp_path / "foresail.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "prometheus": {"url": prometheus.url, "query_input_rate": "sum(foresail_test_input_rate)"},
                "forecast": {"registry_job": "checkout", "resolution_s": 60.0},
            }
        )
    )
    out = tmp_path / "history"
    since, until = pd.Timestamp(START_S, unit="s", tz="UTC").isoformat(), str(END_S)
    assert (
        main(
            ["export-history", "--config", str(config), "--since", since, "--until", until, "--out", str(out)]
        )
        == 0
    )
    days = sorted(p.name for p in (out / "job=checkout").iterdir())
    assert days == [pd.Timestamp(t, unit="s").strftime("day=%Y-%m-%d") for t in (START_S, MIDNIGHT_S)]
    history = read_history(out)
    grid = np.arange(START_S, END_S + 1, 60)  # forecast.resolution_s is the default step
    np.testing.assert_array_equal(history.timestamp, grid)
    np.testing.assert_array_equal(history.rate, rate("a", grid) + rate("b", grid))
    assert set(history.job) == {"checkout"}


def test_a_second_export_adds_files_and_reading_keeps_one_row_per_timestamp(tmp_path):
    first = pd.DataFrame({"job": "j", "timestamp": [0.0, 60.0, 120.0], "rate": [1.0, 2.0, 3.0]})
    second = pd.DataFrame({"job": "j", "timestamp": [120.0, 180.0], "rate": [3.0, 4.0]})
    write_history(first, tmp_path)
    write_history(second, tmp_path)
    assert len(list((tmp_path / "job=j" / "day=1970-01-01").glob("*.parquet"))) == 2
    history = read_history(tmp_path)
    assert len(history) == 5  # raw rows; the retraining drops the duplicate (see test_retrain_steps)
    assert history.timestamp.drop_duplicates().tolist() == [0.0, 60.0, 120.0, 180.0]


def test_csv_histories_from_elsewhere_take_iso_or_epoch_timestamps(tmp_path):
    (tmp_path / "iso.csv").write_text(
        "job,timestamp,rate\nx,2026-01-05T00:01:00Z,5\nx,2026-01-05T00:00:00Z,4\n"
    )
    (tmp_path / "epoch.csv").write_text("job,timestamp,rate\ny,1767571200,9\n")
    iso, epoch = read_history(tmp_path / "iso.csv"), read_history(tmp_path / "epoch.csv")
    assert iso.timestamp.tolist() == [1_767_571_200.0, 1_767_571_260.0] and iso.rate.tolist() == [4.0, 5.0]
    assert epoch.timestamp.tolist() == [1_767_571_200.0]
    (tmp_path / "bad.csv").write_text("job,time,rate\nx,1,2\n")
    with pytest.raises(ValueError, match="timestamp"):
        read_history(tmp_path / "bad.csv")


def test_chunks_cover_the_step_grid_exactly():
    spans = list(chunks(3.0, 100.0, 5.0, max_points=7))
    points = [t for start, end in spans for t in np.arange(start, end + 1e-9, 5.0)]
    assert points == list(np.arange(5.0, 100.0 + 1e-9, 5.0))
    assert all((end - start) / 5.0 + 1 <= 7 for start, end in spans)


def test_times_are_durations_before_now_iso_or_epoch():
    assert parse_time("2d", now_s=1_000_000.0) == 1_000_000.0 - 172_800
    assert parse_time("90m", now_s=10_000.0) == 4_600.0
    assert parse_time("2026-01-05T00:00:00Z", 0.0) == 1_767_571_200.0
    assert parse_time("2026-01-05T00:00:00", 0.0) == 1_767_571_200.0  # naive = UTC
    assert parse_time("1767571200", 0.0) == 1_767_571_200.0


def test_several_series_of_one_job_are_an_error_naming_the_job(prometheus):
    """Per-subtask series that share the job label: keeping one stored a part of the rate as the whole."""
    client = CountingClient(prometheus.url)
    query = (
        'label_replace(label_replace(foresail_test_input_rate, "subtask", "$1", "job_name", "(.*)"), '
        '"job_name", "shop", "", "")'
    )
    with pytest.raises(ExportError, match=r"2 series with job_name='shop': aggregate them"):
        export_history(client, query, START_S, START_S + 600, STEP_S, job_label="job_name")
