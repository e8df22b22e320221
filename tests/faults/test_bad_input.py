"""Bad input from a careless or hostile user: one clear line (exit code 2), never a traceback, a hang or a
machine out of memory."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import pytest

from daemon.cli import main
from forecasting.registry import ModelRegistry, RegistryEntry
from simulator.params import TwinParams
from simulator.workload import load_trace


@dataclass
class Result:
    returncode: int | None
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys, tmp_path, monkeypatch):
    """`foresail ARGS` in this process (a subprocess per case would cost seconds of imports); an exception
    escaping `main` is reported as the traceback it would print."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Result:
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code
        except Exception:
            out, err = capsys.readouterr()
            return Result(None, out, err + "Traceback\n" + traceback.format_exc())
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def _clear_error(result: Result) -> str:
    """The outcome of a bad-input case: a clear error is exit 2 and a short stderr without a traceback."""
    if "Traceback" in result.stderr:
        return "traceback"
    if result.returncode == 2 and 0 < len(result.stderr.strip().splitlines()) <= 2:
        return "clear-error"
    return "crashed"


TRACES = {
    "gap-of-1e9-seconds": ("second|count\n0|5\n1000000000|6\n", ":3: second 1000000000 lies"),
    "count-1e300": ("second|count\n0|5\n1|1e300\n", ":3: count 1e+300 above the maximum"),
    "all-zero": ("second|count\n0|0\n1|0\n2|0\n", "every count is below 1 record/s"),
    "subnormal-peak": ("second|count\n0|5e-324\n1|0\n", "every count is below 1 record/s"),
    "second-beyond-int64": ("second|count\n0|1\n99999999999999999999999|1\n", ":3: need second >= 0"),
    "binary-garbage": ("second|count\n\x00\x01\xff|\x02\n", ":2: not numbers"),
    "no-header": ("0|5\n1|6\n", ":1: expected a header"),
    "decreasing": ("second|count\n5|1\n3|1\n", ":3: second 3 does not increase"),
}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_bad_trace_is_rejected_at_its_line(tmp_path, name, fault, cli):
    text, message = TRACES[name]
    path = tmp_path / f"{name}.csv"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    with pytest.raises(ValueError) as raised:
        load_trace(path)
    assert message in str(raised.value)
    result = cli("simulate", "--workload", str(path))
    fault("bad input", _clear_error(result), f"trace {name}")
    assert _clear_error(result) == "clear-error", result.stderr
    assert message in result.stderr


def test_a_trace_longer_than_the_declared_limits_is_rejected_while_streaming(tmp_path):
    """Rows and span are checked row by row: the file is rejected at the first row past a limit (the
    10-million-line case with the real limits is timed in benchmarks/fault_table.py)."""
    path = tmp_path / "long.csv"
    path.write_text("second|count\n" + "".join(f"{i}|1\n" for i in range(1_000)))
    with pytest.raises(ValueError, match=r":502: more than 500 data rows"):
        load_trace(path, max_rows=500)
    with pytest.raises(ValueError, match=r":302: second 300 lies 300 s after the first row"):
        load_trace(path, max_span_s=299)
    assert len(load_trace(path)) == 1_000


def test_a_job_named_dot_dot_publishes_inside_the_registry(tmp_path, fault):
    registry = ModelRegistry(tmp_path / "models")
    entries = [registry.publish(job, b"artifact", {}) for job in ("..", ".", ".staging", "a/../../b")]
    inside = all(e.path.resolve().is_relative_to((tmp_path / "models").resolve()) for e in entries)
    fault("bad input", "clear-error" if inside else "lost", "registry job '..'")
    assert inside
    assert sorted(registry.jobs()) == sorted(["..", ".", ".staging", "a/../../b"])
    assert [e.version for e in registry.versions("..")] == [1]
    assert not (tmp_path / "v000001").exists() and not (tmp_path / "b").exists()


def test_an_artifact_path_outside_its_version_is_refused(tmp_path):
    registry = ModelRegistry(tmp_path / "models")
    entry = registry.publish("job", b"artifact", {})
    metadata = (entry.path / "metadata.json").read_text().replace('"model.pkl"', '"../../secret"')
    (entry.path / "metadata.json").write_text(metadata)
    with pytest.raises(ValueError, match="is not a file of this version"):
        registry.load(RegistryEntry("job", 1, entry.path))


