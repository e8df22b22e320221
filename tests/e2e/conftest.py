"""Session fixtures: one real Flink cluster (reactive mode, the trace load job) and one real Prometheus
scraping it, started once for all end-to-end tests; the load job's per-worker capacity is estimated once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.e2e.stack import FlinkStack, PrometheusServer, compile_job, flink_home, wait_for

WORK_PER_RECORD = 400_000
"""Hash rounds per record in the keyed operator: about 1 ms of CPU, so one worker carries ~1,000 records/s
on these machines and Flink's per-record overhead stays negligible."""


CALIBRATION_RPS = 300
"""Load while the capacity is estimated: light enough for any machine, heavy enough to read busy time."""


class Stack:
    def __init__(self, flink: FlinkStack, prometheus: PrometheusServer, capacity_rps: float) -> None:
        self.flink = flink
        self.prometheus = prometheus
        self.capacity_rps = capacity_rps
        """One worker's capacity: its throughput when overloaded (sizes the test loads)."""

    def light_load_rps(self) -> int:
        """A load one worker carries easily."""
        return int(0.3 * self.capacity_rps)

    def settle(self) -> None:
        """Wait for the state every test starts from: one worker, the light load, no backlog (a previous
        test's last rescale replays records since its last checkpoint)."""
        self.flink.trace.hold(self.light_load_rps(), lead_s=0.5)
        self.flink.wait_parallelism(1, timeout_s=90)
        wait_for(lambda: (self.backlog() or 0) < self.light_load_rps(), 120, "the backlog drained", poll_s=1)

    def backlog(self) -> float | None:
        return self.value("sum(flink_taskmanager_job_task_operator_pendingRecords)")

    def measure_saturated_capacity(self, overload_rps: float) -> float:
        """One worker's capacity as Flink shows it when overloaded: the keyed operator's throughput while
        the backlog grows. The backlog is drained afterwards and the light calibration load restored."""
        self.flink.trace.hold(int(overload_rps), lead_s=0.5)
        readings: list[float] = []

        def saturated() -> float | None:
            backlog, throughput = self.backlog(), self.throughput_rps("5s")
            if backlog is None or throughput is None or backlog < overload_rps:
                return None
            readings.append(throughput)
            return sorted(readings[-3:])[1] if len(readings) >= 4 else None  # the first may include the ramp

        capacity = float(wait_for(saturated, 120, "the single worker saturated", poll_s=2))
        self.flink.trace.hold(0, lead_s=0.5)
        wait_for(lambda: self.backlog() == 0, 120, "the overload's backlog drained", poll_s=1)
        self.flink.trace.hold(CALIBRATION_RPS, lead_s=0.5)
        return capacity

    def backlog_at(self, time_s: float) -> float:
        return self.value("sum(flink_taskmanager_job_task_operator_pendingRecords)", at_s=time_s) or 0.0

    def throughput_rps(self, window: str = "10s") -> float | None:
        burn = 'flink_taskmanager_job_task_operator_numRecordsIn{operator_name="burn"}'
        return self.value(f"sum(rate({burn}[{window}]))")

    def median_throughput_rps(self, start_s: float, end_s: float) -> float | None:
        """Median over [start, end] of the keyed operator's 5 s throughput (Prometheus, after the fact)."""
        burn = 'flink_taskmanager_job_task_operator_numRecordsIn{operator_name="burn"}'
        span = max(1, int(end_s - start_s))
        return self.value(f"quantile_over_time(0.5, sum(rate({burn}[5s]))[{span}s:1s])", at_s=end_s)

    def value(self, promql: str, at_s: float | None = None) -> float | None:
        result = self.prometheus.query(promql, at_s)
        return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Stack:
    workdir: Path = tmp_path_factory.mktemp("stack")
    for tool in ("java", "javac", "jar", "prometheus"):
        require_tool(tool)
    home = flink_home()
    compile_job(home, workdir / "build")
    flink = FlinkStack(workdir / "flink", home, work=WORK_PER_RECORD, initial_rps=CALIBRATION_RPS)
    prometheus = PrometheusServer(workdir / "prometheus", flink.scrape_targets)
    try:
        flink.start(taskmanagers=1)
        stack = Stack(flink, prometheus, 0.0)
        start_ms = wait_for(
            lambda: stack.value("max(flink_taskmanager_job_task_operator_traceStartMs)"),
            60,
            "the load job's trace start in Prometheus",
        )
        flink.trace.anchor(start_ms / 1000)
        stack.capacity_rps = stack.measure_saturated_capacity(3 * _capacity_from_busy_time(stack))
        yield stack
    finally:
        flink.stop()
        prometheus.stop()


def _capacity_from_busy_time(stack: Stack) -> float:
    """records/s ÷ busy share of the keyed operator at a light load: what one worker could carry.

    The first readings come while the JIT still compiles the hot loop; three consecutive readings within
    15% of each other are taken as settled.
    """
    busy = 'max(avg_over_time(flink_taskmanager_job_task_busyTimeMsPerSecond{task_name=~"burn.*"}[10s]))'
    rate = 'sum(rate(flink_taskmanager_job_task_operator_numRecordsIn{operator_name="burn"}[10s]))'
    readings: list[float] = []

    def settled() -> float | None:
        share, records = stack.value(busy), stack.value(rate)
        if share is None or records is None or not (5 < share < 1000) or records < 0.8 * CALIBRATION_RPS:
            return None
        readings.append(records / (share / 1000))
        last = readings[-3:]
        return sorted(last)[1] if len(last) == 3 and max(last) < 1.15 * min(last) else None

    return float(wait_for(settled, 150, "a settled busy-time reading of the keyed operator", poll_s=3))
