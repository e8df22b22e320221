"""The local cluster's process bookkeeping: a TaskManager that ignores SIGTERM, one started by a daemon
killed before it wrote the pid down, log files that would pile up, the release count a restarted daemon
needs. The TaskManagers are stand-in `taskmanager.sh` scripts (what is tested is the bookkeeping around
the process, which real Flink exercises in tests/e2e)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from backends.localflink import RELEASE_FILE, LocalFlinkCluster, LocalTaskManagers, _running

RUNS = """#!/bin/bash
trap 'exit 0' TERM
while true; do sleep 0.1; done
"""
IGNORES_SIGTERM = """#!/bin/bash
trap '' TERM
while true; do sleep 0.1; done
"""


@pytest.fixture
def cluster_of(tmp_path: Path):
    """Makes clusters over one stand-in Flink home and state directory; kills what they started."""
    made: list[LocalFlinkCluster] = []

    def make(script: str = RUNS, **options) -> LocalFlinkCluster:
        home = tmp_path / "flink"
        (home / "bin").mkdir(parents=True, exist_ok=True)
        (home / "bin" / "taskmanager.sh").write_text(script)
        (home / "bin" / "taskmanager.sh").chmod(0o755)
        cluster = LocalFlinkCluster(home, home / "conf", tmp_path / "state", start_grace_s=0.05, **options)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        for pid in [*cluster.taskmanagers(), *cluster._stopping()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether the process has ended (polled: a kill is asynchronous), within a bound against a hang."""
    deadline = time.monotonic() + within_s
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_taskmanager_that_ignores_sigterm_is_killed_after_the_grace_even_by_a_restarted_daemon(cluster_of):
    cluster = cluster_of(IGNORES_SIGTERM, stop_grace_s=3600.0)
    (pid,) = cluster.scale_to(1)[0]
    assert cluster.stop_taskmanager() == pid
    assert cluster.taskmanagers() == [] and _running(pid)  # within its grace: left to shut down
    assert list(cluster._stopping()) == [pid]
    restarted = cluster_of(IGNORES_SIGTERM, stop_grace_s=0.0)  # the grace is over when it looks
    restarted.taskmanagers()
    assert _gone(pid) and restarted._stopping() == {}


def test_a_taskmanager_started_by_a_daemon_killed_before_it_wrote_the_pid_is_adopted(cluster_of):
    cluster = cluster_of()
    started, _ = cluster.scale_to(2)
    cluster._write("taskmanagers", started[:1])  # as if the daemon died between spawn and write
    restarted = cluster_of()
    assert sorted(restarted.taskmanagers()) == sorted(started)
    restarted.scale_to(0)
    assert all(_gone(pid) for pid in started)


def test_logs_of_taskmanagers_gone_are_kept_only_up_to_the_newest_few(cluster_of):
    cluster = cluster_of(kept_logs=2)
    stopped = []
    for _ in range(4):
        cluster.scale_to(3)
        stopped += cluster.scale_to(1)[1]
    assert all(_gone(pid) for pid in stopped)
    cluster.scale_to(2)  # a start prunes (the running ones' logs stay)
    logs = {p.name for p in cluster.state_dir.glob("taskmanager-*.log")}
    own = {f"{cluster.resource_id(pid).removeprefix('foresail-')}.log" for pid in cluster.taskmanagers()}
    assert own <= logs and len(logs) == 2 + 2


def test_the_release_survives_in_the_state_directory_until_the_cluster_stops(cluster_of):
    cluster = cluster_of()
    pool = LocalTaskManagers(cluster, rest=None)
    assert pool.pending_release() is None
    pool.remember_release(3, "job-a")
    assert LocalTaskManagers(cluster_of(), rest=None).pending_release() == (3, "job-a")
    broken = ('{"count": 3', "3", '{"count": true, "job": "a"}', '{"count": -2, "job": "a"}', '{"count": 2}')
    for text in broken:
        (cluster.state_dir / RELEASE_FILE).write_text(text)
        assert pool.pending_release() is None
    pool.remember_release(2, "job-a")
    cluster.stop_all(timeout_s=0.0)  # the job goes with its cluster: nothing left for the next one
    assert pool.pending_release() is None
