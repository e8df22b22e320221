"""The image's default command (Dockerfile CMD) starts the health server its HEALTHCHECK asks: run as a
process here, on a free port instead of 9464, and probed like Docker would."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.daemon.daemon_cli import start_daemon, stderr_of
from tests.e2e.stack import free_port


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def _until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _stop(process: subprocess.Popen, cwd: Path) -> None:
    """SIGTERM, and the daemon exits 0 within a minute; killed if not, so no test leaves it running."""
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert code == 0, stderr_of(cwd)


def _config_with_port(tmp_path: Path, port: int) -> Path:
    config = yaml.safe_load((REPO / "config" / "example.yaml").read_text())
    config["server"]["port"] = port
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_default_command_passes_the_healthcheck(tmp_path: Path):
    dockerfile = (REPO / "Dockerfile").read_text()
    command = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    healthcheck = re.search(r"urlopen\('http://127.0.0.1:(\d+)(/\w+)'", dockerfile)
    example = yaml.safe_load((REPO / "config" / "example.yaml").read_text())
    assert int(healthcheck.group(1)) == example["server"]["port"]  # the port the check probes is served
    port = free_port()
    args = [str(_config_with_port(tmp_path, port)) if a.endswith("example.yaml") else a for a in command]
    process = start_daemon(args, tmp_path)
    try:
        _until(lambda: _status(f"http://127.0.0.1:{port}{healthcheck.group(2)}") == 200, 60, "/healthz 200")
        assert process.poll() is None  # a daemon: it keeps running
    finally:
        _stop(process, tmp_path)


def test_the_twin_on_wall_time_turns_ready_after_its_first_iteration(tmp_path: Path):
    port = free_port()
    config = _config_with_port(tmp_path, port)
    process = start_daemon(["run", "--config", str(config), "--speedup", "600"], tmp_path)
    try:
        _until(lambda: _status(f"http://127.0.0.1:{port}/readyz") == 200, 60, "/readyz 200")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        assert (
            "foresail_iterations_total" in metrics and "foresail_last_iteration_timestamp_seconds" in metrics
        )
    finally:
        _stop(process, tmp_path)
