"""A standalone Flink cluster set up from nothing on this machine: its configuration directory, free
ports, the load job's jar and the trace that programs the load job's input rate.

Used where foresail starts a cluster of its own (the local-Flink testbed of `plan-capacity`) and by the
end-to-end tests. The settings are those `../shared/docs/local-stack.md` found to work on Flink 2.3:
reactive mode, one slot per TaskManager, a restart strategy and checkpoints (without them removing a
TaskManager ends the application cluster), short adaptive-scheduler cooldowns, the Prometheus reporter on
a port range, and the `env.java.opts.all` line Flink ships (the module opens the JVM needs).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

LOAD_JOB_SOURCE = Path(__file__).resolve().parents[1] / "jobs" / "TraceLoadJob.java"
LOAD_JOB_CLASS = "TraceLoadJob"
LOAD_JOB_JAR = "foresail-trace-load.jar"


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def _listen_range() -> range:
    """Ports outside the kernel's ephemeral range (below it, or above one that starts low): an outgoing
    connection never takes one of them between our probe and the server's bind (a JobManager once lost its
    REST port that way)."""
    try:
        ephemeral_low, ephemeral_high = (int(n) for n in _EPHEMERAL_RANGE.read_text().split()[:2])
    except (OSError, ValueError):
        ephemeral_low, ephemeral_high = 32768, 60999
    if ephemeral_low - 10000 >= 1000:
        return range(10000, ephemeral_low)
    return range(min(ephemeral_high + 1, 64536), 65536)  # a range that starts low: the ports above it


def _bindable(ports: range) -> bool:
    """Every port in `ports` free on all interfaces (the Prometheus reporter binds them all)."""
    with contextlib.ExitStack() as stack:
        try:
            for port in ports:
                probe = stack.enter_context(socket.socket())
                probe.bind(("", port))
        except OSError:
            return False
    return True


def free_port_range(count: int = 1) -> int:
    """First of `count` consecutive free ports, never one this process handed out before."""
    candidates = _listen_range()
    if count > len(candidates):
        raise RuntimeError(f"no {count} consecutive ports in {candidates.start}-{candidates.stop - 1}")
    for _ in range(500):
        base = random.randrange(candidates.start, candidates.stop - count + 1)
        ports = range(base, base + count)
        if _handed_out.isdisjoint(ports) and _bindable(ports):
            _handed_out.update(ports)
            return base
    raise RuntimeError(f"no {count} consecutive free ports in {candidates.start}-{candidates.stop - 1}")


def free_port() -> int:
    return free_port_range(1)


def cluster_settings(
    workdir: Path, rest_port: int, reporter_base: int, reporter_ports: int
) -> dict[str, str]:
    """A reactive-mode cluster on localhost whose pids, logs and checkpoints live under `workdir`."""
    return {
        "env.pid.dir": str(workdir / "pids"),
        "env.log.dir": str(workdir / "log"),
        "jobmanager.rpc.address": "localhost",
        "jobmanager.rpc.port": str(free_port()),
        "jobmanager.bind-host": "localhost",
        "taskmanager.bind-host": "localhost",
        "taskmanager.host": "localhost",
        "rest.address": "localhost",
        "rest.bind-address": "localhost",
        "rest.port": str(rest_port),
        "scheduler-mode": "reactive",
        "taskmanager.numberOfTaskSlots": "1",
        "jobmanager.memory.process.size": "768m",
        "taskmanager.memory.process.size": "1024m",
        "taskmanager.memory.managed.size": "64m",
        "jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling": "2s",
        "jobmanager.adaptive-scheduler.executing.resource-stabilization-timeout": "2s",
        "jobmanager.adaptive-scheduler.rescale-trigger.max-delay": "5s",
        "metrics.reporter.prom.factory.class": "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
        "metrics.reporter.prom.port": f"{reporter_base}-{reporter_base + reporter_ports - 1}",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "100000",
        "restart-strategy.fixed-delay.delay": "1s",
        "execution.checkpointing.interval": "5s",
        "execution.checkpointing.dir": f"file://{workdir / 'checkpoints'}",
    }


def write_conf(home: Path, conf_dir: Path, settings: dict[str, str | None]) -> None:
    """`conf_dir` with Flink's logging files and a config.yaml of `settings` (None drops a key) plus the
    shipped `env.java.opts.all`."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    for name in ("log4j-console.properties", "log4j.properties", "logback-console.xml"):
        shutil.copy(home / "conf" / name, conf_dir / name)
    settings = {"env.java.opts.all": _shipped_java_opts(home / "conf" / "config.yaml"), **settings}
    lines = [f"{key}: {_yaml_scalar(value)}" for key, value in settings.items() if value is not None]
    (conf_dir / "config.yaml").write_text("\n".join(lines) + "\n")


