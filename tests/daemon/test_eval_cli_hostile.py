"""The offline evaluation commands (simulate, compare, check-config, the benchmark drivers) on hostile input:
one line and exit 2 (130 on Ctrl-C), never a traceback, and nothing of the user's overwritten."""

from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import daemon.plots as plots
from config.schema import Config
from daemon.cli import main
from daemon.compare import run_comparison, write_outputs
from daemon.progress import RunProgress

REPO = Path(__file__).resolve().parents[2]
FORESAIL = [sys.executable, "-c", "import sys; from daemon.cli import main; sys.exit(main())"]


def trace(path: Path, seconds: int = 3, rate: float = 5000) -> Path:
    path.write_text("second|count\n" + "".join(f"{s}|{rate}\n" for s in range(seconds)))
    return path


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory no file can be created in: chmod 555 as a user; as root (who ignores it) /sys."""
    directory = tmp_path / "readonly"
    directory.mkdir()
    directory.chmod(0o555)
    if os.geteuid() == 0:
        directory = Path("/sys")
    try:
        (directory / "probe").touch()
    except OSError:
        return directory
    pytest.skip(f"{directory} is writable here")


# ---------------------------------------------------------------------------------- 1: max_parallelism
@pytest.mark.parametrize("max_parallelism", [14, 4])
def test_a_vertex_max_parallelism_below_the_scale_outs_is_one_config_line(tmp_path, capsys, max_parallelism):
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        "name: mp\nvertices:\n  - name: src\n  - name: count\n    inputs: [src]\n    ship: HASH\n"
        f"    num_keys: 1000\n    max_parallelism: {max_parallelism}\n"
    )
    workload = trace(tmp_path / "trace.csv")
    expected = f"vertex 'count' has max_parallelism {max_parallelism}, below scaling.max_scaleout 18"
    assert main(["simulate", "--workload", str(workload), "--topology", str(topology), "--json"]) == 2
    assert expected in one_line_error(capsys)
    out = tmp_path / "out"
    argv = ["compare", "--workload", str(workload), "--topology", str(topology), "--policies", "static"]
    assert main([*argv, "--seeds", "1", "--jobs", "1", "--out", str(out)]) == 2
    assert expected in one_line_error(capsys)
    assert not (out / "summary.json").exists()
    config = tmp_path / "config.yaml"
    config.write_text(f"twin:\n  workload: {workload}\n  topology: {topology}\n")
    assert main(["check-config", "--no-connect", str(config)]) == 2
    assert expected in one_line_error(capsys)


def test_a_topology_within_the_scale_outs_still_runs(tmp_path, capsys):
    topology = tmp_path / "topology.yaml"
    topology.write_text("name: mp\nvertices:\n  - name: src\n    max_parallelism: 18\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"twin:\n  workload: {trace(tmp_path / 'trace.csv')}\n  topology: {topology}\n")
    assert main(["check-config", "--no-connect", str(config)]) == 0


# ---------------------------------------------------------------------------------- 3: only the oracle
@pytest.mark.parametrize("load", [["--workload", "WORKLOAD"], ["--suite", "development"]])
def test_only_the_oracle_is_refused_before_anything_is_written(tmp_path, capsys, load):
    load = [str(trace(tmp_path / "trace.csv")) if a == "WORKLOAD" else a for a in load]
    out = tmp_path / "out"
    assert (
        main(["compare", *load, "--policies", "oracle", "--seeds", "1", "--jobs", "1", "--out", str(out)])
        == 2
    )
    assert "the oracle is always reported; name at least one policy to run" in one_line_error(capsys)
    assert not out.exists()


# ---------------------------------------------------------------------------------- 4: unwritable outputs
def test_an_unwritable_out_is_refused_before_the_runs(tmp_path, capsys, monkeypatch):
    out = unwritable_dir(tmp_path)
    ran = []
    monkeypatch.setattr("daemon.compare._run", lambda task: ran.append(task))
    argv = ["compare", "--workload", str(trace(tmp_path / "trace.csv")), "--policies", "static"]
    assert main([*argv, "--seeds", "1", "--jobs", "1", "--out", str(out)]) == 2
    assert f"--out {out}:" in one_line_error(capsys)
    assert ran == []


def test_a_failed_write_of_the_outputs_is_a_config_error(tmp_path):
    from config.load import ConfigError

    config = Config.model_validate({"twin": {"workload": str(trace(tmp_path / "trace.csv", 120))}})
    comparison = run_comparison(config, ["static"], 1, 1)
    with pytest.raises(ConfigError, match="cannot write"):
        write_outputs(comparison, unwritable_dir(tmp_path))


@pytest.mark.parametrize("where", ["unwritable", "/dev/full"])
def test_an_audit_log_that_cannot_be_written_is_one_line(tmp_path, capsys, where):
    audit = unwritable_dir(tmp_path) / "audit.jsonl" if where == "unwritable" else Path(where)
    workload = trace(tmp_path / "trace.csv", 600)
    assert main(["simulate", "--workload", str(workload), "--audit-log", str(audit), "--json"]) == 2
    err = one_line_error(capsys)
    assert f"--audit-log {audit}: " in err
    assert where != "/dev/full" or os.strerror(errno.ENOSPC) in err
    assert capsys.readouterr().out == ""  # no summary of a run whose log is incomplete


# ---------------------------------------------------------------------------------- 5: Ctrl-C
@pytest.fixture(scope="module")
def hour_trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "hour.csv"
    rates = (f"{s}|{20000 + 15000 * math.sin(s / 300):.1f}\n" for s in range(3600))
    path.write_text("second|count\n" + "".join(rates))
    return path


def interrupt_after_first_line(argv: list[str], stream: str) -> tuple[int, str]:
    """Run the CLI in its own process group, SIGINT it (as a terminal's Ctrl-C) once it printed a line."""
    process = subprocess.Popen(
        [*FORESAIL, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not ignored, as `cmd &` would
    )
    assert getattr(process, stream).readline()  # the run is under way
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_ctrl_c_during_simulate_is_one_line_and_exit_130(hour_trace):
    argv = ["simulate", "--workload", str(hour_trace), "--audit-log", "/dev/stdout", "--json"]
    returncode, err = interrupt_after_first_line(argv, "stdout")  # the first iteration's audit event
    assert (returncode, err) == (130, "foresail simulate: interrupted\n")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_during_compare_stops_the_runs_and_says_what_was_written(tmp_path, hour_trace, jobs):
    out = tmp_path / "out"
    argv = ["compare", "--workload", str(hour_trace), "--policies", "static,foresail", "--seeds", "2"]
    returncode, err = interrupt_after_first_line([*argv, "--jobs", jobs, "--out", str(out)], "stderr")
    # a second worker's run may end before the signal lands (CI once also saw a blank line before it)
    *progress, last = [line for line in err.splitlines() if line]
    assert (returncode, last) == (130, "foresail compare: interrupted; written: nothing")
    assert all(line.startswith("foresail compare: run ") for line in progress)
    assert list(out.iterdir()) == []


# ---------------------------------------------------------------------------------- 6: plot titles
def test_the_time_series_plots_name_the_seed_they_show(tmp_path, monkeypatch):
    titles = {}
    save = plots._save

    def recording_save(fig, path: Path) -> Path:
        titles[path.name] = fig.axes[0].get_title()
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", recording_save)
    config = tmp_path / "config.yaml"
    config.write_text("twin:\n  seed: 7\n")
    argv = ["compare", "--workload", str(trace(tmp_path / "trace.csv", 300)), "--policies", "static"]
    assert (
        main([*argv, "--seeds", "1", "--jobs", "1", "--config", str(config), "--out", str(tmp_path / "out")])
        == 0
    )
    assert titles["workload_capacity.png"].endswith("(seed 7)")
    assert titles["workers.png"].endswith("(seed 7)")


# ---------------------------------------------------------------------------------- 7: benchmark drivers
def run_driver(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--families", "hpa,bogus"], "--families: no family 'bogus'"),
        (["--seeds", "0"], "--seeds: need at least 1, got 0"),
        (["--traces", "MISSING"], "no such trace file"),
        (["--config", "BROKEN"], "broken.yaml: invalid configuration"),
    ],
)
def test_the_equal_service_driver_refuses_a_mistake_in_one_line(tmp_path, args, message):
    workload = str(trace(tmp_path / "trace.csv"))
    (tmp_path / "broken.yaml").write_text("scaling: [\n")
    paths = {"MISSING": str(tmp_path / "no_such.csv"), "BROKEN": str(tmp_path / "broken.yaml")}
    args = [paths.get(a, a) for a in args]
    done = run_driver("equal_service.py", "--traces", workload, "--seeds", "1", "--families", "static", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_the_equal_service_driver_runs_every_run_on_the_given_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("twin:\n  seed: 7\n")
    out = tmp_path / "equal.json"
    args = ["--traces", str(trace(tmp_path / "trace.csv", 300)), "--seeds", "1", "--families", "static"]
    done = run_driver("equal_service.py", *args, "--config", str(config), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["results"][0]["seeds"] == [7]


def test_the_family_driver_renders_nothing_before_a_run_and_says_so_in_one_line(tmp_path):
    done = run_driver("family_evaluation.py", "--out", str(tmp_path / "out"), "--render-only")
    assert done.returncode == 2
    assert "no saved suite.json; run without --render-only" in done.stderr and "Traceback" not in done.stderr


def test_the_family_driver_refuses_a_broken_config_in_one_line(tmp_path):
    (tmp_path / "broken.yaml").write_text("scaling: [\n")
    done = run_driver(
        "family_evaluation.py", "--out", str(tmp_path / "out"), "--config", str(tmp_path / "broken.yaml")
    )
    assert done.returncode == 2
    assert "broken.yaml: invalid configuration" in done.stderr and "Traceback" not in done.stderr


def test_rendering_the_report_before_any_saved_runs_says_to_run_first(tmp_path):
    done = run_driver("decision_quality.py", "--report", str(tmp_path / "evaluation.md"), "--render-only")
    assert done.returncode == 2
    assert "no saved runs of trace 'sine'" in done.stderr and "run without --render-only" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("saved", ['{"seeds": [0], "stats"', "{}", '{"seeds": [], "stats": {}}'])
def test_rendering_the_report_from_a_damaged_saved_run_says_so_in_one_line(tmp_path, saved):
    """A summary cut short by a full disk (it is now replaced whole) or edited: a traceback before."""
    (tmp_path / "evaluation" / "sine").mkdir(parents=True)
    (tmp_path / "evaluation" / "sine" / "summary.json").write_text(saved)
    done = run_driver("decision_quality.py", "--report", str(tmp_path / "evaluation.md"), "--render-only")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "sine/summary.json is damaged" in done.stderr


# ---------------------------------------------------------------------------------- 8: report command
def test_the_simulate_command_the_report_prints_runs_from_the_repository_root():
    from daemon.report import _gap_section

    summaries = {"ysb": {"runs": {"foresail": [{"seed": 3, "avg_workers": 6.0, "rescales": 4}]}}}
    floors = {"ysb": [{"per_second": 4.0, "per_loop": 4.5, "per_horizon": 5.0}]}
    rendered = re.findall(r"foresail simulate --workload (\S+) --seed 3", _gap_section(summaries, floors))
    committed = re.findall(
        r"foresail simulate --workload (\S+)", (REPO / "docs" / "evaluation.md").read_text()
    )
    assert rendered == ["data/daedalus/workloads/advertising_6h_550K_max.csv"]
    assert committed
    for workload in rendered + committed:
        assert (REPO / workload).is_file(), workload


# ---------------------------------------------------------------------------------- 9: progress total
@pytest.mark.parametrize(("end_s", "iterations"), [(95, 1), (659, 10), (600, 10), (59, 0)])
def test_the_progress_total_counts_the_scheduled_iterations(end_s, iterations):
    assert RunProgress(io.StringIO(), 0.0, float(end_s), 60.0).total == iterations


def test_the_summary_starts_from_the_scale_out_the_run_began_at():
    """The first iteration of a seeded run may rescale at once: its workers line said '7 → 7 (min 7, max
    7)' above an average of 7.83 when the run began at 12."""
    from mape.loop import IterationResult
    from messages.types import Decision

    progress = RunProgress(io.StringIO(), 0.0, 180.0, 60.0)
    progress.record(
        IterationResult(60.0, decision=Decision(60.0, 12, 7, "long-lived", ()), executed=True), surge=True
    )
    progress.record(IterationResult(120.0, decision=Decision(120.0, 7, 7, "only-if-necessary", ())))
    summary = progress.summary({}, "k.sqlite", "stdout", "builtin:sine")
    assert "workers      12 → 7 (min 7, max 12)" in summary


# ---------------------------------------------------------------------------------- 10: audit log on an input
def test_an_audit_log_on_the_trace_or_the_config_is_refused_and_both_are_kept(tmp_path, capsys):
    workload = trace(tmp_path / "trace.csv", 300)
    config = tmp_path / "config.yaml"
    config.write_text("twin:\n  seed: 1\n")
    kept = {workload: workload.read_text(), config: config.read_text()}
    for target in (workload, config, tmp_path / "." / "trace.csv"):
        argv = ["simulate", "--workload", str(workload), "--config", str(config), "--audit-log", str(target)]
        assert main(argv) == 2
        assert "it would be overwritten" in one_line_error(capsys)
    assert {path: path.read_text() for path in kept} == kept


# ---------------------------------------------------------------------------------- 11: static out of bounds
def test_static_with_a_static_scaleout_outside_the_bounds_is_refused(tmp_path, capsys, monkeypatch):
    from config.load import ConfigError, parse_config

    data = {"scaling": {"max_scaleout": 4, "policy": "static"}, "baselines": {"static_scaleout": 12}}
    with pytest.raises(ConfigError, match=r"baselines.static_scaleout \(12\), outside"):
        parse_config(data, "test")
    assert parse_config({**data, "scaling": {"max_scaleout": 12, "policy": "static"}}, "test")
    config = tmp_path / "config.yaml"
    config.write_text("scaling:\n  max_scaleout: 4\nbaselines:\n  static_scaleout: 12\n")
    ran = []
    monkeypatch.setattr("daemon.compare._run", lambda task: ran.append(task))
    argv = ["compare", "--workload", str(trace(tmp_path / "trace.csv")), "--policies", "foresail,static"]
    assert main([*argv, "--seeds", "1", "--jobs", "1", "--config", str(config), "--out", str(tmp_path)]) == 2
    assert "static_scaleout (12), outside" in one_line_error(capsys)
    assert ran == []


def test_the_loop_latency_benchmark_runs_its_smallest_case():
    """Its forecaster stand-in lagged behind the loop's interface (`observe(..., now_s=...)`) and every
    run of the benchmark ended in a TypeError; the figures are its to print, this only runs it."""
    result = run_driver("loop_latency.py", "--iterations", "2", "--cases", "12", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout)["12"]
    assert all(math.isfinite(v) and v > 0 for v in figures.values()) and "analyze_plan_ms_p99" in figures


def test_output_whose_reader_left_ends_quietly():
    """`foresail simulate | head -1` gave a BrokenPipeError traceback when the reader left before the end;
    here the reader leaves before the first write, so every write finds the pipe closed."""
    process = subprocess.Popen(
        [*FORESAIL, "config-example"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # the reader leaves before the first line
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and stderr == ""


def test_a_billion_seeds_is_one_line_not_out_of_memory(tmp_path, capsys):
    """A config per run was built before any ran: --seeds 1000000000 took memory until it ran out."""
    argv = ["compare", "--workload", str(trace(tmp_path / "trace.csv")), "--policies", "static"]
    assert main([*argv, "--seeds", "1000000000", "--out", str(tmp_path / "out")]) == 2
    assert "--seeds: need 1 to 1000, got 1000000000" in one_line_error(capsys)
