"""`foresail plan-capacity --testbed local-flink` in a hostile environment: signals, a second run on the
same --out, an orphaned cluster, processes that die, a machine too small, a FLINK_HOME that is no Flink.

No JVM runs: a stub FLINK_HOME's scripts announce their pid on a FIFO and idle under the name of the
Flink class the testbed looks for; the test waits on the FIFO and on pidfds, never on a sleep."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

import backends.standalone as standalone
import planning.flink_testbed as flink_testbed
from backends.localflink import LocalFlinkCluster
from daemon.cli import main
from daemon.plan_commands import STOP_SIGNALS, _stop_on_signals, _Stopped
from mape.knowledge_store import KnowledgeStore
from planning.flink_testbed import FlinkTestbedError, FlinkTestbedSettings, LocalFlinkTestbed

REPO = Path(__file__).resolve().parents[2]
STUB = {
    "standalone-job.sh": 'echo "jm $$" > "$STUB_FIFO"\nexec -a "java StandaloneApplicationClusterEntryPoint" sleep 300\n',
    "taskmanager.sh": 'echo "tm $$" > "$STUB_FIFO"\nexec -a "java TaskManagerRunner" sleep 300\n',
}
"""The stub's launchers: `exec -a` gives the idle process the command line of Flink's JVM."""


def _stub_flink(root: Path) -> Path:
    """A FLINK_HOME whose processes only idle (and a PATH whose javac fails fast: the shipped jar stays)."""
    home = root / "flink"
    for folder in ("bin", "lib", "conf", "usrlib", "path"):
        (home / folder).mkdir(parents=True)
    for name, body in STUB.items():
        (home / "bin" / name).write_text(f"#!/bin/bash\n{body}")
        (home / "bin" / name).chmod(0o755)
    for name in ("log4j-console.properties", "log4j.properties", "logback-console.xml", "config.yaml"):
        (home / "conf" / name).write_text("")
    (home / "lib" / "flink-dist-stub.jar").write_bytes(b"")
    (home / "usrlib" / standalone.LOAD_JOB_JAR).write_bytes(b"")
    (home / "path" / "javac").write_text("#!/bin/sh\nexit 1\n")
    (home / "path" / "javac").chmod(0o755)
    return home


class Announcements:
    """The stub processes' `jm PID` / `tm PID` lines. Opened read-write, so writers never block and a
    read waits for data only."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self.buffer = b""
        self.pids: list[int] = []

    def next(self, timeout_s: float = 60.0) -> tuple[str, int]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            if not select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise AssertionError(f"no stub process announced itself within {timeout_s:.0f} s")
            self.buffer += os.read(self.fd, 4096)
        line, self.buffer = self.buffer.split(b"\n", 1)
        role, pid = line.decode().split()
        self.pids.append(int(pid))
        return role, int(pid)

    def until(self, role: str) -> int:
        while (got := self.next())[0] != role:
            pass
        return got[1]

    def close(self) -> None:
        """SIGKILL what the test's planners left (by pid: the test's own stubs only)."""
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.close(self.fd)