def build_load_job(home: Path, build_dir: Path) -> Path:
    """javac the load job against Flink's lib/*, packed into a jar in usrlib/ (where the application
    entry point looks for it); raises RuntimeError with one line naming what failed (javac's output goes
    to `build_dir`/javac.log: against a directory that is no Flink distribution it is hundreds of lines)."""
    classes = build_dir / "classes"
    try:
        classes.mkdir(parents=True, exist_ok=True)
        _javac(home, classes, build_dir / "javac.log")
        return _install_jar(home, classes)
    except OSError as error:
        raise RuntimeError(
            f"cannot build the load job: {error.strerror or error}: {error.filename}"
        ) from error


def _javac(home: Path, classes: Path, log: Path) -> None:
    if not LOAD_JOB_SOURCE.is_file():
        raise RuntimeError(
            "the load job's source (jobs/TraceLoadJob.java) ships with a checkout, not with an installed "
            f"foresail: run once from a checkout, which installs the job into {home}/usrlib"
        )
    try:
        javac = subprocess.run(
            ["javac", "-nowarn", "-cp", f"{home}/lib/*", "-d", str(classes), str(LOAD_JOB_SOURCE)],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError as error:
        raise RuntimeError("javac not found: a JDK is needed to build the load job") from error
    if javac.returncode != 0:
        log.write_text(javac.stderr)
        raise RuntimeError(f"javac could not build the load job against {home}/lib; its errors are in {log}")


def _install_jar(home: Path, classes: Path) -> Path:
    """The jar, staged inside usrlib/ itself: os.replace is atomic (a cluster of a parallel run never
    sees half a jar) only within one file system, and the build directory may be on another."""
    usrlib = home / "usrlib"
    usrlib.mkdir(exist_ok=True)
    jar = usrlib / LOAD_JOB_JAR
    staging = usrlib / f".{LOAD_JOB_JAR}.{os.getpid()}.tmp"
    try:
        packed = subprocess.run(["jar", "cf", str(staging), "-C", str(classes), "."], check=False)
    except FileNotFoundError as error:
        raise RuntimeError("jar not found: a JDK is needed to build the load job") from error
    if packed.returncode != 0:
        staging.unlink(missing_ok=True)
        raise RuntimeError(f"jar could not pack the load job into {staging}")
    os.replace(staging, jar)
    return jar


class TraceFile:
    """The load job's `second|count` trace, programmed while the job runs: only seconds to come are
    rewritten (the job re-reads the file when it changes, at most once a second)."""

    def __init__(self, path: Path, initial_rps: int = 0) -> None:
        self.path = path
        self.start_s: float | None = None
        self.rates: list[int] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write([initial_rps])

    def anchor(self, start_s: float) -> None:
        """Wall-clock time (epoch seconds) of the trace's second 0: when the job first started."""
        self.start_s = start_s

    def hold(self, rate_rps: int, lead_s: float = 2.0) -> float:
        """From `lead_s` seconds on, `rate_rps` until further notice; returns the wall time of the change."""
        return self.program([(rate_rps, 1)], lead_s)

    def program(self, rates: list[tuple[int, int]], lead_s: float = 2.0) -> float:
        """From `lead_s` seconds on, each (rate, seconds) in turn, the last rate held after; returns the
        wall time at which the first one starts (a whole second of the trace)."""
        assert self.start_s is not None, "anchor the trace to the job's start first"
        # the first whole second at least `lead_s` ahead: the second in progress is never rewritten
        second = max(0, math.ceil(time.time() + lead_s - self.start_s))
        past = self.rates[:second] + [self.rates[-1]] * max(0, second - len(self.rates))
        programmed = [rate for rate, seconds in rates for _ in range(seconds)] or [r for r, _ in rates[-1:]]
        self._write(past + programmed)
        return self.start_s + second

    def _write(self, rates: list[int]) -> None:
        self.rates = list(rates)
        staging = self.path.with_suffix(".tmp")
        staging.write_text("".join(f"{second}|{rate}\n" for second, rate in enumerate(rates)))
        os.replace(staging, self.path)


def _shipped_java_opts(config: Path) -> str:
    lines = config.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.strip() == "all:" or line.strip().startswith("all: "):
            value = line.split("all:", 1)[1].strip()
            return value or lines[index + 1].strip()
    return ""


def _yaml_scalar(value: str) -> str:
    """The value as YAML reads it back: plain where nothing in it means more to YAML ('a: b', '- x',
    'null' do), else double-quoted (a JSON string is a YAML one)."""
    plain = (
        value
        and not value.startswith("-")
        and all(c.isalnum() or c in "._-/=," for c in value)
        and value.lower() not in {"null", "true", "false", "yes", "no", "on", "off", "~"}
    )
    return value if plain else json.dumps(value)
