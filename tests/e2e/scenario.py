"""What both end-to-end paths share: the daemon's config for the real stack, load levels, figures.

Policy: `reactive` with a short stabilization. It decides from what was just measured (average input plus
backlog to drain, against the capacity of each scale-out), so a load step gives the same decision on
every run within a few loop intervals; the `foresail` policy would first need a forecaster trained on
tens of minutes of history (forecast.min_history_s) before it acts on its own, which is what the twin's
tests cover. Loop every 5 s over a 20 s window, Prometheus scraping every 1 s, Flink's reactive
cooldowns at 2 s: a rescale lands in seconds, not minutes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.e2e.daemon_process import DaemonProcess, executed
from tests.e2e.stack import REPO, FlinkStack, free_port

FIGURES = REPO / "runs" / "e2e-figures.json"

E2E_QUERIES = {
    # cores the TaskManager JVM used (its share of one CPU): TaskManagers share this machine's 2 cores,
    # so the JVM's CPU *load* (a share of the whole host) would understate a worker's use of its CPU
    "query_worker_cpu": "sum by (tm_id) (rate(flink_taskmanager_Status_JVM_CPU_Time[10s])) / 1e9",
    # the source is pinned to one worker: per-worker throughput is what each keyed subtask processes
    "query_worker_throughput": (
        'sum by (tm_id) (rate(flink_taskmanager_job_task_operator_numRecordsIn{operator_name="burn"}[10s]))'
    ),
    # the load job's own "messages in" rate (a gauge: the source may restart, the broker would not)
    "query_input_rate": "max(flink_taskmanager_job_task_operator_inputRatePerSecond)",
}


def daemon_config(flink: FlinkStack, prometheus_url: str, workdir: Path, target: dict) -> dict:
    return {
        "target": target,
        "loop": {"interval_s": 5, "window_s": 20},
        "scaling": {"policy": "reactive", "min_scaleout": 1, "max_scaleout": 3, "stabilization_s": 20,
                    "drain_time_s": 60},
        "capacity": {"warmup_s": 8, "saturated_backlog_s": 3, "saturation_cpu": 0.95, "min_points": 6},
        "prometheus": {"url": prometheus_url, "step_s": 2, "timeout_s": 3, "stale_after_s": 15, **E2E_QUERIES,
                       "flink_rest_url": flink.rest_url},
        "local_flink": {"flink_home": str(flink.home), "conf_dir": str(flink.conf_dir),
                        "state_dir": str(flink.state_dir), "rest_url": flink.rest_url, "readiness_timeout_s": 90},
        "knowledge": {"path": str(workdir / "knowledge.sqlite")},
        "server": {"host": "127.0.0.1", "port": free_port()},
        "logging": {"level": "info", "format": "json"},
    }  # fmt: skip


def record_figures(name: str, figures: dict) -> None:
    """Measured figures for the report, one entry per scenario (runs/ is not versioned)."""
    FIGURES.parent.mkdir(exist_ok=True)
    existing = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    existing[name] = {**figures, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    FIGURES.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"\n{name}: {json.dumps(figures)}")


RISE_FACTORS = (1.4, 2.0, 2.8)
"""Load steps, in multiples of one worker's calibrated capacity. One worker's capacity moves with what else
runs on the machine; stepping up until the daemon acts keeps the test about the daemon, not the machine."""


def rise_until_scale_out(flink: FlinkStack, daemon: DaemonProcess, capacity_rps: float) -> tuple[float, dict]:
    """Raise the load step by step until the daemon applies a scale-out; returns the wall time of the step
    that triggered it and the audit event of the decision."""
    for factor in RISE_FACTORS:
        changed_s = flink.trace.hold(int(factor * capacity_rps))
        try:
            return changed_s, daemon.wait_event(executed("scale_out"), 45, f"a scale-out at {factor}× load")
        except AssertionError:
            if daemon.process.poll() is not None:
                raise
    raise AssertionError(f"no scale-out at up to {RISE_FACTORS[-1]}× one worker's capacity")
