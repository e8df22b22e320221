"""A real Prometheus serving series backfilled from OpenMetrics text (promtool), for the source tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import require_tool
from tests.e2e.stack import PrometheusServer


def backfilled_prometheus(workdir: Path, openmetrics: str) -> Iterator[PrometheusServer]:
    """Yields a server whose TSDB holds `openmetrics` (it scrapes nothing); stops it afterwards."""
    promtool = require_tool("promtool")
    (workdir / "data.om").write_text(openmetrics)
    tsdb = workdir / "tsdb"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "data.om"), str(tsdb)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = PrometheusServer(workdir, tsdb=tsdb)
    yield server
    server.stop()