def _exits_within(pid: int, timeout_s: float) -> bool:
    """The process (any, not only a child) exits within `timeout_s`: a pidfd turns readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


@pytest.fixture
def stub(tmp_path):
    home = _stub_flink(tmp_path)
    announcements = Announcements(tmp_path / "announce")
    env = {
        **os.environ,
        "FLINK_HOME": str(home),
        "STUB_FIFO": str(announcements.path),
        "PATH": f"{home / 'path'}:{os.environ['PATH']}",
    }
    yield home, announcements, env
    announcements.close()


def _planner(out: Path, env: dict[str, str]) -> subprocess.Popen:
    argv = ["plan-capacity", "--testbed", "local-flink", "--target-rate", "200", "--budget-max", "2"]
    argv += ["--max-measurements", "4", "--memory-profiles", "64", "--out", str(out)]
    code = (  # the stub's processes take no memory: the machine's must not refuse the budget
        "import sys, planning.flink_testbed as t; t.available_memory_mb = lambda: float('inf'); "
        "from daemon.cli import main; sys.exit(main())"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _finish(planner: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = planner.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        planner.kill()
        planner.communicate()
        raise
    return planner.returncode, err.decode()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_stops_the_testbed_cluster_and_says_so_in_one_line(signum, stub, tmp_path):
    """Both left the JobManager and TaskManagers (~1 GB) running: no handler, so no close()."""
    _, announcements, env = stub
    planner = _planner(tmp_path / "out", env)
    jobmanager, taskmanager = announcements.until("jm"), announcements.until("tm")
    planner.send_signal(signum)
    code, err = _finish(planner)

    assert code == 128 + signum
    assert err.strip().splitlines() == [
        f"foresail plan-capacity: stopped by {signal.Signals(signum).name}; the testbed cluster was "
        "stopped, no plan was written"
    ]
    assert _exits_within(jobmanager, 10) and _exits_within(taskmanager, 10)


def test_a_stop_that_lands_in_a_finalizer_is_delivered_again_to_the_run():
    """A Ctrl-C handled while `Popen.__del__` ran was printed and dropped by Python, and with the signals
    then ignored the run went on (CI: the double Ctrl-C test hung for its 60 s)."""

    class Finalized:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside the finalizer

    handlers = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    try:
        with pytest.raises(_Stopped), _stop_on_signals():
            Finalized()  # collected at once
            for _ in range(200):  # the run goes on: the stop must reach it (it is sent again)
                time.sleep(0.01)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)


def test_a_double_ctrl_c_is_one_line_and_exit_130(stub, tmp_path):
    """It printed a KeyboardInterrupt traceback (a second one inside the cluster's stop)."""
    _, announcements, env = stub
    planner = _planner(tmp_path / "out", env)
    taskmanager = announcements.until("tm")
    planner.send_signal(signal.SIGINT)
    planner.send_signal(signal.SIGINT)
    code, err = _finish(planner)

    assert code == 130
    assert err.strip().splitlines() == [
        "foresail plan-capacity: interrupted; the testbed cluster was stopped, no plan was written"
    ]
    assert _exits_within(taskmanager, 10)


def test_the_testbed_cluster_dies_with_a_killed_planner(stub, tmp_path):
    """SIGKILL runs no handler: the processes die with their parent (PR_SET_PDEATHSIG)."""
    _, announcements, env = stub
    planner = _planner(tmp_path / "out", env)
    jobmanager, taskmanager = announcements.until("jm"), announcements.until("tm")
    planner.kill()
    planner.communicate()

    assert _exits_within(jobmanager, 10) and _exits_within(taskmanager, 10)


def test_a_second_run_on_the_same_out_is_refused_and_leaves_the_first_alone(
    stub, tmp_path, monkeypatch, capsys
):
    """The second run took the first one's deployment directory, adopted its pids and killed them."""
    home, announcements, env = stub
    out = tmp_path / "out"
    first = _planner(out, env)
    taskmanager = announcements.until("tm")
    monkeypatch.setenv("FLINK_HOME", str(home))
    monkeypatch.setattr(standalone, "build_load_job", lambda *_: None)
    monkeypatch.setattr(LocalFlinkCluster, "start_application", _must_not_start)
    argv = ["plan-capacity", "--testbed", "local-flink", "--target-rate", "200", "--budget-max", "2"]
    try:
        code = main([*argv, "--memory-profiles", "64", "--out", str(out)])
        alive = not _exits_within(taskmanager, 0)
    finally:
        first.send_signal(signal.SIGTERM)
        _finish(first)

    err = capsys.readouterr().err
    assert code == 1 and "another plan-capacity run is using the directory" in err
    assert len(err.strip().splitlines()) == 1
    assert alive, "the first run's TaskManager was stopped by the second run"


def _must_not_start(*_):
    raise RuntimeError("a cluster was started")


def test_an_orphaned_cluster_of_an_earlier_run_is_stopped_not_adopted(stub, tmp_path, monkeypatch):
    """A rerun after a killed planner counted the orphans' pids as its own TaskManagers."""
    home, _, _ = stub
    workdir = tmp_path / "out" / "testbed"
    state = workdir / "deployment-1-1x64mb" / "state"
    state.mkdir(parents=True)
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "TaskManagerRunner"], start_new_session=True
    )
    try:
        (state / "taskmanagers.pids").write_text(f"{orphan.pid}\n")
        monkeypatch.setattr(LocalFlinkCluster, "start_application", _must_not_start)
        bed = LocalFlinkTestbed(FlinkTestbedSettings(home, workdir, 100.0))
        with pytest.raises(RuntimeError, match="a cluster was started"):
            bed.deploy(1, 64)
        assert _exits_within(orphan.pid, 0)
    finally:
        orphan.kill()
        orphan.wait()


