"""The retraining on a real Spark standalone cluster on this machine: a master and two workers started
from the pyspark distribution (`bin/spark-class`), the job submitted through `--master spark://…` by
`foresail retrain` as a process (a cluster driver of its own, apart from the tests' local session). The
executors' Python has the dependencies but not this checkout, as on a real cluster's workers: what they
import must come from the archive `retrain` ships."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
import requests

from forecasting.history import write_history
from forecasting.registry import ModelRegistry
from forecasting.synthetic import DAY_S, generate_jobs
from tests.conftest import REPO, require_tool
from tests.e2e.stack import free_port, wait_for

SPARK_HOME = Path(pyspark.__file__).parent
SMALL = ["--min-history-s", "86400", "--backtest-s", "43200", "--select-window-s", "10800"]


WITHOUT_CHECKOUT = f"""import sys
# this venv's libraries without the checkout: no editable-install finder, no path into {REPO}
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in getattr(h, "__module__", "")]
sys.path[:] = [p for p in sys.path if not (p.startswith({str(REPO)!r}) and "site-packages" not in p)]
"""


@pytest.fixture(scope="session")
def executor_python(tmp_path_factory) -> Path:
    """The executors' interpreter: this venv's Python, which cannot import the checkout's packages."""
    directory = tmp_path_factory.mktemp("executor-python")
    (directory / "sitecustomize.py").write_text(WITHOUT_CHECKOUT)
    script = directory / "python"
    script.write_text(f'#!/bin/sh\nexport PYTHONPATH={directory}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    probe = subprocess.run([script, "-c", "import messages"], cwd=directory, capture_output=True, check=False)
    assert probe.returncode != 0, "the executors' Python still sees the checkout"
    return script


def _env(executor_python: Path) -> dict[str, str]:
    """The cluster's and the driver's environment; the checkout is on neither's PYTHONPATH."""
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": str(executor_python),  # the executors' interpreter: on a cluster, name it
    }
    env.pop("PYTHONPATH", None)
    return env


def _start(processes: list, log: Path, env: dict[str, str], *args: str) -> None:
    with log.open("w") as output:
        processes.append(
            subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args], env=env, stdout=output, stderr=output
            )
        )


def _stop(processes: list) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _master(processes: list, workdir: Path, env: dict[str, str]) -> tuple[str, int]:
    """Start a standalone master; its URL and web UI port."""
    port, ui = free_port(), free_port()
    _start(processes, workdir / "master.log", env, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
           "--port", str(port), "--webui-port", str(ui))  # fmt: skip
    return f"spark://127.0.0.1:{port}", ui


def _master_state(ui: int) -> dict:
    try:
        return requests.get(f"http://127.0.0.1:{ui}/json/", timeout=2).json()
    except (requests.RequestException, ValueError):
        return {}


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory, executor_python) -> Iterator[str]:
    """spark://127.0.0.1:PORT with two one-core workers; stopped at the end of the session."""
    require_tool("java")
    workdir = tmp_path_factory.mktemp("spark-standalone")
    env = _env(executor_python)
    processes: list = []
    try:
        url, ui = _master(processes, workdir, env)
        for index in (1, 2):
            _start(processes, workdir / f"worker-{index}.log", env, "org.apache.spark.deploy.worker.Worker", url,
                   "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                   "--work-dir", str(workdir / f"work-{index}"))  # fmt: skip
        wait_for(
            lambda: _master_state(ui).get("aliveworkers", 0) >= 2,
            120,
            "a standalone master with two alive workers",
        )
        yield url
    finally:
        _stop(processes)


@pytest.mark.e2e
def test_retrain_runs_on_a_standalone_cluster(standalone_cluster, executor_python, tmp_path):
    history = tmp_path / "history"
    write_history(generate_jobs(3, seed=13, duration_s=3 * DAY_S, step_s=60.0), history)
    command = [
        sys.executable, "-m", "daemon.cli", "retrain", "--history", str(history),
        "--registry", str(tmp_path / "models"), "--master", standalone_cluster, "--json", *SMALL,
    ]  # fmt: skip
    driver_env = {**_env(executor_python), "PYTHONPATH": str(REPO)}  # only the driver has the checkout
    done = subprocess.run(command, env=driver_env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    registry = ModelRegistry(tmp_path / "models")
    assert registry.jobs() == ["job-0000", "job-0001", "job-0002"]
    # each job trained in a task of the cluster's executors (which of the two workers took which is
    # the scheduler's choice: one may take all three)
    trained_by = [registry.newest(job).metadata()["trained_by"] for job in registry.jobs()]
    assert all(t["partition"] is not None for t in trained_by)


@pytest.mark.e2e
def test_a_master_without_workers_is_one_line_after_the_executor_wait(executor_python, tmp_path):
    """No worker ever registers: the job waited for ever at its first action."""
    require_tool("java")
    history = tmp_path / "history"
    write_history(generate_jobs(1, seed=13, duration_s=DAY_S, step_s=300.0), history)
    env = _env(executor_python)
    processes: list = []
    try:
        url, ui = _master(processes, tmp_path, env)
        wait_for(lambda: _master_state(ui).get("status") == "ALIVE", 120, "a standalone master")
        command = [
            sys.executable, "-m", "daemon.cli", "retrain", "--history", str(history),
            "--registry", str(tmp_path / "models"), "--master", url, "--executor-wait-s", "5",
        ]  # fmt: skip
        driver_env = {**env, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            command, env=driver_env, capture_output=True, text=True, timeout=300, check=False
        )
    finally:
        _stop(processes)
    assert done.returncode == 1, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith("retrain:")]
    assert ours == [f"retrain: no executor started within 5 s at {url}: no worker alive, or none with the "
                    "cores and memory asked for (--executor-wait-s)"]  # fmt: skip
