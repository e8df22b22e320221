"""`foresail run --config FILE` as a process, its JSON audit log collected as it is written."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import yaml

from tests.e2e.stack import REPO, wait_for


class DaemonProcess:
    def __init__(self, config: dict, workdir: Path, name: str = "daemon") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = workdir / f"{name}.stderr"
        self.audit_path = workdir / f"{name}.audit.jsonl"  # kept for a failed test's post-mortem
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "run", "--config", str(self.config_path)],
            stdout=subprocess.PIPE,
            stderr=self.log_path.open("wb"),
            text=True,
            cwd=workdir,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with self.audit_path.open("a") as audit:
            for line in self.process.stdout:
                audit.write(line)
                audit.flush()
                self._collect(line)

    def _collect(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        with self._lock:
            self.events.append(event)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def iterations(self) -> list[dict]:
        return [e for e in self.snapshot() if e.get("event") == "iteration"]

    def implausible(self) -> list[str]:
        """The plausibility problems its iterations named (mape/plausibility.py), but for
        `throughput-unverified`: a daemon started while a backlog drains cannot tell that drain from a wrong
        meter in its first windows and holds (on clean data too, as designed)."""
        return [
            f"iteration {e['iteration']}: {p}"
            for e in self.iterations()
            for p in (e.get("inputs") or {}).get("problems") or []
            if p.startswith("implausible[") and not p.startswith("implausible[throughput-unverified]")
        ]

    def wait_event(self, predicate, timeout_s: float, what: str) -> dict:
        def found() -> dict | None:
            assert self.process.poll() is None, f"daemon exited ({self.process.returncode}): {self.stderr()}"
            return next((e for e in self.snapshot() if predicate(e)), None)

        return wait_for(found, timeout_s, f"{what} (audit log: {self.audit_path})")

    def stderr(self) -> str:
        return self.log_path.read_text()[-3000:]

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: no handler runs
        self.process.wait(timeout=30)
        self._reader.join(timeout=5)

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self._reader.join(timeout=5)
        return code


def executed(action: str):
    """Predicate: an audit event of an applied decision of this action."""
    return lambda e: (
        e.get("event") == "iteration"
        and e.get("executed")
        and (e.get("decision") or {}).get("action") == action
    )


def _die_with_parent() -> None:
    """Linux: SIGKILL the daemon if the test process dies first (no orphan left polling a dead server)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
