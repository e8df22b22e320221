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
    # the first whole second at least 2 s ahead: never the one in progress
    assert starts_s - trace.start_s == second and before_s + 2 <= starts_s <= after_s + 3
    rates = _rates(trace)
    assert rates[:11] == [7] * 11, "seconds already gone, and the one in progress, are not rewritten"
    assert rates[second:] == [100, 100, 100, 5, 5], "then each phase for its seconds, the last rate held"
    assert set(rates[11:second]) == {30}
    trace.program([(9, 0), (8, 2)], lead_s=0.0)
    assert _rates(trace)[-2:] == [8, 8], "a phase of no seconds takes none"


def test_written_values_read_back_as_written(tmp_path):
    """'a: b', '- x' and 'null' were written plain: the file no longer parsed, or read back None."""
    import yaml

    from backends.standalone import _yaml_scalar

    values = ["a: b", "- item", "null", "true", "-Xmx1g -Dx=y", "it's", "/opt/flink", "4", "0.0.0.0", ""]
    text = "".join(f"k{i}: {_yaml_scalar(v)}\n" for i, v in enumerate(values))
    read = yaml.safe_load(text)
    assert [str(read[f"k{i}"]) for i in range(len(values))] == values
    assert _yaml_scalar("/opt/flink") == "/opt/flink"  # plain where plain is safe


def test_ports_are_found_above_an_ephemeral_range_that_starts_low(tmp_path, monkeypatch):
    """With the kernel's range at 1024-60999 the ports below it were 10000 alone: the second port failed."""
    from backends import standalone

    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024\t60999\n")
    monkeypatch.setattr(standalone, "_EPHEMERAL_RANGE", ranges)
    assert standalone._listen_range() == range(61000, 65536)
    ports = [standalone.free_port() for _ in range(3)]
    assert len(set(ports)) == 3 and all(61000 <= port < 65536 for port in ports)


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
