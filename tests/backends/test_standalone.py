"""backends/standalone.py: the load job's programmed trace, the ports it picks and the cluster configuration it
writes."""

import socket
import time
from pathlib import Path

import yaml

from backends import standalone
from backends.standalone import TraceFile, cluster_settings, free_port, free_port_range, write_conf


def _rates(trace: TraceFile) -> list[int]:
    return [int(line.split("|")[1]) for line in trace.path.read_text().splitlines()]


def test_a_programmed_schedule_keeps_the_past_and_starts_on_a_whole_second(tmp_path):
    trace = TraceFile(tmp_path / "trace.txt", initial_rps=7)
    trace.anchor(time.time() - 10.2)
    trace.hold(30, lead_s=0.0)
    before_s = time.time()
    starts_s = trace.program([(100, 3), (5, 2)], lead_s=2.0)
    after_s = time.time()

    second = round(starts_s - trace.start_s)
    assert starts_s - trace.start_s == second and before_s + 1 <= starts_s <= after_s + 2
    rates = _rates(trace)
    assert rates[:10] == [7] * 10, "seconds already gone are not rewritten"
    assert rates[second:] == [100, 100, 100, 5, 5], "then each phase for its seconds, the last rate held"
    assert set(rates[10:second]) == {30}


def test_the_written_configuration_keeps_the_shipped_java_options(tmp_path):
    home = tmp_path / "flink"
    (home / "conf").mkdir(parents=True)
    for name in ("log4j-console.properties", "log4j.properties", "logback-console.xml"):
        (home / "conf" / name).write_text("")
    (home / "conf" / "config.yaml").write_text("env:\n  java:\n    opts:\n      all: --add-opens=x=ALL\n")
    settings = cluster_settings(tmp_path / "run", 8081, 9250, 4) | {"scheduler-mode": None, "a.b": "it's"}
    write_conf(home, tmp_path / "conf", settings)

    written = yaml.safe_load((tmp_path / "conf" / "config.yaml").read_text())
    assert written["env.java.opts.all"] == "--add-opens=x=ALL"
    assert written["metrics.reporter.prom.port"] == "9250-9253" and written["a.b"] == "it's"
    assert "scheduler-mode" not in written and written["rest.port"] == 8081


def test_ports_are_picked_below_the_ephemeral_range_once_each_and_never_a_taken_one(monkeypatch):
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    bases = [free_port_range(8) for _ in range(5)]
    singles = [free_port() for _ in range(20)]
    taken = [port for base in bases for port in range(base, base + 8)] + singles
    assert len(set(taken)) == len(taken), "a port is handed out once per process"
    assert all(port + 1 <= ephemeral_low for port in taken), "no outgoing connection can take one"

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        held = holder.getsockname()[1]
        # The first offer is the held port, then the real draws: any fixed second offer may itself be in use.
        offers = iter([held])
        draw = standalone.random.randrange
        monkeypatch.setattr(standalone.random, "randrange", lambda *args: next(offers, None) or draw(*args))
        assert free_port() != held, "a port something listens on is skipped"
