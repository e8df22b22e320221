"""The real stack the end-to-end tests start: Flink 2.3 (from the PyPI wheels), Prometheus, the load job.

Flink is found at $FLINK_HOME or installed on first use (`pip install --no-deps --target`, as .ci/run
does) into a directory apart from the app's environment; Prometheus is Debian's package. Ports are picked
free at start so two runs on one machine do not collide.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests

from backends.flinkrest import FlinkRest, JobStatus
from backends.localflink import LocalFlinkCluster
from backends.standalone import (
    LOAD_JOB_CLASS,
    TraceFile,
    build_load_job,
    cluster_settings,
    free_port,
    free_port_range,
    write_conf,
)
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
FLINK_VERSION = "2.3.0"
_STACK_DIR = (
    Path("/opt/foresail-stack") if os.access("/opt", os.W_OK) else Path.home() / ".cache" / "foresail-stack"
)
DEFAULT_FLINK_TARGET = _STACK_DIR / f"flink-{FLINK_VERSION}"
"""Where .ci/run installs Flink (as root: /opt); a developer without write access to /opt gets ~/.cache."""
JOB_CLASS = LOAD_JOB_CLASS
INSTALL_HINT = (
    "install the test stack as .ci/run does: apt-get install -y --no-install-recommends prometheus; "
    f"pip install --no-deps --target {DEFAULT_FLINK_TARGET} apache-flink=={FLINK_VERSION} "
    f"apache-flink-libraries=={FLINK_VERSION}; export FLINK_HOME={DEFAULT_FLINK_TARGET}/pyflink"
)


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, poll_s: float = 0.5) -> object:
    """Poll `condition` until it returns something truthy; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


# ---- installation ---------------------------------------------------------------------------------
def flink_home() -> Path:
    """$FLINK_HOME, else the default install location; installs Flink there on first use."""
    configured = os.environ.get("FLINK_HOME")
    if configured:
        home = Path(configured)
        assert (home / "bin" / "taskmanager.sh").is_file(), f"FLINK_HOME={home} has no bin/; {INSTALL_HINT}"
        return home
    home = DEFAULT_FLINK_TARGET / "pyflink"
    if not (home / "bin" / "taskmanager.sh").is_file():
        install_flink(DEFAULT_FLINK_TARGET)
    return home


def install_flink(target: Path) -> None:
    """pip's --target install of the two wheels, under a lock so parallel first uses do not race."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "pyflink" / "bin" / "taskmanager.sh").is_file():
            return
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
            f"apache-flink=={FLINK_VERSION}", f"apache-flink-libraries=={FLINK_VERSION}",
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"installing Flink failed: {result.stderr[-2000:]}\n{INSTALL_HINT}"


def prometheus_binary() -> str:
    return require_tool("prometheus")  # skipped (with the reason) where it cannot be installed


def compile_job(home: Path, build_dir: Path) -> Path:
    try:
        return build_load_job(home, build_dir)
    except RuntimeError as error:
        raise AssertionError(str(error)) from error


# ---- Prometheus -----------------------------------------------------------------------------------
class PrometheusServer:
    """A real Prometheus on 127.0.0.1 with static scrape targets, or over a given TSDB (backfilled data)."""

    def __init__(self, workdir: Path, targets: list[str] | None = None, tsdb: Path | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s", "scrape_configs:"]
        if targets:
            quoted = ", ".join(f"'{t}'" for t in targets)
            lines += ["  - job_name: flink", "    static_configs:", f"      - targets: [{quoted}]"]
        else:
            lines[-1] = "scrape_configs: []"
        config.write_text("\n".join(lines) + "\n")
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tsdb or workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1d",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
            )
        wait_for(self._ready, 30, f"Prometheus ready on {self.url} (log: {self.log_path})", 0.1)

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"Prometheus exited: {self.log_path.read_text()[-2000:]}"
        try:
            return requests.get(f"{self.url}/-/ready", timeout=1).ok
        except requests.RequestException:
            return False

    def query(self, promql: str, at_s: float | None = None) -> list:
        params = {"query": promql} if at_s is None else {"query": promql, "time": f"{at_s:.3f}"}
        answer = requests.get(f"{self.url}/api/v1/query", params=params, timeout=5).json()
        return answer["data"]["result"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- Flink ----------------------------------------------------------------------------------------
class FlinkStack:
    """A reactive-mode application cluster running the trace load job, scraped by its own Prometheus."""

    REPORTER_PORTS = 8

    def __init__(
        self,
        workdir: Path,
        home: Path,
        work: int,
        initial_rps: int = 0,
        job_args: tuple[str, ...] = (),
        conf: dict[str, str | None] | None = None,
    ) -> None:
        self.workdir = workdir
        self.job_args = list(job_args)
        """Further arguments of the load job (e.g. its topology)."""
        self.extra_conf = dict(conf or {})
        """Flink settings added to (or replacing) the defaults below; None removes a default."""
        self.home = home
        self.rest_port = free_port()
        self.rest_url = f"http://127.0.0.1:{self.rest_port}"
        self.reporter_base = free_port_range(self.REPORTER_PORTS)
        self.conf_dir = workdir / "conf"
        self.state_dir = workdir / "state"
        self.trace = TraceFile(workdir / "trace.txt", initial_rps)
        self._write_conf()
        self.cluster = LocalFlinkCluster(home, self.conf_dir, self.state_dir)
        self.rest = FlinkRest(self.rest_url)
        self.work = work

    def _write_conf(self) -> None:
        settings = cluster_settings(self.workdir, self.rest_port, self.reporter_base, self.REPORTER_PORTS)
        write_conf(self.home, self.conf_dir, settings | self.extra_conf)

    @property
    def scrape_targets(self) -> list[str]:
        return [
            f"127.0.0.1:{port}"
            for port in range(self.reporter_base, self.reporter_base + self.REPORTER_PORTS)
        ]

    def start(self, taskmanagers: int = 1) -> None:
        arguments = ["--trace", str(self.trace.path), "--work", str(self.work), *self.job_args]
        self.cluster.start_application(JOB_CLASS, arguments)
        self.cluster.scale_to(taskmanagers)
        self.wait_parallelism(taskmanagers, timeout_s=120)

    def status(self) -> JobStatus | None:
        return self.rest.job_status()

    def wait_parallelism(self, parallelism: int, timeout_s: float) -> JobStatus:
        def at_target() -> JobStatus | None:
            assert self.cluster.jobmanager() is not None, self._exit_reason()
            status = self.status()
            return status if status and status.running and status.parallelism == parallelism else None

        return wait_for(at_target, timeout_s, f"the job running at parallelism {parallelism}")

    def _exit_reason(self) -> str:
        """The JobManager log's last cause, so that a CI log says why without the machine at hand."""
        log = self.state_dir / "jobmanager.log"
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        causes = [line.strip() for line in lines if line.startswith("Caused by:") or " ERROR " in line]
        return f"JobManager exited ({causes[-1] if causes else 'no cause logged'}); logs in {self.state_dir}"

    def stop(self) -> None:
        self.cluster.stop_all()
