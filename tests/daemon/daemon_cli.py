"""`python -m daemon.cli ARGS` as a process for tests, its stderr in `cwd/stderr.txt`: a stderr pipe read
only at the end fills up and blocks the daemon (CI hung so while apscheduler warned of every skipped run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def start_daemon(args: list[str], cwd: Path, stdout: int = subprocess.DEVNULL) -> subprocess.Popen:
    with open(cwd / "stderr.txt", "a") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", *args],
            stdout=stdout,
            stderr=stderr,
            text=True,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )


def stderr_of(cwd: Path) -> str:
    return (cwd / "stderr.txt").read_text()