def test_a_failed_run_does_not_leave_the_earlier_plan_as_its_result(tmp_path, monkeypatch, capsys):
    """The earlier plan.json, deployment.yaml, surrogate.png and store stayed as if this run made them."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("plan.json", "deployment.yaml", "surrogate.png"):
        (out / name).write_text("earlier")
    KnowledgeStore(out / "knowledge.db").close()
    monkeypatch.setenv("FLINK_HOME", str(tmp_path / "no-flink"))
    argv = ["plan-capacity", "--testbed", "local-flink", "--target-rate", "200", "--out", str(out)]
    assert main(argv) == 1

    err = capsys.readouterr().err
    assert f"the earlier run's outputs are in {out / 'previous'}" in err and len(err.splitlines()) == 1
    assert not any((out / name).exists() for name in ("plan.json", "deployment.yaml", "knowledge.db"))
    assert (out / "previous" / "plan.json").read_text() == "earlier"
    assert (out / "previous" / "knowledge.db").is_file()


def _fake_jdk(monkeypatch, javac_errors: str = "") -> None:
    def run(command, **_):
        if command[0] == "jar":
            Path(command[2]).write_bytes(b"jar")
        return subprocess.CompletedProcess(command, 1 if javac_errors else 0, "", javac_errors)

    monkeypatch.setattr(standalone.subprocess, "run", run)


def test_the_jar_is_staged_in_usrlib_so_a_build_on_another_file_system_installs(tmp_path, monkeypatch):
    """--out on another file system than FLINK_HOME: `[Errno 18] Invalid cross-device link` traceback."""
    real_replace = os.replace

    def replace(source, target):  # the build directory on another file system than usrlib/
        if Path(source).parent != Path(target).parent:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_replace(source, target)

    (tmp_path / "flink").mkdir()
    _fake_jdk(monkeypatch)
    monkeypatch.setattr(standalone.os, "replace", replace)
    jar = standalone.build_load_job(tmp_path / "flink", tmp_path / "elsewhere" / "build")

    assert jar.read_bytes() == b"jar" and sorted(p.name for p in jar.parent.iterdir()) == [jar.name]


def test_javac_errors_are_one_line_naming_the_build_directory(tmp_path, monkeypatch):
    """A FLINK_HOME that is no distribution dumped 353 lines of javac errors."""
    _fake_jdk(monkeypatch, javac_errors="TraceLoadJob.java:1: error: package does not exist\n" * 353)
    with pytest.raises(RuntimeError) as raised:
        standalone.build_load_job(tmp_path / "flink", tmp_path / "build")

    assert len(str(raised.value).splitlines()) == 1 and str(tmp_path / "build") in str(raised.value)
    assert len((tmp_path / "build" / "javac.log").read_text().splitlines()) == 353


def test_an_installed_foresail_without_the_load_jobs_source_says_where_it_is(tmp_path, monkeypatch):
    """`pip install .` ships no jobs/ folder: javac was handed a path that does not exist."""
    _fake_jdk(monkeypatch)
    monkeypatch.setattr(
        standalone, "LOAD_JOB_SOURCE", tmp_path / "site-packages" / "jobs" / "TraceLoadJob.java"
    )
    with pytest.raises(RuntimeError, match="ships with a checkout") as raised:
        standalone.build_load_job(tmp_path / "flink", tmp_path / "build")
    assert len(str(raised.value).splitlines()) == 1


def test_a_flink_home_without_flink_dist_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "fake" / "bin").mkdir(parents=True)
    (tmp_path / "fake" / "bin" / "taskmanager.sh").write_text("")
    monkeypatch.setenv("FLINK_HOME", str(tmp_path / "fake"))
    argv = ["plan-capacity", "--testbed", "local-flink", "--target-rate", "100", "--out", str(tmp_path / "o")]
    assert main(argv) == 1

    err = capsys.readouterr().err
    assert "lib/flink-dist*.jar" in err and len(err.strip().splitlines()) == 1


def test_a_flink_home_that_cannot_be_written_is_one_line(stub, tmp_path, monkeypatch, capsys):
    home, _, _ = stub
    (home / "usrlib" / standalone.LOAD_JOB_JAR).unlink()

    def read_only(*_):
        raise PermissionError(errno.EACCES, "Permission denied", str(home / "usrlib"))

    monkeypatch.setenv("FLINK_HOME", str(home))
    monkeypatch.setattr(standalone, "build_load_job", read_only)
    argv = ["plan-capacity", "--testbed", "local-flink", "--target-rate", "100", "--out", str(tmp_path / "o")]
    assert main(argv) == 1

    err = capsys.readouterr().err
    assert f"Permission denied: {home / 'usrlib'}" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--budget-min", "63", "--budget-max", "64", "--memory-profiles", "158"],
            "--budget-max 64: local-flink runs a 1,118 MB TaskManager per slot (memory profile 158 MB) beside "
            "a 768 MB JobManager, and this machine has 23,682 MB available: at most 20 slots",
        ),
        (["--memory-profiles", "1000000"], "at most 0 slots"),
    ],
    ids=["budget", "memory-profile"],
)
def test_a_budget_the_machine_cannot_hold_is_refused_before_any_process(
    extra, message, stub, tmp_path, monkeypatch, capsys
):
    """63 TaskManagers of 1,118 MB were started on a 23 GB machine; a memory profile no TaskManager can
    start with waited 180 s, then blamed the job."""
    home, _, _ = stub
    monkeypatch.setenv("FLINK_HOME", str(home))
    monkeypatch.setattr(flink_testbed, "available_memory_mb", lambda: 23_682.0, raising=False)
    monkeypatch.setattr(standalone, "build_load_job", lambda *_: None)
    monkeypatch.setattr(LocalFlinkCluster, "start_application", _must_not_start)
    argv = ["plan-capacity", "--testbed", "local-flink", "--target-rate", "200", "--out", str(tmp_path / "o")]
    assert main([*argv, *extra]) == 2

    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


class FakeCluster:
    """The processes of a deployment as the testbed sees them."""

    def __init__(self, state_dir: Path, taskmanagers: list[int], jobmanager: int | None = 1) -> None:
        self.state_dir = state_dir
        self.alive = taskmanagers
        self.running_jobmanager = jobmanager
        self.logs = {pid: state_dir / f"taskmanager-{pid}.log" for pid in (7, 8)}

    def jobmanager(self) -> int | None:
        return self.running_jobmanager

    def taskmanagers(self) -> list[int]:
        return list(self.alive)

    def stop_all(self) -> None:
        pass


def _deployed(tmp_path, cluster: FakeCluster) -> LocalFlinkTestbed:
    bed = LocalFlinkTestbed(FlinkTestbedSettings(tmp_path, tmp_path, 100.0, start_timeout_s=5.0))
    bed._cluster, bed._started = cluster, [7, 8]
    bed._vertices = [("v-source", "source", 2, 0)]
    return bed


def test_a_taskmanager_dead_at_start_is_named_at_once(tmp_path):
    """Flink's memory check killed it; the run waited 180 s and blamed the job's parallelism."""
    bed = _deployed(tmp_path, FakeCluster(tmp_path, [7]))
    with pytest.raises(FlinkTestbedError) as raised:
        bed._await(lambda: None, tmp_path, "the job running at parallelism 2")

    assert (
        str(raised.value) == f"1 of 2 TaskManagers exited; the log of one: {tmp_path / 'taskmanager-8.log'}"
    )


def test_a_taskmanager_killed_mid_measurement_is_named_not_the_job(tmp_path, monkeypatch):
    """It said Flink served no consistent metrics, or the job was not foresail's load job."""
    bed = _deployed(tmp_path, FakeCluster(tmp_path, [8]))
    monkeypatch.setattr(flink_testbed, "FRESH_TIMEOUT_S", 0.0)
    monkeypatch.setattr(flink_testbed, "POLL_S", 0.0)
    monkeypatch.setattr(bed, "_vertex_metrics", lambda _: {"0.clockMs": 1.0})
    with pytest.raises(FlinkTestbedError) as raised:
        bed._counters()

    assert (
        str(raised.value) == f"1 of 2 TaskManagers exited; the log of one: {tmp_path / 'taskmanager-7.log'}"
    )


def test_a_jobmanager_killed_mid_measurement_is_named_not_a_connection_error(tmp_path, monkeypatch):
    """It was a raw ConnectionError(MaxRetryError(...))."""
    bed = _deployed(tmp_path, FakeCluster(tmp_path, [7, 8], jobmanager=None))

    def refused(*_):
        raise requests.ConnectionError("Connection refused")

    monkeypatch.setattr(bed, "_get", refused)
    with pytest.raises(FlinkTestbedError) as raised:
        bed._vertex_metrics("v-source")

    assert str(raised.value) == f"the JobManager exited; its log: {tmp_path / 'jobmanager.log'}"
