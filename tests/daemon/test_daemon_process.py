"""The daemon as a process: audit log on stdout, clean stop on SIGTERM, resume after kill -9."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from mape.knowledge_store import KnowledgeStore
from tests.daemon.daemon_cli import start_daemon, stderr_of


def _start(tmp_path: Path, *args: str) -> subprocess.Popen:
    return start_daemon(["run", "--knowledge", str(tmp_path / "k.sqlite"), *args], tmp_path, subprocess.PIPE)


def _events(
    process: subprocess.Popen, tmp_path: Path, until_iteration: int, deadline_s: float = 120
) -> list[dict]:
    """Read audit events until the given iteration has been logged (it was persisted before); a daemon
    that has not logged it within the deadline is killed, which ends the read and fails the test instead
    of hanging it, and so is one whose output breaks the read."""
    events = []
    watchdog = threading.Timer(deadline_s, process.kill)
    watchdog.start()
    try:
        for line in process.stdout:
            event = json.loads(line)
            events.append(event)
            if event["event"] == "iteration" and event["iteration"] >= until_iteration:
                return events
    except BaseException:
        process.kill()
        raise
    finally:
        watchdog.cancel()
    raise AssertionError(
        f"daemon ended or fell silent before iteration {until_iteration}: {stderr_of(tmp_path)}"
    )


def test_run_prints_one_audit_event_per_iteration_and_resumes(tmp_path: Path):
    first = _start(tmp_path, "--iterations", "5")
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, stderr_of(tmp_path)
    events = [json.loads(line) for line in out.splitlines()]
    iterations = [e for e in events if e["event"] == "iteration"]
    assert [e["iteration"] for e in iterations] == [1, 2, 3, 4, 5]
    assert all({"inputs", "capacity_rps", "decision", "timestamp"} <= set(e) for e in iterations)
    assert events[-1]["event"] == "daemon-stopped"

    second = _start(tmp_path, "--iterations", "2")
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0, stderr_of(tmp_path)
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["resumed_iteration"] == 5
    assert [e["iteration"] for e in events if e["event"] == "iteration"] == [6, 7]
    # informed by its store, it looks once two watch reads (310, 320 s) see the rate settled, then
    # iterates on its 60 s grid again
    assert [e["time_s"] for e in events if e["event"] == "iteration"] == [320.0, 360.0]
    assert [e["time_s"] for e in events if e["event"] == "first-look"] == [320.0]


def test_sigterm_finishes_the_iteration_persists_and_exits_0(tmp_path: Path):
    # speedup > 0 drives the loop with apscheduler: one 60 s iteration every 0.1 s of wall time
    process = _start(tmp_path, "--speedup", "600")
    _events(process, tmp_path, until_iteration=4)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, stderr_of(tmp_path)
    tail = [json.loads(line) for line in out.splitlines()]
    stopped = tail[-1]
    assert stopped["event"] == "daemon-stopped"
    logged = [e["iteration"] for e in tail if e["event"] == "iteration"] or [4]
    assert (
        KnowledgeStore(tmp_path / "k.sqlite").load().iteration
        == stopped["knowledge_iteration"]
        >= max(logged)
    )
    # a watch run skipped while an iteration holds the lock is the design, not a warning per skip
    assert "skipped" not in stderr_of(tmp_path)


@pytest.mark.parametrize("kill_after", [[3, 9, 20]])
def test_kill_9_at_any_moment_loses_nothing_learned(tmp_path: Path, kill_after: list[int]):
    store_path = tmp_path / "k.sqlite"
    previous_samples = 0
    previous_iteration = 0
    for target in kill_after:
        process = _start(tmp_path, "--speedup", "3000")
        events = _events(process, tmp_path, until_iteration=target)
        process.kill()  # SIGKILL: no handler runs, possibly in the middle of the next transaction
        process.wait(timeout=30)
        started = events[0]
        assert started["resumed_iteration"] == previous_iteration
        with sqlite3.connect(store_path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        knowledge = KnowledgeStore(store_path).load()
        assert knowledge.iteration >= target
        samples = knowledge.capacity.retired_n + sum(w.stats.n for w in knowledge.capacity.workers.values())
        assert samples >= previous_samples
        assert len(KnowledgeStore(store_path).decisions()) == knowledge.iteration
        previous_samples, previous_iteration = samples, knowledge.iteration
