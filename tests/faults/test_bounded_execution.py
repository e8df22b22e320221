"""Bounded execution: every start/rescale retry has a limit and a back-off, fails the iteration with a named
error, and gives up at once when the daemon is asked to stop (SIGTERM).

The Kubernetes API is kmock's emulator (no real API server can run here); a TaskManager that dies at start
is a stand-in `taskmanager.sh` that exits at once; a hanging API server is the fake HTTP server (no real
one can be made to hang)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from backends.kubernetes import (
    DeploymentScale,
    FlinkDeploymentScale,
    KubernetesTarget,
    NotLeader,
    api_client,
)
from backends.localflink import LocalFlinkCluster, LocalFlinkTarget, TaskManagersFailed
from backends.oversight import Oversight
from backends.retry import Interrupted, RetriesExhausted, stop_waiting, with_retries
from config.backends import KubernetesConfig
from config.schema import Config
from daemon.build import knowledge_settings, make_loop
from mape.knowledge_store import KnowledgeStore
from tests.backends.fake_http import raw_server, send_headers
from tests.backends.kube_emulator import KubeEmulator
from tests.faults.test_plausibility import _observation, _Source

REPO = Path(__file__).resolve().parents[2]
DIES_AT_START = """#!/bin/bash
# stands in for Flink's taskmanager.sh when the TaskManager cannot start (bad memory settings, no disk)
echo "started" >> "$(dirname "$0")/../started.log"
exit 1
"""


def _flink_home(tmp_path: Path, script: str = DIES_AT_START) -> Path:
    home = tmp_path / "flink"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "taskmanager.sh").write_text(script)
    (home / "bin" / "taskmanager.sh").chmod(0o755)
    return home


def _starts(home: Path) -> int:
    log = home / "started.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _run_bounded(call, limit_s: float = 60.0) -> tuple[BaseException | None, bool]:
    """Run `call` in a thread; (its exception, whether it returned at all within `limit_s`)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    return (outcome[0] if outcome else None), not thread.is_alive()


def test_a_taskmanager_that_dies_at_start_fails_the_rescale_after_a_few_attempts(tmp_path, fault):
    home = _flink_home(tmp_path)
    cluster = LocalFlinkCluster(home, home / "conf", tmp_path / "state", start_attempts=3, start_grace_s=0.2)
    error, returned = _run_bounded(lambda: cluster.scale_to(2))
    fault("execution", "bounded" if returned and isinstance(error, TaskManagersFailed) else "unbounded")
    assert returned and isinstance(error, TaskManagersFailed), error
    assert "2 of 2 TaskManagers died at start" in str(error)
    assert 2 <= _starts(home) <= 6  # at most start_attempts × missing, not hundreds a second
    assert len(list((tmp_path / "state").glob("taskmanager-*.log"))) <= 6
    assert cluster.taskmanagers() == []


def test_the_loop_names_the_failed_rescale_and_goes_on(tmp_path, fault):
    home = _flink_home(tmp_path)
    cluster = LocalFlinkCluster(home, home / "conf", tmp_path / "state", start_attempts=2, start_grace_s=0.1)
    target = LocalFlinkTarget(cluster, rest=None)
    config = Config()
    store = KnowledgeStore(":memory:")
    knowledge = store.load(knowledge_settings(config))
    loop = make_loop(config, _Source(_observation()), target, knowledge, store)
    decision = _ScaleOut(knowledge)
    loop.plan = decision
    try:
        results = [loop.iterate(3_600.0 + 60 * k) for k in range(2)]
    finally:
        knowledge.close()
    fault("execution", "bounded" if all("execute" in r.errors for r in results) else "crashed")
    assert all("TaskManagersFailed" in r.errors["execute"] for r in results)
    assert not any(r.executed for r in results)
    assert knowledge.iteration == 2  # the loop lived on


class _ScaleOut:
    """A plan that always wants 3 workers (to drive the execute phase)."""

    def __init__(self, knowledge) -> None:
        self.knowledge = knowledge

    def decide(self, assessment, knowledge):
        from messages.types import Decision

        return Decision(assessment.time_s, 1, 3, "test")