CONFIGS = {
    "max_scaleout 1e8": ("scaling: {max_scaleout: 100000000}\n", "scaling.max_scaleout"),
    "max_scaleout above the twin": ("scaling: {max_scaleout: 500}\n", "exceeds what the twin can run"),
    "min_history above max_history": ("forecast: {min_history_s: 99999}\n", "must be ≤ max_history_s"),
    "reference_scaleout above the twin": ("twin: {reference_scaleout: 1000}\n", "twin.reference_scaleout"),
    "no such topology": ("twin: {topology: nowhere}\n", "twin.topology: topology nowhere: no such topology"),
    "no such trace": ("twin: {workload: /nowhere.csv}\n", "no such trace file '/nowhere.csv'"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_what_the_target_cannot_run_fails_check_config(tmp_path, name, fault, cli):
    text, message = CONFIGS[name]
    (tmp_path / "c.yaml").write_text(text)
    result = cli("check-config", "--no-connect", str(tmp_path / "c.yaml"))
    fault(
        "bad input",
        "clear-error" if result.returncode == 2 and "Traceback" not in result.stderr else "crashed",
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def _alias_bomb(levels: int = 9) -> str:
    """Nine aliases of nine aliases of …: a 1 KB file that expands to 9**9 entries."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "scaling:\n  slot_sharing_groups:\n" + "".join(f"    {line}\n" for line in lines)


FILES_THAT_HUNG_OR_CRASHED = {
    "loop every inf seconds": (b"loop: {interval_s: .inf}\n", "loop.interval_s: Input should be a finite"),
    "loop every microsecond": (b"loop: {interval_s: 0.000001}\n", "loop.interval_s"),
    "surge watch every nanosecond": (b"loop: {surge_watch_s: 1.0e-9}\n", "loop.surge_watch_s"),
    "horizon of 1e308 s": (b"forecast: {horizon_s: 1.0e+308}\n", "forecast.horizon_s"),
    "checkpoint every inf seconds": (b"recovery: {checkpoint_interval_s: .inf}\n", "finite number"),
    "negative seed": (b"twin: {seed: -1}\n", "twin.seed"),
    "alias bomb": (_alias_bomb().encode(), "YAML aliases (*a0) are not accepted"),
    "100,000 brackets": (b"x: " + b"[" * 100_000, "nested more than 32 levels"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not UTF-8 text"),
    "prometheus timeout inf": (b"prometheus: {timeout_s: .inf}\n", "prometheus.timeout_s"),
    "healthz that never fails": (b"server: {unhealthy_after_loops: .inf}\n", "server.unhealthy_after_loops"),
    "5,000-digit number": (b"loop: {interval_s: " + b"9" * 5000 + b"}\n", "not valid YAML: Exceeds"),
    "month 13": (b"x: !!timestamp 2001-13-45\n", "not valid YAML: month must be"),
    "int abc": (b"x: !!int abc\n", "not valid YAML: invalid literal"),
    "a list as a key": (b"? [a, b]\n: 1\n", "not valid YAML: unhashable"),
    "5 MB": (b"#" * 5 * 1024**2, "larger than 4 MB"),
    "seasonal period -5 s": (b"forecast: {seasonal_period_s: -5}\n", "forecast.seasonal_period_s"),
    "hpa every millisecond": (
        b"scaling: {policy: hpa-80}\nbaselines: {hpa_sync_period_s: 0.001}\n",
        "baselines.hpa_sync_period_s",
    ),
    "idle above saturation": (
        b"capacity: {idle_cpu: 0.9, saturation_cpu: 0.2}\n",
        "must be below saturation_cpu",
    ),
    "hpa target of 400 nines": (b"scaling: {policy: hpa-" + b"9" * 400 + b"}\n", "not a finite number"),
}


@pytest.mark.parametrize("name", sorted(FILES_THAT_HUNG_OR_CRASHED))
def test_a_config_that_hung_or_crashed_the_daemon_is_one_clear_error(tmp_path, name, fault, cli):
    """Each of these passed check-config and then hung `run` (an endless loop, a forecast over 1e308
    seconds, a parser on 100,000 brackets or an exponential alias), or crashed it with a traceback."""
    content, message = FILES_THAT_HUNG_OR_CRASHED[name]
    (tmp_path / "c.yaml").write_bytes(content)
    for command in (["check-config", "--no-connect"], ["run", "--iterations", "1", "--config"]):
        result = cli(*command, str(tmp_path / "c.yaml"))
        fault("bad input", _clear_error(result), f"config {name}")
        assert _clear_error(result) == "clear-error" and message in result.stderr, result.stderr


def test_a_checkpoint_interval_under_a_second_runs_on_the_twin(tmp_path, cli):
    """Flink checkpoints as often as every 10 ms; the twin, stepping whole seconds, replays at most one."""
    (tmp_path / "c.yaml").write_text("recovery: {checkpoint_interval_s: 0.4}\n")
    result = cli("run", "--iterations", "1", "--config", str(tmp_path / "c.yaml"))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def test_the_twin_limit_in_the_schema_is_the_twins():
    from config.schema import TWIN_MAX_PARALLELISM

    assert TwinParams().max_parallelism == TWIN_MAX_PARALLELISM


ARGUMENTS = {
    "step 0": (["export-history", "--since", "1d", "--out", "h", "--step-s", "0"], "--step-s must be"),
    "negative step": (
        ["export-history", "--since", "1d", "--out", "h", "--step-s", "-5"],
        "--step-s must be",
    ),
    "since after until": (
        ["export-history", "--since", "1h", "--until", "2d", "--out", "h"],
        "must lie before",
    ),
    "since not a time": (["export-history", "--since", "yesterday", "--out", "h"], "--since: not a time"),
    "iterations -1": (["run", "--iterations", "-1"], "--iterations must be at least 1"),
    "missing history": (["retrain", "--history", "nowhere", "--registry", "h"], "no such file or directory"),
}  # a bad history row or column: tests/spark/test_retrain_inputs.py (one line each; a bad row never aborts)


@pytest.mark.parametrize("name", sorted(ARGUMENTS))
def test_arguments_that_would_silently_do_nothing_are_one_clear_line(tmp_path, name, fault, cli):
    args, message = ARGUMENTS[name]
    (tmp_path / "bad.csv").write_text("job,timestamp,rate\nx,2026-01-01T00:00:00Z,5\nx,yesterday,5\n")
    (tmp_path / "cols.csv").write_text("second|count\n0|5\n")
    result = cli(*args)
    fault("bad input", _clear_error(result), f"argument {name}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr
    assert not (tmp_path / "h").exists()


COMMAND_LINES = {
    "no policy": (["compare", "--workload", "cols.csv", "--policies", ",", "--out", "o"], "--policies"),
    "no parallel run": (
        ["compare", "--workload", "cols.csv", "--policies", "static", "--jobs", "0", "--out", "o"],
        "--jobs: need at least 1",
    ),
    "results into a file": (
        ["compare", "--workload", "cols.csv", "--policies", "static", "--out", "cols.csv"],
        "--out cols.csv",
    ),
    "audit log in no directory": (
        ["simulate", "--workload", "cols.csv", "--audit-log", "nowhere/a.jsonl"],
        "--audit-log nowhere/a.jsonl: not a file in an existing directory",
    ),
    "speedup 1e308": (["run", "--speedup", "1e308", "--iterations", "1"], "twin.speedup"),
    "negative seed": (["simulate", "--workload", "cols.csv", "--seed", "-1"], "twin.seed"),
}


@pytest.mark.parametrize("name", sorted(COMMAND_LINES))
def test_command_lines_that_crashed_or_did_nothing_are_one_clear_error(tmp_path, name, fault, cli):
    """Before: a KeyError after every run (no policy), a FileExistsError after every run (--out a file), a
    traceback (audit log, negative seed), or 0 iterations and exit 0 (speedup 1e308)."""
    args, message = COMMAND_LINES[name]
    (tmp_path / "cols.csv").write_text("second|count\n0|5\n")
    result = cli(*args)
    fault("bad input", _clear_error(result), f"command line {name}")
    assert _clear_error(result) == "clear-error" and message in result.stderr, result.stderr


def test_a_directory_given_as_the_knowledge_store_is_refused_not_moved_aside(tmp_path, fault, cli):
    """It was taken for a damaged store: renamed to `<dir>.corrupt-…`, with a new store in its place."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    result = cli("run", "--iterations", "1", "--knowledge", str(folder), "--audit-log", str(tmp_path / "a"))
    fault("bad input", _clear_error(result), "knowledge store is a directory")
    assert _clear_error(result) == "clear-error" and "must be a file, not a directory" in result.stderr
    assert (folder / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("results")] == ["results"]


def test_a_damaged_store_is_said_on_the_console_not_only_in_the_audit_log(tmp_path, cli):
    store = tmp_path / "k.sqlite"
    store.write_bytes(b"not a database" * 100)
    result = cli("run", "--iterations", "1", "--knowledge", str(store), "--audit-log", str(tmp_path / "a"))
    assert result.returncode == 0
    damaged = [line for line in result.stderr.splitlines() if line.startswith("foresail: knowledge store")]
    assert len(damaged) == 1 and "moved to" in damaged[0] and "starting fresh" in damaged[0]


def test_a_trace_shorter_than_one_loop_says_that_no_iteration_ran(tmp_path, cli):
    (tmp_path / "c.yaml").write_text("loop: {interval_s: 86400}\n")
    result = cli("run", "--config", str(tmp_path / "c.yaml"), "--audit-log", str(tmp_path / "a"))
    assert result.returncode == 0
    assert "no iteration ran" in result.stderr and "86400 s" in result.stderr


def test_a_missing_kubeconfig_is_one_line_not_a_traceback(tmp_path, fault, cli):
    config = tmp_path / "c.yaml"
    config.write_text(
        "target: {kind: prometheus+kubernetes}\n"
        f"kubernetes: {{kubeconfig: {tmp_path / 'missing'}, name: tm}}\n"
        f"knowledge: {{path: {tmp_path / 'k.sqlite'}}}\nserver: {{port: 0}}\n"
    )
    result = cli("run", "--config", str(config), "--iterations", "1")
    fault("bad input", _clear_error(result), "missing kubeconfig")
    assert _clear_error(result) == "clear-error", result.stderr
    assert "cannot start" in result.stderr
