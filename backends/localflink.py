"""A standalone Flink cluster on this machine: JobManager and TaskManager processes foresail starts and stops.

In reactive mode the job runs at as many subtasks as there are TaskManagers (one slot each), so scaling is
starting or stopping TaskManager processes. Each runs `bin/taskmanager.sh start-foreground` (which execs
the JVM, so its pid is the JVM's) with the cluster's `FLINK_CONF_DIR`, its working directory at the
Flink home (TaskManagers resolve `usrlib/` from it) and its output in its own log file. The pids are kept
in a file, so a restarted daemon finds the TaskManagers it started (and adopts one it started but was
killed before writing down: found by its resource id and its `FLINK_PID_DIR`, the state directory).
Stopping sends SIGTERM and does not wait: the pid is kept in a second file and sent SIGKILL once it
still runs `stop_grace_s` later (checked whenever the TaskManagers are listed), like Flink's own
`taskmanager.sh stop`, which escalates after a timeout. Each TaskManager's console output goes to its own
log file; those of TaskManagers gone are deleted beyond the newest `kept_logs`.

Memory levels: TaskManagers start with the memory last set (dynamic properties
`-Dtaskmanager.memory.managed.size=…` and `-Dtaskmanager.memory.process.size=…`, kept in the state
directory); a memory change stops every TaskManager and starts the new count with the new memory, so the
job restarts once, like a rescale.

Per-vertex parallelism (`LocalFlinkVertexTarget`, the adaptive scheduler, not reactive mode): the
TaskManagers carry the slots and Flink's REST requirements set each vertex's parallelism
(backends/vertex_rescale.py). Each TaskManager starts with its own resource id
(`-Dtaskmanager.resource-id=foresail-…`, which the REST API shows as its id), so the ones left without
tasks after a scale-down are the ones stopped — after a rescale Flink places tasks on any TaskManager.

Starting is bounded: a TaskManager that dies at start (a bad configuration, no memory) is started again at
most `start_attempts` times in one rescale, with a doubling wait in between, then the rescale fails with
`TaskManagersFailed` (the iteration names it; the next one tries again). Every wait gives up at once when
the daemon is asked to stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog

from backends.flink_memory import dynamic_properties
from backends.flinkrest import BAD_ANSWER, FlinkRest
from backends.retry import wait_s
from backends.vertex_rescale import VertexExecution, VertexRescaler, remembered_release

TASKMANAGER_CLASS = "TaskManagerRunner"
JOBMANAGER_CLASS = "StandaloneApplicationClusterEntryPoint"
MEMORY_FILE = "taskmanager-memory.json"
RESOURCE_ID_KEY = "taskmanager.resource-id"
START_ATTEMPTS = 3
START_GRACE_S = 0.5
"""A started TaskManager must still run this long after its start (doubling per attempt) to count."""
STOP_GRACE_S = 30.0
"""A TaskManager sent SIGTERM gets this long to shut down before SIGKILL."""
KEPT_LOGS = 20
"""Log files of TaskManagers no longer running that are kept (the newest) for a post-mortem."""
RELEASE_FILE = "release-taskmanagers.json"


class TaskManagersFailed(RuntimeError):
    """TaskManagers kept dying at start: the rescale is given up for this iteration."""


OWN_ID_PREFIX = "foresail-"
"""The resource ids of the TaskManagers foresail starts begin with it (`foresail-taskmanager-<ns>`)."""


class LocalFlinkCluster:
    """The processes of one local cluster; the pid files in `state_dir` are the source of truth."""

    def __init__(
        self,
        flink_home: Path,
        conf_dir: Path,
        state_dir: Path,
        start_attempts: int = START_ATTEMPTS,
        start_grace_s: float = START_GRACE_S,
        stop_grace_s: float = STOP_GRACE_S,
        kept_logs: int = KEPT_LOGS,
    ) -> None:
        self.start_attempts = start_attempts
        self.start_grace_s = start_grace_s
        self.stop_grace_s = stop_grace_s
        self.kept_logs = kept_logs
        self.flink_home = Path(flink_home)
        self.conf_dir = Path(conf_dir)
        self.state_dir = Path(state_dir).resolve()  # spelt alike in every TaskManager's FLINK_PID_DIR
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.logs: dict[int, Path] = {}
        """Pid → log file of every process this object started."""
        if not (self.flink_home / "bin" / "taskmanager.sh").is_file():
            raise FileNotFoundError(
                f"no Flink distribution at {self.flink_home} (bin/taskmanager.sh missing)"
            )
        self._adopt_unlisted()

    # ---- TaskManagers ---------------------------------------------------------------------------
    def taskmanagers(self) -> list[int]:
        """Pids of the running TaskManagers, oldest first (dead ones are dropped from the file)."""
        self._finish_stopping()
        return self._alive("taskmanagers", TASKMANAGER_CLASS)

    def own_ids(self) -> set[str]:
        """The resource ids (Flink's REST ids) of the running TaskManagers this cluster started."""
        return {rid for pid in self.taskmanagers() if (rid := self.resource_id(pid)) is not None}

    def start_taskmanager(self) -> int:
        self._prune_logs()
        name = f"taskmanager-{time.time_ns()}"
        resource_id = f"-D{RESOURCE_ID_KEY}={OWN_ID_PREFIX}{name}"
        command = ["bin/taskmanager.sh", "start-foreground", resource_id, *self._memory_flags()]
        pid = self._spawn(command, name)
        self._append("taskmanagers", pid)
        return pid

    def memory(self) -> dict[str, float] | None:
        """The TaskManager memory last set ({'managed_mb', 'process_mb'}); None: Flink's configuration."""
        try:
            return json.loads((self.state_dir / MEMORY_FILE).read_text())
        except FileNotFoundError:
            return None

    def set_memory(self, managed_mb: float, process_mb: float) -> None:
        """The memory TaskManagers start with from now on (atomic, survives a daemon restart)."""
        temporary = self.state_dir / f"{MEMORY_FILE}.tmp"
        temporary.write_text(json.dumps({"managed_mb": managed_mb, "process_mb": process_mb}))
        temporary.replace(self.state_dir / MEMORY_FILE)

    def restart_taskmanagers(self, count: int) -> tuple[list[int], list[int]]:
        """Stop every TaskManager, then start `count` with the current memory; (started, stopped) pids."""
        stopped = []
        while (pid := self.stop_taskmanager()) is not None:
            stopped.append(pid)
        started, _ = self.scale_to(count)
        return started, stopped

    def _memory_flags(self) -> list[str]:
        memory = self.memory()
        if memory is None:
            return []
        return dynamic_properties(memory["managed_mb"], memory["process_mb"])

    def stop_taskmanager(self, pid: int | None = None) -> int | None:
        """SIGTERM to the TaskManager `pid` (default: the newest; Flink then rescales in); None when
        it does not run."""
        pids = self.taskmanagers()
        pid = pid if pid is not None else (pids[-1] if pids else None)
        if pid not in pids:
            return None
        self._write_stopping({**self._stopping(), pid: time.time()})  # first: a restart escalates too
        self._write("taskmanagers", [p for p in pids if p != pid])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        return pid

    def _finish_stopping(self) -> None:
        """SIGKILL to a stopped TaskManager that still runs `stop_grace_s` after its SIGTERM (the time is
        in the file, so a restarted daemon escalates too); gone ones leave the file."""
        listed, now_s = self._signalled(), time.time()
        stopping = {pid: t for pid, t in listed.items() if _is_process(pid, TASKMANAGER_CLASS)}
        for pid, signalled_s in stopping.items():
            if now_s - signalled_s >= self.stop_grace_s:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        left = {pid: t for pid, t in stopping.items() if now_s - t < self.stop_grace_s}
        if left != listed:
            self._write_stopping(left)

    def _stopping(self) -> dict[int, float]:
        """TaskManagers sent SIGTERM that still run → when (epoch seconds)."""
        return {pid: t for pid, t in self._signalled().items() if _is_process(pid, TASKMANAGER_CLASS)}

    def _signalled(self) -> dict[int, float]:
        try:
            lines = self._path("stopping").read_text().splitlines()
        except FileNotFoundError:
            return {}
        signalled = {}
        for line in lines:
            fields = line.split()
            with contextlib.suppress(ValueError, IndexError):
                signalled[int(fields[0])] = float(fields[1])
        return signalled

    def _write_stopping(self, signalled: dict[int, float]) -> None:
        temporary = self._path("stopping").with_suffix(".tmp")
        temporary.write_text("".join(f"{pid} {t:.3f}\n" for pid, t in signalled.items()))
        temporary.replace(self._path("stopping"))

    def _adopt_unlisted(self) -> None:
        """TaskManagers of this cluster that run but are in no pid file (the daemon was killed between
        starting one and writing its pid) are listed again, not left to run unseen."""
        listed = set(self._read("taskmanagers")) | set(self._stopping())
        marker = f"FLINK_PID_DIR={self.state_dir}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in listed:
                continue
            pid = int(entry.name)
            try:
                environment = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environment and self.resource_id(pid) and _is_process(pid, TASKMANAGER_CLASS):
                self._append("taskmanagers", pid)

    def _prune_logs(self) -> None:
        """Deletes the log files of TaskManagers gone, all but the newest `kept_logs`."""
        running = {
            f"{rid.removeprefix(OWN_ID_PREFIX)}.log"
            for pid in [*self._read("taskmanagers"), *self._stopping()]
            if (rid := self.resource_id(pid)) is not None
        }
        logs = sorted(self.state_dir.glob("taskmanager-*.log"), key=lambda p: p.stat().st_mtime)
        gone = [log for log in logs if log.name not in running]
        for log in gone[: max(0, len(gone) - self.kept_logs)]:
            log.unlink(missing_ok=True)

    @staticmethod
    def resource_id(pid: int) -> str | None:
        """The resource id a TaskManager was started with (its id in Flink's REST API); None: unknown."""
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return None
        prefix = f"-D{RESOURCE_ID_KEY}="
        return next((a.removeprefix(prefix) for a in arguments if a.startswith(prefix)), None)

    def scale_to(self, count: int) -> tuple[list[int], list[int]]:
        """Start or stop TaskManagers until `count` run; returns (started, stopped) pids.

        Raises `TaskManagersFailed` when started ones keep dying (see the module docstring)."""
        started, stopped = [], []
        for attempt in range(self.start_attempts):
            missing = count - len(self.taskmanagers())
            if missing <= 0:
                break
            started.extend(self.start_taskmanager() for _ in range(missing))
            wait_s(self.start_grace_s * 2**attempt)  # those that die at start are gone by then
        else:
            missing = count - len(self.taskmanagers())
            if missing > 0:
                raise TaskManagersFailed(
                    f"{missing} of {count} TaskManagers died at start, {len(started)} started in "
                    f"{self.start_attempts} attempts; see the taskmanager-*.log files in {self.state_dir}"
                )
        while len(self.taskmanagers()) > count:
            pid = self.stop_taskmanager()
            if pid is not None:
                stopped.append(pid)
        return started, stopped

    # ---- JobManager (application mode: the job starts with it) ---------------------------------
    def start_application(self, job_class: str, args: list[str]) -> int:
        command = ["bin/standalone-job.sh", "start-foreground", "--job-classname", job_class, *args]
        pid = self._spawn(command, "jobmanager")
        self._write("jobmanager", [pid])
        return pid

    def jobmanager(self) -> int | None:
        alive = self._alive("jobmanager", JOBMANAGER_CLASS)
        return alive[0] if alive else None

    def stop_all(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every process of the cluster, then SIGKILL what still runs after `timeout_s`."""
        pids = [*self._stopping(), *self.taskmanagers()] + [p for p in [self.jobmanager()] if p]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(_running(p) for p in pids):
            time.sleep(0.2)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._write("taskmanagers", [])
        self._write_stopping({})
        self._write("jobmanager", [])
        (self.state_dir / RELEASE_FILE).unlink(missing_ok=True)  # the cluster's job is gone with it

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _spawn(self, command: list[str], log_name: str) -> int:
        log_path = self.state_dir / f"{log_name}.log"
        env = {**os.environ, "FLINK_CONF_DIR": str(self.conf_dir), "FLINK_PID_DIR": str(self.state_dir)}
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                command,
                cwd=self.flink_home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C on the terminal is the caller's to handle
                preexec_fn=self._before_exec(),
            )
        self.logs[process.pid] = log_path
        return process.pid

    def _before_exec(self) -> Callable[[], None] | None:
        """What a started process runs before Flink's script: nothing here, the daemon's processes outlive
        it and a restarted daemon adopts them."""
        return None

    def _alive(self, name: str, java_class: str) -> list[int]:
        pids = [pid for pid in self._read(name) if _is_process(pid, java_class)]
        if pids != self._read(name):
            self._write(name, pids)
        return pids

    def _path(self, name: str) -> Path:
        return self.state_dir / f"{name}.pids"

    def _read(self, name: str) -> list[int]:
        try:
            return [int(line) for line in self._path(name).read_text().split() if line.strip()]
        except FileNotFoundError:
            return []

    def _write(self, name: str, pids: list[int]) -> None:
        temporary = self._path(name).with_suffix(".tmp")
        temporary.write_text("".join(f"{pid}\n" for pid in pids))
        temporary.replace(self._path(name))  # atomic: a killed daemon leaves the old or the new list

    def _append(self, name: str, pid: int) -> None:
        self._write(name, [*self._read(name), pid])


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _is_process(pid: int, java_class: str) -> bool:
    """The pid runs and is still ours. Each process was started as a session leader, which its exec'd
    JVM stays; a pid reused by an unrelated process is told apart by that and by its command line
    (while the launcher script execs the next step the command line can read empty)."""
    if not _running(pid):
        return False
    try:
        if os.getsid(pid) != pid:
            return False
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    markers = (java_class, "taskmanager.sh", "standalone-job.sh", "flink-console.sh")
    return not command.strip() or any(marker in command for marker in markers)


class LocalFlinkTarget:
    """`ScalingTarget` for a local reactive-mode cluster: the scale-out is the number of TaskManagers."""

    def __init__(
        self,
        cluster: LocalFlinkCluster,
        rest: FlinkRest,
        log: structlog.typing.FilteringBoundLogger | None = None,
        process_base_mb: float = 1890.0,
    ) -> None:
        self.cluster = cluster
        self.rest = rest
        self.log = log or structlog.get_logger("foresail.target")
        self.process_base_mb = process_base_mb
        self._foreign_said = False

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None:
        """Restart the TaskManagers, `scaleout` of them, with `managed_mb` managed memory each."""
        process_mb = self.process_base_mb + managed_mb
        self.cluster.set_memory(managed_mb, process_mb)
        own, _ = self._shares(scaleout)  # theirs keep their memory: only foresail's are restarted
        started, stopped = self.cluster.restart_taskmanagers(own)
        self.log.info(
            "local-flink-reconfigured",
            scaleout=scaleout,
            managed_mb=managed_mb,
            process_mb=process_mb,
            started=started,
            stopped=stopped,
            time_s=now_s,
        )

    def configured_managed_mb(self) -> float | None:
        """The managed memory TaskManagers start with from now on; None: Flink's own configuration."""
        memory = self.cluster.memory()
        return None if memory is None else memory["managed_mb"]

    def scale_to(self, scaleout: int, now_s: float) -> None:
        own, foreign = self._shares(scaleout)
        started, stopped = self.cluster.scale_to(own)
        self.log.info(
            "local-flink-scaled",
            scaleout=scaleout,
            started=started,
            stopped=stopped,
            foreign_taskmanagers=foreign,
            time_s=now_s,
        )

    def _shares(self, scaleout: int) -> tuple[int, int]:
        """foresail's TaskManagers of `scaleout`, and those it did not start (which count toward it)."""
        foreign = self.foreign_taskmanagers() or 0
        return max(0, scaleout - foreign), foreign

    def desired(self) -> int | None:
        """TaskManagers that run (or start) now: what the cluster is being scaled to; None while the
        JobManager does not say which TaskManagers it has."""
        foreign = self.foreign_taskmanagers()
        return None if foreign is None else len(self.cluster.taskmanagers()) + foreign

    def foreign_taskmanagers(self) -> int | None:
        """TaskManagers registered with the JobManager that this cluster did not start (Flink's scripts
        started them): they count toward the scale-out and stay, as foresail stops only its own; None when
        the REST API does not answer."""
        try:
            registered = set(self.rest.taskmanager_tasks())
        except BAD_ANSWER:
            return None
        # not by the pid file: one of ours that died is listed until its heartbeat times out
        foreign = sum(1 for rid in registered if not rid.startswith(OWN_ID_PREFIX))
        if foreign and not self._foreign_said:
            self._foreign_said = True
            self.log.warning(
                "local-flink-foreign-taskmanagers",
                count=foreign,
                reason="registered TaskManagers foresail did not start: they count toward the scale-out and "
                "are never stopped (the scale-out cannot go below them)",
            )
        return foreign

    def ready(self, scaleout: int) -> bool:
        """The job runs at `scaleout` (Flink's REST API); false while it restarts or cannot be reached."""
        status = self.rest.job_status()
        return status is not None and status.running and status.parallelism == scaleout


class LocalTaskManagers:
    """`TaskManagerPool` of a local cluster: processes, told apart in Flink's REST API by resource id."""

    def __init__(self, cluster: LocalFlinkCluster, rest: FlinkRest) -> None:
        self.cluster = cluster
        self.rest = rest

    def grow_to(self, count: int) -> int:
        before = len(self.cluster.taskmanagers())
        if before < count:
            try:
                self.cluster.scale_to(count)
            except TaskManagersFailed:  # those that did start hold no task (nothing was PUT): stopped
                self.cluster.scale_to(before)
                raise
        return before

    def registered(self) -> int:
        """This cluster's TaskManagers registered with the JobManager (not a killed one Flink still lists
        until its heartbeat times out, nor one that Flink's scripts started)."""
        try:
            registered = set(self.rest.taskmanager_tasks())
        except BAD_ANSWER:
            return 0
        return len(registered & self.cluster.own_ids())

    def shrink_to(self, count: int) -> bool:
        pids = self.cluster.taskmanagers()
        surplus = len(pids) - count
        if surplus <= 0:
            return True
        tasks = self.rest.taskmanager_tasks()
        free = [pid for pid in reversed(pids) if tasks.get(self.cluster.resource_id(pid) or "") == 0]
        for pid in free[:surplus]:
            self.cluster.stop_taskmanager(pid)
        return len(free) >= surplus

    def pending_release(self) -> tuple[int, str] | None:
        # none, or a file cut short: no release is better than a wrong one
        try:
            remembered = json.loads((self.cluster.state_dir / RELEASE_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return remembered_release(remembered)

    def remember_release(self, count: int | None, job_id: str | None) -> None:
        path = self.cluster.state_dir / RELEASE_FILE
        if count is None:
            path.unlink(missing_ok=True)
            return
        path.with_suffix(".tmp").write_text(json.dumps({"count": count, "job": job_id}))
        path.with_suffix(".tmp").replace(path)


class LocalFlinkVertexTarget(LocalFlinkTarget):
    """`VertexScalingTarget` for a local cluster on the adaptive scheduler: TaskManager processes carry the
    slots, Flink's REST requirements each vertex's parallelism (see the module docstring)."""

    def __init__(self, cluster: LocalFlinkCluster, rest: FlinkRest, **options) -> None:
        super().__init__(cluster, rest, **options)
        self.execution = VertexExecution(
            VertexRescaler(rest, log=self.log), LocalTaskManagers(cluster, rest), self.log
        )

    def scale_vertices(self, vertex_parallelism: Mapping[str, int], taskmanagers: int, now_s: float) -> None:
        self.execution.scale_vertices(vertex_parallelism, taskmanagers)
        self.log.info(
            "local-flink-vertices-requested",
            vertex_parallelism=dict(vertex_parallelism),
            taskmanagers=taskmanagers,
            time_s=now_s,
        )

    def desired(self) -> None:
        """Nothing to adopt at start-up: a per-vertex PUT is absolute, so deciding again is safe."""
        return None

    def scale_to(self, scaleout: int, now_s: float) -> None:
        """TaskManagers alone (the plan clamped a configuration to max_scaleout): started, or stopped only
        where they hold no task, never under a running subtask."""
        pool = LocalTaskManagers(self.cluster, self.rest)
        if scaleout > len(self.cluster.taskmanagers()):
            pool.grow_to(scaleout)
        else:
            pool.shrink_to(scaleout)
        self.log.info("local-flink-taskmanagers", scaleout=scaleout, time_s=now_s)