def test_sigterm_ends_a_start_in_back_off_without_waiting_it_out(tmp_path, fault):
    """The daemon's signal handling (daemon/schedule.py) around a rescale whose TaskManagers die: SIGTERM
    interrupts the back-off, so the iteration ends and the process exits within a second."""
    home = _flink_home(tmp_path)
    script = textwrap.dedent(
        f"""
        import sys, threading
        from pathlib import Path
        from backends.localflink import LocalFlinkCluster
        from daemon.schedule import stop_on_signals
        stop_on_signals(threading.Event())
        cluster = LocalFlinkCluster(Path({str(home)!r}), Path({str(home)!r}) / "conf",
                                    Path({str(tmp_path)!r}) / "state", start_attempts=5, start_grace_s=30)
        try:
            cluster.scale_to(2)
        except Exception as error:
            print(type(error).__name__, flush=True)
            sys.exit(3)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 60
        while _starts(home) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # poll: the first attempt has started both TaskManagers and waits
        assert _starts(home) == 2
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10.0)  # a hang bound (the grace is 30 s), not a speed goal
            exited_s = time.monotonic() - signalled
        except subprocess.TimeoutExpired:
            exited_s = None
    finally:
        process.kill()
        out = process.communicate()[0]
    fault("execution", "bounded" if exited_s is not None else "unbounded")
    assert exited_s is not None and exited_s < 10.0
    assert out.strip() == "Interrupted" and process.returncode == 3


@pytest.fixture
def kube():
    with KubeEmulator() as emulator:
        emulator.create_deployment("flink", "tm", replicas=2)
        yield emulator


@pytest.mark.parametrize("statuses", [(409,) * 50, (500,) * 50, (503,) * 50, (502, 409) * 25])
def test_a_kubernetes_api_that_keeps_failing_gives_up_with_a_named_error(kube, statuses, fault):
    kube.fail("PATCH", "/scale", *statuses)
    target = KubernetesTarget(DeploymentScale(kube.api(), "flink", "tm", 5.0), retries=3, backoff_s=0.01)
    error, returned = _run_bounded(lambda: target.scale_to(4, now_s=0.0))
    fault("kubernetes", "bounded" if returned and isinstance(error, RetriesExhausted) else "unbounded")
    assert isinstance(error, RetriesExhausted) and isinstance(error.__cause__, ApiException)
    assert error.__cause__.status == statuses[3]
    assert len(kube.requests("PATCH", "/scale")) == 4  # first try + 3 retries


def test_conflicts_then_success_land_the_patch(kube, fault):
    kube.fail("PATCH", "/scale", 409, 500)
    target = KubernetesTarget(DeploymentScale(kube.api(), "flink", "tm", 5.0), retries=3, backoff_s=0.01)
    target.scale_to(4, now_s=0.0)
    fault("kubernetes", "held" if kube.replicas("flink", "tm") == 4 else "lost")
    assert kube.replicas("flink", "tm") == 4


class _Silent:
    """Accepts connections and never answers (the fake HTTP server serves GET only; a PATCH must hang)."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.accepted.append(self.socket.accept()[0])

    def close(self) -> None:
        for connection in self.accepted:
            connection.close()
        self.socket.close()


def test_an_api_server_that_never_answers_times_out_each_try_and_gives_up(fault):
    from kubernetes import client

    server = _Silent()
    try:
        configuration = client.Configuration()
        configuration.host = server.url
        resource = DeploymentScale(client.ApiClient(configuration), "flink", "tm", 0.3)
        target = KubernetesTarget(resource, retries=2, backoff_s=0.01)
        error, returned = _run_bounded(lambda: target.scale_to(4, now_s=0.0))
    finally:
        server.close()
    fault("kubernetes", "bounded" if returned and isinstance(error, RetriesExhausted) else "unbounded")
    assert returned and isinstance(error, RetriesExhausted), error
    assert "ReadTimeoutError" in str(error) or "timed out" in str(error).lower()
    assert len(server.accepted) == 3  # first try + 2 retries, each given up after its timeout


def _kubeconfig(path: Path, url: str) -> KubernetesConfig:
    """Settings whose kubeconfig points at the API server at `url`."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: s\n"
        f"clusters: [{{name: s, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: s, user: {token: t}}]\ncontexts: [{name: s, context: {cluster: s, user: s}}]\n"
    )
    return KubernetesConfig(kubeconfig=str(path), namespace="flink", name="tm", request_timeout_s=0.3)


def test_the_daemons_client_tries_a_read_once_per_attempt(tmp_path, fault):
    """urllib3 retried each GET 3 times unseen: one call took 4 x its timeout, longer than a lease."""
    server = _Silent()
    try:
        settings = _kubeconfig(tmp_path / "kubeconfig", server.url)
        error, returned = _run_bounded(DeploymentScale(api_client(settings), "flink", "tm", 0.3).desired)
    finally:
        server.close()
    fault("kubernetes", "bounded" if returned and error is not None else "unbounded")
    assert returned and error is not None
    assert len(server.accepted) == 1


def test_oversight_of_an_api_server_that_never_answers_is_bounded(tmp_path, fault):
    """Its reads and Events had no timeout and run on the loop's thread every iteration."""
    server = _Silent()
    try:
        settings = _kubeconfig(tmp_path / "kubeconfig", server.url)
        oversight = Oversight(api_client(settings), settings)
        error, returned = _run_bounded(lambda: (oversight.blocked(), oversight.event("Test", "x")), 20.0)
    finally:
        server.close()
    fault("kubernetes", "bounded" if returned and error is None else "unbounded")
    assert returned and error is None


def test_a_lease_lost_while_retrying_stops_the_next_write(kube, fault):
    kube.fail("PATCH", "/scale", 503, 503, 503)
    leading = iter([True])  # the first attempt leads; the lease is lost before the retry

    class Lease:
        def is_leader(self) -> bool:
            return next(leading, False)

    resource = DeploymentScale(kube.api(), "flink", "tm", 5.0)
    target = KubernetesTarget(resource, retries=3, backoff_s=0.01, leadership=Lease())
    error, returned = _run_bounded(lambda: target.scale_to(4, now_s=0.0))
    patches = len(kube.requests("PATCH", "/scale"))
    fault("kubernetes", "held" if isinstance(error, NotLeader) and patches == 1 else "lost")
    assert returned and isinstance(error, NotLeader) and patches == 1


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"spec": {"replicas": "x"'])
def test_a_scale_answered_2xx_with_a_body_that_does_not_parse_was_applied(tmp_path, body, fault):
    """The body was parsed, raised after the scale had changed, and the loop took the rescale for failed."""

    def garbled(handler) -> None:
        handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        send_headers(handler, len(body))
        handler.wfile.write(body)

    with raw_server(garbled) as url:
        settings = _kubeconfig(tmp_path / "kubeconfig", url)
        target = KubernetesTarget(DeploymentScale(api_client(settings), "flink", "tm", 2.0), 2, 0.01)
        error, returned = _run_bounded(lambda: target.scale_to(4, now_s=0.0))
    fault("kubernetes", "held" if returned and error is None else "lost")
    assert returned and error is None, error


@pytest.mark.parametrize("parallelism", [True, -4, 2.7, 1e300, "4"])
def test_a_scaleout_that_is_no_whole_number_is_not_adopted(kube, parallelism, fault):
    """Each was adopted at start-up as a rescale in progress, holding the loop for the readiness timeout."""
    from kubernetes import client

    client.CustomObjectsApi(kube.api()).create_namespaced_custom_object(
        "flink.apache.org", "v1beta1", "flink", "flinkdeployments",
        {"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
         "metadata": {"name": "job", "namespace": "flink"}, "spec": {"job": {"parallelism": parallelism}}},
    )  # fmt: skip
    desired = FlinkDeploymentScale(kube.api(), "flink", "job", "spec.job.parallelism", 5.0).desired()
    fault("kubernetes", "held" if desired is None else "scaled-on-bad-data")
    assert desired is None


def test_a_retry_waiting_out_its_back_off_stops_at_once_on_sigterm(fault):
    def always_conflicting():
        raise ApiException(status=409, reason="Conflict")

    holder: dict = {}

    def call():
        holder["started"] = time.monotonic()
        with_retries(always_conflicting, retries=5, backoff_s=60.0)

    thread_error: list = []
    thread = threading.Thread(target=lambda: _catch(call, thread_error), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while "started" not in holder and time.monotonic() < deadline:
        time.sleep(0.01)
    stop_waiting()  # what the SIGTERM handler does
    thread.join(10.0)  # against a 60 s back-off
    fault("execution", "bounded" if not thread.is_alive() else "unbounded")
    assert not thread.is_alive() and isinstance(thread_error[0], Interrupted)


def _catch(call, errors: list) -> None:
    try:
        call()
    except BaseException as error:
        errors.append(error)


ROOM_FOR_TWO = """#!/bin/bash
# stands in for Flink's taskmanager.sh on a machine with room for two TaskManagers (mkdir is atomic: of
# those started at once, two get a place)
home="$(dirname "$0")/.."
mkdir "$home/place-1" 2>/dev/null || mkdir "$home/place-2" 2>/dev/null || exit 1
trap 'exit 0' TERM
while true; do sleep 0.1; done
"""


def test_taskmanagers_started_for_a_per_vertex_rescale_that_failed_to_start_are_stopped(tmp_path):
    """Of three TaskManagers a rescale needed, two started and the third kept dying: the two ran on for
    good, free of tasks, as nothing followed the rescale that failed."""
    from backends.localflink import LocalTaskManagers

    home = _flink_home(tmp_path, ROOM_FOR_TWO)
    cluster = LocalFlinkCluster(home, home / "conf", tmp_path / "state", start_attempts=2, start_grace_s=0.1)
    cluster.scale_to(1)
    try:
        with pytest.raises(TaskManagersFailed):
            LocalTaskManagers(cluster, rest=None).grow_to(3)
        assert len(cluster.taskmanagers()) == 1  # back to what ran before
    finally:
        for pid in cluster.taskmanagers():
            os.kill(pid, signal.SIGKILL)
