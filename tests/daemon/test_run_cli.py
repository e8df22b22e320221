"""`foresail run` as a new user meets it: progress, a summary, a resume that says so, --fresh, --version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, trace_head


@pytest.fixture(scope="module")
def short_config(recorded_workloads: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The twin on the first 10 minutes of the recorded sine trace: a 10-iteration run."""
    directory = tmp_path_factory.mktemp("run")
    trace = trace_head(recorded_workloads, "sine_60000_6h.csv", 600, directory)
    config = directory / "foresail.yaml"
    config.write_text(f"twin:\n  workload: {trace}\n")
    return config


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_shows_progress_and_ends_with_a_summary(tmp_path: Path, short_config: Path):
    done = _run(tmp_path, "run", "--config", str(short_config))
    assert done.returncode == 0, done.stderr
    iterations = [json.loads(line) for line in done.stdout.splitlines() if '"iteration"' in line]
    assert len([e for e in iterations if e["event"] == "iteration"]) == 10  # audit log on stdout (a pipe)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(e["target"] == "twin" and e["job"].endswith("sine_60000_6h_600s.csv") for e in events)
    assert "iteration 1/10" in done.stderr  # the progress line
    assert "foresail run: 10 iterations on the digital twin" in done.stderr
    for heading in ("workers", "rescales", "latency", "knowledge", "audit log", "plots"):
        assert f"\n  {heading}" in done.stderr
    assert "foresail-knowledge.sqlite" in done.stderr


def test_a_second_run_says_it_resumed_and_how_to_start_afresh(tmp_path: Path, short_config: Path):
    first = _run(tmp_path, "run", "--config", str(short_config), "--iterations", "4")
    assert first.returncode == 0, first.stderr
    assert "resuming" not in first.stderr
    resumed = _run(tmp_path, "run", "--config", str(short_config))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming at iteration 4" in resumed.stderr
    assert "--fresh" in resumed.stderr
    assert "foresail run: 6 iterations" in resumed.stderr
    finished = _run(tmp_path, "run", "--config", str(short_config))
    assert "nothing left to run" in finished.stderr and "--fresh" in finished.stderr
    afresh = _run(tmp_path, "run", "--config", str(short_config), "--fresh", "--iterations", "2")
    assert afresh.returncode == 0, afresh.stderr
    assert "resuming" not in afresh.stderr and "nothing left" not in afresh.stderr
    assert "foresail run: 2 iterations" in afresh.stderr


def test_the_audit_log_can_go_to_a_file(tmp_path: Path, short_config: Path):
    done = _run(tmp_path, "run", "--config", str(short_config), "--iterations", "3", "--audit-log", "a.jsonl")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [e["iteration"] for e in events if e["event"] == "iteration"] == [1, 2, 3]
    assert '"event"' not in done.stdout
    assert "audit log    a.jsonl" in done.stderr


def test_dry_run_decides_but_executes_nothing(tmp_path: Path, short_config: Path):
    done = _run(tmp_path, "run", "--config", str(short_config), "--dry-run")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    iterations = [e for e in events if e["event"] == "iteration"]
    assert any(e["decision"]["action"] != "hold" for e in iterations)  # it wanted to rescale ...
    assert not any(e["executed"] for e in iterations)  # ... and did not


def test_version():
    done = _run(REPO, "--version")
    assert done.returncode == 0
    assert done.stdout.startswith("foresail ") and done.stdout.split()[1][0].isdigit()


def test_a_surge_between_iterations_gets_its_own_iteration_and_the_progress_says_so(tmp_path: Path):
    """The surge watch on `foresail run`'s virtual clock: a step at 1,215 s is met before the 1,260 s
    iteration, and the progress counts that iteration apart from the scheduled 30."""
    trace = tmp_path / "step.csv"
    trace.write_text("second|count\n" + "".join(f"{s}|{20000 if s < 1215 else 50000}\n" for s in range(1800)))
    config = tmp_path / "foresail.yaml"
    config.write_text(f"twin:\n  workload: {trace}\n")
    done = _run(tmp_path, "run", "--config", str(config))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    (watch,) = [e for e in events if e["event"] == "surge-watch"]
    surge = next(e for e in events if e["event"] == "iteration" and e["time_s"] == watch["time_s"])
    assert 1215 < surge["time_s"] < 1260 and surge["decision"]["rule"] == "surge" and surge["executed"]
    assert len([e for e in events if e["event"] == "iteration"]) == 31
    assert "foresail run: 30 iterations (+1 off-schedule)" in done.stderr  # a first look counts there too
    hint = f"`foresail compare --workload {trace} --policies foresail,static --seeds 1 --out results/`"
    assert hint in done.stderr  # the plots of this run's load, not of builtin:sine
