"""A log or audit line that cannot be written (a full disk) is dropped; the loop goes on."""

from __future__ import annotations

import errno
import json

import structlog

from daemon.logs import configure_logging


class FullDisk:
    def __init__(self) -> None:
        self.full = True
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        return None


def test_lines_that_cannot_be_written_are_dropped_and_said_once(capsys):
    disk = FullDisk()
    configure_logging("info", "json", disk)
    log = structlog.get_logger("foresail.audit")
    for iteration in range(3):
        log.info("iteration", iteration=iteration)
    assert capsys.readouterr().err.count("log lines dropped (OSError") == 1
    disk.full = False
    log.info("iteration", iteration=3)
    assert len(disk.lines) == 1 and '"iteration": 3' in disk.lines[0]


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def test_an_audit_run_is_json_a_strict_parser_reads(tmp_path):
    """An HPA run's recoveries carry an unknown (infinite) predicted recovery: json.dumps wrote
    `Infinity`, which JSON has not (Node's JSON.parse and jq refuse the line)."""
    from config.schema import Config
    from daemon.runtime import run_daemon

    audit = tmp_path / "a.jsonl"
    config = Config.model_validate(
        {"scaling": {"policy": "hpa-80"}, "knowledge": {"path": str(tmp_path / "k.sqlite")}}
    )
    assert run_daemon(config, max_iterations=30, audit_log=str(audit)) == 0
    events = [json.loads(line, parse_constant=_refuse) for line in audit.read_text().splitlines()]
    observed = [r for e in events for r in e.get("recoveries_observed") or []]
    assert observed and any(r["predicted_s"] is None for r in observed)


def test_a_dry_run_audits_recommendations_and_counts_no_execute_error(tmp_path):
    """Each recommendation was an execute error: `foresail_phase_errors_total{phase="execute"}` rose, and
    the ForesailRescaleFailed alert (deploy/alerts.yaml) fired on a dry run or a pause."""
    from config.schema import Config
    from daemon.runtime import run_daemon

    audit = tmp_path / "a.jsonl"
    config = Config.model_validate(
        {"target": {"recommend_only": True}, "knowledge": {"path": str(tmp_path / "k.sqlite")}}
    )
    assert run_daemon(config, max_iterations=40, audit_log=str(audit)) == 0
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    iterations = [e for e in events if e["event"] == "iteration"]
    assert any(e.get("recommendation", "").startswith("dry run: scale-out") for e in iterations)
    assert not any(e["errors"] and "execute" in e["errors"] for e in iterations)
